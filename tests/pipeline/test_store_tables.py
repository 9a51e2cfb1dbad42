"""Schema 3 of the results store: a read verifies what it serves.

Each unit's rows of each table carry their own checksum (``unit_tables``), bound by the unit's
checksum. A read of one table's rows verifies those rows (of the units it reads), every unit's
record, and nothing else: at hundreds of models the per-subset rows are most of a run's bytes,
and a page reads the rows of the other tables. The tests here check that each level finds the
damage it covers and only reads what it covers, and that a schema-2 store — the shipped demo
stores are schema 2 — is served read-only at its own schema and upgraded when opened writable.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sde_core.pipeline.store_integrity as integrity
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.store_integrity import (
    FULL,
    RECORDS,
    ROWS,
    DamagedUnitError,
    Level,
    unit_checksum,
)
from sde_core.pipeline.store_schema import SCHEMA_VERSION
from sde_core.pipeline.store_verify import forget_shared_checks

ROOT = Path(__file__).resolve().parents[2]
WS, SETTINGS = "ws-hash", {"layer": "output", "seeds": [0]}


def _store(path: Path, n: int = 3) -> int:
    """A store of ``n`` units, each with a one-row ``models`` table, a 50-row ``subsets``
    table and an array; the run id."""
    with ResultsStore(path) as s:
        run = s.open_run(WS, SETTINGS)
        for i in range(n):
            s.put_unit(
                run.id,
                f"u{i}",
                {
                    "models": [{"name": f"u{i}", "otr": i / 10}],
                    "subsets": [{"model": f"u{i}", "draw": d, "h": d / 7} for d in range(50)],
                },
                {f"u{i}/h": np.arange(4.0) + i},
            )
        s.mark_complete(run.id)
    return run.id


def _hashed_tables(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables whose rows are hashed from now on (one entry per unit and table)."""
    seen: list[str] = []
    real = integrity.rows_checksum

    def counted(run_id, unit_key, table, rows):  # type: ignore[no-untyped-def]
        seen.append(str(table))
        return real(run_id, unit_key, table, rows)

    monkeypatch.setattr(integrity, "rows_checksum", counted)
    return seen


def test_a_read_of_one_table_hashes_that_tables_rows_only(tmp_path, monkeypatch):
    path = tmp_path / "results.sqlite"
    run = _store(path)
    forget_shared_checks()
    hashed = _hashed_tables(monkeypatch)
    with ResultsStore(path, read_only=True) as s:
        assert s.finished_units(run, arrays=False) == {"u0", "u1", "u2"}
        assert s.tables(run) == ["models", "subsets"]
        assert hashed == []  # the units' records only
        assert [r["name"] for r in s.records(run, "models")] == ["u0", "u1", "u2"]
        assert hashed == ["models"] * 3
        hashed.clear()
        s.records(run, "models")  # verified once per store object
        assert len(s.records(run, "subsets", units=["u1"])) == 50
        assert hashed == ["subsets"]  # the unit read, not the other two
        hashed.clear()
        assert s.finished_units(run) == {"u0", "u1", "u2"}  # in full: every table of every unit
        assert sorted(hashed) == ["models"] * 3 + ["subsets"] * 3


