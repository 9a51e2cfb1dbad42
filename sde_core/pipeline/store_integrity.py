"""Integrity of the results store: checksums and the checks of its records.

Every stored record carries a SHA-256 checksum (schema version 2 and later):

- a run: over its workspace hash, settings hash, settings JSON, label, creation time, status;
- a run's table: over its run id, name and column list;
- an array: over its run id, the key of the unit that wrote it, its name, dtype, shape and bytes;
- a unit's rows of one table (schema 3): over its run id, key, the table's name and every row
  (sequence number, JSON payload), recorded with the row count in ``unit_tables``;
- a unit: over its run id, key and finish time, and (schema 3) the records of its tables and
  the names and checksums of its arrays, or (schema 2) every table row it wrote and its
  arrays' names and checksums — so a lost, added or altered row or array, or a record moved to
  another unit or run, changes it.

Schema 3 lets a read verify what it serves: a unit's record against its table and array
records (:data:`RECORDS`), the rows of the tables it reads (:class:`Level`), the bytes of the
arrays it reads (:func:`array_problem`). At hundreds of models the per-subset rows are most of
a run's rows and a page reads the rows of other tables. A schema-2 unit can only be checked
with all its rows (its checksum covers them).

These are integrity checks against damage (a truncated copy, a bad disk, a stray write), not
authentication: anyone who can write the file can also rewrite the checksums.
:func:`unit_problem` verifies one unit; :func:`file_problem` runs SQLite's own structural
check. Upgrading older files and salvaging damaged ones is :mod:`~sde_core.pipeline.store_repair`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.errors import StoreError

__all__ = [
    "FULL",
    "FULL_CHECK_MAX_BYTES",
    "RECORDS",
    "ROWS",
    "DamagedUnit",
    "DamagedUnitError",
    "Level",
    "RepairReport",
    "StoreDamagedError",
    "array_checksum",
    "array_problem",
    "check_unit",
    "check_unit3",
    "decode_array",
    "decode_payload",
    "file_problem",
    "rows_checksum",
    "run_checksum",
    "run_problem",
    "suspect_units",
    "table_checksum",
    "table_problem",
    "tolerant_text",
    "unit_checksum",
    "unit_checksum3",
    "unit_problem",
    "unit_records",
]

#: Files up to this size get ``PRAGMA integrity_check`` (also compares indexes with tables)
#: when opened; larger ones the faster ``PRAGMA quick_check``.
FULL_CHECK_MAX_BYTES = 256 * 2**20
_ARRAY_KINDS = "biuf"
_UNITS_PER_QUERY = 500  # ids bound in one query, well within SQLite's variable limit


@dataclass(frozen=True)
class Level:
    """What a check of a unit covers beyond its record: the rows of ``tables`` (``None``: of
    every table) and, with ``arrays``, the arrays' bytes (each array's recorded checksum is
    bound by the unit's record at every level)."""

    tables: frozenset[str] | None = frozenset()
    arrays: bool = False

    def covers(self, other: Level) -> bool:
        """Whether a unit checked at this level needs no check at ``other``."""
        rows = self.tables is None or (other.tables is not None and other.tables <= self.tables)
        return rows and (self.arrays or not other.arrays)

    def union(self, other: Level) -> Level:
        """What two checks of the same unit covered together."""
        if self.tables is None or other.tables is None:
            return Level(None, self.arrays or other.arrays)
        return Level(self.tables | other.tables, self.arrays or other.arrays)


RECORDS = Level()
"""The unit's record only (schema 3; a schema-2 unit's record covers its rows)."""
ROWS = Level(None)
"""The unit's record and every row it wrote."""
FULL = Level(None, arrays=True)
"""Every row and every array's bytes (what a resumed evaluation checks before it skips a unit)."""


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


