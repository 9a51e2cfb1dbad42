"""A shipped store (issue 33): every draw's numbers and near-ties, the first draws' H arrays."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from sde_core.common.hashing import stable_hash
from sde_core.inputs.data import load_dataset
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace, stored_result
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.shipped_store import (
    ARRAY_KINDS,
    UNSHIPPED_ARRAYS,
    UNSHIPPED_KINDS,
    kept_rows,
    ship_run,
)
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.workspace import workspace_hash
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.viz.figures.distributions import hsic_histogram

#: A small precision design: a pilot of 3 draws of 4 targets, a budget of 6 draws, the null
#: check sized at 24 subsets each way.
PRECISE = EvalSettings(
    layer="output", sigma="sqrt_dim", subset_size=40, targets=8, splits=20, panel_size=20,
    null_pairs=4, baseline_targets=0, draws=2, precision=0.3, pilot_draws=3, max_draws=6,
    null_size=24,
)  # fmt: skip


@pytest.fixture(scope="module")
def shipped(tiny_workspace, tmp_path_factory):
    """The tiny workspace evaluated at PRECISE into a full store, shipped keeping 2 draws."""
    base = tmp_path_factory.mktemp("shipped")
    ws = load_workspace(tiny_workspace)
    ws_hash = workspace_hash(ws, data_fingerprint=load_dataset(ws.dataset_spec()).fingerprint)
    full_path, ship_path = base / "full.sqlite", base / "results.sqlite"
    with ResultsStore(full_path) as store:
        full = evaluate_workspace(ws, PRECISE, store=store, stage_dir=False)
    written = ship_run(full_path, ship_path, ws_hash, PRECISE.result_key(), keep_draws=2)
    return ws, ws_hash, full, ship_path, written


@pytest.mark.slow  # a precision evaluation of four models (~30 s quiet, 200 s at load 15)
def test_every_number_is_kept_and_the_arrays_of_the_first_draws(shipped):
    ws, ws_hash, full, path, written = shipped
    names = [m.name for m in ws.models]
    with ResultsStore(path, read_only=True) as store:
        back = stored_result(store, ws_hash, PRECISE, names)
        assert store.damaged_units() == []
        runs = store.list_runs()
    assert back is not None and len(runs) == 1 and runs["status"].iloc[0] == "complete"
    assert runs["settings_hash"].iloc[0] == stable_hash(PRECISE.result_key())
    assert back.models.equals(full.models)
    home = full.subsets["kind"].isin(UNSHIPPED_KINDS)  # the null check's own subsets
    assert home.any() and not back.subsets["kind"].isin(UNSHIPPED_KINDS).any()
    kept = full.subsets[~home].reset_index(drop=True)
    assert back.subsets.reset_index(drop=True).equals(kept)
    assert back.draws.equals(full.draws)
    assert any(run > kept for run, kept in written.draws.values()), written.draws
    for name in names:
        run, kept = written.draws[name]
        assert kept == min(run, 2)
        assert back.near_ties(name) == full.near_ties(name)  # found from every array
        assert back.to_json_dict()["models"][name] == full.to_json_dict()["models"][name]
        subsets = full.subsets[full.subsets["model"] == name]
        first = sorted(subsets[subsets["kind"] == "it_ref"]["draw"])[:kept]
        a, b = full.model_arrays(name), back.model_arrays(name)
        assert set(a) - UNSHIPPED_ARRAYS == set(b) and {"null_h", "null_train_h"} <= set(a)
        for key, array in a.items():
            if key in UNSHIPPED_ARRAYS:
                continue
            kind = ARRAY_KINDS.get(key)
            if kind is None:
                assert np.array_equal(array, b[key]), key  # draw 0's references, whole
                continue
            rows = subsets[subsets["kind"] == kind]
            assert len(rows) == len(array), key
            keep = rows["draw"].isin(first).to_numpy()
            assert np.array_equal(array[keep], b[key]), key  # the same rows, bit for bit
        hsic_histogram(back, name)  # the cold-open histogram draws from what is kept
    assert written.shipped_bytes < written.source_bytes


def test_rows_of_unmatched_arrays_are_kept_whole():
    arrays = {"targets_h": np.arange(6.0).reshape(3, 2), "it_h": np.ones(4)}
    subsets = [{"kind": "target", "draw": d} for d in (0, 1, 1)]
    kept = kept_rows(arrays, subsets, {0})
    assert kept["targets_h"].tolist() == [[0.0, 1.0]] and kept["it_h"].tolist() == [1.0] * 4
    assert kept_rows(arrays, subsets[:2], {0})["targets_h"].shape == (3, 2)  # unmatched: whole


@pytest.mark.slow  # the same evaluation
def test_the_shipped_file_replaces_the_old_one_atomically(shipped, tmp_path):
    _ws, ws_hash, _full, path, _written = shipped
    target = tmp_path / "results.sqlite"
    target.write_bytes(b"old")
    source = tmp_path / "full.sqlite"
    source.write_bytes(path.read_bytes())  # a complete store serves as the source again
    ship_run(source, target, ws_hash, PRECISE.result_key(), keep_draws=1)
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert not list(tmp_path.glob(".results.sqlite.shipping*"))
