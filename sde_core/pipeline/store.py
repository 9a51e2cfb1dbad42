"""Results store: evaluation runs, their units of work, result tables and raw arrays.

One SQLite file holds every run of every workspace. A *run* is identified by the pair
(``workspace_hash``, ``settings_hash``), where ``settings_hash`` is
:func:`~sde_core.common.hashing.stable_hash` of the (normalised) settings dict, so opening a run
with the same settings again returns the stored results instantly. A run is filled by *units of
work* (one model, one sweep point, ...): :meth:`ResultsStore.put_unit` writes every table row
and array a unit produced in one transaction, so an interrupted sweep keeps each finished unit
whole and never a partial one, and a resumed sweep skips the units listed by
:meth:`ResultsStore.finished_units`.

Writing a unit key that is already stored is a **no-op** (the first write wins and
:meth:`~ResultsStore.put_unit` returns ``False``): finished results are never duplicated or
silently changed by a resume.

**Integrity.** Every run, table, unit and array record carries a SHA-256 checksum (see
:mod:`sde_core.pipeline.store_integrity`). Opening a store runs SQLite's structural check
(``integrity_check``; ``quick_check`` above 256 MiB); a structurally damaged file raises
:class:`StoreDamagedError`. Every read verifies the checksums of the units it returns (once per
unit and store object); a damaged unit is never served: it raises :class:`DamagedUnitError`
naming it, and :meth:`ResultsStore.damaged_units` lists them all. ``ResultsStore(path,
repair=True)`` (``evaluate --repair`` on the command line) drops exactly the damaged units, or
rebuilds a structurally damaged file from the units that verify (keeping the damaged file as
``<name>.damaged-<time>``), so a resumed evaluation recomputes just what was lost. Checksums
detect damage, they do not authenticate: whoever can write the file can forge them.

**Older stores.** A schema-1 store (no checksums; the bundled demos ship one) is upgraded in
place when opened writable: records that decode get checksums, the others are reported as
damaged. Opened with ``read_only=True`` it is not changed: it is served after the structural
check, with every row and array decoded and validated on read (there are no checksums to
compare).

Schema (version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``; the file is tagged
with ``PRAGMA application_id`` = :data:`APPLICATION_ID`):

- ``runs(id, workspace_hash, settings_hash, settings JSON, label, created, status, checksum)``,
  unique on (workspace_hash, settings_hash); ``status`` is ``"running"`` or ``"complete"``.
- ``units(id, run_id, unit_key, finished, checksum)``, unique on (run_id, unit_key); insertion
  order is the row order of :meth:`~ResultsStore.rows`.
- ``run_tables(run_id, name, columns JSON, checksum)``: the tables of a run and their column
  order (first-seen order of the row dicts' keys).
- ``table_rows(unit_id, table_name, seq, payload JSON)``: one row dict per record.
- ``arrays(run_id, name, unit_id, dtype, shape JSON, data BLOB, checksum)``: C-order bytes,
  unique name per run (:meth:`~ResultsStore.array`, :meth:`~ResultsStore.array_names`).

Every child row references its run (directly or through its unit) with ``ON DELETE CASCADE``.
The database runs in WAL mode with ``synchronous=NORMAL`` and a busy timeout, so any number of
processes can read while one writes; every write is a ``BEGIN IMMEDIATE`` transaction.

Row values must be scalars: ``None``, ``bool``, ``int``, ``float`` (NaN and ±inf included),
``str`` or a NumPy scalar of those kinds (stored as the equivalent Python value).
:meth:`~ResultsStore.records` returns the stored row dicts exactly (``None`` and NaN stay
distinct, absent keys stay absent). :meth:`~ResultsStore.rows` builds a DataFrame with pandas'
own inference: all-int columns are ``int64``, all-bool ``bool``, numeric ``float64``, strings
pandas' string dtype, mixed columns ``object``; ``None`` and absent keys read back as pandas'
missing value for the column (NaN, or ``None`` in ``object`` columns), so test with
``pandas.isna``.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import numpy as np
import pandas as pd

from sde_core.common.fsio import atomic_write
from sde_core.common.hashing import stable_hash
from sde_core.errors import StoreError
from sde_core.pipeline.store_integrity import (
    DamagedUnit,
    DamagedUnitError,
    RepairReport,
    StoreDamagedError,
    array_checksum,
    check_unit,
    decode_array,
    decode_payload,
    file_problem,
    run_checksum,
    run_problem,
    salvage,
    table_checksum,
    table_problem,
    tolerant_text,
    unit_checksum,
    upgrade_v1,
)
from sde_core.pipeline.workspace import cache_path

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "SHIPPED_STORE",
    "ResultsStore",
    "Run",
    "workspace_store_path",
]

SCHEMA_VERSION = 2
"""Version of the store's SQL schema, kept in ``PRAGMA user_version`` (2: checksums)."""

