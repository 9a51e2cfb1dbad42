"""Integrity of the results store: checksums, verification, schema upgrade and salvage.

Every stored record carries a SHA-256 checksum (schema version 2):

- a run: over its workspace hash, settings hash, settings JSON, label, creation time, status;
- a run's table: over its run id, name and column list;
- an array: over its run id, the key of the unit that wrote it, its name, dtype, shape and bytes;
- a unit: over its run id, key, finish time, every table row it wrote (table, sequence number,
  JSON payload) and the names and checksums of its arrays — so a lost, added or altered row or
  array, or a record moved to another unit or run, changes it.

These are integrity checks against damage (a truncated copy, a bad disk, a stray write), not
authentication: anyone who can write the file can also rewrite the checksums.
:func:`check_unit` verifies one unit; :func:`file_problem` runs SQLite's own structural check;
:func:`upgrade_v1` adds checksums to a version-1 store; :func:`salvage` rebuilds a store whose
file is structurally damaged from the units that still verify, keeping the damaged file beside
it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.errors import StoreError

__all__ = [
    "FULL_CHECK_MAX_BYTES",
    "DamagedUnit",
    "DamagedUnitError",
    "RepairReport",
    "StoreDamagedError",
    "array_checksum",
    "array_problem",
    "check_unit",
    "decode_array",
    "decode_payload",
    "file_problem",
    "run_checksum",
    "run_problem",
    "salvage",
    "table_checksum",
    "table_problem",
    "tolerant_text",
    "unit_checksum",
    "upgrade_v1",
]

#: Files up to this size get ``PRAGMA integrity_check`` (also compares indexes with tables)
#: when opened; larger ones the faster ``PRAGMA quick_check``.
FULL_CHECK_MAX_BYTES = 256 * 2**20
_ARRAY_KINDS = "biuf"


class StoreDamagedError(StoreError):
    """The results store file itself is damaged (SQLite's structural check fails)."""


@dataclass(frozen=True)
class DamagedUnit:
    """A stored record that failed verification.

    Attributes:
        run_id: the run it belongs to.
        unit_key: the unit's key, or ``None`` for a record of the run itself.
        reason: what failed, in words.
        table: for a damaged column list, the table's name (``unit_key`` is then ``None`` and
            no unit is lost: the list is rebuilt from the rows). ``None`` with ``unit_key``
            ``None`` means the run's own record (its settings) is damaged, which takes every
            unit of the run with it.
    """

    run_id: int
    unit_key: str | None
    reason: str
    table: str | None = None

    def __str__(self) -> str:
        if self.unit_key is not None:
            what = f"unit {self.unit_key!r}"
        elif self.table is not None:
            what = f"the column list of table {self.table!r}"
        else:
            what = "the run record"
        return f"{what} of run {self.run_id} ({self.reason})"


class DamagedUnitError(StoreError):
    """Stored units failed their checksums; they are never served.

    Attributes:
        units: the damaged units.
    """

    def __init__(self, path: Path, units: Sequence[DamagedUnit]) -> None:
        self.units = tuple(units)
        shown = "; ".join(str(u) for u in self.units[:5])
        more = f"; and {len(self.units) - 5} more" if len(self.units) > 5 else ""
        super().__init__(
            f"results store {path} has {len(self.units)} damaged record(s): {shown}{more}. "
            "They are not served: drop and recompute them with 'python -m sde_core evaluate "
            "WORKSPACE --repair' (or ResultsStore(path, repair=True))"
        )


@dataclass(frozen=True)
class RepairReport:
    """What a repair did.

    Attributes:
        path: the store.
        moved_to: where a structurally damaged file was kept (``None`` when the file itself was
            sound and only damaged units were dropped from it).
        dropped: the units (and runs) removed; recomputing them restores the store.
        kept_units: units that verified and were kept.
    """

    path: Path
    moved_to: Path | None
    dropped: tuple[DamagedUnit, ...]
    kept_units: int

    def summary(self) -> str:
        """One line for the command line and the dashboard."""
        if not self.dropped and self.moved_to is None:
            return f"results store {self.path}: no damage found ({self.kept_units} units)"
        kept = f"kept {self.kept_units} verified unit(s)"
        moved = "" if self.moved_to is None else f"; the damaged file is kept as {self.moved_to}"
        names = ", ".join(str(u) for u in self.dropped[:5])
        more = "" if len(self.dropped) <= 5 else f", and {len(self.dropped) - 5} more"
        dropped = f"dropped {len(self.dropped)}: {names}{more}" if self.dropped else "dropped none"
        return f"results store {self.path} repaired: {kept}, {dropped}{moved}"


# ------------------------------------------------------------------------------- checksums


def tolerant_text(raw: bytes) -> str:
    """SQLite text factory that never fails: invalid UTF-8 (damage) becomes lone surrogates,
    which then fail verification instead of raising while reading."""
    return raw.decode("utf-8", "surrogateescape")


def _digest(*parts: Any, data: bytes = b"") -> str:
    head = json.dumps(parts, separators=(",", ":"), ensure_ascii=True, default=repr)
    digest = hashlib.sha256(head.encode("ascii"))
    digest.update(data)
    return digest.hexdigest()


def run_checksum(
    workspace_hash: Any, settings_hash: Any, settings: Any, label: Any, created: Any, status: Any
) -> str:
    """Checksum of a run record (every field except its id)."""
    return _digest("run", workspace_hash, settings_hash, settings, label, created, status)


def table_checksum(run_id: Any, name: Any, columns: Any) -> str:
    """Checksum of a run's table record (its column list)."""
    return _digest("table", run_id, name, columns)


def array_checksum(
    run_id: Any, unit_key: Any, name: Any, dtype: Any, shape: Any, data: Any
) -> str | None:
    """Checksum of an array record, or ``None`` when ``data`` is not bytes (damage)."""
    if not isinstance(data, bytes):
        return None
    return _digest("array", run_id, unit_key, name, dtype, shape, data=data)


def unit_checksum(
    run_id: Any,
    unit_key: Any,
    finished: Any,
    rows: Sequence[tuple[Any, Any, Any]],
    arrays: Sequence[tuple[Any, Any]],
) -> str:
    """Checksum of a unit: its identity, its rows ``(table, seq, payload)`` sorted by table and
    sequence number, and its arrays' ``(name, checksum)`` sorted by name."""
    ordered_rows = sorted(rows, key=lambda r: (str(r[0]), repr(r[1])))
    ordered_arrays = sorted(arrays, key=lambda a: str(a[0]))
    return _digest(
        "unit", run_id, unit_key, finished, [list(r) for r in ordered_rows], ordered_arrays
    )


# ------------------------------------------------------------------------------- decoding


def decode_payload(payload: Any) -> dict[str, Any]:
    """A stored row payload as its dict; raises ``ValueError`` when it is not one."""
    if not isinstance(payload, str):
        raise ValueError("a row payload is not text")
    value = json.loads(payload)
    if not isinstance(value, dict):
        raise ValueError("a row payload is not a JSON object")
    return value


def decode_array(dtype: Any, shape: Any, data: Any) -> np.ndarray:
    """The array stored as ``(dtype, shape JSON, bytes)`` (a writable copy).

    Raises:
        ValueError: the dtype, shape or byte count is invalid or inconsistent.
    """
    if not isinstance(dtype, str) or not isinstance(shape, str) or not isinstance(data, bytes):
        raise ValueError("an array record has the wrong field types")
    try:
        kind = np.dtype(dtype)
    except TypeError as exc:
        raise ValueError(f"unknown dtype {dtype!r}") from exc
    if kind.kind not in _ARRAY_KINDS or kind.fields is not None:
        raise ValueError(f"dtype {dtype!r} is not a stored kind")
    dims = json.loads(shape)
    if not isinstance(dims, list) or not all(isinstance(d, int) and d >= 0 for d in dims):
        raise ValueError(f"invalid shape {shape!r}")
    count = 1
    for d in dims:
        count *= d
    if count * kind.itemsize != len(data):
        raise ValueError(f"{len(data)} bytes do not hold shape {dims} of {dtype}")
    return np.frombuffer(data, dtype=kind).reshape(tuple(dims)).copy()


def _decodes(fn: Callable[[], Any]) -> str | None:
    try:
        fn()
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        return str(exc) or type(exc).__name__
    return None


def run_problem(row: Sequence[Any], checksums: bool) -> str | None:
    """Why a ``runs`` row ``(id, workspace_hash, settings_hash, settings, label, created,
    status[, checksum])`` cannot be trusted, or ``None``."""
    _, ws_hash, s_hash, settings, label, created, status = row[:7]
    if checksums and row[7] != run_checksum(ws_hash, s_hash, settings, label, created, status):
        return "its record does not match its checksum"
    bad = _decodes(lambda: _settings_dict(settings))
    return None if bad is None else f"its settings do not decode: {bad}"


def _settings_dict(text: Any) -> dict[str, Any]:
    if not isinstance(text, str):
        raise ValueError("settings are not text")
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("settings are not a JSON object")
    return value


def table_problem(row: Sequence[Any], checksums: bool) -> str | None:
    """Why a ``run_tables`` row ``(run_id, name, columns[, checksum])`` cannot be trusted."""
    run_id, name, columns = row[:3]
    if checksums and row[3] != table_checksum(run_id, name, columns):
        return "it does not match its checksum"

    def names() -> None:
        value = json.loads(columns) if isinstance(columns, str) else None
        if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
            raise ValueError("not a list of column names")

    bad = _decodes(names)
    return None if bad is None else f"it does not decode: {bad}"


def check_unit(
    conn: sqlite3.Connection,
    unit: Sequence[Any],
    checksums: bool,
    indexed: bool = True,
    arrays: bool = True,
) -> str | None:
    """Why the unit ``(id, run_id, unit_key, finished[, checksum])`` cannot be served, or
    ``None`` when every row and array decodes and (schema 2) matches its checksums.
    ``indexed=False`` reads by table scans, for files whose indexes may be damaged.

    ``arrays=False`` (schema 2): the rows and the arrays' recorded checksums are checked
    against the unit's checksum, the arrays' bytes are not read — they are checked against
    those recorded checksums when each is read (:func:`array_problem`). At hundreds of models
    the arrays are most of a store's bytes, and a page reads every model's rows but the
    arrays of a few."""
    uid, run_id, key, finished = unit[:4]
    scan = "" if indexed else " NOT INDEXED"
    if not arrays and checksums and unit[4] is not None and isinstance(key, str):
        rows = conn.execute(
            f"SELECT table_name, seq, payload FROM table_rows{scan} WHERE unit_id = ?", (uid,)
        ).fetchall()
        sums = conn.execute(
            f"SELECT name, checksum FROM arrays{scan} WHERE unit_id = ?", (uid,)
        ).fetchall()
        if all(c is not None for _, c in sums) and unit[4] == unit_checksum(
            run_id, key, finished, rows, [tuple(x) for x in sums]
        ):
            return None
        # something does not match: the full check names what
    rows = conn.execute(
        f"SELECT table_name, seq, payload FROM table_rows{scan} WHERE unit_id = ?", (uid,)
    ).fetchall()
    cols = "name, dtype, shape, data" + (", checksum" if checksums else "")
    stored = conn.execute(f"SELECT {cols} FROM arrays{scan} WHERE unit_id = ?", (uid,)).fetchall()
    if not isinstance(key, str):
        return "its key is damaged"
    sums = []
    for record in stored:
        name, dtype, shape, data = record[:4]
        if checksums:
            if record[4] is None or record[4] != array_checksum(
                run_id, key, name, dtype, shape, data
            ):
                return f"array {name!r} does not match its checksum"
            sums.append((name, record[4]))
    if (
        checksums
        and unit[4] is not None
        and unit[4] == unit_checksum(run_id, key, finished, rows, sums)
    ):
        # Every byte is as written, and what put_unit writes decodes (it encoded it): the
        # decoding below (json of every row, the most of a store's reading time at hundreds
        # of models) is needed only for what no checksum covers.
        return None
    for record in stored:
        name, dtype, shape, data = record[:4]
        bad = _decodes(functools.partial(decode_array, dtype, shape, data))
        if bad is not None:
            return f"array {name!r} does not decode: {bad}"
    for table, seq, payload in rows:
        bad = _decodes(functools.partial(decode_payload, payload))
        if bad is not None:
            return f"row {seq!r} of table {table!r} does not decode: {bad}"
    if checksums:
        if unit[4] is None:
            return "it could not be verified when the store was upgraded"
        if unit[4] != unit_checksum(run_id, key, finished, rows, sums):
            return "its rows or arrays do not match its checksum"
    return None


def array_problem(
    run_id: Any, unit_key: Any, name: Any, dtype: Any, shape: Any, data: Any, checksum: Any,
    checksums: bool,
) -> str | None:  # fmt: skip
    """Why one array record cannot be served, or ``None``: its bytes, dtype and shape match
    its recorded checksum (schema 2; the unit's checksum binds that record, :func:`check_unit`
    with ``arrays=False``), and it decodes."""
    if checksums and (checksum is None or checksum != array_checksum(
        run_id, unit_key, name, dtype, shape, data
    )):  # fmt: skip
        return f"array {name!r} does not match its checksum"
    bad = _decodes(functools.partial(decode_array, dtype, shape, data))
    return None if bad is None else f"array {name!r} does not decode: {bad}"


def file_problem(conn: sqlite3.Connection, size: int) -> str | None:
    """SQLite's structural check of the file (integrity_check up to
    :data:`FULL_CHECK_MAX_BYTES`, quick_check above), or ``None`` when it passes."""
    pragma = "integrity_check" if size <= FULL_CHECK_MAX_BYTES else "quick_check"
    try:
        found = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}(20)").fetchall()]
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        return " ".join(str(exc).split())
    if found == ["ok"]:
        return None
    text = "; ".join(
        " ".join(line.replace("*** in database main ***", "").split()) for line in found[:3]
    )
    return text or "the check returned nothing"


