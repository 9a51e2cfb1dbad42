"""The results store's SQLite file: its schema, opening it, transactions and readable errors.

:class:`StoreFile` opens a store file (read-only, or writable in WAL mode), checks that it is an
SDE results store of a version it reads (``PRAGMA application_id`` = :data:`APPLICATION_ID`,
``PRAGMA user_version`` = :data:`SCHEMA_VERSION`) and sound (SQLite's structural check), creates
the schema in an empty file, upgrades a schema-1 or schema-2 store
(:mod:`~sde_core.pipeline.store_repair`; a store opened read-only is read at its own schema) and,
with ``repair``, rebuilds a structurally damaged one
(:func:`~sde_core.pipeline.store_repair.salvage`). It runs every
write as one ``BEGIN IMMEDIATE`` transaction and turns SQLite's failures into
:class:`~sde_core.errors.StoreError` messages that say what to do. The records' checks are
:class:`~sde_core.pipeline.store_verify.VerifiedStore`'s; the store's API is
:class:`~sde_core.pipeline.store.ResultsStore`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from sde_core.common.stamps import StampRecords, identity, settled_ns
from sde_core.errors import StoreError
from sde_core.pipeline.store_integrity import (
    RepairReport,
    StoreDamagedError,
    file_problem,
    tolerant_text,
)
from sde_core.pipeline.store_repair import salvage, upgrade_v1, upgrade_v2
from sde_core.pipeline.store_schema import APPLICATION_ID, SCHEMA_VERSION, create_schema

__all__ = ["StoreFile", "file_stamp"]


def _fresh_store(path: Path) -> sqlite3.Connection:
    """A new, empty store file at ``path`` (for :func:`salvage`), in WAL mode."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN IMMEDIATE")
    create_schema(conn)
    conn.execute("COMMIT")
    return conn


def file_stamp(path: Path) -> tuple[int, ...] | None:
    """The store file's stamp (:func:`~sde_core.common.stamps.identity`: device, inode, size,
    modification and status-change times) followed by the size and modification time (ns) of
    its write-ahead log (0, 0 when it has none or an empty one); None when the file cannot be
    stat'ed or it or its log was modified within the last
    :data:`~sde_core.common.stamps.SETTLED_NS` (then nothing is shared: every store object
    checks for itself). What a check of an unchanged file found holds while its stamp is the
    same: the structural check here, the verified runs in
    :class:`~sde_core.pipeline.store_verify.VerifiedStore`."""
    main = identity(path)
    if main is None:
        return None
    try:
        wal = Path(f"{path}-wal").stat()
        # an empty log holds nothing (a reader creates one on opening, a checkpoint empties it)
        log = (wal.st_size, wal.st_mtime_ns) if wal.st_size else (0, 0)
    except OSError:
        log = (0, 0)
    if time.time_ns() - log[1] < settled_ns():
        return None
    return (*main, *log)


#: Files whose structural check (:func:`~sde_core.pipeline.store_integrity.file_problem`)
#: passed in this process: resolved path → :func:`file_stamp` taken before the check. At
#: hundreds of models the check costs a third of a second (reading every page of the file:
#: more when the file is not in the OS page cache), and a page opens the store several times.
#: A store opened with ``checks`` also finds (and records) a pass there, for other processes.
_CHECKED_FILES: dict[str, tuple[int, ...]] = {}
_CHECKED_FILES_MAX = 64
_CHECKED_LOCK = threading.Lock()


