"""The method leaderboard (method §15): order, paired intervals and withheld models, checked
against a paired t interval computed here from the per-draw rates (independent of
:mod:`sde_core.stats.precision`), on :func:`helpers.results.synthetic_result` with a second
unlearned model (a copy of the original, which remembers D_f) and the random model audited as
a third (its rates are withheld by the gate)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from helpers.results import synthetic_result
from scipy import stats

from sde_core.pipeline.evaluation.metric_table import (
    CALIBRATED_OTR,
    LOSS_GAP_VS_RETRAINED,
    OTR,
    Metric,
)
from sde_core.viz.figures.leaderboard import (
    leaderboard_chart,
    leaderboard_table,
    leaderboard_text,
)
from sde_core.viz.report.html_page import build_html_report, report_figures


@pytest.fixture(scope="module")
def audited() -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(models, draws)``: ga (forgets), copy (the original's numbers: remembers) and rand
    (withheld) audited against retrain and original."""
    result = synthetic_result()
    models, draws = result.models.copy(), result.draws.copy()
    copy = models[models["name"] == "original"].assign(name="copy", role="unlearned")
    copy_draws = draws[draws["model"] == "original"].assign(model="copy")
    models = pd.concat([models, copy], ignore_index=True)
    draws = pd.concat([draws, copy_draws], ignore_index=True)
    models.loc[models["name"] == "rand", "role"] = "unlearned"
    return models, draws


def reference_interval(draws: pd.DataFrame, a: str, b: str, rate: Metric) -> tuple[float, ...]:
    """The paired difference a − b over the common draws: the trial-weighted mean of the
    per-draw differences, its linearised variance floored by the binomial variance of either
    pooled rate (Agresti–Coull), Student t with B − 1 df; in the rate's shown unit."""
    x = draws[draws["model"] == a].set_index("draw").sort_index()
    y = draws[draws["model"] == b].set_index("draw").sort_index()
    common = x.index.intersection(y.index)
    u, v = x.loc[common, rate.key].to_numpy(float), y.loc[common, rate.key].to_numpy(float)
    m = x.loc[common, "targets"].to_numpy(float)
    w = m / m.sum()
    d = u - v
    mean = float(w @ d)
    var = len(d) / (len(d) - 1) * float(np.sum((w * (d - mean)) ** 2))
    for r in (u, v):
        p = (float(r @ m) + 2) / (m.sum() + 4)
        var = max(var, p * (1 - p) / m.sum())
    half = stats.t.ppf(0.975, len(d) - 1) * math.sqrt(var)
    lo, hi = max(-1.0, mean - half), min(1.0, mean + half)
    return mean * rate.scale, lo * rate.scale, hi * rate.scale, float(len(d))


def test_models_are_ranked_by_closeness_to_retraining_with_withheld_last(audited):
    models, draws = audited
    table = leaderboard_table(models, draws)
    ranked = list(dict.fromkeys(table.sort_values("rank")["model"]))
    gaps = {
        n: abs(reference_interval(draws, n, "retrain", CALIBRATED_OTR)[0]) for n in ("ga", "copy")
    }
    assert gaps["ga"] < gaps["copy"]  # the case is not degenerate
    assert ranked == ["ga", "copy", "rand"]
    assert set(table["model"]) == {"ga", "copy", "rand"}  # audited models only


@pytest.mark.parametrize("rate", [OTR, CALIBRATED_OTR], ids=lambda m: m.label)
@pytest.mark.parametrize("reference", ["retrain", "original"])
def test_differences_and_intervals_match_a_paired_t_computed_here(audited, rate, reference):
    models, draws = audited
    table = leaderboard_table(models, draws)
    role = {"retrain": "retrained", "original": "original"}[reference]
    for name in ("ga", "copy"):
        row = table[
            (table["model"] == name) & (table["rate"] == rate.label) & (table["vs"] == role)
        ]
        (got,) = row[["difference", "low", "high", "draws"]].to_numpy(float)
        want = reference_interval(draws, name, reference, rate)
        assert got == pytest.approx(want, abs=1e-9)
        assert row["unit"].item() == "points"
        contains = want[1] <= 0 <= want[2]
        words = row["paired test"].item()
        assert (words == f"within the uncertainty of {role}") == contains, words
        assert contains or words.startswith(("above", "below"))
    assert "within the uncertainty of original" in set(
        table.loc[(table["model"] == "copy") & (table["vs"] == "original"), "paired test"]
    )  # the copy of the original cannot be told from it


