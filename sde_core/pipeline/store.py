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
(``integrity_check``; ``quick_check`` above 256 MiB; once per process for a file unchanged
since); a structurally damaged file raises :class:`StoreDamagedError`. Any read of a run first
verifies every unit's record — its checksum against its table records and its arrays' recorded
checksums — a read of a table's rows verifies those rows against their table records (of every
unit, or of the units it reads), and a read of an array checks its bytes against its recorded
checksum (once per unit and store object, and per process while the file is unchanged); a
damaged record is never served: it raises :class:`DamagedUnitError` naming its unit. (A
schema-2 file opened read-only is checked with every row at each read: its unit checksums
cover them; opened writable, it is upgraded.) A resumed
evaluation checks every array's bytes too before it skips a unit
(:meth:`ResultsStore.finished_units`), and :meth:`ResultsStore.damaged_units` lists every
damaged unit. ``ResultsStore(path,
repair=True)`` (``evaluate --repair`` on the command line) drops exactly the damaged units, or
rebuilds a structurally damaged file from the units that verify (keeping the damaged file as
``<name>.damaged-<time>``), so a resumed evaluation recomputes just what was lost. Checksums
detect damage, they do not authenticate: whoever can write the file can forge them.

**Older stores.** A schema-1 store (no checksums) or schema-2 store (each unit's checksum over
all its rows; the bundled demos ship schema 2) is upgraded in place when opened writable
(:mod:`~sde_core.pipeline.store_repair`): records that verify (schema 1: that decode) are
sealed at schema 3, the others keep what they had and are reported as damaged. Opened with
``read_only=True`` it is not changed: it is served at its own schema after the structural check
(schema 2: every row checked at each read; schema 1: every row and array decoded and validated,
there being no checksums to compare).

Schema (version :data:`~sde_core.pipeline.store_schema.SCHEMA_VERSION`, kept in
``PRAGMA user_version``; the file is tagged with ``PRAGMA application_id`` =
:data:`~sde_core.pipeline.store_schema.APPLICATION_ID`):

- ``runs(id, workspace_hash, settings_hash, settings JSON, label, created, status, checksum)``,
  unique on (workspace_hash, settings_hash); ``status`` is ``"running"`` or ``"complete"``.
- ``units(id, run_id, unit_key, finished, checksum)``, unique on (run_id, unit_key); insertion
  order is the row order of :meth:`~ResultsStore.rows`.