# ------------------------------------------------------------------------------- upgrade


def upgrade_v1(conn: sqlite3.Connection) -> None:
    """Add checksums to a schema-1 store, inside the caller's write transaction.

    Records that do not decode are left without a checksum, so they are reported as damaged
    instead of being certified. Sets ``user_version`` to 2.
    """
    for table in ("runs", "units", "run_tables", "arrays"):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN checksum TEXT")
    for row in conn.execute(
        "SELECT id, workspace_hash, settings_hash, settings, label, created, status FROM runs"
    ).fetchall():
        if run_problem(row, checksums=False) is None:
            conn.execute(
                "UPDATE runs SET checksum = ? WHERE id = ?", (run_checksum(*row[1:]), row[0])
            )
    for run_id, name, columns in conn.execute(
        "SELECT run_id, name, columns FROM run_tables"
    ).fetchall():
        conn.execute(
            "UPDATE run_tables SET checksum = ? WHERE run_id = ? AND name = ?",
            (table_checksum(run_id, name, columns), run_id, name),
        )
    for unit in conn.execute("SELECT id, run_id, unit_key, finished FROM units").fetchall():
        if check_unit(conn, unit, checksums=False) is not None:
            continue
        uid, run_id, key, finished = unit
        sums = []
        for name, dtype, shape, data in conn.execute(
            "SELECT name, dtype, shape, data FROM arrays WHERE unit_id = ?", (uid,)
        ).fetchall():
            digest = array_checksum(run_id, key, name, dtype, shape, data)
            conn.execute(
                "UPDATE arrays SET checksum = ? WHERE run_id = ? AND name = ?",
                (digest, run_id, name),
            )
            sums.append((name, digest))
        rows = conn.execute(
            "SELECT table_name, seq, payload FROM table_rows WHERE unit_id = ?", (uid,)
        ).fetchall()
        conn.execute(
            "UPDATE units SET checksum = ? WHERE id = ?",
            (unit_checksum(run_id, key, finished, rows, sums), uid),
        )
    conn.execute("PRAGMA user_version=2")


