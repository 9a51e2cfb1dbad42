"""Tests of :mod:`sde_core.pipeline.store`: runs, units, round-trips, export, errors, crash
safety."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sde_core.common import stamps
from sde_core.common.hashing import stable_hash
from sde_core.errors import SDEError, StoreError
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.store_integrity import DamagedUnitError
from sde_core.pipeline.store_schema import APPLICATION_ID, SCHEMA_VERSION
from sde_core.pipeline.store_verify import Run

ROOT = Path(__file__).resolve().parents[2]
WORKER_PATH = Path(__file__).with_name("_store_worker.py")
_spec = importlib.util.spec_from_file_location("_store_worker", WORKER_PATH)
assert _spec is not None and _spec.loader is not None
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)

WS = "ws-hash"
SETTINGS = {"layer": "output", "sigma": 1.5, "subset_size": 400, "seeds": [0, 1]}


@pytest.fixture
def store(tmp_path: Path):
    with ResultsStore(tmp_path / "results.sqlite") as s:
        yield s


def _row_count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _worker(db: Path, n: int, *extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, str(WORKER_PATH), str(db), str(n), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


# ---------------------------------------------------------------------- opening and runs


def test_new_store_uses_wal_and_versioned_schema(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "results.sqlite"
    with ResultsStore(path) as s:
        assert s._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert s._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    with ResultsStore(path) as s:  # reopening an existing store keeps it
        assert s.list_runs().empty


def test_open_run_same_settings_same_run(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    with ResultsStore(path) as s:
        run = s.open_run(WS, SETTINGS, label="first")
        assert isinstance(run, Run)
        assert run.status == "running" and run.label == "first"
        assert run.settings_hash == stable_hash(SETTINGS)
        assert run.settings == SETTINGS
        reordered = {k: SETTINGS[k] for k in reversed(list(SETTINGS))}
        numpy_typed = {**SETTINGS, "sigma": np.float64(1.5), "subset_size": np.int64(400)}
        tupled = {**SETTINGS, "seeds": (0, 1)}
        for same in (reordered, numpy_typed, tupled):
            assert s.open_run(WS, same, label="ignored") == run
        other_settings = s.open_run(WS, {**SETTINGS, "sigma": 2.0})
        other_workspace = s.open_run("other-ws", SETTINGS)
        assert len({run.id, other_settings.id, other_workspace.id}) == 3
    with ResultsStore(path) as s:  # a new process/session finds the same run
        assert s.open_run(WS, dict(reversed(SETTINGS.items()))) == run
        assert s.get_run(run.id) == run
    with ResultsStore(path, read_only=True) as s:  # found without creating, as open_run keys it
        assert s.find_run(WS, {**SETTINGS, "sigma": np.float64(1.5)}) == run
        assert s.find_run(WS, {**SETTINGS, "sigma": 3.0}) is None
        assert s.find_run("nowhere", SETTINGS) is None
        assert len(s.list_runs()) == 3
        with pytest.raises(StoreError, match="settings must be a dict"):
            s.find_run(WS, [1])  # type: ignore[arg-type]


def test_list_runs_mark_complete_and_delete(store: ResultsStore) -> None:
    a = store.open_run(WS, {"x": 1}, label="a")
    b = store.open_run(WS, {"x": 2}, label="b")
    c = store.open_run("ws2", {"x": 1})
    store.put_unit(a.id, "u0", {"models": [{"name": "m"}]}, {"h": np.zeros(3)})
    store.mark_complete(a.id)
    assert store.get_run(a.id).status == "complete"
    runs = store.list_runs()
    assert runs["id"].tolist() == [a.id, b.id, c.id]
    assert runs["units"].tolist() == [1, 0, 0]
    assert runs["status"].tolist() == ["complete", "running", "running"]
    assert json.loads(runs["settings"].iloc[1]) == {"x": 2}
    assert store.list_runs(WS)["label"].tolist() == ["a", "b"]
    # a new unit written into a complete run makes it "running" again
    store.put_unit(a.id, "u1", {"models": [{"name": "n"}]})
    assert store.get_run(a.id).status == "running"
    store.delete_run(a.id)
    assert store.list_runs()["id"].tolist() == [b.id, c.id]
    for table in ("units", "table_rows", "arrays", "run_tables"):
        assert _row_count(store.path, table) == 0
    with pytest.raises(StoreError, match="unknown run id"):
        store.get_run(a.id)


# ---------------------------------------------------------------------- rows and arrays


def test_rows_round_trip_every_value_type(store: ResultsStore) -> None:
    run = store.open_run(WS, SETTINGS)
    rows = [
        {
            "name": "retrain",
            "i": 1,
            "big": 2**62,
            "f": 0.1,
            "b": True,
            "none": None,
            "nan": math.nan,
            "inf": math.inf,
            "i_or_none": 3,
            "s_or_none": "x",
            "b_or_none": False,
            "np_f32": np.float32(0.25),
            "np_f64": np.float64(1 / 3),
            "np_i": np.int64(-7),
            "np_u": np.uint8(255),
            "np_b": np.bool_(True),
            "np_s": np.str_("é"),
            "mixed": "text",
        },
        {
            "name": "ga",
            "i": -2,
            "big": -(2**62),
            "f": -1e-300,
            "b": False,
            "none": None,
            "nan": 0.5,
            "inf": -math.inf,
            "i_or_none": None,
            "s_or_none": None,
            "b_or_none": None,
            "np_f32": np.float32(-2.0),
            "np_f64": np.float64(np.nan),
            "np_i": np.int32(0),
            "np_u": np.uint64(2**63),
            "np_b": np.bool_(False),
            "np_s": np.str_(""),
            "mixed": 4,
        },
    ]
    assert store.put_unit(run.id, "u0", {"models": rows})

    records = store.records(run.id, "models")
    expected = [
        {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()} for row in rows
    ]
    assert len(records) == 2
    for got, want in zip(records, expected, strict=True):
        assert list(got) == list(want)
        for key in want:
            if isinstance(want[key], float) and math.isnan(want[key]):
                assert isinstance(got[key], float) and math.isnan(got[key])
            else:
                assert got[key] == want[key] and type(got[key]) is type(want[key]), key

    df = store.rows(run.id, "models")
    assert list(df.columns) == list(rows[0])
    assert df["i"].dtype == np.int64 and df["i"].tolist() == [1, -2]
    assert df["big"].tolist() == [2**62, -(2**62)]
    assert df["f"].dtype == np.float64 and df["f"].tolist() == [0.1, -1e-300]
    assert df["b"].dtype == bool and df["b"].tolist() == [True, False]
    assert df["none"].isna().all()
    assert math.isnan(df["nan"].iloc[0]) and df["nan"].iloc[1] == 0.5
    assert df["inf"].tolist() == [math.inf, -math.inf]
    assert df["i_or_none"].iloc[0] == 3 and pd.isna(df["i_or_none"].iloc[1])
    assert df["s_or_none"].iloc[0] == "x" and pd.isna(df["s_or_none"].iloc[1])
    assert df["b_or_none"].iloc[0] is False and pd.isna(df["b_or_none"].iloc[1])
    assert df["np_f32"].tolist() == [0.25, -2.0]
    assert df["np_f64"].iloc[0] == 1 / 3 and math.isnan(df["np_f64"].iloc[1])
    assert df["np_i"].tolist() == [-7, 0]
    assert df["np_u"].tolist() == [255, 2**63]
    assert df["np_b"].tolist() == [True, False]
    assert df["np_s"].tolist() == ["é", ""]
    assert df["mixed"].tolist() == ["text", 4]


def test_columns_keep_first_seen_order_across_units(store: ResultsStore) -> None:
    run = store.open_run(WS, SETTINGS)
    store.put_unit(run.id, "b", {"t": [{"z": 1, "a": 2}], "empty": []})
    store.put_unit(run.id, "a", {"t": [{"a": 3, "new": "n"}, {"z": 4}]})
    assert store.tables(run.id) == ["empty", "t"]
    assert store.columns(run.id, "t") == ["z", "a", "new"]
    assert store.records(run.id, "t") == [{"z": 1, "a": 2}, {"a": 3, "new": "n"}, {"z": 4}]
    df = store.rows(run.id, "t")
    assert list(df.columns) == ["z", "a", "new"]
    assert df["z"].iloc[[0, 2]].tolist() == [1, 4] and pd.isna(df["z"].iloc[1])
    empty = store.rows(run.id, "empty")
    assert empty.empty and list(empty.columns) == []


def test_rows_of_some_units_only(store: ResultsStore, monkeypatch) -> None:
    """Filtered by unit key in SQL: the same rows in the same order (units in write order,
    then row order) as the whole table filtered afterwards, whatever order the keys come
    in, across more keys than one query takes."""
    import sde_core.pipeline.store as store_module

    run = store.open_run(WS, SETTINGS)
    for unit in ("c", "a", "b", "d"):
        store.put_unit(run.id, unit, {"t": [{"u": unit, "i": i} for i in range(3)]})
    every = store.records(run.id, "t")
    wanted = ["b", "c"]
    assert store.records(run.id, "t", wanted[::-1]) == [r for r in every if r["u"] in wanted]
    assert store.records(run.id, "t", []) == []
    assert store.records(run.id, "t", ["nobody"]) == []
    monkeypatch.setattr(store_module, "_KEYS_PER_QUERY", 1)  # one key a query: four queries
    assert store.records(run.id, "t", ["d", "a", "c", "b"]) == every
    df = store.rows(run.id, "t", ["a"])
    assert list(df.columns) == ["u", "i"] and df["u"].tolist() == ["a"] * 3


def test_arrays_round_trip_exactly(store: ResultsStore) -> None:
    run = store.open_run(WS, SETTINGS)
    rng = np.random.default_rng(0)
    arrays = {
        "H/retrain/it": rng.random(200),
        "H/retrain/oot": np.array([math.nan, math.inf, -0.0, 5e-324]),
        "H/ga/it": rng.random((4, 5)).astype(np.float32),
        "ints": np.arange(-3, 3, dtype=np.int16),
        "uints": np.array([0, 2**64 - 1], dtype=np.uint64),
        "flags": np.array([True, False, True]),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 3)),
        "bigendian": np.arange(4, dtype=">f8"),
        "fortran": np.asfortranarray(rng.random((3, 2))),
        "strided": np.arange(10.0)[::3],
    }
    store.put_unit(run.id, "u0", {}, arrays)
    for name, arr in arrays.items():
        got = store.array(run.id, name)
        assert got.dtype == arr.dtype and got.shape == arr.shape, name
        assert got.tobytes() == np.ascontiguousarray(arr).tobytes(), name
        assert got.flags.writeable
    assert store.array_names(run.id, "H/") == ["H/ga/it", "H/retrain/it", "H/retrain/oot"]
    assert store.array_names(run.id, "H/retrain/") == ["H/retrain/it", "H/retrain/oot"]
    assert store.array_names(run.id) == sorted(arrays)
    assert store.array_names(run.id, "nothing") == []


def test_put_unit_is_idempotent_first_write_wins(store: ResultsStore) -> None:
    run = store.open_run(WS, SETTINGS)
    tables = {"models": [{"name": "a", "otr": 0.1}], "targets": [{"t": 0}, {"t": 1}]}
    assert store.finished_units(run.id) == set()
    assert store.put_unit(run.id, "u0", tables, {"h": np.ones(3)}) is True
    changed = {"models": [{"name": "a", "otr": 0.9}], "targets": [{"t": 5}]}
    assert store.put_unit(run.id, "u0", changed, {"h": np.zeros(3), "h2": np.ones(1)}) is False
    assert store.finished_units(run.id) == {"u0"}
    assert store.records(run.id, "models") == [{"name": "a", "otr": 0.1}]
    assert store.records(run.id, "targets") == [{"t": 0}, {"t": 1}]
    assert store.array_names(run.id) == ["h"]
    np.testing.assert_array_equal(store.array(run.id, "h"), np.ones(3))
    # the same key in another run is a different unit
    other = store.open_run(WS, {"other": True})
    assert store.put_unit(other.id, "u0", tables)
    assert store.finished_units(other.id) == {"u0"}


def test_put_unit_is_atomic_on_failure(store: ResultsStore) -> None:
    run = store.open_run(WS, SETTINGS)
    store.put_unit(run.id, "u0", {"models": [{"name": "a"}]}, {"h": np.ones(2)})
    # an array name owned by another unit fails inside the transaction: nothing of u1 is kept
    with pytest.raises(StoreError, match="already stored by unit 'u0'"):
        store.put_unit(
            run.id, "u1", {"models": [{"name": "b"}], "new": [{"x": 1}]}, {"h": np.ones(2)}
        )
    assert store.finished_units(run.id) == {"u0"}
    assert store.records(run.id, "models") == [{"name": "a"}]
    assert store.tables(run.id) == ["models"]
    # invalid values are rejected before anything is written
    bad_inputs = [
        ({"models": [{"x": [1, 2]}]}, None, "type list"),
        ({"models": [{"x": {"a": 1}}]}, None, "type dict"),
        ({"models": [{"x": np.datetime64("2020-01-01")}]}, None, "type"),
        ({"models": [{1: 2}]}, None, "invalid key"),
        ({"models": {"x": 1}}, None, "list of row dicts"),
        ({"models": ["row"]}, None, "not a dict"),
        ({"../evil": [{"x": 1}]}, None, "invalid table name"),
        ({}, {"a": [1.0, 2.0]}, "not a numpy array"),
        ({}, {"a": np.array(["s"])}, "dtype"),
        ({}, {"a": np.array([1 + 2j])}, "dtype"),
        ({}, {"": np.ones(1)}, "invalid array name"),
    ]
    for tables, arrays, message in bad_inputs:
        with pytest.raises(StoreError, match=message):
            store.put_unit(run.id, "u2", tables, arrays)
    with pytest.raises(StoreError, match="unit_key"):
        store.put_unit(run.id, "", {})
    assert store.finished_units(run.id) == {"u0"}


# ---------------------------------------------------------------------- compare and export


def _two_runs(store: ResultsStore) -> tuple[Run, Run]:
    a = store.open_run(WS, {"sigma": 1.0})
    b = store.open_run(WS, {"sigma": 2.0})
    store.put_unit(a.id, "m", {"models": [{"name": "ft", "otr": 0.2}, {"name": "ga", "otr": 0.5}]})
    store.put_unit(
        b.id,
        "m",
        {"models": [{"name": "ga", "otr": 0.7, "f1": 0.9}, {"name": "rl", "otr": 0.1, "f1": 0.4}]},
    )
    return a, b


# ---------------------------------------------------------------------- errors


def test_corrupt_and_foreign_files_raise_store_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database at all " * 200)
    with pytest.raises(StoreError, match="is not an SDE results store: delete it or choose"):
        ResultsStore(garbage)
    assert garbage.read_bytes().startswith(b"this is not")  # left untouched
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    conn.close()
    with pytest.raises(StoreError, match="is not an SDE results store"):
        ResultsStore(foreign)
    with pytest.raises(StoreError, match="cannot open results store"):
        ResultsStore(tmp_path)  # a folder
    assert issubclass(StoreError, SDEError) and issubclass(StoreError, ValueError)


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    ResultsStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer SDE Explorer"):
        ResultsStore(path)


def test_unknown_ids_names_and_bad_settings(store: ResultsStore) -> None:
    run = store.open_run(WS, SETTINGS)
    store.put_unit(run.id, "u", {"models": [{"a": 1}]}, {"h": np.ones(1)})
    for call in (
        lambda: store.finished_units(42),
        lambda: store.put_unit(42, "u", {}),
        lambda: store.rows(42, "models"),
        lambda: store.array(42, "h"),
        lambda: store.mark_complete(42),
        lambda: store.delete_run(42),
    ):
        with pytest.raises(StoreError, match="unknown run id 42"):
            call()
    with pytest.raises(StoreError, match=r"no table 'targets' \(its tables: models\)"):
        store.rows(run.id, "targets")
    with pytest.raises(StoreError, match="no array 'nope'"):
        store.array(run.id, "nope")
    with pytest.raises(StoreError, match=r"type (Posix|Windows)Path"):
        store.open_run(WS, {"path": Path("/x")})
    with pytest.raises(StoreError, match="non-string key"):
        store.open_run(WS, {"nested": {1: 2}})
    with pytest.raises(StoreError, match="must be a dict"):
        store.open_run(WS, [("a", 1)])  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="workspace_hash"):
        store.open_run("", SETTINGS)


# ---------------------------------------------------------------------- processes


def _check_units_complete(store: ResultsStore, run_id: int, units: range) -> None:
    """Every unit in ``units`` is present exactly once with all its rows and arrays."""
    assert store.finished_units(run_id) == {worker.unit_key(i) for i in units}
    for table in ("models", "targets"):
        want = [row for i in units for row in worker.unit_tables(i)[table]]
        assert store.records(run_id, table) == want, table
    want_arrays = {name: arr for i in units for name, arr in worker.unit_arrays(i).items()}
    assert store.array_names(run_id) == sorted(want_arrays)
    for name, arr in want_arrays.items():
        np.testing.assert_array_equal(store.array(run_id, name), arr)


def test_killed_sweep_keeps_finished_units_and_resumes(tmp_path: Path) -> None:
    db, marker, n, hang_at = tmp_path / "sweep.sqlite", tmp_path / "inside-tx", 8, 5
    proc = _worker(db, n, "--hang-at", str(hang_at), "--marker", str(marker))
    try:
        # The worker creates the marker inside unit 5's transaction, after inserting its rows.
        _wait_for(lambda: marker.exists() or proc.poll() is not None, 60, "the worker to hang")
        assert proc.poll() is None, proc.communicate()
        # Readers work while the writer holds its transaction open (WAL).
        with ResultsStore(db) as reader:
            (run,) = reader.list_runs().itertuples()
            assert reader.finished_units(run.id) == {worker.unit_key(i) for i in range(hang_at)}
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    with ResultsStore(db) as s:
        assert s._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        run = s.open_run(worker.WORKSPACE, worker.SETTINGS)
        assert run.status == "running"
        _check_units_complete(s, run.id, range(hang_at))  # unit 5's rows were rolled back

    resumed = _worker(db, n)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert out.strip() == f"written={n - hang_at} skipped={hang_at}"
    with ResultsStore(db) as s:
        run = s.get_run(run.id)
        assert run.status == "complete"
        _check_units_complete(s, run.id, range(n))
        assert len(s.list_runs()) == 1
    assert _row_count(db, "units") == n
    assert _row_count(db, "table_rows") == n * (1 + worker.N_TARGETS)
    assert _row_count(db, "arrays") == n * worker.N_TARGETS


def test_concurrent_workers_write_each_unit_once(tmp_path: Path) -> None:
    db, n = tmp_path / "race.sqlite", 12
    procs = [_worker(db, n, "--delay", "0.01") for _ in range(2)]
    written = 0
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        written += int(out.split()[0].removeprefix("written="))
    assert written == n
    with ResultsStore(db) as s:
        (run,) = s.list_runs().itertuples()
        _check_units_complete(s, run.id, range(n))


def test_workspace_store_path_seeds_from_a_shipped_store(tmp_path):
    from sde_core.pipeline.store import workspace_store_path

    assert workspace_store_path(tmp_path) == tmp_path / ".sde-cache" / "results.sqlite"
    assert not (tmp_path / ".sde-cache").exists()  # nothing shipped: nothing created
    with ResultsStore(tmp_path / "results.sqlite") as shipped:
        run = shipped.open_run("ws", {"n": 1})
        shipped.put_unit(run.id, "m", {"models": [{"name": "m", "otr": 0.5}]})
    before = (tmp_path / "results.sqlite").read_bytes()
    path = workspace_store_path(tmp_path)
    with ResultsStore(path) as store:
        run = store.open_run("ws", {"n": 1})
        assert store.finished_units(run.id) == {"m"}
        store.put_unit(run.id, "m2", {"models": [{"name": "m2", "otr": 1.0}]})
    assert (tmp_path / "results.sqlite").read_bytes() == before  # the shipped file is untouched
    workspace_store_path(tmp_path)  # an existing store is never replaced by the seed
    with ResultsStore(path) as store:
        assert store.finished_units(store.open_run("ws", {"n": 1}).id) == {"m", "m2"}


# ---------------------------------------------------------------------- integrity


def _legacy_copy(tmp_path: Path, name: str = "demo") -> Path:
    """A schema-1 copy of a shipped store (as workspace_store_path makes one): the shipped
    stores are schema 2 now, and schema 1 is schema 2 without the checksum columns, so the
    copy is taken back to the layout that earlier releases shipped."""
    path = tmp_path / name / "results.sqlite"
    path.parent.mkdir(parents=True)
    shutil.copyfile(ROOT / "assets" / name / "results.sqlite", path)
    conn = sqlite3.connect(path)
    with conn:
        if conn.execute("PRAGMA user_version").fetchone()[0] == 3:  # a store rebuilt since
            conn.execute("DROP TABLE unit_tables")
            conn.execute("PRAGMA user_version=2")
        if conn.execute("PRAGMA user_version").fetchone()[0] == 2:
            for table in ("runs", "units", "run_tables", "arrays"):
                conn.execute(f"ALTER TABLE {table} DROP COLUMN checksum")
            conn.execute("PRAGMA user_version=1")
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.execute("VACUUM")
    conn.close()
    return path


def _everything(store: ResultsStore) -> dict:
    out = {}
    for run_id in store.list_runs()["id"].tolist():
        tables = {t: store.records(run_id, t) for t in store.tables(run_id)}
        arrays = {n: store.array(run_id, n) for n in store.array_names(run_id)}
        out[run_id] = (store.get_run(run_id), sorted(store.finished_units(run_id)), tables, arrays)
    return out


def _equal(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        (ra, ua, ta, xa), (rb, ub, tb, xb) = a[key], b[key]
        same_rows = repr(ta) == repr(tb)  # NaN-safe exact comparison
        same_arrays = xa.keys() == xb.keys() and all(
            xa[n].dtype == xb[n].dtype and np.array_equal(xa[n], xb[n], equal_nan=True) for n in xa
        )
        if (ra, ua) != (rb, ub) or not same_rows or not same_arrays:
            return False
    return True


def test_shipped_schema_1_store_is_upgraded_when_writable_and_served_read_only(tmp_path):
    legacy, upgraded = _legacy_copy(tmp_path / "a"), _legacy_copy(tmp_path / "b")
    with ResultsStore(legacy, read_only=True) as store:  # verified by SQLite's check, unchanged
        before = _everything(store)
        assert store.damaged_units() == []
        with pytest.raises(StoreError, match="read-only"):
            store.open_run("new", {"x": 1})
    assert sqlite3.connect(legacy).execute("PRAGMA user_version").fetchone()[0] == 1
    with ResultsStore(upgraded) as store:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert _equal(_everything(store), before) and store.damaged_units() == []
        nulls = store._conn.execute(
            "SELECT (SELECT count(*) FROM units WHERE checksum IS NULL)"
            " + (SELECT count(*) FROM arrays WHERE checksum IS NULL)"
            " + (SELECT count(*) FROM runs WHERE checksum IS NULL)"
        ).fetchone()[0]
        assert nulls == 0
    with ResultsStore(upgraded) as store:  # reopening does not upgrade twice
        assert _equal(_everything(store), before)


def _damage(path: Path, sql: str, params: tuple = ()) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql, params)
    conn.close()


def test_a_settled_file_is_verified_once_per_process_and_again_once_it_changes(
    tmp_path, monkeypatch
):
    """A run verified in full by one store object is not checked again by the next while the
    file is unchanged (and was last modified more than 2 s ago); a change to the file makes
    the next store object check every unit again, and find the damage."""
    import sde_core.pipeline.store_integrity as integrity

    path = tmp_path / "results.sqlite"
    with ResultsStore(path) as s:
        run = s.open_run(WS, SETTINGS)
        for i in range(3):
            s.put_unit(run.id, f"u{i}", {"models": [{"name": f"u{i}", "otr": i / 10}]})
        s.mark_complete(run.id)
    checks: list[str] = []
    real = integrity.unit_checksum3

    def counted(run_id, unit_key, finished, tables, arrays):  # a unit's record checked
        checks.append(str(unit_key))
        return real(run_id, unit_key, finished, tables, arrays)

    monkeypatch.setattr(integrity, "unit_checksum3", counted)
    assert not Path(f"{path}-wal").exists()
    with ResultsStore(path, read_only=True) as s:  # just written: nothing is shared
        s.records(run.id, "models")
    with ResultsStore(path, read_only=True) as s:
        s.records(run.id, "models")
    assert len(checks) == 6
    monkeypatch.setattr(stamps, "SETTLED_NS", 0)  # the file counts as settled from now on
    checks.clear()
    for _ in range(3):
        with ResultsStore(path, read_only=True) as s:
            assert [r["name"] for r in s.records(run.id, "models")] == ["u0", "u1", "u2"]
    assert len(checks) == 3  # the first store object only
    _damage(path, "UPDATE table_rows SET payload = '{\"name\": \"u1\", \"otr\": 0.9}' "
                  "WHERE unit_id = 2")  # fmt: skip
    hour_ago = time.time() - 3600
    os.utime(path, (hour_ago, hour_ago))  # its modification time set back: its stamp still
    with ResultsStore(path, read_only=True) as s, pytest.raises(DamagedUnitError, match="u1"):
        s.records(run.id, "models")


def test_a_settled_file_is_checked_for_structure_once_and_again_once_it_changes(
    tmp_path, monkeypatch
):
    """SQLite's structural check runs once per process for a file that has not changed (and
    settled); a byte changed in a page — with the modification time set back to another
    settled time — is checked again, found, and nothing is read."""
    import sde_core.pipeline.store_file as store_file
    from sde_core.pipeline.store_verify import forget_shared_checks

    path = tmp_path / "results.sqlite"
    with ResultsStore(path) as s:
        run = s.open_run(WS, SETTINGS)
        for i in range(40):
            s.put_unit(run.id, f"u{i}", {"models": [{"name": f"u{i}", "text": "x" * 200}]})
        s._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    monkeypatch.setattr(stamps, "SETTLED_NS", 0)  # the file counts as settled
    forget_shared_checks()
    checks: list[int] = []
    real = store_file.file_problem

    def counted(conn, size):
        checks.append(size)
        return real(conn, size)

    monkeypatch.setattr(store_file, "file_problem", counted)
    for _ in range(3):
        with ResultsStore(path, read_only=True) as s:
            assert len(s.finished_units(run.id)) == 40
    assert len(checks) == 1  # the first store object only
    raw = bytearray(path.read_bytes())
    size = int.from_bytes(raw[16:18], "big")
    raw[(len(raw) // size - 1) * size] = 0xFF  # the last page: an invalid b-tree page type
    path.write_bytes(bytes(raw))
    hour_ago = time.time() - 3600
    os.utime(path, (hour_ago, hour_ago))  # the modification time set back: the stamp changed
    with pytest.raises(StoreError, match="damaged"):
        ResultsStore(path, read_only=True)
    assert len(checks) == 2
    forget_shared_checks()


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("UPDATE arrays SET data = zeroblob(length(data)) WHERE name = 'u1/h'", "array 'u1/h'"),
        ("UPDATE arrays SET dtype = 'garbage' WHERE name = 'u1/h'", "array 'u1/h'"),
        ("UPDATE arrays SET shape = '[[' WHERE name = 'u1/h'", "array 'u1/h'"),
        ("UPDATE table_rows SET payload = '{\"otr\": 0.9' WHERE seq = 0 AND unit_id = 2", "row 0"),
        ("DELETE FROM table_rows WHERE unit_id = 2", "rows of table 'models'"),
        ("UPDATE units SET unit_key = 'u9' WHERE unit_key = 'u1'", "records do not match"),
    ],
)
def test_damaged_units_are_named_never_served_and_dropped_exactly(tmp_path, sql, reason):
    """A damaged record is never served; a resumed evaluation's check (finished_units, in
    full) and the repair find every damaged unit, arrays' bytes included."""
    path = tmp_path / "results.sqlite"
    with ResultsStore(path) as s:
        run = s.open_run(WS, SETTINGS)
        for i in range(3):
            s.put_unit(run.id, f"u{i}", {"models": [{"name": f"u{i}", "otr": i / 10}]},
                       {f"u{i}/h": np.full(4, float(i))})  # fmt: skip
        s.mark_complete(run.id)
    _damage(path, sql)
    with ResultsStore(path) as s:
        with pytest.raises(DamagedUnitError, match=reason) as err:
            s.finished_units(run.id)
        (bad,) = err.value.units
        assert bad.run_id == run.id and bad.unit_key in ("u1", "u9")
        if sql.startswith("UPDATE arrays"):
            # an array's bytes, dtype or shape: the rows verify (the unit's checksum binds
            # them and the array's recorded checksum) and are served; the array is not
            assert [r["name"] for r in s.records(run.id, "models")] == ["u0", "u1", "u2"]
            with pytest.raises(DamagedUnitError, match="array 'u1/h'") as err:
                s.array(run.id, "u1/h")
            assert [d.unit_key for d in err.value.units] == ["u1"]
            assert (s.array(run.id, "u2/h") == 2.0).all()
            assert s.finished_units(run.id, arrays=False) == {"u0", "u1", "u2"}
        else:
            with pytest.raises(DamagedUnitError, match=reason):
                s.records(run.id, "models")
            if "table_rows" in sql:
                # a row: found by the read that serves it; listing the units checks each
                # unit's record (its checksum over its table and array records), not its rows
                assert s.finished_units(run.id, arrays=False) == {"u0", "u1", "u2"}
                assert s.records(run.id, "models", units=["u0", "u2"]) == [
                    {"name": "u0", "otr": 0.0}, {"name": "u2", "otr": 0.2}
                ]  # fmt: skip
            else:
                with pytest.raises(DamagedUnitError):
                    s.finished_units(run.id, arrays=False)
        assert [d.unit_key for d in s.damaged_units()] == [bad.unit_key]
    with ResultsStore(path, repair=True) as s:
        assert s.repair_report is not None and len(s.repair_report.dropped) == 1
        assert s.finished_units(run.id) == {"u0", "u2"}
        assert [r["name"] for r in s.records(run.id, "models")] == ["u0", "u2"]
        assert s.get_run(run.id).status == "running"  # incomplete until recomputed
        assert s.put_unit(run.id, "u1", {"models": [{"name": "u1", "otr": 0.1}]},
                          {"u1/h": np.full(4, 1.0)})  # fmt: skip
        assert s.damaged_units() == []


