"""Checked reads of the results store: every run, table and unit record verified before use.

:class:`VerifiedStore` adds to the open file (:class:`~sde_core.pipeline.store_file.StoreFile`)
the checks of :mod:`sde_core.pipeline.store_integrity`: a run record is verified before it is
returned as a :class:`Run`, a run's unit and table records before any of it is served, and the
rows of a table before they are served (:class:`~sde_core.pipeline.store_integrity.Level`; once
per store object while the records are unchanged, and once per process while the file is, too),
:meth:`~VerifiedStore.damaged_units` lists every damaged record and
:meth:`~VerifiedStore.drop_damaged_units` deletes exactly those (what ``repair=True`` does on
opening). The store's API is :class:`~sde_core.pipeline.store.ResultsStore`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sde_core.common.stamps import StampRecords
from sde_core.errors import StoreError
from sde_core.pipeline import store_file
from sde_core.pipeline.store_file import StoreFile, file_stamp
from sde_core.pipeline.store_integrity import (
    FULL,
    RECORDS,
    ROWS,
    DamagedUnit,
    DamagedUnitError,
    Level,
    RepairReport,
    decode_payload,
    run_checksum,
    run_problem,
    suspect_units,
    table_checksum,
    table_problem,
    unit_problem,
)

__all__ = ["Run", "VerifiedStore", "forget_shared_checks"]


RunStatus = Literal["running", "complete"]


_RUN_COLUMNS = "id, workspace_hash, settings_hash, settings, label, created, status"
#: Runs verified by any store object of this process: (file, run) → (file stamp, records'
#: signature, the :class:`Level` every unit was checked at) (:meth:`VerifiedStore._verify_run`),
#: the oldest dropped beyond the limit.
_VERIFIED_FILES: dict[tuple[str, int], tuple[Any, ...]] = {}
_VERIFIED_FILES_MAX = 256
_VERIFIED_LOCK = threading.Lock()  # store objects of several threads share the mapping


def forget_shared_checks() -> None:
    """Forget what this process's store objects checked and trusted on a file's stamp (the
    structural checks and the verified runs): the next store object checks again, as in a
    fresh process (what a benchmark of a cold page load starts from)."""
    with _VERIFIED_LOCK:
        _VERIFIED_FILES.clear()
    with store_file._CHECKED_LOCK:
        store_file._CHECKED_FILES.clear()


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


class VerifiedStore(StoreFile):
    """A results-store file whose records are verified before they are served (see
    :class:`~sde_core.pipeline.store.ResultsStore` for the arguments)."""

    def __init__(
        self,
        path: str | Path,
        timeout: float = 30.0,
        *,
        read_only: bool = False,
        repair: bool = False,
        checks: StampRecords | None = None,
    ) -> None:
        self._verified: dict[tuple[int, Any], Level] = {}  # unit → what its checks covered
        self._verified_runs: dict[int, tuple[Any, Level]] = {}  # run → (signature, level)
        super().__init__(path, timeout, read_only=read_only, repair=repair, checks=checks)
        if repair and self.repair_report is None:  # a sound file: drop its damaged records
            try:
                dropped = self.drop_damaged_units()
                kept = self._query("SELECT count(*) FROM units")[0][0]
                self.repair_report = RepairReport(self.path, None, tuple(dropped), int(kept))
            except BaseException:
                self._conn.close()
                raise

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

    def _level(self, level: Level) -> Level:
        """What checking a unit at ``level`` takes in this file: a schema-2 unit's checksum
        covers every row, a schema-1 unit (no checksums) is decoded whole."""
        if self._schema >= 3:
            return level
        return Level(None, level.arrays or not self._checksums)

    def _unit_problem(self, unit: Sequence[Any], level: Level = FULL) -> str | None:
        """Why a unit cannot be served at ``level`` (``None``: verified; what a store object
        verified is not checked again while the unit's checksum is the same;
        :func:`~sde_core.pipeline.store_integrity.unit_problem`)."""
        level = self._level(level)
        with self._lock:
            if self._covered(unit, level):
                return None
            try:
                problem = unit_problem(self._conn, unit, self._schema, level=level)
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                problem = f"unreadable ({' '.join(str(exc).split())})"
            if problem is None:
                self._mark(unit, level)
        return problem

    def _token(self, unit: Sequence[Any]) -> tuple[int, Any]:
        return (int(unit[0]), unit[4] if self._checksums else unit[2])

    def _done(self, unit: Sequence[Any]) -> Level | None:
        """The level this store object verified ``unit`` at (``None``: not verified)."""
        return self._verified.get(self._token(unit))

    def _covered(self, unit: Sequence[Any], level: Level) -> bool:
        done = self._done(unit)
        return done is not None and done.covers(level)

    def _mark(self, unit: Sequence[Any], level: Level) -> None:
        """Record that ``unit`` verified at ``level`` (with what it verified at before)."""
        done = self._done(unit)
        self._verified[self._token(unit)] = level if done is None else done.union(level)

    def _unit_damage(
        self, units: Sequence[Sequence[Any]], level: Level = FULL
    ) -> list[DamagedUnit]:
        """The units of ``units`` (of one run) that fail their check at ``level``, each with
        its problem (schema 3, below the full check: read a few queries for all the units,
        :func:`~sde_core.pipeline.store_integrity.suspect_units`; each unit found suspect is
        checked alone)."""
        level = self._level(level)
        if self._schema >= 3 and level.tables is not None and not level.arrays and len(units) > 1:
            with self._lock:
                todo = [u for u in units if not self._covered(u, level)]
                try:
                    suspect = suspect_units(self._conn, todo, level, self._done)
                except (sqlite3.DatabaseError, UnicodeDecodeError):
                    suspect = {u[0] for u in todo}  # each checked alone says what
                for unit in todo:
                    if unit[0] not in suspect:
                        self._mark(unit, level)
            units = [u for u in todo if u[0] in suspect]
        damaged = []
        for unit in units:
            problem = self._unit_problem(unit, level)
            if problem is not None:
                damaged.append(DamagedUnit(int(unit[1]), str(unit[2]), problem))
        return damaged

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
        # schema 3: a unit's tables are its table records (bound by its checksum; rows without
        # one fail the read of that table), far fewer than its rows
        used = self._query(
            "SELECT DISTINCT t.table_name FROM "
            + ("unit_tables" if self._schema >= 3 else "table_rows")
            + " t JOIN units u ON u.id = t.unit_id WHERE u.run_id = ?",
            (run_id,),
        )
        damaged.extend(
            DamagedUnit(run_id, None, "its record is missing", str(name))
            for (name,) in used
            if str(name) not in listed
        )
        return damaged

    def _verify_run(
        self, run_id: int, level: Level = ROWS, units: Collection[str] | None = None
    ) -> None:
        """:meth:`_verify_run_at_schema`, again at the new schema when another process upgraded
        the file after this store object opened it (its units' checksums are then of the new
        schema, which the old schema's check would report as damage)."""
        try:
            self._verify_run_at_schema(run_id, level, units)
        except DamagedUnitError:
            current = self._query("PRAGMA user_version")[0][0]
            if not isinstance(current, int) or current <= self._schema:
                raise
            with self._lock:
                self._schema = current
                self._verified.clear()
                self._verified_runs.clear()
            self._verify_run_at_schema(run_id, level, units)

    def _verify_run_at_schema(
        self, run_id: int, level: Level, units: Collection[str] | None = None
    ) -> None:
        """Verify a run's table records and every unit at ``level`` before serving any of it:
        a lost or altered unit would otherwise make a table silently shorter. With ``units``,
        only those units are checked at ``level`` (every unit's record still is): a read of a
        few models' rows of a large table costs what they hold. Below :data:`FULL`, an
        array's bytes are checked when the array is read
        (:func:`~sde_core.pipeline.store_integrity.array_problem`).

        A run verified at a level is not verified again at it while its unit and table
        records are the same and — across the store objects of this process (a page opens a
        connection per read) — while the file and its write-ahead log keep their size and
        modification time (:func:`~sde_core.pipeline.store_file.file_stamp`, taken before the
        checks read anything): at hundreds of models a check costs seconds, and a page reads
        a run several times."""
        level = self._level(level)
        stamp = file_stamp(self.path)
        found = self._query(f"{self._unit_select()} WHERE run_id = ?", (run_id,))
        tables = self._query(f"{self._table_select()} WHERE run_id = ?", (run_id,))
        signature = (tuple((u[0], u[-1]) for u in found), tuple(tables))

        def covered(done: tuple[Any, Level] | None) -> bool:
            return done is not None and done[0] == signature and done[1].covers(level)

        if covered(self._verified_runs.get(run_id)):
            return
        shared = (str(self.path.resolve()), run_id)
        with _VERIFIED_LOCK:
            known = _VERIFIED_FILES.get(shared)
        shared_ok = stamp is not None and known is not None and known[0] == stamp
        if shared_ok and known is not None and covered((known[1], known[2])):
            with self._lock:
                self._verified_runs[run_id] = (known[1], known[2])
            return
        # with ``units``: the level for those, the records of the others
        chosen = None if units is None else {str(u) for u in units}
        mine = [u for u in found if chosen is None or str(u[2]) in chosen]
        others = [u for u in found if chosen is not None and str(u[2]) not in chosen]
        base = self._level(RECORDS)
        damaged = (
            self._table_problems(run_id, tables)
            + self._unit_damage(mine, level)
            + self._unit_damage(others, base)
        )
        if damaged:
            raise DamagedUnitError(self.path, damaged)
        if chosen is not None:
            level = base  # what holds for every unit of the run
        with self._lock:
            before = self._verified_runs.get(run_id)
            if before is not None and before[0] == signature:
                level = before[1].union(level)
            self._verified_runs[run_id] = (signature, level)
        if shared_ok and known is not None and known[1] == signature:
            level = known[2].union(level)
        if stamp is not None:
            with _VERIFIED_LOCK:
                _VERIFIED_FILES[shared] = (stamp, signature, level)
                while len(_VERIFIED_FILES) > _VERIFIED_FILES_MAX:
                    _VERIFIED_FILES.pop(next(iter(_VERIFIED_FILES)))

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