class StoreFile:
    """An open results-store file (see :class:`~sde_core.pipeline.store.ResultsStore` for the
    arguments): the connection, its lock, its transactions and queries."""

    def __init__(
        self,
        path: str | Path,
        timeout: float = 30.0,
        *,
        read_only: bool = False,
        repair: bool = False,
        checks: StampRecords | None = None,
    ) -> None:
        self.path = Path(path)
        self._checks = checks
        self.timeout = float(timeout)
        self.read_only = bool(read_only)
        self.repair_report: RepairReport | None = None
        self._lock = threading.RLock()
        self._checksums = True
        self._schema = SCHEMA_VERSION  # the file's schema once opened (read-only: as found)
        if repair and self.read_only:
            raise StoreError("a store opened read_only cannot be repaired: open it writable")
        self._conn = self._connect()
        try:
            self._open_schema(repair)
        except BaseException:
            self._conn.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.read_only:
                if not self.path.is_file():
                    raise StoreError(f"results store {self.path} does not exist")
                uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
                conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, isolation_level=None,
                                       check_same_thread=False)  # fmt: skip
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(
                    self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
                )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"cannot open results store {self.path} ({exc}): choose a writable file path"
            ) from exc
        conn.text_factory = tolerant_text
        return conn

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database connection (idempotent)."""
        with self._lock:
            self._conn.close()

    def _open_schema(self, repair: bool) -> None:
        """Check the file is a sound SDE store of a readable version; create, upgrade or (a
        structurally damaged file, with ``repair``) rebuild it as needed."""
        not_store = f"{self.path} is not an SDE results store: delete it or choose another path"
        try:
            app_id, version, n_tables = self._header()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # text of a damaged schema
            if repair:
                return self._salvage(str(exc))
            raise StoreDamagedError(
                f"{not_store} ({exc}); if it is a damaged results store, open it with "
                "repair=True (evaluate --repair) to rebuild it, keeping this file aside"
            ) from exc
        empty = version == 0 and n_tables == 0
        if not empty and app_id != APPLICATION_ID:
            raise StoreError(not_store)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer SDE Explorer (schema version {version}; "
                f"this version reads {SCHEMA_VERSION}): upgrade sde_core or choose another path"
            )
        if not empty and version not in (1, 2, SCHEMA_VERSION):
            raise StoreError(f"{not_store} (unknown schema version {version})")
        if not empty:
            problem = self._structure_problem()
            if problem is not None:
                if repair:
                    return self._salvage(problem)
                raise StoreDamagedError(
                    f"results store {self.path} is damaged (SQLite check: {problem}); nothing "
                    "was read from it. Rebuild it from its intact units with 'python -m "
                    "sde_core evaluate WORKSPACE --repair' (or ResultsStore(path, repair=True)); "
                    "the damaged file is kept beside it"
                )
        if self.read_only:
            self._checksums = version >= 2
            self._schema = int(version)
            return None
        try:
            self._enable_wal()
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from exc
        if empty or version < SCHEMA_VERSION:  # another process may have done it: re-read
            with self._tx() as conn:
                current = conn.execute("PRAGMA user_version").fetchone()[0]
                if current == 0 and empty:
                    create_schema(conn)
                if current == 1:
                    upgrade_v1(conn)
                if current in (1, 2):
                    upgrade_v2(conn)
        return None

    def _salvage(self, problem: str) -> None:
        """Rebuild a structurally damaged file (``repair=True``); reopen the rebuilt store."""
        self._conn.close()
        report = salvage(self.path, _fresh_store)
        self.repair_report = report
        self._conn = self._connect()
        self._enable_wal()
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        del problem

    def _structure_problem(self) -> str | None:
        """SQLite's structural check of the file (:func:`file_problem`), skipped when this
        process checked the file unchanged (the same :func:`file_stamp`) and it passed, or
        when the store's ``checks`` record such a pass (made by another process; a pass made
        here is recorded there)."""
        stamp = file_stamp(self.path)  # before the check reads anything
        key = str(self.path.resolve())
        with _CHECKED_LOCK:
            if stamp is not None and _CHECKED_FILES.get(key) == stamp:
                return None
        record = f"sqlite-structure:{key}"
        passed = f"ok, SQLite {sqlite3.sqlite_version}"
        if self._checks is not None and self._checks.get(record, stamp) == passed:
            problem = None
        else:
            problem = file_problem(self._conn, self._file_size())
            if problem is None and self._checks is not None:
                self._checks.put(record, stamp, passed)
                self._checks.flush()
        if problem is None and stamp is not None:
            with _CHECKED_LOCK:
                _CHECKED_FILES[key] = stamp
                while len(_CHECKED_FILES) > _CHECKED_FILES_MAX:
                    _CHECKED_FILES.pop(next(iter(_CHECKED_FILES)))
        return problem

    def _file_size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def _enable_wal(self) -> None:
        """Switch to WAL mode, retrying while another process holds the lock it needs.

        SQLite's busy handler does not cover the journal-mode change, so two processes opening
        the same new file at once would otherwise fail at once with "database is locked".
        """
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(2 * delay, 0.2)

    def _header(self) -> tuple[int, int, int]:
        """``application_id``, ``user_version`` and the number of schema objects of the file."""
        # One read transaction: a snapshot, so a schema another process is creating is seen
        # either not at all or whole (three autocommit reads could mix the two states).
        conn = self._conn
        conn.execute("BEGIN")
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            n_tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")
        return int(app_id), int(version), int(n_tables)

    def _error(self, exc: sqlite3.Error) -> StoreError:
        """A readable :class:`StoreError` for a database failure."""
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return StoreError(
                f"results store {self.path} stayed locked by another writer for more than "
                f"{self.timeout:g} s: wait for it to finish or raise the timeout"
            )
        if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc).replace("-", ""):
            return StoreError(f"results store {self.path} is read-only: {exc}")
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
            return StoreDamagedError(
                f"results store {self.path} is damaged ({exc}); rebuild it from its intact "
                "units with 'python -m sde_core evaluate WORKSPACE --repair'"
            )
        return StoreError(
            f"results store {self.path} failed ({exc}): if the file is corrupt, "
            "open it with repair=True (evaluate --repair)"
        )

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on error)."""
        if self.read_only:
            raise StoreError(
                f"results store {self.path} was opened read-only: open it without "
                "read_only=True to write"
            )
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                raise self._error(exc) from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                    exc, sqlite3.ProgrammingError
                ):
                    raise self._error(exc) from exc
                raise

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """All rows of one read-only statement."""
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.ProgrammingError:
                raise
            except sqlite3.DatabaseError as exc:
                raise self._error(exc) from exc
            except UnicodeDecodeError as exc:  # SQLite's message quotes damaged bytes
                raise StoreDamagedError(
                    f"results store {self.path} is damaged (unreadable text: {exc.reason}); "
                    "rebuild it with 'python -m sde_core evaluate WORKSPACE --repair'"
                ) from exc
