"""The staged evaluation (method §12): stage caches keyed by what each stage depends on, partial
results in page order, cancellation that keeps finished stages, and numbers identical to a
one-shot evaluation."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers.designs import fixed_settings

import sde_core.learning.metrics as metrics
import sde_core.pipeline.evaluation.run as run_module
from sde_core.pipeline.evaluation.plan import draw_subsets
from sde_core.pipeline.evaluation.run import STAGES, ModelRun
from sde_core.pipeline.evaluation.run_driver import EvaluationCancelled, evaluate_arrays, run_model
from sde_core.pipeline.evaluation.session import EvaluationSession
from sde_core.pipeline.evaluation.stages import StageCache
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.model_inputs import ModelInputs

N_TR, N_TE, N_F, D = 900, 600, 240, 5
SETTINGS = fixed_settings(
    subset_size=40, targets=10, splits=20, panel_size=20, null_pairs=4, baseline_targets=4
)


@pytest.fixture(scope="module")
def inputs() -> ModelInputs:
    """A model that remembers D_f (training rows more spread out) with softmax outputs."""
    rng = np.random.default_rng(0)
    tr, te = 1.6 * rng.normal(size=(N_TR, D)), rng.normal(size=(N_TE, D))
    y_tr, y_te = rng.integers(0, 3, N_TR), rng.integers(0, 3, N_TE)
    p_tr = rng.dirichlet(np.ones(3), N_TR)
    p_te = rng.dirichlet(np.ones(3), N_TE)
    return ModelInputs("m", "unlearned", tr, te, train_probs=p_tr, test_probs=p_te,
                       train_labels=y_tr, test_labels=y_te)  # fmt: skip


@pytest.fixture(scope="module")
def forget() -> np.ndarray:
    return np.random.default_rng(1).choice(N_TR, N_F, replace=False)


def same(a: dict, b: dict) -> bool:
    """Rows equal number for number (NaN equals NaN); the evaluation's own time excluded."""
    keys = set(a) | set(b)
    for k in keys - {"eval_seconds"}:
        x, y = a[k], b[k]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if x != y:
            return False
    return True


def assert_identical(ev, ref) -> None:
    assert same(ev.summary, ref.summary), {
        k: (ev.summary[k], ref.summary[k]) for k in ev.summary if ev.summary[k] != ref.summary[k]
    }
    assert [d.to_row() for d in ev.draws] == [d.to_row() for d in ref.draws] or all(
        same(x.to_row(), y.to_row()) for x, y in zip(ev.draws, ref.draws, strict=True)
    )
    assert len(ev.subsets) == len(ref.subsets)
    assert all(same(x, y) for x, y in zip(ev.subsets, ref.subsets, strict=True))
    assert ev.arrays.keys() == ref.arrays.keys()
    for k in ev.arrays:
        np.testing.assert_array_equal(ev.arrays[k], ref.arrays[k])


class Counter:
    """Wraps a function and counts its calls."""

    def __init__(self, fn) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


@pytest.fixture
def counters(monkeypatch) -> dict[str, Counter]:
    out = {
        "h": Counter(run_module.compute_h),
        "classic": Counter(metrics.metrics_from_probs),
        "w2": Counter(run_module.wasserstein2),
        "mmd": Counter(run_module.nearest_reference_batch),
    }
    monkeypatch.setattr(run_module, "compute_h", out["h"])
    monkeypatch.setattr(metrics, "metrics_from_probs", out["classic"])
    monkeypatch.setattr(run_module, "wasserstein2", out["w2"])
    monkeypatch.setattr(run_module, "nearest_reference_batch", out["mmd"])
    return out


def test_sigma_change_reuses_classic_metrics_and_w2_and_matches_one_shot(
    inputs, forget, tmp_path, counters
):
    plan = draw_subsets(N_TR, N_TE, forget, SETTINGS)
    cache = StageCache(tmp_path / "stages")
    first = evaluate_arrays(inputs, plan, SETTINGS.with_overrides(sigma=2.0), cache=cache)
    assert counters["classic"].calls == 1 and counters["w2"].calls > 0
    calls = {k: c.calls for k, c in counters.items()}
    new_sigma = SETTINGS.with_overrides(sigma=3.0)
    staged = evaluate_arrays(inputs, plan, new_sigma, cache=cache)
    assert counters["classic"].calls == calls["classic"]  # σ-independent: read back
    assert counters["w2"].calls == calls["w2"]  # exact W2 never depends on σ
    assert counters["h"].calls > calls["h"] and counters["mmd"].calls > calls["mmd"]
    one_shot = evaluate_arrays(inputs, plan, new_sigma)  # no cache at all
    assert_identical(staged, one_shot)
    assert staged.summary["sigma"] == 3.0 != first.summary["sigma"]
    # A fresh cache object on the same folder (another process) reads every stage from disk.
    again = evaluate_arrays(inputs, plan, new_sigma, cache=StageCache(tmp_path / "stages"))
    assert_identical(again, one_shot)


@pytest.mark.parametrize("change", [{"bins": 12}, {"alpha": 0.05}, {"alpha_calibrated": 0.1}])
def test_bins_or_alpha_change_recomputes_no_hsic(inputs, forget, tmp_path, counters, change):
    plan = draw_subsets(N_TR, N_TE, forget, SETTINGS)
    cache = StageCache(tmp_path / "stages")
    evaluate_arrays(inputs, plan, SETTINGS, cache=cache)
    before = {k: c.calls for k, c in counters.items()}
    changed = SETTINGS.with_overrides(**change)
    staged = evaluate_arrays(inputs, plan, changed, cache=cache)
    assert {k: c.calls for k, c in counters.items()} == before  # nothing but decisions redone
    assert_identical(staged, evaluate_arrays(inputs, plan, changed))