# ------------------------------------------------------------------------------- salvage


def _fetch(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any] | None:
    try:
        return conn.execute(sql, params).fetchall()
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        return None


def _move_aside(path: Path) -> Path:
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while aside.exists():
        aside = aside.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        n += 1
    shutil.move(str(path), str(aside))
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            shutil.move(str(side), str(aside.with_name(aside.name + suffix)))
    return aside


def _columns_from_rows(rows: list[tuple[str, dict[str, Any]]]) -> dict[str, list[str]]:
    columns: dict[str, dict[str, None]] = {}
    for table, payload in rows:
        seen = columns.setdefault(table, {})
        for key in payload:
            seen.setdefault(key, None)
    return {table: list(cols) for table, cols in columns.items()}


def salvage(path: Path, create: Callable[[Path], sqlite3.Connection]) -> RepairReport:
    """Rebuild a structurally damaged store from every unit that still verifies.

    The damaged file (with its ``-wal``/``-shm`` files) is moved aside to
    ``<name>.damaged-<time>``, never deleted; ``create(path)`` makes a fresh, empty store
    there; verified runs and units are copied with their ids; each run's table columns are
    rebuilt from its kept rows, and a run that lost units is marked ``running``.
    """
    aside = _move_aside(path)
    dropped: list[DamagedUnit] = []
    kept = 0
    dst = create(path)
    try:
        src = sqlite3.connect(f"file:{aside}?mode=ro", uri=True)
    except sqlite3.Error:
        dst.close()
        return RepairReport(path, aside, (DamagedUnit(0, None, "unreadable file"),), 0)
    src.text_factory = tolerant_text
    try:
        version = (_fetch(src, "PRAGMA user_version") or [(2,)])[0][0]
        checksums = version >= 2
        run_cols = "id, workspace_hash, settings_hash, settings, label, created, status"
        runs = _fetch(src, f"SELECT {run_cols}{', checksum' if checksums else ''} FROM runs")
        if runs is None:
            dropped.append(DamagedUnit(0, None, "the list of runs is unreadable"))
            runs = []
        dst.execute("BEGIN IMMEDIATE")
        for run in runs:
            kept += _salvage_run(src, dst, run, checksums, dropped)
        dst.execute("COMMIT")
    finally:
        src.close()
        dst.close()
    return RepairReport(path, aside, tuple(dropped), kept)