def test_damaged_settings_and_columns_are_reported_not_raw_decode_errors(tmp_path):
    path = tmp_path / "results.sqlite"
    with ResultsStore(path) as s:
        run = s.open_run(WS, SETTINGS)
        s.put_unit(run.id, "u", {"models": [{"name": "m", "x": 1}]})
    _damage(path, "UPDATE run_tables SET columns = '[\"name\"' WHERE name = 'models'")
    with ResultsStore(path) as s, pytest.raises(DamagedUnitError, match="table 'models'"):
        s.rows(run.id, "models")
    with ResultsStore(path, repair=True) as s:  # rebuilt from the rows: nothing lost
        assert s.repair_report.kept_units == 1
        assert s.columns(run.id, "models") == ["name", "x"]
    _damage(path, "UPDATE runs SET settings = '{not json'")
    with ResultsStore(path) as s, pytest.raises(DamagedUnitError, match="run record of run 1"):
        s.get_run(run.id)
    with ResultsStore(path, repair=True) as s:  # the run cannot be trusted: it goes, units too
        assert {d.unit_key for d in s.repair_report.dropped} == {None, "u"}
        assert s.list_runs().empty


def test_a_read_of_rows_checks_the_arrays_bytes_only_when_they_are_read(tmp_path, monkeypatch):
    """A read that serves rows verifies every unit's rows and its arrays' recorded checksums;
    an array's bytes are hashed when that array is read — at hundreds of models the arrays
    are most of the file, and a page reads every model's rows but a few models' arrays. A
    resumed evaluation's check (finished_units) hashes every array's bytes."""
    import sde_core.pipeline.store as store_module
    import sde_core.pipeline.store_integrity as integrity

    path = tmp_path / "results.sqlite"
    with ResultsStore(path) as s:
        run = s.open_run(WS, SETTINGS)
        for i in range(3):
            s.put_unit(run.id, f"u{i}", {"models": [{"name": f"u{i}"}]},
                       {f"u{i}/h": np.full(4, float(i)), f"u{i}/g": np.zeros(2)})  # fmt: skip
    hashed: list[str] = []
    real = integrity.array_checksum

    def counted(run_id, unit_key, name, dtype, shape, data):
        hashed.append(str(name))
        return real(run_id, unit_key, name, dtype, shape, data)

    monkeypatch.setattr(integrity, "array_checksum", counted)
    monkeypatch.setattr(store_module, "array_checksum", counted)
    with ResultsStore(path, read_only=True) as s:
        assert [r["name"] for r in s.records(run.id, "models")] == ["u0", "u1", "u2"]
        assert s.finished_units(run.id, arrays=False) == {"u0", "u1", "u2"}
        assert hashed == []  # every unit verified, no array's bytes read
        assert (s.array(run.id, "u1/h") == 1.0).all()
        assert hashed == ["u1/h"]
        hashed.clear()
        assert s.finished_units(run.id) == {"u0", "u1", "u2"}
        assert sorted(hashed) == ["u0/g", "u0/h", "u1/g", "u1/h", "u2/g", "u2/h"]