def test_partial_results_come_in_page_order(inputs, forget):
    plan = draw_subsets(N_TR, N_TE, forget, SETTINGS)
    parts = list(ModelRun(inputs, plan, SETTINGS).steps())
    assert [p.done for p in parts] == list(range(1, len(parts) + 1))
    assert all(p.total == len(parts) for p in parts) and parts[-1].complete
    assert not any(p.complete for p in parts[:-1])
    stages = [p.stage for p in parts]
    assert stages[:4] == ["references", "panels", "references", "panels"]
    assert [s for s in STAGES if s in stages] == list(dict.fromkeys(stages))  # stage order
    first = parts[0].evaluation()
    # The first histogram: draw 1's references and targets, nothing else yet.
    assert first.arrays["it_h"].shape == (20,) and first.arrays["targets_h"].shape == (2, 20)
    assert first.model.draws == 1 and "panel_it_h" not in first.arrays
    assert (
        math.isnan(first.summary["otr"])
        and "not computed yet" in first.summary["inconclusive_reason"]
    )
    assert not first.complete
    assert parts[1].evaluation().summary["panel_p"] == parts[1].evaluation().draws[0].panel_p
    assert_identical(parts[-1].evaluation(), evaluate_arrays(inputs, plan, SETTINGS))


def test_cancel_keeps_finished_stages_and_a_rerun_resumes(inputs, forget, tmp_path, counters):
    plan = draw_subsets(N_TR, N_TE, forget, SETTINGS)
    cache = StageCache(tmp_path / "stages")
    seen = []

    def stop() -> bool:
        return len(seen) >= 3

    with pytest.raises(EvaluationCancelled) as info:
        run_model(ModelRun(inputs, plan, SETTINGS, cache=cache), on_update=seen.append,
                  cancelled=stop)  # fmt: skip
    assert info.value.partial is seen[-1] and info.value.partial.done == 3
    computed = counters["h"].calls  # 2 groups per step for the first three steps
    assert computed == 6
    resumed = evaluate_arrays(inputs, plan, SETTINGS, cache=StageCache(tmp_path / "stages"))
    groups = sum(len(d.groups(SETTINGS.seed, "test")) for d in plan.draws)
    assert counters["h"].calls - computed == groups - computed  # only the missing ones
    assert_identical(resumed, evaluate_arrays(inputs, plan, SETTINGS))


def test_unreadable_cache_files_are_recomputed(inputs, forget, tmp_path):
    plan = draw_subsets(N_TR, N_TE, forget, SETTINGS)
    folder = tmp_path / "stages"
    ref = evaluate_arrays(inputs, plan, SETTINGS, cache=StageCache(folder))
    files = sorted(folder.rglob("*.npz"))
    assert {f.parent.parent.name for f in files} == {"h", "classic", "mmd", "w2"}
    for f in files[::3]:
        f.write_bytes(b"not an npz file")
    again = evaluate_arrays(inputs, plan, SETTINGS, cache=StageCache(folder))
    assert_identical(again, ref)


def test_stage_subset_runs_only_what_is_asked(inputs, forget, counters):
    plan = draw_subsets(N_TR, N_TE, forget, SETTINGS)
    ev = evaluate_arrays(inputs, plan, SETTINGS, stages=("references", "panels"))
    assert counters["classic"].calls == 0 and counters["w2"].calls == 0
    assert math.isnan(ev.summary["f1"]) and math.isnan(ev.summary["asr"])
    assert np.isfinite(ev.summary["otr"]) and ev.summary["null_pairs"] == 0
    full = evaluate_arrays(inputs, plan, SETTINGS)
    for key in ("otr", "otr_lo", "otr_hi", "calibrated_otr", "dependence_score", "panel_p"):
        assert ev.summary[key] == full.summary[key], key


# ----------------------------------------------------------------- a real workspace


@pytest.fixture(scope="module")
def workspace(mnist1d_copy: Callable[[str], Path]) -> Path:
    """A copy of the mnist1d demo without its results store and stage caches."""
    return mnist1d_copy("staged")


@pytest.mark.slow  # > 10 s on 2 cores (make test-slow, CI)
def test_session_matches_evaluate_workspace_and_serves_repeats_from_cache(workspace):
    settings = fixed_settings(subset_size=100, targets=10, splits=20, baseline_targets=2)
    names = ["original", "random"]
    session = EvaluationSession(workspace)
    result = session.evaluate(names, settings)
    reference = evaluate_workspace(workspace, settings, models=names, stage_dir=False)
    for a, b in zip(
        result.models.to_dict("records"), reference.models.to_dict("records"), strict=True
    ):
        assert same(a, b)
    assert result.to_json_dict()["models"] == reference.to_json_dict()["models"]
    misses = dict(session.cache.misses)
    parts = list(session.stream(["original"], settings.with_overrides(bins=10)))
    assert session.cache.misses == misses  # a bins change computes no stage
    assert parts[0].stage == "references" and parts[-1].complete
    doc = json.loads(json.dumps(result.to_json_dict()))  # strict JSON round trip
    orig, rand = doc["models"]["original"], doc["models"]["random"]
    assert len(orig["otr_draws"]) == orig["draws"] == 5 and orig["inconclusive_reason"] is None
    assert orig["otr_ci"][0] <= orig["otr"] <= orig["otr_ci"][1]
    assert rand["otr"] is None and rand["otr_ci"] == [None, None] and rand["otr_draws"] is None
    assert "do not separate" in rand["inconclusive_reason"]
    assert doc["caveats"]["null_pairs"] == 20 and doc["caveats"]["models"] == 2