def test_damaged_subset_rows_are_found_by_the_read_that_serves_them(tmp_path):
    """A changed per-subset row of one unit: the models table is served, the subsets of the
    other units are served, that unit's subsets are not; a resumed evaluation's check, the
    damage listing and the repair find it."""
    path = tmp_path / "results.sqlite"
    run = _store(path)
    with sqlite3.connect(path) as conn:
        conn.execute(
            'UPDATE table_rows SET payload = \'{"model": "u1", "draw": 3, "h": 9.0}\' '
            "WHERE table_name = 'subsets' AND seq = 3 AND unit_id = 2"
        )
    conn.close()
    with ResultsStore(path) as s:
        assert [r["name"] for r in s.records(run, "models")] == ["u0", "u1", "u2"]
        assert len(s.records(run, "subsets", units=["u0", "u2"])) == 100
        for units in (None, ["u1"]):
            with pytest.raises(DamagedUnitError, match="rows of table 'subsets'") as err:
                s.records(run, "subsets", units=units)
            assert [d.unit_key for d in err.value.units] == ["u1"]
        with pytest.raises(DamagedUnitError, match="u1"):
            s.finished_units(run)
        assert [d.unit_key for d in s.damaged_units()] == ["u1"]
    with ResultsStore(path, repair=True) as s:
        assert s.finished_units(run) == {"u0", "u2"}
        assert s.get_run(run).status == "running"


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("DELETE FROM unit_tables WHERE unit_id = 2 AND table_name = 'subsets'", "records"),
        (
            "UPDATE unit_tables SET n_rows = 49 WHERE unit_id = 2 AND table_name = 'subsets'",
            "records",
        ),
        ("UPDATE unit_tables SET table_name = 'draws' WHERE rowid = 3", "records"),
        ("UPDATE arrays SET checksum = 'x' WHERE name = 'u1/h'", "records"),
        ("INSERT INTO table_rows VALUES (2, 'extra', 0, '{\"a\": 1}')", "have no record"),
    ],
)
def test_a_damaged_table_record_or_an_unrecorded_table_is_never_served(tmp_path, sql, reason):
    """A lost or altered table record, or an array record's checksum, fails the unit's record
    check (at every level); rows of a table the unit never recorded fail the full check (a
    resumed evaluation's, the damage listing's and the repair's)."""
    path = tmp_path / "results.sqlite"
    run = _store(path)
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    conn.close()
    with ResultsStore(path) as s:
        with pytest.raises(DamagedUnitError, match=reason) as err:
            s.finished_units(run)
        assert {d.unit_key for d in err.value.units} - {None} == {"u1"}
        if reason == "records":
            with pytest.raises(DamagedUnitError):
                s.records(run, "models")
        else:  # rows no record lists: no read serves them, the full checks find them
            assert len(s.records(run, "models")) == 3
        assert s.damaged_units()
    with ResultsStore(path, repair=True) as s:
        assert s.repair_report is not None and s.repair_report.dropped
        assert s.damaged_units() == []
        assert "u0" in s.finished_units(run)


def _schema_2(path: Path) -> None:
    """Take a schema-3 store back to schema 2 as earlier releases wrote it: no table records,
    each unit's checksum over all its rows."""
    conn = sqlite3.connect(path)
    with conn:
        for uid, run_id, key, finished in conn.execute(
            "SELECT id, run_id, unit_key, finished FROM units"
        ).fetchall():
            rows = conn.execute(
                "SELECT table_name, seq, payload FROM table_rows WHERE unit_id = ?", (uid,)
            ).fetchall()
            sums = conn.execute(
                "SELECT name, checksum FROM arrays WHERE unit_id = ?", (uid,)
            ).fetchall()
            conn.execute(
                "UPDATE units SET checksum = ? WHERE id = ?",
                (unit_checksum(run_id, key, finished, rows, sums), uid),
            )
        conn.execute("DROP TABLE unit_tables")
        conn.execute("PRAGMA user_version=2")
    conn.close()


def _everything(store: ResultsStore) -> list:
    out = []
    for run_id in store.list_runs()["id"].tolist():
        tables = {t: store.records(run_id, t) for t in store.tables(run_id)}
        arrays = {n: store.array(run_id, n).tolist() for n in store.array_names(run_id)}
        out.append((store.get_run(run_id), sorted(store.finished_units(run_id)), tables, arrays))
    return out


