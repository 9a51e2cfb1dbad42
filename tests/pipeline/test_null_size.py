"""The null check sized at the defaults (method §9, issues 35 and 37): a precision design's
draws judge at least N unseen subsets and N training subsets, the subsets it adds come from
generators of their own (nothing else moves), the store keys of runs made before stay, and the
default N has the power it claims."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers.designs import half_remembered, small_precision_settings

from sde_core.pipeline.evaluation.draw_statistics import DrawState, null_train_calls
from sde_core.pipeline.evaluation.plan import draw_subsets, null_top_up
from sde_core.pipeline.evaluation.run import ModelRun
from sde_core.pipeline.evaluation.statistics import null_rates
from sde_core.pipeline.meta_eval.null_sizing import SHIPPED_PANEL_ICC, gate_power
from sde_core.pipeline.settings import (
    DEFAULT_NULL_SIZE,
    EvalSettings,
    settings_from_key,
)
from sde_core.stats.calibrated import calibrated_verdict, subset_scores

N_TR, N_TE, N_F, D = 1200, 800, 300, 6


@pytest.fixture(scope="module")
def remembered():
    """A model that still remembers half of D_f (training rows spread wider than unseen ones)."""
    return half_remembered(11, N_TR, N_TE, N_F, D)


def _settings(**kw):
    return small_precision_settings(**{"null_size": 0, **kw})


@pytest.fixture(scope="module")
def sized_run(remembered):
    """The remembering model evaluated with the null check sized at 160 (settings, run)."""
    forget, inputs = remembered
    s = _settings(null_size=160)
    run = ModelRun(inputs, draw_subsets(N_TR, N_TE, forget, s), s)
    for _ in run.steps():
        pass
    return s, run


def test_the_default_is_sized_and_the_keys_of_earlier_runs_stay():
    assert EvalSettings().null_size == DEFAULT_NULL_SIZE == 1000
    sized = EvalSettings()
    assert sized.result_key()["null_size"] == 1000
    unsized = EvalSettings(null_size=0)
    assert "null_size" not in unsized.result_key()  # a run made before sizing: the same key
    fixed = EvalSettings(precision=0)  # the fixed design: inert, and out of the key
    assert "null_size" not in fixed.result_key()
    for s in (sized, unsized, fixed, EvalSettings(precision=0.2, null_size=40)):
        assert settings_from_key(s.result_key()) == (s if s.precision else replace0(s))


def replace0(s: EvalSettings) -> EvalSettings:
    """A fixed-design key gives back its precision fields at their defaults but null_size 0."""
    return s.with_overrides(null_size=0)


def test_a_key_written_before_the_setting_reads_as_unsized():
    old = EvalSettings().result_key()
    old.pop("null_size")
    assert settings_from_key(old).null_size == 0
    assert settings_from_key(old).result_key() == old


@pytest.mark.parametrize("draws", [1, 4, 7, 10, 60])
@pytest.mark.parametrize("size", [0, 40, 300])
def test_the_top_up_reaches_the_size_over_the_draws(remembered, draws, size):
    forget, _ = remembered
    s = _settings(null_size=size, max_draws=60)
    plan = draw_subsets(N_TR, N_TE, forget, s)
    unseen = train = 0
    for d in plan.draws[:draws]:
        pairs, extra = null_top_up(d, draws, s)
        n = d.it_ref.size
        assert pairs.shape[1:] == (2, n) and extra.shape[1:] == (n,)
        for a, b in pairs:
            assert not set(a) & set(b)  # each pair disjoint
        control_te, control_tr = set(d.test_halves[1]), set(d.retain_halves[1])
        assert set(pairs.ravel()) <= control_te  # outside the references' half
        assert set(extra.ravel()) <= control_tr
        assert set(extra.ravel()).isdisjoint(d.it_ref)
        unseen += 2 * (len(d.null_pairs) + len(pairs))
        train += len(d.f1_pos) + len(extra)
    if size:
        assert unseen >= size and train >= size
        per_draw = 2 * math.ceil(size / (2 * draws))
        assert unseen <= max(per_draw, 2 * len(plan.draws[0].null_pairs)) * draws
    else:
        assert unseen == 2 * sum(len(d.null_pairs) for d in plan.draws[:draws])


def test_the_fixed_design_adds_nothing(remembered):
    forget, _ = remembered
    s = _settings(precision=0.0, null_size=300)
    d = draw_subsets(N_TR, N_TE, forget, s).draws[0]
    pairs, extra = null_top_up(d, 5, s)
    assert len(pairs) == 0 and len(extra) == 0


def test_a_larger_size_extends_the_subsets_it_adds(remembered):
    forget, _ = remembered
    s = _settings(null_size=100)
    d = draw_subsets(N_TR, N_TE, forget, s).draws[2]
    small_pairs, small_train = null_top_up(d, 4, s)
    large_pairs, large_train = null_top_up(d, 4, s.with_overrides(null_size=300))
    assert len(large_pairs) > len(small_pairs) and len(large_train) > len(small_train)
    assert np.array_equal(large_pairs[: len(small_pairs)], small_pairs)
    assert np.array_equal(large_train[: len(small_train)], small_train)


def test_sizing_changes_the_null_check_and_nothing_else(remembered):
    """The same run unsized and sized: every number but the null check's is identical, and the
    sized run judges at least N subsets in each direction."""
    forget, inputs = remembered
    unsized, sized = _settings(null_size=0), _settings(null_size=160)
    runs = {}
    for name, s in (("unsized", unsized), ("sized", sized)):
        plan = draw_subsets(N_TR, N_TE, forget, s)
        run = ModelRun(inputs, plan, s)
        for _ in run.steps():
            pass
        runs[name] = run.evaluation()
    a, b = runs["unsized"].model.to_row(), runs["sized"].model.to_row()
    assert b["null_pairs"] >= 80 and b["null_train_subsets"] >= 160
    assert a["null_pairs"] < b["null_pairs"] and a["null_train_subsets"] < b["null_train_subsets"]
    skip = {"eval_seconds", "seconds"}
    for key, value in a.items():
        if key.startswith("null_") or key in skip or key in ("inconclusive_reason",):
            continue
        assert _same(value, b[key]), key
    kinds = {name: {r["kind"] for r in ev.subsets} for name, ev in runs.items()}
    assert "null_train" in kinds["sized"] and "null_train" not in kinds["unsized"]
    arrays = runs["sized"].arrays
    assert len(arrays["null_h"]) == b["null_pairs"] * 2
    assert len(arrays["null_train_h"]) + len(arrays["f1_h"]) // 2 == b["null_train_subsets"]


def _same(x, y) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return (math.isnan(x) and math.isnan(y)) or x == y
    return x == y


def test_the_training_subsets_are_judged_by_p_out_against_the_it_panel(sized_run):
    s, run = sized_run
    st = next(st for st in run.draws if "null_train_h" in st.arrays)
    calls, judged = null_train_calls(st, s)
    assert st.panel is not None
    by_hand = [
        calibrated_verdict(float(x), st.panel.it_scores, st.panel.oot_scores, 0.05).p_out < 0.05
        for x in subset_scores(st.arrays["null_train_h"])
    ]
    assert (calls, judged) == (sum(by_hand), len(by_hand))
    assert null_train_calls(DrawState(0), s) is None


def test_the_false_out_rate_pools_controls_and_the_added_subsets(sized_run):
    s, run = sized_run
    used = [st for st in run.draws if st.core is not None]
    rates = null_rates(used, s)
    calls = judged = 0
    for st in used:
        if st.controls is not None and st.controls.verdicts is not None:
            calls, judged = calls + st.controls.false_out, judged + st.controls.positives
        if st.null_train is not None:
            calls, judged = calls + st.null_train[0], judged + st.null_train[1]
    assert rates.train_subsets == judged >= 160
    assert rates.false_out is not None
    assert rates.false_out.value == pytest.approx(calls / judged)


def test_the_default_size_has_the_power_it_claims():
    """Method §9: at the default N, under the shipped demos' median panel effect, the shown 95%
    interval excludes α_cal from a 2α_cal rate with probability about 0.92 at B = 20 and 0.65
    at B = 10 (the panels, not the subsets, limit it there); independent calls give about 1;
    N = 300 and the fixed design's 20 pairs give less."""
    pairs = DEFAULT_NULL_SIZE // 2
    at10 = gate_power(pairs, 10, reps=1500, seed=1, icc=SHIPPED_PANEL_ICC)
    at20 = gate_power(pairs, 20, reps=1500, seed=2, icc=SHIPPED_PANEL_ICC)
    alone = gate_power(pairs, 10, reps=800, seed=3)
    assert 0.58 <= at10.interval <= 0.72 and 0.88 <= at20.interval <= 0.96
    assert alone.interval >= 0.97
    smaller = gate_power(150, 20, reps=1500, seed=4, icc=SHIPPED_PANEL_ICC)
    assert smaller.interval < 0.75
    unsized = gate_power(20, 10, reps=800, seed=5)  # the fixed design's 20 pairs
    assert unsized.interval < 0.3


