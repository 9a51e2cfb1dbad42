"""Property-based tests of the results store: what is written reads back exactly, bad values
give a clean :class:`~sde_core.errors.StoreError`, and a damaged file is either reported or read
back unchanged — never served with different rows or arrays."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sde_core.errors import StoreError
from sde_core.pipeline.store import ResultsStore

FAST = settings(
    derandomize=True,
    deadline=None,
    max_examples=80,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=64),
    st.text(max_size=12),
    st.sampled_from(
        [np.float32(0.5), np.int16(-3), np.uint64(2**63), np.bool_(False), np.str_("é")]
    ),
)
odd_values = st.sampled_from([b"bytes", 1 + 2j, [1, 2], {"a": 1}, np.array([1.0]), object()])
rows = st.lists(st.dictionaries(st.text(min_size=1, max_size=6), scalars, max_size=4), max_size=4)
table_names = st.one_of(st.sampled_from(["models", "subsets", "t.1"]), st.text(max_size=6))
arrays = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.one_of(
        hnp.arrays(
            st.sampled_from([np.bool_, np.int8, np.uint16, np.int64, np.float16, np.float64]),
            hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
        ),
        hnp.arrays(np.complex64, st.integers(1, 3)),
        st.lists(st.integers(), max_size=2),
    ),
    max_size=3,
)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b and type(a) is type(b)


@FAST
@given(tables=st.dictionaries(table_names, rows, max_size=3), blobs=arrays,
       odd=st.one_of(st.none(), odd_values))  # fmt: skip
def test_units_round_trip_exactly_or_are_refused(tmp_path, tables, blobs, odd):
    if odd is not None and tables:
        name = next(iter(tables))
        tables = {**tables, name: [*tables[name], {"odd": odd}]}
    path = tmp_path / "results.sqlite"
    path.unlink(missing_ok=True)
    with ResultsStore(path) as store:
        run = store.open_run("ws", {"case": 1})
        try:
            store.put_unit(run.id, "u", tables, blobs)
        except StoreError:
            assert store.finished_units(run.id) == set()  # nothing half-written
            return
        for table, written in tables.items():
            got = store.records(run.id, table)
            assert len(got) == len(written)
            for g, w in zip(got, written, strict=True):
                w = {k: v.item() if isinstance(v, np.generic) else v for k, v in w.items()}
                assert list(g) == list(w) and all(_same_value(w[k], g[k]) for k in w)
        back = {name: store.array(run.id, name) for name in store.array_names(run.id)}
        assert sorted(back) == sorted(blobs)
        for name, arr in blobs.items():
            assert back[name].dtype == arr.dtype and back[name].shape == arr.shape
            assert back[name].tobytes() == arr.tobytes()


def _snapshot(store: ResultsStore) -> Any:
    out = []
    for run_id in store.list_runs()["id"].tolist():
        units = sorted(store.finished_units(run_id))
        tables = {t: repr(store.records(run_id, t)) for t in store.tables(run_id)}
        data = {k: store.array(run_id, k).tobytes() for k in store.array_names(run_id)}
        out.append((store.get_run(run_id).settings, units, tables, data))
    return out


class _Pristine:
    """A store's bytes and what it holds (short repr for Hypothesis' failure reports)."""

    def __init__(self, raw: bytes, expected: Any) -> None:
        self.raw, self.expected = raw, expected

    def __repr__(self) -> str:
        return f"<pristine store, {len(self.raw)} bytes>"


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> _Pristine:
    path = tmp_path_factory.mktemp("store") / "results.sqlite"
    rng = np.random.default_rng(0)
    with ResultsStore(path) as store:
        run = store.open_run("ws", {"layer": "output", "n": 16})
        for i in range(3):
            store.put_unit(
                run.id, f"model-{i}",
                {"models": [{"name": f"model-{i}", "otr": i / 3}],
                 "subsets": [{"model": f"model-{i}", "k": k, "h": rng.random()} for k in range(5)]},
                {f"model-{i}/h": rng.random((5, 8)), f"model-{i}/idx": np.arange(16)},
            )  # fmt: skip
        store.mark_complete(run.id)
        expected = _snapshot(store)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return _Pristine(path.read_bytes(), expected)


@settings(FAST, max_examples=120)
@given(where=st.floats(0, 1), junk=st.binary(min_size=1, max_size=16), truncate=st.booleans())
def test_a_damaged_file_is_reported_or_read_back_unchanged(small_store, tmp_path, where, junk,
                                                            truncate):  # fmt: skip
    raw, expected = small_store.raw, small_store.expected
    at = int(where * (len(raw) - 1))
    damaged = raw[:at] if truncate else raw[:at] + junk + raw[at + len(junk) :]
    path = tmp_path / "results.sqlite"
    for side in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        side.unlink(missing_ok=True)
    path.write_bytes(damaged)
    try:
        with ResultsStore(path, read_only=True) as store:
            seen = _snapshot(store)
    except StoreError as exc:
        assert "\n" not in str(exc)
    else:
        assert seen == expected