def test_the_shipped_schema_2_store_is_read_as_it_is_and_upgraded_when_writable(tmp_path):
    """The demo's shipped store (schema 2, as the release before this one wrote it; taken back
    to schema 2 if a rebuild made it schema 3): served
    read-only at schema 2, upgraded to schema 3 on a writable open with every record the same
    and every unit verifying, and not upgraded twice."""
    path = tmp_path / "results.sqlite"
    shutil.copyfile(ROOT / "assets" / "demo-mnist1d" / "results.sqlite", path)
    if sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 3:
        _schema_2(path)  # a demo rebuilt since writes schema 3: take the copy back
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 2
    with ResultsStore(path, read_only=True) as s:
        before = _everything(s)
        assert s.damaged_units() == [] and before
    with ResultsStore(path) as s:
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        assert s.damaged_units() == []
        assert repr(_everything(s)) == repr(before)
        units, records = s._conn.execute(
            "SELECT (SELECT count(*) FROM units), (SELECT count(DISTINCT unit_id) FROM unit_tables)"
        ).fetchone()
        assert units == records > 0
        columns = [r[1] for r in s._conn.execute("PRAGMA table_info(arrays)")]
        assert columns[-2:] == ["checksum", "data"]  # the bytes last: records read no blob
        indexes = {r[1] for r in s._conn.execute("PRAGMA index_list(arrays)")}
        assert "arrays_unit" in indexes
    with ResultsStore(path) as s:
        assert repr(_everything(s)) == repr(before)
    with ResultsStore(tmp_path / "new.sqlite") as s:  # a new store: the same layout
        assert [r[1] for r in s._conn.execute("PRAGMA table_info(arrays)")][-2:] == [
            "checksum",
            "data",
        ]


def test_an_upgrade_certifies_no_damaged_unit(tmp_path):
    """A schema-2 unit whose row was changed stays damaged through the upgrade (it keeps its
    old checksum), is named, and the repair drops exactly it."""
    path = tmp_path / "results.sqlite"
    run = _store(path)
    _schema_2(path)
    with ResultsStore(path, read_only=True) as s:  # schema 2 read at schema 2
        assert s._schema == 2 and s.finished_units(run, arrays=False) == {"u0", "u1", "u2"}
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE table_rows SET payload = '{\"name\": \"u1\"}' WHERE unit_id = 2 "
                     "AND table_name = 'models'")  # fmt: skip
    conn.close()
    with ResultsStore(path, read_only=True) as s, pytest.raises(DamagedUnitError, match="u1"):
        s.records(run, "models")
    with ResultsStore(path) as s:
        assert s._schema == 3
        assert [d.unit_key for d in s.damaged_units()] == ["u1"]
        with pytest.raises(DamagedUnitError, match="u1"):
            s.records(run, "models")
    with ResultsStore(path, repair=True) as s:
        assert s.finished_units(run) == {"u0", "u2"}
        assert len(s.records(run, "subsets")) == 100