def _salvage_run(
    src: sqlite3.Connection,
    dst: sqlite3.Connection,
    run: Sequence[Any],
    checksums: bool,
    dropped: list[DamagedUnit],
) -> int:
    run_id = run[0]
    unit_cols = "id, run_id, unit_key, finished" + (", checksum" if checksums else "")
    units = _fetch(
        src, f"SELECT {unit_cols} FROM units NOT INDEXED WHERE run_id = ? ORDER BY id", (run_id,)
    )
    problem = run_problem(run, checksums)
    if problem is not None or units is None:
        why = problem or "its list of units is unreadable"
        keys = [u[2] for u in units or [] if isinstance(u[2], str)]
        dropped.extend(DamagedUnit(int(run_id), k, why) for k in keys)
        dropped.append(DamagedUnit(int(run_id), None, why))
        return 0
    fields = list(run[1:7])
    lost_any = False
    copied: list[tuple[str, dict[str, Any]]] = []
    plans: list[Sequence[Any]] = []
    for unit in units:
        reason: str | None
        try:
            reason = check_unit(src, unit, checksums, indexed=False)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            reason = f"unreadable ({' '.join(str(exc).split())})"
        if reason is not None:
            dropped.append(DamagedUnit(int(run_id), str(unit[2]), reason))
            lost_any = True
            continue
        plans.append(unit)
    dst.execute(
        "INSERT INTO runs (id, workspace_hash, settings_hash, settings, label, created, status)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (run_id, *fields),
    )
    kept = 0
    for unit in plans:
        dst.execute("SAVEPOINT unit")
        try:
            rows = _copy_unit(src, dst, unit)
        except (sqlite3.DatabaseError, UnicodeDecodeError, ValueError) as exc:
            dst.execute("ROLLBACK TO unit")
            dropped.append(DamagedUnit(int(run_id), str(unit[2]), f"unreadable ({exc})"))
            lost_any = True
        else:
            copied.extend(rows)
            kept += 1
        dst.execute("RELEASE unit")
    if lost_any:
        fields[5] = "running"
    dst.execute(
        "UPDATE runs SET status = ?, checksum = ? WHERE id = ?",
        (fields[5], run_checksum(*fields), run_id),
    )
    for table, columns in _columns_from_rows(copied).items():
        text = json.dumps(columns)
        dst.execute(
            "INSERT INTO run_tables (run_id, name, columns, checksum) VALUES (?, ?, ?, ?)",
            (run_id, table, text, table_checksum(run_id, table, text)),
        )
    return kept


