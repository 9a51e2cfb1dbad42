"""The precision design (method §15): Stein's two-stage interval against a textbook version and
by simulation, the pipeline's pilot, its reuse of earlier draws, the budget and the planner."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.designs import half_remembered, small_precision_settings
from scipy import stats

from sde_core.errors import InputError, SettingsError
from sde_core.pipeline.evaluation.draw_statistics import DrawState
from sde_core.pipeline.evaluation.metric_table import Estimate
from sde_core.pipeline.evaluation.plan import draw_subsets
from sde_core.pipeline.evaluation.planner import forecast, forecast_sentence
from sde_core.pipeline.evaluation.precision import (
    PrecisionDesign,
    miss_reasons,
    per_draw_rates,
    precision_json,
    precision_status,
    with_design,
)
from sde_core.pipeline.evaluation.run import ModelRun
from sde_core.pipeline.evaluation.stages import StageCache
from sde_core.pipeline.settings import PRECISION_RULE_VERSION, EvalSettings, settings_from_key
from sde_core.stats.precision import stein_draws, stein_interval
from sde_core.stats.replication import replicate_proportion

N_TR, N_TE, N_F, D = 1200, 800, 300, 6


def textbook_stein(pilot: list[float], all_values: list[float], width: float, m: int):
    """Stein (1945) written out by hand: pilot SD (with the binomial floor of one draw of m
    trials), B, and the interval over every draw (equal trials)."""
    n0 = len(pilot)
    mean0 = sum(pilot) / n0
    s2 = sum((x - mean0) ** 2 for x in pilot) / (n0 - 1)
    x = sum(v * m for v in pilot)
    p = (x + 0.5) / (n0 * m + 1)
    s = max(math.sqrt(s2), math.sqrt(p * (1 - p) / m))
    t = stats.t.ppf(0.975, n0 - 1)
    b = max(n0, math.ceil((t * s / width) ** 2))
    mean = sum(all_values) / len(all_values)
    half = t * s / math.sqrt(len(all_values))
    return b, mean, max(0.0, mean - half), min(1.0, mean + half)


def test_stein_matches_the_textbook():
    rng = np.random.default_rng(7)
    values = list(rng.binomial(20, 0.7, size=40) / 20)
    plan = stein_draws(values[:10], [20] * 10, 0.1)
    b, mean, lo, hi = textbook_stein(values[:10], values[: plan.draws], 0.1, 20)
    assert plan.draws == b
    value, got_lo, got_hi, half = stein_interval(values[: plan.draws], [20] * plan.draws, plan)
    assert (value, got_lo, got_hi) == pytest.approx((mean, lo, hi), rel=1e-12)
    assert half <= 0.1 + 1e-12  # the pilot's B reaches the width by construction


def test_stein_covers_at_its_level_under_normal_draws():
    """Exact under normality (Stein 1945): 1,500 simulated two-stage runs, coverage 0.95 ±
    three Monte Carlo SEs; every run reaches the requested half-width."""
    rng = np.random.default_rng(11)
    mu, sd, n0, width = 0.6, 0.25, 10, 0.1
    hits, halves = 0, []
    for _ in range(1500):
        pilot = rng.normal(mu, sd, n0)
        plan = stein_draws(np.clip(pilot, 0, 1), [1000] * n0, width)
        rest = rng.normal(mu, sd, plan.draws - n0)
        values = np.r_[pilot, rest]
        mean = values.mean()
        half = plan.t * plan.sd / math.sqrt(values.size)
        hits += abs(mean - mu) <= half
        halves.append(half)
    assert abs(hits / 1500 - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / 1500) + 0.005  # clip bias
    assert max(halves) <= width + 1e-12


def test_a_pilot_whose_draws_agree_keeps_the_binomial_floor():
    plan = stein_draws([1.0] * 10, [20] * 10, 0.05)
    p = 200.5 / 201
    assert plan.sd == pytest.approx(math.sqrt(p * (1 - p) / 20))
    assert plan.draws == 10
    _, lo, hi, half = stein_interval([1.0] * 10, [20] * 10, plan)
    assert hi == 1.0 and half > 0 and lo == pytest.approx(1.0 - half)


@pytest.mark.parametrize(
    ("pilot", "trials", "width", "match"),
    [
        ([0.5], [20], 0.1, "at least two draws"),
        ([0.5, 1.2], [20, 20], 0.1, r"in \[0, 1\]"),
        ([0.5, 0.6], [20], 0.1, "one count"),
        ([0.5, 0.6], [20, 20], 0.0, "half_width"),
        ([0.5, float("nan")], [20, 20], 0.1, "NaN"),
    ],
)
def test_bad_pilots_are_refused(pilot, trials, width, match):
    with pytest.raises(InputError, match=match):
        stein_draws(pilot, trials, width)


def test_settings_default_to_the_precision_design_and_the_fixed_keeps_its_store_key():
    s = EvalSettings(precision=0)
    assert "precision" not in s.result_key()
    assert "max_draws" not in s.result_key()
    on = EvalSettings()  # the default: W = 0.1, a pilot of 10 draws, a budget of 60
    assert on.result_key()["precision"] == 0.1 and on.result_key()["max_draws"] == 60
    assert on.result_key()["pilot_draws"] == 10
    # a precision run's key carries the rule that judged its half-widths (method §15); a
    # fixed-design run's does not; the key reads back as the same settings
    assert on.result_key()["precision_rule"] == PRECISION_RULE_VERSION == 2
    assert "precision_rule" not in s.result_key()
    assert settings_from_key(on.result_key()) == on
    with pytest.raises(SettingsError, match="max_draws=5 is smaller"):
        EvalSettings(precision=0.1, max_draws=5)
    with pytest.raises(SettingsError, match="precision"):
        EvalSettings(precision=0.7)


@pytest.fixture(scope="module")
def partly_forgotten():
    """Half of D_f remembered (spread like training rows), half not: per-draw OTRs vary."""
    return half_remembered(3, N_TR, N_TE, N_F, D)


def _settings(**kw):
    return small_precision_settings(**kw)


def _pilot_and_rest(partly_forgotten, **kw) -> ModelRun:
    """A precision run of the references and panels at ``_settings(**kw)``, run to its end,
    with budget left (its design's B not capped)."""
    forget, inputs = partly_forgotten
    s = _settings(**kw)
    run = ModelRun(inputs, draw_subsets(N_TR, N_TE, forget, s), s, stages=("references",
                   "panels"))  # fmt: skip
    for _ in run.steps():
        pass
    assert run.design is not None and not run.design.budget_spent
    return run


def test_the_fixed_design_is_unchanged_by_the_precision_fields(partly_forgotten):
    forget, _ = partly_forgotten
    fixed = EvalSettings(subset_size=40, targets=20, splits=30, null_pairs=5, precision=0)
    plan = draw_subsets(N_TR, N_TE, forget, fixed)
    budgeted = draw_subsets(N_TR, N_TE, forget, fixed.with_overrides(max_draws=9, pilot_draws=3))
    assert plan.fingerprint() == budgeted.fingerprint() and len(plan.draws) == 5


def test_a_precision_run_fixes_its_draws_after_the_pilot_and_reuses_them(partly_forgotten):
    forget, inputs = partly_forgotten
    s = _settings()
    plan = draw_subsets(N_TR, N_TE, forget, s)
    assert len(plan.draws) == 10 and {len(d.targets) for d in plan.draws} == {4}
    cache = StageCache(None, memory_items=4096)
    planner_run = ModelRun(inputs, plan, s, cache=cache, stages=("references", "panels"))
    predicted = forecast(planner_run)
    assert predicted.pilot_draws == 4 and predicted.targets == 4 * predicted.draws
    assert math.isfinite(predicted.seconds) and "draws" in forecast_sentence([predicted])
    hits = cache.hits["h"]
    run = ModelRun(inputs, plan, s, cache=cache, stages=("references", "panels"))
    labels = [p.label for p in run.steps()]
    assert labels[0].startswith("pilot draw 1 of 4")
    assert cache.hits["h"] - hits == 4 * 4  # the pilot's four batches per draw came back
    design = run.design
    assert design is not None and design.draws == predicted.draws
    m = run.evaluation().model
    assert m.draws == design.draws and m.draws_needed == design.needed
    # Stein's second stage, by hand, for the OTR: the pilot's SD and quantile over all draws.
    per_draw = np.array([d.otr for d in run.evaluation().draws])
    plan_otr = design.plans["otr"]
    half = plan_otr.t * plan_otr.sd / math.sqrt(per_draw.size)
    kg = replicate_proportion(per_draw, [4] * per_draw.size)
    assert m.otr.value == pytest.approx(per_draw.mean())
    # Stein's interval joined with Korn–Graubard's (which guards the boundaries)
    assert m.otr.lo == pytest.approx(min(max(0.0, per_draw.mean() - half), kg.lo))
    assert m.otr.hi == pytest.approx(max(min(1.0, per_draw.mean() + half), kg.hi))
    assert precision_json(m.to_row())["precision"]["draws_needed"] == design.needed
    if not design.budget_spent:
        assert m.precision_half_width <= 0.3 + 1e-12
    else:
        assert "not reached" in m.notes and m.draws == 10


def test_the_budget_stops_the_run_and_says_so(partly_forgotten):
    forget, inputs = partly_forgotten
    s = _settings(precision=0.02, max_draws=5)
    plan = draw_subsets(N_TR, N_TE, forget, s)
    run = ModelRun(inputs, plan, s, stages=("references", "panels"))
    for _ in run.steps():
        pass
    m = run.evaluation().model
    assert m.draws == 5 and m.draws_needed > 5 and m.precision_half_width > 0.02
    assert "precision ±0.02 not reached" in m.notes and "max_draws = 5" in m.notes


def test_forecast_needs_a_precision_target(partly_forgotten):
    forget, inputs = partly_forgotten
    s = _settings(precision=0.0)
    run = ModelRun(inputs, draw_subsets(N_TR, N_TE, forget, s), s)
    with pytest.raises(SettingsError, match="precision target"):
        forecast(run)


def test_a_miss_without_the_budget_says_not_reached_and_why(partly_forgotten):
    """W missed with budget left (method §15): a pilot SD below the full run's leaves the
    Korn–Graubard half of the joined interval wider than W; the notes say so in words."""
    from dataclasses import replace

    run = _pilot_and_rest(partly_forgotten, precision=0.3, max_draws=10)
    design = run.design
    assert design is not None
    kg = run.evaluation().model.otr
    # the same draws, judged as if the pilot had seen a 20× smaller spread and W were half the
    # interval the draws give: Stein's half shrinks below W, Korn–Graubard's stays above it
    quiet = {k: replace(p, sd=p.sd / 20) for k, p in design.plans.items()}
    target = min(0.3, (kg.hi - kg.lo) / 4)
    run.design = replace(design, plans=quiet, target=target)
    m = run.evaluation().model
    assert m.precision_half_width > target
    assert f"precision ±{target:g} not reached after the {design.draws} draws" in m.notes
    # the reason in words: the pilot's spread below the full run's, or (here: these draws
    # agree, their SD is below the pilot's binomial floor) Clopper–Pearson wider than Student t
    values, _ = per_draw_rates(run.draws, "otr")
    full_sd = float(np.std(values, ddof=1))
    why = (
        "underestimated the full run's"
        if full_sd > quiet["otr"].sd
        else "Clopper–Pearson's bound on the effective trials is wider than Stein's Student t"
    )
    assert why in m.notes and "budget" not in m.notes
    kind = "the pilot's SD below the full run's" if full_sd > quiet["otr"].sd else (
        "Clopper–Pearson wider than Student t")  # fmt: skip
    assert miss_reasons(m.to_row()) == [kind]
    assert precision_json(m.to_row())["precision"]["reached"] is False


def test_the_half_width_judged_is_the_interval_given(partly_forgotten):
    """Stein's interval and Korn–Graubard's can each hold W while their join, the interval
    given, does not (Korn–Graubard's is not symmetric about the rate: near 0 or 1 it leans to
    the inner side): the join's half-width is the one judged and reported, and the notes say
    why in words (method §15). Rule 1 took the wider of the two halves and said "reached"."""
    from dataclasses import replace
    from types import SimpleNamespace

    run = _pilot_and_rest(partly_forgotten, precision=0.3, max_draws=12)
    design = run.design
    assert design is not None
    run.design = None
    nan = Estimate(math.nan, math.nan, math.nan, math.nan)
    plain = replace(run.evaluation().model, calibrated_otr=nan, over_unlearned_rate=nan)
    # any model's summary with OTR its only published rate (its interval is replaced below)
    # twelve draws of 20 targets with OTRs about 0.5, the first ten the pilot
    rates = [0.45, 0.55, 0.5, 0.4, 0.6, 0.5, 0.45, 0.55, 0.5, 0.5, 0.4, 0.6]
    draws = [DrawState(b, core=SimpleNamespace(otr=r, decisions=[None] * 20))  # type: ignore[arg-type]
             for b, r in enumerate(rates)]  # fmt: skip
    values, trials = per_draw_rates(draws, "otr")
    v, w = float(np.mean(values)), 0.2
    plan = stein_draws(values[:10], trials[:10], w)
    sd = 0.95 * w * np.sqrt(values.size) / plan.t  # Stein's half over all 12 draws: 0.95 W
    fixed = PrecisionDesign(w, 10, {"otr": replace(plan, sd=sd)}, needed=12, draws=12, budget=60)
    pooled, stein_lo, _, stein_half = stein_interval(values, trials, fixed.plans["otr"])
    assert pooled == pytest.approx(v) and stein_half == pytest.approx(0.95 * w)
    leaning = Estimate(v, v - 0.1 * w, v + 1.3 * w, v)  # half 0.7 W, leaning upwards
    m = with_design(replace(plain, otr=leaning), draws, fixed)
    assert (m.otr.lo, m.otr.hi) == (pytest.approx(stein_lo), pytest.approx(v + 1.3 * w))
    assert m.precision_half_width == pytest.approx((1.3 + 0.95) / 2 * w)  # > W
    assert f"precision ±{w:g} not reached after the 12 draws" in m.notes
    assert f"otr ±{(1.3 + 0.95) / 2 * w:.3f}" in m.notes
    assert "each hold the target, but Korn–Graubard's is not symmetric about the rate" in m.notes
    assert precision_json(m.to_row())["precision"]["reached"] is False
    assert miss_reasons(m.to_row()) == ["Stein's and Korn–Graubard's centred apart"]
    # the same intervals centred alike: each within W, and so is their join
    centred = Estimate(v, v - 0.7 * w, v + 0.7 * w, v)
    m = with_design(replace(plain, otr=centred), draws, fixed)
    assert m.precision_half_width == pytest.approx(0.95 * w) and "not reached" not in m.notes
    # a rate the gate withheld after the pilot (no plan: it did not drive B) but publishes
    # after all draws is shown beside the others, with its Korn–Graubard interval: judged too
    wide = Estimate(0.4, 0.4 - 1.2 * w, 0.4 + 1.2 * w, 0.4)
    m = with_design(replace(plain, otr=centred, calibrated_otr=wide), draws, fixed)
    assert m.precision_half_width == pytest.approx(1.2 * w)
    assert f"calibrated_otr ±{1.2 * w:.3f}: withheld by the gate after the pilot" in m.notes
    assert miss_reasons(m.to_row()) == ["withheld after the pilot, published after all draws"]
    # nothing drove B (every rate withheld after the pilot): the target was not applied
    m = with_design(replace(plain, otr=centred), draws, replace(fixed, plans={}))
    assert math.isnan(m.precision_half_width) and "no precision target applied" in m.notes


def test_the_precision_status_says_reached_or_why_not_in_words():
    """The CLI's and Explore's sentence on a precision row; nothing for a fixed-design row."""
    row = {"precision_target": 0.1, "precision_half_width": 0.094, "draws": 36,
           "draws_needed": 36, "notes": ""}  # fmt: skip
    assert precision_status(row) == (
        "reached",
        "precision ±0.1 reached: widest half-width 0.094 after 36 draws (the pilot asked for 36)",
    )
    missed = {**row, "precision_half_width": 0.122, "notes": "x; precision ±0.1 not reached "
              "after the 36 draws the pilot fixed: otr ±0.122: the pilot's per-draw SD 0.203 "
              "underestimated the full run's 0.264, so …"}  # fmt: skip
    state, sentence = precision_status(missed)
    assert state == "not reached" and sentence.endswith(
        "— after the 36 draws the pilot fixed: otr ±0.122: the pilot's per-draw SD 0.203 "
        "underestimated the full run's 0.264, so …"
    )
    spent = {**row, "draws": 60, "draws_needed": 80, "notes": "precision ±0.1 not reached: "
             "budget spent at half-width 0.130 — the pilot asks for 80 draws"}  # fmt: skip
    assert precision_status(spent)[0] == "not reached (budget spent)"
    assert "the pilot asks for 80 draws" in precision_status(spent)[1]
    withheld = {**row, "precision_half_width": float("nan"), "notes": "no precision target "
                "applied: every headline rate is withheld after the pilot"}  # fmt: skip
    assert precision_status(withheld)[0] == "not applied"
    assert precision_status({"precision_target": float("nan")}) is None