def rows_checksum(run_id: Any, unit_key: Any, table: Any, rows: Sequence[tuple[Any, Any]]) -> str:
    """Checksum of a unit's rows ``(seq, payload)`` of one table, sorted by sequence number
    (schema 3)."""
    ordered = sorted(rows, key=lambda r: repr(r[0]))
    return _digest("rows", run_id, unit_key, table, [list(r) for r in ordered])


def unit_records(
    run_id: Any, unit_key: Any, rows: Sequence[tuple[Any, Any, Any]]
) -> list[tuple[str, int, str]]:
    """A unit's table records ``(table, row count, rows checksum)`` from its rows
    ``(table, seq, payload)`` (schema 3), sorted by table."""
    grouped: dict[str, list[tuple[Any, Any]]] = {}
    for table, seq, payload in rows:
        grouped.setdefault(str(table), []).append((seq, payload))
    return [
        (table, len(found), rows_checksum(run_id, unit_key, table, found))
        for table, found in sorted(grouped.items())
    ]


def unit_checksum3(
    run_id: Any,
    unit_key: Any,
    finished: Any,
    tables: Sequence[Sequence[Any]],
    arrays: Sequence[Sequence[Any]],
) -> str:
    """Checksum of a schema-3 unit: its identity, its table records ``(table, row count,
    rows checksum)`` sorted by table, and its arrays' ``(name, checksum)`` sorted by name."""
    ordered_tables = sorted((list(t) for t in tables), key=lambda t: str(t[0]))
    ordered_arrays = sorted((list(a) for a in arrays), key=lambda a: str(a[0]))
    return _digest("unit3", run_id, unit_key, finished, ordered_tables, ordered_arrays)


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


def _sealed(unit: Sequence[Any], tables: Sequence[Sequence[Any]], arrays: Sequence[Any]) -> bool:
    """Whether a schema-3 unit's checksum matches its table records and its arrays'
    ``(name, checksum)`` records."""
    _, run_id, key, finished, checksum = unit[:5]
    return checksum is not None and checksum == unit_checksum3(
        run_id, key, finished, tables, arrays
    )


def _rows_match(unit: Sequence[Any], table: str, rows: Sequence[Any], record: Any) -> bool:
    """Whether a unit's rows ``(seq, payload)`` of ``table`` match its record of them
    ``(table, n_rows, checksum)`` (no record: no rows)."""
    if record is None:
        return not rows
    return len(rows) == record[1] and record[2] == rows_checksum(unit[1], unit[2], table, rows)


def check_unit3(
    conn: sqlite3.Connection, unit: Sequence[Any], indexed: bool = True, level: Level = FULL
) -> str | None:
    """Why the schema-3 unit ``(id, run_id, unit_key, finished, checksum)`` cannot be served at
    ``level``, or ``None``: its checksum matches its table and array records, and the rows of
    the level's tables (and, with ``level.arrays``, the arrays' bytes) match those records.
    ``indexed=False`` reads by table scans, for files whose indexes may be damaged."""
    uid, run_id, key = unit[:3]
    scan = "" if indexed else " NOT INDEXED"
    if not isinstance(key, str):
        return "its key is damaged"
    records = conn.execute(
        f"SELECT table_name, n_rows, checksum FROM unit_tables{scan} WHERE unit_id = ?", (uid,)
    ).fetchall()
    cols = "name, checksum" + (", dtype, shape, data" if level.arrays else "")
    stored = conn.execute(f"SELECT {cols} FROM arrays{scan} WHERE unit_id = ?", (uid,)).fetchall()
    if not _sealed(unit, records, [r[:2] for r in stored]):
        return "its table or array records do not match its checksum"
    if level.arrays:
        for name, recorded, dtype, shape, data in stored:
            actual = array_checksum(run_id, key, name, dtype, shape, data)
            if recorded is None or recorded != actual:
                return f"array {name!r} does not match its checksum"
    known = {str(r[0]): r for r in records}
    if level.tables is None:
        present = conn.execute(
            f"SELECT DISTINCT table_name FROM table_rows{scan} WHERE unit_id = ?", (uid,)
        ).fetchall()
        wanted = sorted({str(t) for (t,) in present} | set(known))
    else:
        wanted = sorted(level.tables)
    for table in wanted:
        rows = conn.execute(
            f"SELECT seq, payload FROM table_rows{scan} WHERE unit_id = ? AND table_name = ?",
            (uid, table),
        ).fetchall()
        record = known.get(table)
        if _rows_match(unit, table, rows, record):
            continue
        if record is None:
            return f"its rows of table {table!r} have no record"
        for seq, payload in rows:  # name a row that does not decode, when one does not
            bad = _decodes(functools.partial(decode_payload, payload))
            if bad is not None:
                return f"row {seq!r} of table {table!r} does not decode: {bad}"
        return f"its rows of table {table!r} do not match their checksum"
    return None