- ``run_tables(run_id, name, columns JSON, checksum)``: the tables of a run and their column
  order (first-seen order of the row dicts' keys).
- ``table_rows(unit_id, table_name, seq, payload JSON)``: one row dict per record.
- ``arrays(run_id, name, unit_id, dtype, shape JSON, checksum, data BLOB)``: C-order bytes,
  unique name per run (:meth:`~ResultsStore.array`, :meth:`~ResultsStore.arrays`,
  :meth:`~ResultsStore.array_names`); the bytes last, so the other columns are read without
  them.
- ``unit_tables(unit_id, table_name, n_rows, checksum)``: each unit's rows of each table
  counted and checksummed (schema 3), so a read verifies the rows it serves.

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

:class:`ResultsStore` is built in three layers, one idea each: the file
(:class:`~sde_core.pipeline.store_file.StoreFile`: schema, opening, upgrade and salvage,
transactions, readable errors), the verified records
(:class:`~sde_core.pipeline.store_verify.VerifiedStore`: checked runs, units and tables, the
damaged records and their repair), and, here, the runs, units, tables and arrays a caller reads
and writes.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sde_core.common.fsio import atomic_write
from sde_core.common.hashing import stable_hash
from sde_core.errors import StoreError
from sde_core.pipeline.store_encode import Scalar, encode_arrays, encode_tables, json_value
from sde_core.pipeline.store_integrity import (
    FULL,
    RECORDS,
    DamagedUnit,
    DamagedUnitError,
    Level,
    array_checksum,
    array_problem,
    decode_array,
    decode_payload,
    run_checksum,
    table_checksum,
    table_problem,
    unit_checksum3,
    unit_records,
)
from sde_core.pipeline.store_verify import Run, VerifiedStore
from sde_core.pipeline.workspace import cache_path

__all__ = [
    "SHIPPED_STORE",
    "ResultsStore",
    "workspace_store_path",
]


#: Unit keys per ``IN (…)`` of a filtered read (SQLite allows 32,766 variables since 3.32).
_KEYS_PER_QUERY = 500


class ResultsStore(VerifiedStore):
    """SQLite-backed store of evaluation runs (see the module docstring for the schema).

    Open it as a context manager (or call :meth:`close`). One instance may be shared by threads
    (calls are serialised); separate processes open their own instance on the same file.

    Args:
        path: The database file; created with its parent folders when missing.
        timeout: Seconds a write waits for another process's write to finish before failing.
        read_only: Open without writing to the store file (no upgrade, no WAL switch); writes
            raise :class:`~sde_core.errors.StoreError` (``checks`` is still written).
        repair: Drop damaged units (or rebuild a structurally damaged file from the units that
            verify) while opening; what was done is in :attr:`repair_report`.
        checks: Where a pass of SQLite's structural check is recorded and found for the file's
            stamp (:class:`~sde_core.common.stamps.StampRecords`; a workspace's
            ``.sde-cache/checks.json``), so that another process opening the unchanged file
            does not read all of it again. None: checked once per process.

    Attributes:
        repair_report: The :class:`RepairReport` of ``repair=True`` (``None`` otherwise).

    Raises:
        StoreError: The file cannot be opened, is not an SDE results store or was written by a
            newer schema version.
        StoreDamagedError: The file is structurally damaged (and ``repair`` is off).
    """

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
        normal, settings_hash = self._run_key(workspace_hash, settings)
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

    def find_run(self, workspace_hash: str, settings: Mapping[str, Any]) -> Run | None:
        """The run of ``workspace_hash`` under ``settings`` (normalised as :meth:`open_run`
        does), or None when there is none; nothing is written (a read-only store serves it).

        Raises:
            StoreError: ``settings`` is not a dict of JSON values.
            DamagedUnitError: The stored run record is damaged.
        """
        _, settings_hash = self._run_key(workspace_hash, settings)
        found = self._query(
            f"{self._run_select()} WHERE workspace_hash = ? AND settings_hash = ?",
            (workspace_hash, settings_hash),
        )
        return self._run(found[0]) if found else None

    @staticmethod
    def _run_key(workspace_hash: str, settings: Mapping[str, Any]) -> tuple[Any, str]:
        """``(normalised settings, their hash)``, the key of a run (:meth:`open_run`)."""
        if not isinstance(workspace_hash, str) or not workspace_hash:
            raise StoreError("workspace_hash must be a non-empty string")
        return ResultsStore.settings_key(settings)

    @staticmethod
    def settings_key(settings: Mapping[str, Any]) -> tuple[Any, str]:
        """``(normalised settings, their hash)``: the settings half of a run's key, the hash
        being what :meth:`list_runs` gives as ``settings_hash``."""
        if not isinstance(settings, Mapping):
            raise StoreError(f"settings must be a dict, got {type(settings).__name__}")
        normal = json_value(dict(settings), "settings")
        return normal, stable_hash(normal)

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

    def finished_units(self, run_id: int, *, arrays: bool = True) -> set[str]:
        """Keys of every stored unit of the run, after verifying every one of them.

        Args:
            arrays: also check every row and every array's bytes (what a resumed evaluation
                needs before it skips a unit); False: each unit's record against its table
                and array records, the rows being checked when :meth:`records` reads them and
                an array's bytes when :meth:`array` does (at hundreds of models the per-subset
                rows and the arrays are most of the file; a page reads a few tables).

        Raises:
            StoreError: No such run.
            DamagedUnitError: Some units are damaged (all are named; repair drops them).
        """
        self.get_run(run_id)
        self._verify_run(int(run_id), FULL if arrays else RECORDS)
        found = self._query("SELECT unit_key FROM units WHERE run_id = ?", (int(run_id),))
        return {str(key) for (key,) in found}

    def unit_times(self, run_id: int) -> dict[str, str]:
        """Every stored unit key of the run with its ``finished`` time (ISO 8601, UTC), in
        write order: the run record is verified, the units are not — a cheap read for a
        progress display polled every few seconds
        (:mod:`~sde_core.pipeline.run_progress`); each unit's rows are verified when they
        are served (:meth:`finished_units`, :meth:`records`, ...).

        Raises:
            StoreError: No such run.
            DamagedUnitError: The run record is damaged.
        """
        self.get_run(run_id)
        found = self._query(
            "SELECT unit_key, finished FROM units WHERE run_id = ? ORDER BY id", (int(run_id),)
        )
        return {str(key): str(finished) for key, finished in found}

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
        records = encode_tables(tables)
        blobs = encode_arrays(arrays or {})
        self.get_run(run_id)
        finished = _now()
        sums = {name: array_checksum(run_id, unit_key, name, *blob) for name, blob in blobs.items()}
        rows = [
            (table, seq, payload)
            for table, (_, payloads) in records.items()
            for seq, payload in enumerate(payloads)
        ]
        tables_sums = unit_records(run_id, unit_key, rows)  # a table given empty: no record
        checksum = unit_checksum3(run_id, unit_key, finished, tables_sums, list(sums.items()))
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
            conn.executemany(
                "INSERT INTO unit_tables (unit_id, table_name, n_rows, checksum)"
                " VALUES (?, ?, ?, ?)",
                [(unit_id, *record) for record in tables_sums],
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
        """Names of the run's tables, sorted (the run's unit and table records verified; a
        table's rows are checked when they are read, as an array's bytes are).

        Raises:
            StoreError: No such run.
        """
        self.get_run(run_id)
        self._verify_run(int(run_id), RECORDS)
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

    def records(
        self, run_id: int, table: str, units: Collection[str] | None = None
    ) -> list[dict[str, Scalar]]:
        """The run's rows of ``table`` exactly as stored (units in write order, then row order);
        with ``units``, only the rows those units wrote (read by SQL: a few models of a run of
        hundreds cost what they hold, not what the run holds).

        Raises:
            StoreError: No such run or table.
            DamagedUnitError: A unit with rows in this table is damaged.
        """
        self.columns(run_id, table)
        # every unit's record, and this table's rows of the units read
        self._verify_run(int(run_id), Level(frozenset({table})), units)
        base = (
            "FROM table_rows t JOIN units u ON u.id = t.unit_id"
            " WHERE u.run_id = ? AND t.table_name = ?"
        )
        if units is None:
            every = self._query(f"SELECT t.payload {base} ORDER BY u.id, t.seq",
                                (int(run_id), table))  # fmt: skip
            return [decode_payload(payload) for (payload,) in every]
        keys = sorted({str(u) for u in units})
        found: list[tuple[Any, ...]] = []
        for start in range(0, len(keys), _KEYS_PER_QUERY):  # within SQLite's variable limit
            chunk = keys[start : start + _KEYS_PER_QUERY]
            marks = ", ".join("?" * len(chunk))
            found += self._query(
                f"SELECT u.id, t.seq, t.payload {base} AND u.unit_key IN ({marks})",
                (int(run_id), table, *chunk),
            )
        found.sort(key=lambda r: (r[0], r[1]))  # units in write order, then row order
        return [decode_payload(payload) for _, _, payload in found]

    def rows(self, run_id: int, table: str, units: Collection[str] | None = None) -> pd.DataFrame:
        """The run's rows of ``table`` as a DataFrame (units in write order, then row order;
        only ``units``' rows when given, :meth:`records`).

        Raises:
            StoreError: No such run or table.
            DamagedUnitError: A unit with rows in this table is damaged.
        """
        return pd.DataFrame(self.records(run_id, table, units), columns=self.columns(run_id, table))

    def array(self, run_id: int, name: str) -> np.ndarray:
        """The stored array ``name`` of the run, with its exact dtype, shape and values.

        Raises:
            StoreError: No such run or array.
            DamagedUnitError: The unit that stored it is damaged.
        """
        self.get_run(run_id)
        found = self._array_rows(run_id, "a.name = ?", (name,))
        if not found:
            raise StoreError(
                f"run {run_id} has no array {name!r}: list them with array_names({run_id})"
            )
        self._verify_run(int(run_id), RECORDS)  # its unit binds the recorded checksum
        return self._checked_arrays(run_id, found)[name]

    def arrays(self, run_id: int, prefixes: Collection[str] = ("",)) -> dict[str, np.ndarray]:
        """Every stored array of the run whose name starts with one of ``prefixes`` (name ->
        array, sorted by name): the run verified once, each array's bytes checked against its
        recorded checksum — what :meth:`array` does for one, for the arrays of many models.

        Raises:
            StoreError: No such run.
            DamagedUnitError: The unit that stored one of them is damaged (every such unit is
                named).
        """
        self.get_run(run_id)
        self._verify_run(int(run_id), RECORDS)  # each unit binds its arrays' recorded checksums
        found: list[tuple[Any, ...]] = []
        for prefix in dict.fromkeys(prefixes):
            found += self._array_rows(run_id, "substr(a.name, 1, ?) = ?", (len(prefix), prefix))
        return self._checked_arrays(run_id, found)

    def _array_rows(self, run_id: int, where: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The run's array records ``(name, unit key, dtype, shape, bytes, checksum)`` that
        satisfy ``where`` (on the arrays ``a``)."""
        return self._query(
            "SELECT a.name, u.unit_key, a.dtype, a.shape, a.data"
            f"{', a.checksum' if self._checksums else ', NULL'}"
            f" FROM arrays a JOIN units u ON u.id = a.unit_id WHERE a.run_id = ? AND {where}",
            (int(run_id), *params),
        )

    def _checked_arrays(self, run_id: int, found: Sequence[Sequence[Any]]) -> dict[str, np.ndarray]:
        """The arrays of the records ``found`` (name -> array, sorted by name), each checked
        against its recorded checksum; :class:`DamagedUnitError` naming every damaged one."""
        damaged = []
        out: dict[str, np.ndarray] = {}
        for name, key, dtype, shape, data, checksum in sorted(found, key=lambda r: str(r[0])):
            problem = array_problem(int(run_id), key, name, dtype, shape, data, checksum,
                                    self._checksums)  # fmt: skip
            if problem is not None:
                damaged.append(DamagedUnit(int(run_id), str(key), problem))
            else:
                out[str(name)] = decode_array(dtype, shape, data)
        if damaged:
            raise DamagedUnitError(self.path, damaged)
        return out

    def array_names(self, run_id: int, prefix: str = "") -> list[str]:
        """Sorted names of the run's arrays that start with ``prefix``.

        Raises:
            StoreError: No such run.
        """
        self.get_run(run_id)
        self._verify_run(int(run_id), RECORDS)  # a name; the bytes are checked when read
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
