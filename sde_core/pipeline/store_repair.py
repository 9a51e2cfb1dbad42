"""Upgrading and salvaging results-store files.

:func:`upgrade_v1` adds checksums to a schema-1 store; :func:`upgrade_v2` adds each unit's
table records (``unit_tables``) and re-seals its checksum over them (schema 3: a read verifies
the rows of the tables it serves, :mod:`~sde_core.pipeline.store_integrity`); :func:`salvage`
rebuilds a store whose file is structurally damaged from the units that still verify, keeping
the damaged file beside it. A record that does not verify is never certified by an upgrade: it
keeps its old checksum and is reported as damaged.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sde_core.pipeline.store_integrity import (
    FULL,
    ROWS,
    DamagedUnit,
    RepairReport,
    array_checksum,
    check_unit,
    decode_payload,
    run_checksum,
    run_problem,
    table_checksum,
    tolerant_text,
    unit_checksum,
    unit_checksum3,
    unit_problem,
    unit_records,
)
from sde_core.pipeline.store_schema import ARRAYS_SCHEMA, UNIT_TABLES_SCHEMA

__all__ = ["salvage", "upgrade_v1", "upgrade_v2"]


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


def upgrade_v2(conn: sqlite3.Connection) -> None:
    """Add each unit's table records to a schema-2 store and re-seal its checksum over them,
    inside the caller's write transaction (every row is read once). A unit that does not
    verify keeps its schema-2 checksum, which no longer matches: it is reported as damaged.
    Rewrites the arrays table with each array's bytes after its checksum
    (:data:`~sde_core.pipeline.store_integrity.ARRAYS_SCHEMA`). Sets ``user_version`` to 3."""
    conn.execute(UNIT_TABLES_SCHEMA)
    conn.execute(ARRAYS_SCHEMA.replace("CREATE TABLE arrays", "CREATE TABLE arrays_v3", 1))
    conn.execute(
        "INSERT INTO arrays_v3 (run_id, name, unit_id, dtype, shape, checksum, data)"
        " SELECT run_id, name, unit_id, dtype, shape, checksum, data FROM arrays"
    )
    conn.execute("DROP TABLE arrays")
    conn.execute("ALTER TABLE arrays_v3 RENAME TO arrays")
    conn.execute("CREATE INDEX arrays_unit ON arrays (unit_id)")
    for unit in conn.execute(
        "SELECT id, run_id, unit_key, finished, checksum FROM units"
    ).fetchall():
        if unit_problem(conn, unit, 2, level=ROWS) is not None:
            continue
        uid, run_id, key, finished = unit[:4]
        rows = conn.execute(
            "SELECT table_name, seq, payload FROM table_rows WHERE unit_id = ?", (uid,)
        ).fetchall()
        sums = conn.execute(
            "SELECT name, checksum FROM arrays WHERE unit_id = ?", (uid,)
        ).fetchall()
        records = unit_records(run_id, key, rows)
        conn.executemany(
            "INSERT INTO unit_tables (unit_id, table_name, n_rows, checksum) VALUES (?, ?, ?, ?)",
            [(uid, *record) for record in records],
        )
        conn.execute(
            "UPDATE units SET checksum = ? WHERE id = ?",
            (unit_checksum3(run_id, key, finished, records, sums), uid),
        )
    conn.execute("PRAGMA user_version=3")


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
        src_schema = int(version) if isinstance(version, int) else 2
        run_cols = "id, workspace_hash, settings_hash, settings, label, created, status"
        runs = _fetch(src, f"SELECT {run_cols}{', checksum' if checksums else ''} FROM runs")
        if runs is None:
            dropped.append(DamagedUnit(0, None, "the list of runs is unreadable"))
            runs = []
        dst.execute("BEGIN IMMEDIATE")
        for run in runs:
            kept += _salvage_run(src, dst, run, src_schema, dropped)
        dst.execute("COMMIT")
    finally:
        src.close()
        dst.close()
    return RepairReport(path, aside, tuple(dropped), kept)


def _salvage_run(
    src: sqlite3.Connection,
    dst: sqlite3.Connection,
    run: Sequence[Any],
    schema: int,
    dropped: list[DamagedUnit],
) -> int:
    run_id = run[0]
    checksums = schema >= 2
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
            reason = unit_problem(src, unit, schema, indexed=False, level=FULL)
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
    records = unit_records(run_id, key, rows)  # the rebuilt store is of the current schema
    dst.execute(
        "INSERT INTO units (id, run_id, unit_key, finished, checksum) VALUES (?, ?, ?, ?, ?)",
        (uid, run_id, key, finished, unit_checksum3(run_id, key, finished, records, sums)),
    )
    dst.executemany(
        "INSERT INTO unit_tables (unit_id, table_name, n_rows, checksum) VALUES (?, ?, ?, ?)",
        [(uid, *record) for record in records],
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