def test_a_salvaged_store_is_of_the_current_schema_and_verifies(tmp_path):
    """A structurally damaged schema-2 file is rebuilt as schema 3 from its units, every one
    verifying in full."""
    path = tmp_path / "results.sqlite"
    run = _store(path, n=4)
    _schema_2(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    raw = bytearray(path.read_bytes())
    size = int.from_bytes(raw[16:18], "big")
    raw[(len(raw) // size - 1) * size] = 0xFF  # the last page: an invalid b-tree page type
    path.write_bytes(bytes(raw))
    forget_shared_checks()
    with ResultsStore(path, repair=True) as s:
        assert s.repair_report is not None and s.repair_report.moved_to is not None
        kept = s.finished_units(run) if s.list_runs().shape[0] else set()
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == 3
        assert s.damaged_units() == []
        assert len(kept) + len({d.unit_key for d in s.repair_report.dropped} - {None}) == 4


_LEVELS = st.builds(
    Level,
    st.one_of(st.none(), st.frozensets(st.sampled_from(["models", "subsets", "draws"]))),
    st.booleans(),
)


@given(_LEVELS, _LEVELS, _LEVELS)
def test_levels_cover_and_unite_as_sets_do(a, b, c):
    u = a.union(b)
    assert u.covers(a) and u.covers(b)
    assert a.covers(RECORDS) and FULL.covers(a) and a.covers(a)
    assert (a.covers(b) and b.covers(c)) <= a.covers(c)  # transitive
    assert ROWS.covers(a) == (not a.arrays)
    if c.covers(a) and c.covers(b):
        assert c.covers(u)  # the union is the least that covers both


_DAMAGE = [
    "UPDATE table_rows SET payload = '{\"h\": 1}' WHERE unit_id = :u AND table_name = :t"
    " AND seq = 0",
    "DELETE FROM table_rows WHERE unit_id = :u AND table_name = :t AND seq = 0",
    "INSERT OR IGNORE INTO table_rows VALUES (:u, :t, 999, '{\"h\": 2}')",
    "UPDATE unit_tables SET n_rows = n_rows + 1 WHERE unit_id = :u AND table_name = :t",
    "UPDATE unit_tables SET checksum = 'x' || checksum WHERE unit_id = :u AND table_name = :t",
    "DELETE FROM unit_tables WHERE unit_id = :u AND table_name = :t",
    "UPDATE units SET finished = finished || 'x' WHERE id = :u",
    "UPDATE units SET checksum = NULL WHERE id = :u",
    "UPDATE arrays SET checksum = 'x' WHERE unit_id = :u",
]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_DAMAGE), st.integers(1, 4), st.sampled_from(["models", "subsets"])
        ),
        max_size=3,
    )
)
def test_the_batched_check_finds_what_each_units_own_check_finds(damage):
    """Random damage to rows, table records, unit and array records of a 4-unit store: the
    check of a read (all units in a few queries) names exactly the units that the check of
    each unit alone names, at every level a read uses."""
    import tempfile

    from sde_core.pipeline.store_integrity import unit_problem

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "results.sqlite"
        run = _store(path, n=4)
        with sqlite3.connect(path) as conn:
            for sql, unit, table in damage:
                conn.execute(sql, {"u": unit, "t": table})
        conn.close()
        levels = [RECORDS, Level(frozenset({"models"})), Level(frozenset({"models", "subsets"}))]
        for level in levels:
            forget_shared_checks()
            with ResultsStore(path, read_only=True) as s:
                units = s._query(f"{s._unit_select()} WHERE run_id = ?", (run,))
                alone = {str(u[2]) for u in units if unit_problem(s._conn, u, 3, level=level)}
                batched = {d.unit_key for d in s._unit_damage(units, level)}
                assert batched == alone, (level, damage)


def test_a_reader_opened_before_another_process_upgrades_the_file_reads_on(tmp_path):
    """A store object that opened a schema-2 file read-only keeps serving it after a writable
    open elsewhere upgraded it to schema 3 (its units re-sealed), instead of calling the
    re-sealed units damaged."""
    path = tmp_path / "results.sqlite"
    run = _store(path)
    _schema_2(path)
    with ResultsStore(path, read_only=True) as reader:
        assert reader._schema == 2
        with ResultsStore(path):  # another process's writable open: upgraded
            pass
        assert [r["name"] for r in reader.records(run, "models")] == ["u0", "u1", "u2"]
        assert reader._schema == 3
        assert reader.damaged_units() == []


def test_arrays_reads_the_arrays_of_many_units_each_checked(tmp_path):
    """``arrays(run, prefixes)`` serves what ``array`` serves one by one; an array whose bytes
    changed is not served and its unit is named, while other units' arrays still are."""
    path = tmp_path / "results.sqlite"
    run = _store(path, n=4)
    with ResultsStore(path, read_only=True) as s:
        some = s.arrays(run, ["u1/", "u3/", "u1/"])
        assert list(some) == ["u1/h", "u3/h"]
        assert all(np.array_equal(some[k], s.array(run, k)) for k in some)
        assert list(s.arrays(run)) == [f"u{i}/h" for i in range(4)]
        assert s.arrays(run, ["nobody/"]) == {}
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE arrays SET data = zeroblob(length(data)) WHERE name = 'u1/h'")
    conn.close()
    with ResultsStore(path, read_only=True) as s:
        with pytest.raises(DamagedUnitError, match="array 'u1/h'") as err:
            s.arrays(run, ["u0/", "u1/"])
        assert [d.unit_key for d in err.value.units] == ["u1"]
        assert (s.arrays(run, ["u0/", "u2/"])["u2/h"] == np.arange(4.0) + 2).all()