def test_the_panel_effect_constant_is_the_shipped_stores():
    """SHIPPED_PANEL_ICC is the median ρ of the shipped stores' per-draw null rates."""
    from sde_core.pipeline.meta_eval.null_sizing import stores_panel_icc

    assets = Path(__file__).resolve().parents[2] / "assets"
    demos = ("demo", "demo-mnist1d", "demo-facts", "demo-fashion-edm", "demo-fashion-edm-mem")
    rho = stores_panel_icc([assets / demo / "results.sqlite" for demo in demos])
    assert rho.size >= 50
    assert float(np.median(rho)) == pytest.approx(SHIPPED_PANEL_ICC, abs=0.01)


def test_the_panel_effect_is_estimated_and_lowers_the_power():
    """panel_icc recovers ρ from beta-binomial draws; at ρ > 0 the same size has less power."""
    from sde_core.pipeline.meta_eval.null_sizing import panel_icc

    rng = np.random.default_rng(5)
    mu, rho, m, b = 0.1, 0.05, 60, 4000
    a, bb = mu * (1 - rho) / rho, (1 - mu) * (1 - rho) / rho
    rates = rng.binomial(m, rng.beta(a, bb, size=b)) / m
    assert panel_icc(rates, np.full(b, m)) == pytest.approx(rho, abs=0.01)
    independent = rng.binomial(m, mu, size=b) / m
    assert panel_icc(independent, np.full(b, m)) < 0.005
    assert math.isnan(panel_icc(np.array([0.1]), np.array([10])))
    assert math.isnan(panel_icc(np.zeros(5), np.full(5, 10)))
    alone = gate_power(150, 10, reps=600, seed=4)
    shared = gate_power(150, 10, reps=600, seed=4, icc=0.03)
    assert shared.interval < alone.interval - 0.1
    with pytest.raises(ValueError, match="icc"):
        gate_power(150, 10, icc=1.0)