def test_withheld_model_is_listed_with_why_and_never_drawn(audited):
    models, draws = audited
    table = leaderboard_table(models, draws)
    rand = table[table["model"] == "rand"]
    assert len(rand) == 4 and rand["difference"].isna().all()
    assert (rand["paired test"] == "").all()
    assert all(
        f"rand's {label} is withheld" in why
        for label, why in zip(rand["rate"], rand["why withheld"], strict=True)
    )
    figure = leaderboard_chart(table, models)
    drawn = [y for trace in figure.data for y in trace.y]
    assert "rand" not in drawn and drawn.count("ga") == 4 and drawn.count("copy") == 4
    notes = [a for a in figure.layout.annotations if a.text == "withheld"]
    assert [a.y for a in notes] == ["rand"] * 4
    assert all("withheld" in a.hovertext for a in notes)
    # each panel's points are the table's differences, the error bars reach its interval
    for trace in figure.data:
        part = table[table["model"].isin(trace.y)].set_index(["model", "rate", "vs"])
        rate, vs = trace.name.split(" − ")
        for model, x, plus, minus in zip(
            trace.y, trace.x, trace.error_x.array, trace.error_x.arrayminus, strict=True
        ):
            row = part.loc[(model, rate, vs)]
            assert (x, x + plus, x - minus) == pytest.approx((row.difference, row.high, row.low))
    assert list(figure.layout.yaxis.categoryarray) == ["ga", "copy", "rand"]


def test_the_behaviour_gap_is_shown_where_measured_with_its_test(audited):
    models, draws = audited
    models = models.copy()
    metric = LOSS_GAP_VS_RETRAINED
    for name, value, lo, hi in (("ga", 0.01, -0.02, 0.04), ("copy", 0.5, 0.3, 0.7)):
        at = models["name"] == name
        models.loc[at, [metric.key, metric.lo, metric.hi]] = [value, lo, hi]
    table = leaderboard_table(models, draws)
    gap = table[table["rate"] == metric.label].set_index("model")
    assert gap.loc["ga", "paired test"] == "within the uncertainty of retrained"
    assert gap.loc["copy", "paired test"] == "above retrained (interval excludes 0)"
    assert gap.loc["copy", ["difference", "low", "high"]].tolist() == [0.5, 0.3, 0.7]
    assert (
        math.isnan(gap.loc["rand", "difference"])
        and "not measured" in gap.loc["rand", "why withheld"]
    )
    assert (gap["vs"] == "retrained").all()
    panels = {trace.name for trace in leaderboard_chart(table, models).data}
    assert f"{metric.label} − retrained" in panels and len(panels) == 5
    # a family without the measure gets no such panel
    assert metric.label not in set(leaderboard_table(*audited)["rate"])


def test_without_a_retrained_model_only_the_original_is_a_reference(audited):
    models, draws = audited
    models = models[models["role"] != "retrained"]
    table = leaderboard_table(models, draws)
    assert set(table["vs"]) == {"original"}
    ranked = list(dict.fromkeys(table.sort_values("rank")["model"]))
    assert ranked == ["ga", "rand", "copy"]  # the table's order is kept


def test_the_report_carries_the_leaderboard_chart_and_its_readable_table(audited):
    models, draws = audited
    result = dataclasses.replace(synthetic_result(), models=models, draws=draws)
    assert "Method leaderboard" in report_figures(result)
    text = leaderboard_text(leaderboard_table(models, draws))
    ga = text[(text["model"] == "ga") & (text["difference"] == f"{OTR.label} − retrained")]
    lo, hi = reference_interval(draws, "ga", "retrain", OTR)[1:3]
    assert ga["value [95% CI]"].item().endswith(f"[{lo:+.1f}, {hi:+.1f}]".replace("-", "−"))
    rand = text[text["model"] == "rand"]
    assert set(rand["value [95% CI]"]) == {"withheld"}
    assert all("withheld" in why for why in rand["paired test, or why withheld"])
    doc = build_html_report(result, "syn", figures=[])
    board = doc[doc.index("<h3>Method leaderboard</h3>") :]
    assert "within the uncertainty of" in board and "rand's OTR is withheld" in board