APPLICATION_ID = 0x53444531
"""``PRAGMA application_id`` of an SDE results store (ASCII ``"SDE1"``)."""

RunStatus = Literal["running", "complete"]
Scalar = None | bool | int | float | str

_SCHEMA = (
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        workspace_hash TEXT NOT NULL,
        settings_hash TEXT NOT NULL,
        settings TEXT NOT NULL,
        label TEXT NOT NULL,
        created TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'complete')),
        checksum TEXT,
        UNIQUE (workspace_hash, settings_hash)
    )""",
    """CREATE TABLE units (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        unit_key TEXT NOT NULL,
        finished TEXT NOT NULL,
        checksum TEXT,
        UNIQUE (run_id, unit_key)
    )""",
    """CREATE TABLE run_tables (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        columns TEXT NOT NULL,
        checksum TEXT,
        PRIMARY KEY (run_id, name)
    )""",
    """CREATE TABLE table_rows (
        unit_id INTEGER NOT NULL REFERENCES units (id) ON DELETE CASCADE,
        table_name TEXT NOT NULL,
        seq INTEGER NOT NULL,
        payload TEXT NOT NULL,
        PRIMARY KEY (unit_id, table_name, seq)
    )""",
    """CREATE TABLE arrays (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        unit_id INTEGER NOT NULL REFERENCES units (id) ON DELETE CASCADE,
        dtype TEXT NOT NULL,
        shape TEXT NOT NULL,
        data BLOB NOT NULL,
        checksum TEXT,
        PRIMARY KEY (run_id, name)
    )""",
    "CREATE INDEX arrays_unit ON arrays (unit_id)",
)

_TABLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_ARRAY_KINDS = "biuf"
_RUN_COLUMNS = "id, workspace_hash, settings_hash, settings, label, created, status"


@dataclass(frozen=True)
class Run:
    """One evaluation run: a workspace evaluated under one settings dict.

    Attributes:
        id: Database id, the handle every other store method takes.
        workspace_hash: Content hash of the workspace the run evaluates.
        settings_hash: :func:`~sde_core.common.hashing.stable_hash` of ``settings``.
        settings: The normalised settings (JSON values, keys sorted).
        label: Free-text label given when the run was created.
        created: Creation time, ISO 8601 in UTC.
        status: ``"running"`` until :meth:`ResultsStore.mark_complete`, then ``"complete"``.
    """

    id: int
    workspace_hash: str
    settings_hash: str
    settings: dict[str, Any]
    label: str
    created: str
    status: RunStatus


def _create_schema(conn: sqlite3.Connection) -> None:
    """Create the current schema in an empty database (inside the caller's transaction)."""
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _fresh_store(path: Path) -> sqlite3.Connection:
    """A new, empty store file at ``path`` (for :func:`salvage`), in WAL mode."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN IMMEDIATE")
    _create_schema(conn)
    conn.execute("COMMIT")
    return conn


class ResultsStore:
    """SQLite-backed store of evaluation runs (see the module docstring for the schema).

    Open it as a context manager (or call :meth:`close`). One instance may be shared by threads
    (calls are serialised); separate processes open their own instance on the same file.

    Args:
        path: The database file; created with its parent folders when missing.
        timeout: Seconds a write waits for another process's write to finish before failing.
        read_only: Open without writing anything (no upgrade, no WAL switch); writes raise
            :class:`~sde_core.errors.StoreError`.
        repair: Drop damaged units (or rebuild a structurally damaged file from the units that
            verify) while opening; what was done is in :attr:`repair_report`.

    Attributes:
        repair_report: The :class:`RepairReport` of ``repair=True`` (``None`` otherwise).

    Raises:
        StoreError: The file cannot be opened, is not an SDE results store or was written by a
            newer schema version.
        StoreDamagedError: The file is structurally damaged (and ``repair`` is off).
    """

    def __init__(
        self,
        path: str | Path,
        timeout: float = 30.0,
        *,
        read_only: bool = False,
        repair: bool = False,
    ) -> None:
        self.path = Path(path)
        self.timeout = float(timeout)
        self.read_only = bool(read_only)
        self.repair_report: RepairReport | None = None
        self._lock = threading.RLock()
        self._verified: set[tuple[int, Any]] = set()
        self._verified_runs: dict[int, tuple[Any, ...]] = {}
        self._checksums = True
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

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database connection (idempotent)."""
        with self._lock:
            self._conn.close()

    def _open_schema(self, repair: bool) -> None:
        """Check the file is a sound SDE store of a readable version; create, upgrade or repair
        it as needed."""
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
        if not empty and version not in (1, SCHEMA_VERSION):
            raise StoreError(f"{not_store} (unknown schema version {version})")
        if not empty:
            problem = file_problem(self._conn, self._file_size())
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
            return None
        try:
            self._enable_wal()
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from exc
        if empty or version == 1:  # another process may have done it meanwhile: re-read
            with self._tx() as conn:
                current = conn.execute("PRAGMA user_version").fetchone()[0]
                if current == 0 and empty:
                    _create_schema(conn)
                elif current == 1:
                    upgrade_v1(conn)
        if repair:
            dropped = self.drop_damaged_units()
            kept = self._query("SELECT count(*) FROM units")[0][0]
            self.repair_report = RepairReport(self.path, None, tuple(dropped), int(kept))
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

    # ------------------------------------------------------------------ verification

    def _run_select(self) -> str:
        return f"SELECT {_RUN_COLUMNS}{', checksum' if self._checksums else ''} FROM runs"

    def _table_select(self) -> str:
        cols = "run_id, name, columns" + (", checksum" if self._checksums else "")
        return f"SELECT {cols} FROM run_tables"

    def _unit_select(self) -> str:
        cols = "id, run_id, unit_key, finished" + (", checksum" if self._checksums else "")
        return f"SELECT {cols} FROM units"

    def _run(self, row: Sequence[Any]) -> Run:
        """A verified :class:`Run` from a runs row, or :class:`DamagedUnitError`."""
        problem = run_problem(row, self._checksums)
        if problem is not None:
            raise DamagedUnitError(self.path, [DamagedUnit(int(row[0]), None, problem)])
        run_id, workspace_hash, settings_hash, settings, label, created, status = row[:7]
        return Run(
            id=int(run_id),
            workspace_hash=workspace_hash,
            settings_hash=settings_hash,
            settings=json.loads(settings),
            label=label,
            created=created,
            status=status,
        )

    def _unit_problem(self, unit: Sequence[Any]) -> str | None:
        """Why a unit cannot be served (``None``: verified; cached per store object)."""
        token = (int(unit[0]), unit[4] if self._checksums else unit[2])
        with self._lock:
            if token in self._verified:
                return None
            try:
                problem = check_unit(self._conn, unit, self._checksums)
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                problem = f"unreadable ({' '.join(str(exc).split())})"
            if problem is None:
                self._verified.add(token)
        return problem

    def _verify_units(self, units: Sequence[Sequence[Any]]) -> None:
        """Raise :class:`DamagedUnitError` naming every unit of ``units`` that fails."""
        damaged = []
        for unit in units:
            problem = self._unit_problem(unit)
            if problem is not None:
                damaged.append(DamagedUnit(int(unit[1]), str(unit[2]), problem))
        if damaged:
            raise DamagedUnitError(self.path, damaged)

    def _table_problems(
        self, run_id: int, found: list[tuple[Any, ...]] | None = None
    ) -> list[DamagedUnit]:
        """Damaged or missing table records of a run (a table with rows but no record)."""
        if found is None:
            found = self._query(f"{self._table_select()} WHERE run_id = ?", (run_id,))
        damaged = []
        for row in found:
            reason = table_problem(row, self._checksums)
            if reason is not None:
                damaged.append(DamagedUnit(run_id, None, reason, str(row[1])))
        listed = {str(row[1]) for row in found}
        used = self._query(
            "SELECT DISTINCT t.table_name FROM table_rows t JOIN units u ON u.id = t.unit_id"
            " WHERE u.run_id = ?",
            (run_id,),
        )
        damaged.extend(
            DamagedUnit(run_id, None, "its record is missing", str(name))
            for (name,) in used
            if str(name) not in listed
        )
        return damaged

    def _verify_run(self, run_id: int) -> None:
        """Verify every unit and table record of a run before serving any of it: a lost or
        altered unit would otherwise make a table silently shorter."""
        units = self._query(f"{self._unit_select()} WHERE run_id = ?", (run_id,))
        tables = self._query(f"{self._table_select()} WHERE run_id = ?", (run_id,))
        signature = (tuple((u[0], u[-1]) for u in units), tuple(tables))
        if self._verified_runs.get(run_id) == signature:
            return
        damaged = self._table_problems(run_id, tables)
        for unit in units:
            problem = self._unit_problem(unit)
            if problem is not None:
                damaged.append(DamagedUnit(int(unit[1]), str(unit[2]), problem))
        if damaged:
            raise DamagedUnitError(self.path, damaged)
        with self._lock:
            self._verified_runs[run_id] = signature

    def damaged_units(self, run_id: int | None = None) -> list[DamagedUnit]:
        """Every damaged record (of one run when given): runs whose own record fails (with
        ``unit_key=None``, plus each of their units), and units failing their checksums.

        Raises:
            StoreError: No such run.
        """
        if run_id is not None:
            self.get_run(run_id)
        where, params = ("WHERE id = ?", (int(run_id),)) if run_id is not None else ("", ())
        damaged: list[DamagedUnit] = []
        for row in self._query(f"{self._run_select()} {where}", params):
            problem = run_problem(row, self._checksums)
            units = self._query(f"{self._unit_select()} WHERE run_id = ?", (row[0],))
            if problem is not None:
                damaged.append(DamagedUnit(int(row[0]), None, problem))
                damaged.extend(DamagedUnit(int(row[0]), str(u[2]), problem) for u in units)
                continue
            for unit in units:
                reason = self._unit_problem(unit)
                if reason is not None:
                    damaged.append(DamagedUnit(int(row[0]), str(unit[2]), reason))
            damaged.extend(self._table_problems(int(row[0])))
        unit_where = "" if run_id is None else " AND run_id = ?"
        orphans = self._query(
            f"{self._unit_select()} WHERE run_id NOT IN (SELECT id FROM runs){unit_where}", params
        )
        damaged.extend(DamagedUnit(int(u[1]), str(u[2]), "its run is missing") for u in orphans)
        return damaged

    def drop_damaged_units(self) -> list[DamagedUnit]:
        """Delete exactly the damaged records (:meth:`damaged_units`) so they can be recomputed.

        A run whose own record is damaged is deleted with its units; a run that loses units is
        marked ``running``; table column lists are rebuilt from the rows that remain.

        Returns:
            What was dropped.
        """
        damaged = self.damaged_units()
        if not damaged:
            return []
        runs = {d.run_id for d in damaged if d.unit_key is None and d.table is None}
        with self._tx() as conn:
            for run_id in runs:
                conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
                conn.execute("DELETE FROM units WHERE run_id = ?", (run_id,))
            lost, tables = set(), set()
            for d in damaged:
                if d.run_id in runs:
                    continue
                if d.unit_key is None:
                    tables.add(d.run_id)
                    continue
                conn.execute(
                    "DELETE FROM units WHERE run_id = ? AND unit_key = ?", (d.run_id, d.unit_key)
                )
                lost.add(d.run_id)
            for run_id in lost:
                self._set_status(conn, run_id, "running")
            for run_id in lost | tables:
                self._rebuild_columns(conn, run_id)
        return damaged

    def _rebuild_columns(self, conn: sqlite3.Connection, run_id: int) -> None:
        """Rewrite a run's table column lists from its remaining rows (first-seen order)."""
        rows = conn.execute(
            "SELECT t.table_name, t.payload FROM table_rows t JOIN units u ON u.id = t.unit_id"
            " WHERE u.run_id = ? ORDER BY u.id, t.table_name, t.seq",
            (run_id,),
        ).fetchall()
        columns: dict[str, dict[str, None]] = {}
        for table, payload in rows:
            cols = columns.setdefault(table, {})
            for key in decode_payload(payload):
                cols.setdefault(key, None)
        known = [name for (name,) in conn.execute(
            "SELECT name FROM run_tables WHERE run_id = ?", (run_id,)
        ).fetchall()]  # fmt: skip
        for name in dict.fromkeys([*known, *columns]):
            text = json.dumps(list(columns.get(name, {})))
            conn.execute(
                "INSERT OR REPLACE INTO run_tables (run_id, name, columns, checksum)"
                " VALUES (?, ?, ?, ?)",
                (run_id, name, text, table_checksum(run_id, name, text)),
            )

    # ------------------------------------------------------------------ runs

    def open_run(self, workspace_hash: str, settings: Mapping[str, Any], label: str = "") -> Run:
        """The run of ``workspace_hash`` under ``settings``, created when it does not exist.

        ``settings`` is normalised first (NumPy scalars become Python values, tuples become
        lists), so dicts that differ only in key order or scalar type map to the same run. The
        label is used only when the run is created.

        Raises:
            StoreError: ``settings`` is not a dict of JSON values.
            DamagedUnitError: The stored run record is damaged.
        """
        if not isinstance(workspace_hash, str) or not workspace_hash:
            raise StoreError("workspace_hash must be a non-empty string")
        if not isinstance(settings, Mapping):
            raise StoreError(f"settings must be a dict, got {type(settings).__name__}")
        normal = _json_value(dict(settings), "settings")
        settings_hash = stable_hash(normal)
        select = f"{self._run_select()} WHERE workspace_hash = ? AND settings_hash = ?"
        found = self._query(select, (workspace_hash, settings_hash))
        if found:
            return self._run(found[0])
        with self._tx() as conn:
            row = conn.execute(select, (workspace_hash, settings_hash)).fetchone()
            if row is None:
                fields = (
                    workspace_hash,
                    settings_hash,
                    json.dumps(normal, sort_keys=True),
                    str(label),
                    _now(),
                    "running",
                )
                conn.execute(
                    "INSERT INTO runs (workspace_hash, settings_hash, settings, label, created,"
                    " status, checksum) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (*fields, run_checksum(*fields)),
                )
                row = conn.execute(select, (workspace_hash, settings_hash)).fetchone()
        return self._run(row)

    def get_run(self, run_id: int) -> Run:
        """The run with this id.

        Raises:
            StoreError: No such run.
            DamagedUnitError: Its record is damaged.
        """
        found = self._query(f"{self._run_select()} WHERE id = ?", (int(run_id),))
        if not found:
            raise StoreError(f"unknown run id {run_id}: list the stored runs with list_runs()")
        return self._run(found[0])

    def list_runs(self, workspace_hash: str | None = None) -> pd.DataFrame:
        """All runs (of one workspace when given), oldest first.

        Columns: ``id``, ``workspace_hash``, ``settings_hash``, ``label``, ``created``,
        ``status``, ``units`` (number of finished units) and ``settings`` (JSON text).

        Raises:
            DamagedUnitError: A run record is damaged.
        """
        sql = self._run_select()
        params: tuple[str, ...] = ()
        if workspace_hash is not None:
            sql += " WHERE workspace_hash = ?"
            params = (workspace_hash,)
        runs = [self._run(row) for row in self._query(sql + " ORDER BY id", params)]
        counts = dict(self._query("SELECT run_id, count(*) FROM units GROUP BY run_id"))
        columns = [
            "id",
            "workspace_hash",
            "settings_hash",
            "label",
            "created",
            "status",
            "units",
            "settings",
        ]
        records = [
            (r.id, r.workspace_hash, r.settings_hash, r.label, r.created, r.status,
             counts.get(r.id, 0), json.dumps(r.settings, sort_keys=True))
            for r in runs
        ]  # fmt: skip
        frame = pd.DataFrame(records, columns=columns)
        return frame.astype({"id": "int64", "units": "int64"})

    def _set_status(self, conn: sqlite3.Connection, run_id: int, status: str) -> None:
        """Set a run's status and its checksum, inside a write transaction."""
        row = conn.execute(f"{self._run_select()} WHERE id = ?", (run_id,)).fetchone()
        if row is None or row[6] == status:
            return
        fields = (*row[1:6], status)
        conn.execute(
            "UPDATE runs SET status = ?, checksum = ? WHERE id = ?",
            (status, run_checksum(*fields), run_id),
        )

    def mark_complete(self, run_id: int) -> None:
        """Set the run's status to ``"complete"``.

        Raises:
            StoreError: No such run.
        """
        self.get_run(run_id)
        with self._tx() as conn:
            self._set_status(conn, int(run_id), "complete")

    def delete_run(self, run_id: int) -> None:
        """Delete the run with all its units, rows and arrays.

        Raises:
            StoreError: No such run.
        """
        found = self._query("SELECT 1 FROM runs WHERE id = ?", (int(run_id),))
        if not found:
            raise StoreError(f"unknown run id {run_id}: list the stored runs with list_runs()")
        with self._tx() as conn:
            conn.execute("DELETE FROM runs WHERE id = ?", (int(run_id),))

    # ------------------------------------------------------------------ units

    def finished_units(self, run_id: int) -> set[str]:
        """Keys of every stored unit of the run, after verifying every one of them.

        Raises:
            StoreError: No such run.
            DamagedUnitError: Some units are damaged (all are named; repair drops them).
        """
        self.get_run(run_id)
        self._verify_run(int(run_id))
        found = self._query("SELECT unit_key FROM units WHERE run_id = ?", (int(run_id),))
        return {str(key) for (key,) in found}

    def put_unit(
        self,
        run_id: int,
        unit_key: str,
        tables: Mapping[str, Sequence[Mapping[str, Any]]],
        arrays: Mapping[str, np.ndarray] | None = None,
    ) -> bool:
        """Store every row and array of one finished unit of work in one transaction.

        Args:
            run_id: The run the unit belongs to.
            unit_key: Key of the unit, unique within the run.
            tables: Table name -> row dicts (scalar values, see the module docstring). A table
                given with no rows is still registered for the run.
            arrays: Array name -> numeric (bool/int/uint/float) array; names are unique per run.

        Returns:
            ``True`` when the unit was written, ``False`` when ``unit_key`` was already stored
            (nothing is written: the first write wins). Writing a new unit into a complete run
            sets its status back to ``"running"``.

        Raises:
            StoreError: No such run, an invalid table name, row value or array, or an array
                name already stored by another unit of the run.
        """
        run_id = int(run_id)
        if not isinstance(unit_key, str) or not unit_key:
            raise StoreError("unit_key must be a non-empty string")
        records = _encode_tables(tables)
        blobs = _encode_arrays(arrays or {})
        self.get_run(run_id)
        finished = _now()
        sums = {name: array_checksum(run_id, unit_key, name, *blob) for name, blob in blobs.items()}
        rows = [
            (table, seq, payload)
            for table, (_, payloads) in records.items()
            for seq, payload in enumerate(payloads)
        ]
        checksum = unit_checksum(run_id, unit_key, finished, rows, list(sums.items()))
        with self._tx() as conn:
            if conn.execute(
                "SELECT 1 FROM units WHERE run_id = ? AND unit_key = ?", (run_id, unit_key)
            ).fetchone():
                return False
            for name in blobs:
                owner = conn.execute(
                    "SELECT u.unit_key FROM arrays a JOIN units u ON u.id = a.unit_id"
                    " WHERE a.run_id = ? AND a.name = ?",
                    (run_id, name),
                ).fetchone()
                if owner is not None:
                    raise StoreError(
                        f"array {name!r} of run {run_id} is already stored by unit "
                        f"{owner[0]!r}: give each unit's arrays distinct names"
                    )
            unit_id = conn.execute(
                "INSERT INTO units (run_id, unit_key, finished, checksum) VALUES (?, ?, ?, ?)",
                (run_id, unit_key, finished, checksum),
            ).lastrowid
            self._set_status(conn, run_id, "running")
            for table, (columns, payloads) in records.items():
                self._register_columns(conn, run_id, table, columns)
                conn.executemany(
                    "INSERT INTO table_rows (unit_id, table_name, seq, payload)"
                    " VALUES (?, ?, ?, ?)",
                    [(unit_id, table, seq, payload) for seq, payload in enumerate(payloads)],
                )
            conn.executemany(
                "INSERT INTO arrays (run_id, name, unit_id, dtype, shape, data, checksum)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(run_id, name, unit_id, *blob, sums[name]) for name, blob in blobs.items()],
            )
        return True

    @staticmethod
    def _register_columns(
        conn: sqlite3.Connection, run_id: int, table: str, columns: list[str]
    ) -> None:
        """Add ``table`` to the run's tables and append its unseen columns, in order."""
        row = conn.execute(
            "SELECT columns FROM run_tables WHERE run_id = ? AND name = ?", (run_id, table)
        ).fetchone()
        if row is None:
            text = json.dumps(columns)
            conn.execute(
                "INSERT INTO run_tables (run_id, name, columns, checksum) VALUES (?, ?, ?, ?)",
                (run_id, table, text, table_checksum(run_id, table, text)),
            )
            return
        known: list[str] = json.loads(row[0])
        new = [c for c in columns if c not in set(known)]
        if new:
            text = json.dumps(known + new)
            conn.execute(
                "UPDATE run_tables SET columns = ?, checksum = ? WHERE run_id = ? AND name = ?",
                (text, table_checksum(run_id, table, text), run_id, table),
            )

    # ------------------------------------------------------------------ reading

    def tables(self, run_id: int) -> list[str]:
        """Names of the run's tables, sorted.

        Raises:
            StoreError: No such run.
        """
        self.get_run(run_id)
        self._verify_run(int(run_id))
        found = self._query(
            "SELECT name FROM run_tables WHERE run_id = ? ORDER BY name", (int(run_id),)
        )
        return [str(name) for (name,) in found]

    def columns(self, run_id: int, table: str) -> list[str]:
        """Column names of the run's ``table``, in first-seen order.

        Raises:
            StoreError: No such run or table.
            DamagedUnitError: The table's record is damaged.
        """
        self.get_run(run_id)
        found = self._query(
            f"{self._table_select()} WHERE run_id = ? AND name = ?", (int(run_id), table)
        )
        if not found:
            known = ", ".join(self.tables(run_id)) or "none"
            raise StoreError(f"run {run_id} has no table {table!r} (its tables: {known})")
        problem = table_problem(found[0], self._checksums)
        if problem is not None:
            raise DamagedUnitError(self.path, [DamagedUnit(int(run_id), None, problem, table)])
        columns: list[str] = json.loads(found[0][2])
        return columns

    def records(self, run_id: int, table: str) -> list[dict[str, Scalar]]:
        """The run's rows of ``table`` exactly as stored (units in write order, then row order).

        Raises:
            StoreError: No such run or table.
            DamagedUnitError: A unit with rows in this table is damaged.
        """
        self.columns(run_id, table)
        self._verify_run(int(run_id))
        payloads = self._query(
            "SELECT t.payload FROM table_rows t JOIN units u ON u.id = t.unit_id"
            " WHERE u.run_id = ? AND t.table_name = ? ORDER BY u.id, t.seq",
            (int(run_id), table),
        )
        return [decode_payload(payload) for (payload,) in payloads]

    def rows(self, run_id: int, table: str) -> pd.DataFrame:
        """The run's rows of ``table`` as a DataFrame (units in write order, then row order).

        Raises:
            StoreError: No such run or table.
            DamagedUnitError: A unit with rows in this table is damaged.
        """
        return pd.DataFrame(self.records(run_id, table), columns=self.columns(run_id, table))

    def array(self, run_id: int, name: str) -> np.ndarray:
        """The stored array ``name`` of the run, with its exact dtype, shape and values.

        Raises:
            StoreError: No such run or array.
            DamagedUnitError: The unit that stored it is damaged.
        """
        self.get_run(run_id)
        found = self._query(
            "SELECT unit_id, dtype, shape, data FROM arrays WHERE run_id = ? AND name = ?",
            (int(run_id), name),
        )
        if not found:
            raise StoreError(
                f"run {run_id} has no array {name!r}: list them with array_names({run_id})"
            )
        self._verify_run(int(run_id))
        return decode_array(*found[0][1:])

    def array_names(self, run_id: int, prefix: str = "") -> list[str]:
        """Sorted names of the run's arrays that start with ``prefix``.

        Raises:
            StoreError: No such run.
        """
        self.get_run(run_id)
        self._verify_run(int(run_id))
        found = self._query(
            "SELECT name FROM arrays WHERE run_id = ? AND substr(name, 1, ?) = ? ORDER BY name",
            (int(run_id), len(prefix), prefix),
        )
        return [str(name) for (name,) in found]

    # ------------------------------------------------------------------ export


# ---------------------------------------------------------------------- helpers


def _now() -> str:
    """The current UTC time, ISO 8601 with seconds."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _scalar(value: Any, where: str, hint: str) -> Scalar:
    """``value`` as a plain Python scalar, or :class:`StoreError` naming ``where``."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return str(value)
    raise StoreError(f"{where} has a value of type {type(value).__name__}; {hint}")


def _json_value(value: Any, where: str) -> Any:
    """``value`` with dicts, lists/tuples and scalars normalised to plain JSON values."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise StoreError(f"{where} has a non-string key {key!r}")
            out[key] = _json_value(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [_json_value(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return _scalar(
        value, where, "settings hold dicts, lists, None, bool, int, float or str (e.g. str(path))"
    )


def _encode_tables(
    tables: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, tuple[list[str], list[str]]]:
    """Per table: its columns in first-seen order and one JSON payload per row."""
    hint = "store None, bool, int, float or str (one column per value, arrays in `arrays`)"
    encoded: dict[str, tuple[list[str], list[str]]] = {}
    for table, rows in tables.items():
        if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
            raise StoreError(
                f"invalid table name {table!r}: use 1-64 letters, digits, '_', '-' or '.', "
                "not starting with '-' or '.'"
            )
        if isinstance(rows, (str, Mapping)) or not isinstance(rows, Sequence):
            raise StoreError(f"table {table!r} must be a list of row dicts")
        columns: dict[str, None] = {}
        payloads = []
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise StoreError(f"row {i} of table {table!r} is not a dict")
            clean: dict[str, Scalar] = {}
            for key, value in row.items():
                if not isinstance(key, str) or not key:
                    raise StoreError(f"row {i} of table {table!r} has an invalid key {key!r}")
                clean[key] = _scalar(value, f"column {key!r} of row {i} of table {table!r}", hint)
                columns[key] = None
            payloads.append(json.dumps(clean))
        encoded[table] = (list(columns), payloads)
    return encoded


def _encode_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, tuple[str, str, bytes]]:
    """Per array: dtype string, JSON shape and C-order bytes."""
    encoded: dict[str, tuple[str, str, bytes]] = {}
    for name, arr in arrays.items():
        if not isinstance(name, str) or not name:
            raise StoreError(f"invalid array name {name!r}: use a non-empty string")
        if not isinstance(arr, np.ndarray):
            raise StoreError(
                f"array {name!r} is a {type(arr).__name__}, not a numpy array: convert it "
                "(e.g. tensor.cpu().numpy())"
            )
        if arr.dtype.kind not in _ARRAY_KINDS or arr.dtype.fields is not None:
            raise StoreError(
                f"array {name!r} has dtype {arr.dtype}; store bool, integer or float arrays"
            )
        encoded[name] = (arr.dtype.str, json.dumps(list(arr.shape)), arr.tobytes(order="C"))
    return encoded


#: A workspace may ship precomputed results here (e.g. the bundled demos); read-only seed.
SHIPPED_STORE = "results.sqlite"


def workspace_store_path(workspace_root: str | Path) -> Path:
    """The results store of a workspace: ``<root>/.sde-cache/results.sqlite``.

    When it does not exist yet and the workspace ships ``<root>/results.sqlite`` (the bundled
    demos do), the shipped file is copied there first, so its results are served at once while
    the shipped file itself is never written to.
    """
    root = Path(workspace_root)
    path = cache_path(root, "results")
    shipped = root / SHIPPED_STORE
    if not path.exists() and shipped.is_file():
        atomic_write(path, lambda tmp: shutil.copyfile(shipped, tmp))
    return path