def _copy_unit(
    src: sqlite3.Connection, dst: sqlite3.Connection, unit: Sequence[Any]
) -> list[tuple[str, dict[str, Any]]]:
    uid, run_id, key, finished = unit[:4]
    rows = src.execute(
        "SELECT table_name, seq, payload FROM table_rows NOT INDEXED WHERE unit_id = ?"
        " ORDER BY table_name, seq",
        (uid,),
    ).fetchall()
    arrays = src.execute(
        "SELECT name, dtype, shape, data FROM arrays NOT INDEXED WHERE unit_id = ? ORDER BY name",
        (uid,),
    ).fetchall()
    sums = [(name, array_checksum(run_id, key, name, d, s, b)) for name, d, s, b in arrays]
    dst.execute(
        "INSERT INTO units (id, run_id, unit_key, finished, checksum) VALUES (?, ?, ?, ?, ?)",
        (uid, run_id, key, finished, unit_checksum(run_id, key, finished, rows, sums)),
    )
    dst.executemany(
        "INSERT INTO table_rows (unit_id, table_name, seq, payload) VALUES (?, ?, ?, ?)",
        [(uid, *row) for row in rows],
    )
    dst.executemany(
        "INSERT INTO arrays (run_id, name, unit_id, dtype, shape, data, checksum)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (run_id, name, uid, d, s, b, digest)
            for (name, d, s, b), (_, digest) in zip(arrays, sums, strict=True)
        ],
    )
    return [(table, decode_payload(payload)) for table, _, payload in rows]