def suspect_units(
    conn: sqlite3.Connection,
    units: Sequence[Sequence[Any]],
    level: Level,
    done: Callable[[Sequence[Any]], Level | None],
) -> set[int]:
    """The ids of those schema-3 ``units`` (rows of ``units``) that may fail a check at
    ``level`` — a set of tables, no arrays' bytes — read in a few queries per chunk of units
    instead of several per unit: each record not verified yet (``done(unit)``: the level a
    unit was checked at, or ``None``) against the unit's checksum, and each table's rows not
    verified yet against their record. A unit named here is checked alone by
    :func:`check_unit3`, which says why it fails."""
    assert level.tables is not None and not level.arrays
    suspect: set[int] = set()
    for start in range(0, len(units), _UNITS_PER_QUERY):
        chunk = units[start : start + _UNITS_PER_QUERY]
        marks = ", ".join("?" * len(chunk))
        ids = [u[0] for u in chunk]
        records: dict[Any, dict[str, tuple[Any, ...]]] = {}
        for uid, *record in conn.execute(
            "SELECT unit_id, table_name, n_rows, checksum FROM unit_tables"
            f" WHERE unit_id IN ({marks})",
            ids,
        ).fetchall():
            records.setdefault(uid, {})[str(record[0])] = tuple(record)
        sums: dict[Any, list[tuple[Any, Any]]] = {}
        for uid, name, checksum in conn.execute(
            f"SELECT unit_id, name, checksum FROM arrays WHERE unit_id IN ({marks})", ids
        ).fetchall():
            sums.setdefault(uid, []).append((name, checksum))
        rows: dict[str, dict[Any, list[tuple[Any, Any]]]] = {}
        for table in sorted(level.tables):
            grouped = rows.setdefault(table, {})
            for uid, seq, payload in conn.execute(
                "SELECT unit_id, seq, payload FROM table_rows"
                f" WHERE table_name = ? AND unit_id IN ({marks})",
                [table, *ids],
            ).fetchall():
                grouped.setdefault(uid, []).append((seq, payload))
        for unit in chunk:
            uid, key = unit[0], unit[2]
            before = done(unit)
            mine = records.get(uid, {})
            ok = isinstance(key, str) and (
                before is not None or _sealed(unit, list(mine.values()), sums.get(uid, []))
            )
            checked = frozenset() if before is None else before.tables
            for table in [] if checked is None else sorted(level.tables - checked):
                ok = ok and _rows_match(unit, table, rows[table].get(uid, []), mine.get(table))
            if not ok:
                suspect.add(uid)
    return suspect


def unit_problem(
    conn: sqlite3.Connection,
    unit: Sequence[Any],
    schema: int,
    indexed: bool = True,
    level: Level = FULL,
) -> str | None:
    """Why a unit of a store of ``schema`` (``PRAGMA user_version``) cannot be served at
    ``level``, or ``None`` (:func:`check_unit3`; schemas 1 and 2: :func:`check_unit`, which
    checks every row at any level)."""
    if schema >= 3:
        return check_unit3(conn, unit, indexed, level)
    return check_unit(conn, unit, schema >= 2, indexed, arrays=level.arrays or schema < 2)


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