def test_the_vectorised_korn_graubard_bound_is_the_library_s():
    """korn_graubard_rows over many rows at once (the simulation's call) against
    replicate_proportion one row at a time (the evaluation's), including rows of all zeros, all
    ones and no spread."""
    from sde_core.stats.replication import korn_graubard_rows, replicate_proportion

    rng = np.random.default_rng(9)
    for draws in (1, 2, 5, 12):
        m = rng.integers(3, 40, size=draws)
        rows = [rng.binomial(m, rng.uniform(0, 0.3)) / m for _ in range(40)]
        rows += [np.zeros(draws), np.ones(draws), np.full(draws, 0.25)]
        for conf in (0.95, 0.98):
            _, lo, hi, _ = korn_graubard_rows(np.array(rows), m, conf)
            want = [replicate_proportion(r, m, conf) for r in rows]
            assert lo == pytest.approx([w.lo for w in want], rel=1e-9, abs=1e-12)
            assert hi == pytest.approx([w.hi for w in want], rel=1e-9, abs=1e-12)


def test_a_sized_check_runs_when_a_draw_has_no_pairs_of_its_own(remembered):
    """null_pairs below the fixed design's draws leaves a precision draw without a pair of its
    own; the sized check still reaches N (and an unsized one has none)."""
    forget, inputs = remembered
    s = _settings(null_pairs=2, draws=5, null_size=60)
    plan = draw_subsets(N_TR, N_TE, forget, s)
    assert all(len(d.null_pairs) == 0 for d in plan.draws)
    run = ModelRun(inputs, plan, s)
    for _ in run.steps():
        pass
    row = run.evaluation().model.to_row()
    assert 2 * row["null_pairs"] >= 60 and row["null_train_subsets"] >= 60
    unsized = ModelRun(inputs, plan, s.with_overrides(null_size=0))
    for _ in unsized.steps():
        pass
    assert unsized.evaluation().model.to_row()["null_pairs"] == 0


def test_a_sized_check_that_fails_withholds_the_verdicts():
    """A non-exchangeable OOT panel (drawn from a tighter part of the unseen data, method §9)
    in the precision design with the null check sized: its rate over the 1,000 added unseen
    subsets is far above the level, the gate fires and every calibrated verdict is withheld
    with that reason. (Its interval is not narrower than the unsized one's here: over five
    draws the panels' spread, not the count, sets the width — method §9.)"""
    from dataclasses import replace

    from sde_core.pipeline.evaluation.run_driver import evaluate_arrays
    from sde_core.pipeline.model_inputs import ModelInputs

    rng = np.random.default_rng(0)
    n_tr, n_te = 1200, 800
    forget = rng.choice(n_tr, 300, replace=False)
    tr = rng.normal(size=(n_tr, 6)) * 1.0
    te = rng.normal(size=(n_te, 6))
    tight = np.arange(n_te // 2)
    te[tight] *= 0.85
    for size in (0, 1000):
        s = small_precision_settings(
            subset_size=60, targets=20, splits=40, null_pairs=20, pilot_draws=5, max_draws=5,
            null_size=size,
        )  # fmt: skip
        plan = draw_subsets(n_tr, n_te, forget, s)
        pick = np.random.default_rng(5)
        draws = tuple(
            replace(
                d, oot_panel=np.stack([pick.choice(tight, 60, replace=False) for _ in range(20)])
            )
            for d in plan.draws
        )
        row = evaluate_arrays(
            ModelInputs("m", "unlearned", tr, te), replace(plan, draws=draws), s
        ).summary
        if size:
            assert row["draws"] == 5 and 2 * row["null_pairs"] >= size
            assert row["panel_valid"]  # the panel test alone would have let it through
            assert row["null_calibrated_fpr_lo"] > s.alpha_calibrated
            assert "null check calls" in row["inconclusive_reason"]
            assert math.isnan(row["calibrated_otr"])
        else:
            assert row["null_pairs"] == 20  # unsized: the design's own pairs
