"""Figure builders: the traces hold the evaluation's data, colours and reference lines are right.

The figures are drawn from :func:`helpers.results.synthetic_result` (shared with
``test_report``): four models on synthetic activations with known answers.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from helpers.results import synthetic_result

from sde_core.errors import ExportError, SDEError, SettingsError
from sde_core.pipeline.evaluation.workspace_run import EvaluationResult
from sde_core.stats.jsd import histogram_edges
from sde_core.viz.figures import export
from sde_core.viz.figures.comparison import comparison_bars
from sde_core.viz.figures.distributions import (
    hsic_histogram,
    panel_figure,
    spread_figure,
    target_overlay,
)
from sde_core.viz.figures.export import figure_to_image
from sde_core.viz.figures.style import COLORS, PLOTLY_CONFIG, VERDICT_COLORS, plotly_config
from sde_core.viz.figures.sweeps import sweep_figure


@pytest.fixture(scope="module")
def result() -> EvaluationResult:
    return synthetic_result()


def _titled(fig: go.Figure) -> None:
    assert fig.layout.title.text
    assert fig.layout.xaxis.title.text


def test_synthetic_result_has_known_answers(result):
    rows = result.models.set_index("name")
    assert rows.loc["original", "otr"] <= 0.2 and rows.loc["retrain", "otr"] >= 0.8
    assert rows.loc["original", "references_valid"]


def test_histogram_traces_hold_exactly_the_h_arrays(result):
    fig = hsic_histogram(result, "original")
    arrays = result.model_arrays("original")
    it, oot, tg = fig.data
    np.testing.assert_array_equal(it.x, arrays["it_h"])
    np.testing.assert_array_equal(oot.x, arrays["oot_h"])
    np.testing.assert_array_equal(tg.x, arrays["targets_h"].ravel())
    assert [t.marker.color for t in fig.data] == [COLORS["it"], COLORS["oot"], COLORS["target"]]
    edges = histogram_edges(arrays["it_h"], arrays["oot_h"], arrays["targets_h"].ravel(), bins=30)
    for trace in fig.data:  # common bins spanning everything shown
        assert trace.xbins.start == pytest.approx(edges[0])
        assert trace.xbins.size == pytest.approx(edges[1] - edges[0])
        assert trace.histnorm == "probability"
    assert fig.layout.barmode == "overlay"
    assert "split-half HSIC" in fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    _titled(fig)


def test_histogram_of_one_target_uses_its_jsd_bins(result):
    arrays = result.model_arrays("retrain")
    fig = hsic_histogram(result, "retrain", [4], bins=12)
    edges = histogram_edges(arrays["targets_h"][4], arrays["it_h"], arrays["oot_h"], bins=12)
    assert [t.name for t in fig.data][-1] == "target 4"
    np.testing.assert_array_equal(fig.data[2].x, arrays["targets_h"][4])
    assert fig.data[0].xbins.start == pytest.approx(edges[0])
    assert fig.data[0].xbins.size == pytest.approx(edges[1] - edges[0])
    several = hsic_histogram(result, "retrain", [0, 1, 2])
    targets = several.data[2:]
    assert [t.name for t in targets] == ["target 0", "target 1", "target 2"]
    assert {t.marker.color for t in targets} == {COLORS["target"]}  # one meaning, one colour
    assert len({t.marker.pattern.shape for t in targets}) == 3  # told apart by patterns
    assert len(hsic_histogram(result, "retrain", None).data) == 2


@pytest.mark.parametrize("targets", [[99], [], "all"])
def test_histogram_rejects_bad_targets(result, targets):
    with pytest.raises(SettingsError):
        hsic_histogram(result, "original", targets)


def test_unknown_model_is_a_settings_error(result):
    with pytest.raises(SettingsError, match="no model 'nope'"):
        hsic_histogram(result, "nope")
    with pytest.raises(SettingsError, match="no model 'nope'"):
        panel_figure(result, "nope")


def test_target_overlay(result):
    fig = target_overlay(result, ["original", "retrain", "rand"])
    assert [t.name for t in fig.data] == ["original", "retrain", "rand"]
    for trace in fig.data:
        np.testing.assert_array_equal(trace.x, result.arrays[f"{trace.name}/targets_h"].ravel())
    assert len({t.xbins.start for t in fig.data}) == 1
    with pytest.raises(SettingsError, match="2 to 4"):
        target_overlay(result, ["original"])


def test_every_model_keeps_its_colour_and_traces_read_apart_in_grayscale(result):
    """One colour per model in every chart (the overlay's order does not change it), and the
    histogram's three traces differ by fill pattern, not only by hue."""
    from sde_core.viz.figures.style import ROLE_COLORS, model_styles

    styles = model_styles(result.models)
    assert styles["original"][0] == ROLE_COLORS["original"]
    assert styles["retrain"][0] == ROLE_COLORS["retrained"]
    bars = comparison_bars(result.models, "otr").data[0]
    by_bar = dict(zip(bars.x, bars.marker.color, strict=True))
    for order in (["original", "retrain", "ga"], ["ga", "retrain", "original"]):
        overlay = target_overlay(result, order)
        assert {t.name: t.marker.color for t in overlay.data} == {n: by_bar[n] for n in order}
    hist = hsic_histogram(result, "original")
    shapes = [t.marker.pattern.shape or "" for t in hist.data]
    assert len(set(shapes)) == 3  # S_IT plain fill, S_OOT hatched, targets dotted


def test_panel_figure_colours_targets_by_verdict(result):
    fig = panel_figure(result, "original")
    sub = result.subsets[result.subsets["model"] == "original"]
    it, oot, *targets = fig.data
    np.testing.assert_allclose(it.x, sub[sub["kind"] == "it_panel"]["score"])
    np.testing.assert_allclose(oot.x, sub[sub["kind"] == "oot_panel"]["score"])
    assert it.marker.color == COLORS["it"] and oot.marker.color == COLORS["oot"]
    verdicts = sub[sub["kind"] == "target"]["verdict"].value_counts()
    assert sum(len(t.x) for t in targets) == result.settings.targets
    for trace in targets:
        verdict = trace.name.split(": ")[1].split(" (")[0]
        assert trace.marker.color == VERDICT_COLORS[verdict]
        assert len(trace.x) == verdicts[verdict]
    # The original model remembers: most targets score above the OOT panel.
    assert "in-training" in verdicts.index
    assert "p_in" in targets[0].hovertemplate
    _titled(fig)


def test_spread_figure_plots_spread_against_score(result):
    fig = spread_figure(result, "ga")
    sub = result.subsets[result.subsets["model"] == "ga"]
    assert [t.name.split(" ")[0] for t in fig.data] == ["IT", "OOT", "targets"]
    target_rows = sub[sub["kind"] == "target"]
    np.testing.assert_allclose(fig.data[2].x, target_rows["spread"])
    np.testing.assert_allclose(fig.data[2].y, target_rows["score"])
    assert "correlation r =" in fig.layout.title.text


def test_comparison_bars_with_wilson_errors_and_retrain_line(result):
    models = result.models
    fig = comparison_bars(models, "otr")
    bar = fig.data[0]
    np.testing.assert_allclose(bar.y, models["otr"] * 100)
    np.testing.assert_allclose(bar.error_y.array, (models["otr_hi"] - models["otr"]) * 100)
    np.testing.assert_allclose(bar.error_y.arrayminus, (models["otr"] - models["otr_lo"]) * 100)
    (line,) = fig.layout.shapes
    retrain_otr = float(models.set_index("name").loc["retrain", "otr"])
    assert line.y0 == pytest.approx(retrain_otr * 100) == pytest.approx(line.y1)
    assert "retrain" in fig.layout.annotations[0].text
    assert "%" in fig.layout.yaxis.title.text
    accuracy = comparison_bars(models, "acc_r")
    assert accuracy.data[0].error_y.array is None
    np.testing.assert_allclose(accuracy.data[0].y, models["acc_r"])
    no_retrain = comparison_bars(models[models["role"] != "retrained"], "asr")
    assert not no_retrain.layout.shapes
    invalid = models.assign(references_valid=[True, True, True, False])
    shapes = comparison_bars(invalid, "otr").data[0].marker.pattern.shape
    assert list(shapes) == ["", "", "", "/"]
    assert comparison_bars(invalid, "otr").data[0].text[3].endswith("(invalid refs)")
    with pytest.raises(SettingsError, match="unknown metric"):
        comparison_bars(models, "accuracy")


def _sweep_table() -> pd.DataFrame:
    rows = []
    for model in ("original", "retrain"):
        for sigma in (0.5, 2.0, 8.0, 32.0):
            otr = 0.1 if model == "original" else 0.9
            rows.append(
                {
                    "param": "sigma",
                    "value": sigma,
                    "model": model,
                    "otr": otr,
                    "otr_lo": otr - 0.05,
                    "otr_hi": otr + 0.05,
                    "f1": 0.95,
                    "references_valid": sigma < 30,
                    "sigma": sigma,
                }
            )
    return pd.DataFrame(rows)


def test_sweep_figure_marks_the_sigma_rules():
    sweep = _sweep_table()
    fig = sweep_figure(sweep, "otr", markers={"sqrt_dim": 3.0, "median": 1.25})
    lines = [t for t in fig.data if "rule" not in t.name]
    assert [t.name for t in lines] == ["original", "retrain"]
    np.testing.assert_allclose(lines[0].x, [0.5, 2.0, 8.0, 32.0])
    np.testing.assert_allclose(lines[1].y, [90.0] * 4)
    marks = {t.name: list(t.x) for t in fig.data if "rule" in t.name}
    assert marks == {"√d rule: σ = 3": [3.0, 3.0], "median rule: σ = 1.25": [1.25, 1.25]}
    assert list(lines[0].marker.symbol) == ["circle"] * 3 + ["circle-open"]  # invalid refs
    assert fig.layout.xaxis.type == "log"  # σ spans 64×
    assert "σ" in fig.layout.xaxis.title.text
    gated = sweep.copy()  # the gate withholds one σ of the original: marked, not dropped
    gated["inconclusive_reason"] = None
    first = gated.index[gated["model"] == "original"][1]
    gated.loc[first, ["otr", "otr_lo", "otr_hi"]] = np.nan
    gated.loc[first, "inconclusive_reason"] = "panels do not separate"
    (mark,) = [t for t in sweep_figure(gated, "otr").data if t.name == "original: withheld"]
    assert list(mark.x) == [gated.loc[first, "sigma"]]
    assert mark.customdata[0][0] == "panels do not separate"


def test_sweep_figure_for_checkpoints_and_layers():
    sweep = _sweep_table().assign(param="checkpoint", value=lambda d: d["sigma"] / 32)
    fig = sweep_figure(sweep, "f1")
    np.testing.assert_allclose(fig.data[0].x, [1.5625, 6.25, 25.0, 100.0])
    assert "% of training" in fig.layout.xaxis.title.text
    with pytest.raises(SettingsError, match="σ sweep"):
        sweep_figure(sweep, "f1", markers={"median": 1.0})
    layers = _sweep_table().head(2).assign(param="layer", value=["output", "penultimate"])
    assert list(sweep_figure(layers).data[0].x) == ["output", "penultimate"]
    with pytest.raises(SettingsError, match="one sweep"):
        sweep_figure(pd.concat([sweep, layers]))


def test_plotly_config_downloads_client_side():
    assert PLOTLY_CONFIG["toImageButtonOptions"]["format"] == "png"
    assert plotly_config("chart", "svg")["toImageButtonOptions"] == {
        "format": "svg",
        "filename": "chart",
        "scale": 2,
    }
    with pytest.raises(SettingsError):
        plotly_config(fmt="pdf")


def test_figure_to_image_without_chromium_says_what_to_do(monkeypatch):
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))
    monkeypatch.setattr(export, "_kaleido_installed", lambda: True)
    monkeypatch.setattr(export, "find_chromium", lambda: None)
    with pytest.raises(ExportError, match=r"needs Chromium.*camera button") as info:
        figure_to_image(fig, "svg")
    assert isinstance(info.value, SDEError)
    monkeypatch.setattr(export, "_kaleido_installed", lambda: False)
    with pytest.raises(ExportError, match="kaleido"):
        figure_to_image(fig, "png")
    with pytest.raises(SettingsError, match="format"):
        figure_to_image(fig, "jpeg")


@pytest.mark.slow  # starts Chromium where kaleido and Chromium are installed (CI)
def test_figure_to_image_renders_or_explains():
    """With kaleido and Chromium installed this renders a real PNG; otherwise it explains."""
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))
    if export._kaleido_installed() and export.find_chromium():
        assert figure_to_image(fig, "png").startswith(b"\x89PNG\r\n\x1a\n")
    else:
        with pytest.raises(ExportError, match="camera button"):
            figure_to_image(fig, "png")


def test_hover_text_and_axes_use_the_one_number_format(result):
    from sde_core.viz.formatting import column_formatter

    sub = result.subsets[result.subsets["model"] == "original"]
    fmt = column_formatter(sub["score"])
    panel = panel_figure(result, "original")
    it = sub[sub["kind"] == "it_panel"]
    assert list(panel.data[0].customdata[:, 1]) == [fmt(v) for v in it["score"]]
    assert "%{customdata[1]}" in panel.data[0].hovertemplate
    spread = spread_figure(result, "original")
    for axis in (
        spread.layout.xaxis,
        spread.layout.yaxis,
        hsic_histogram(result, "original").layout.xaxis,
    ):
        assert axis.exponentformat == "power" and axis.tickformat is None  # 2×10⁻⁵, never 20µ
    assert hsic_histogram(result, "original").layout.xaxis.hoverformat == ".3~g"


def test_panel_figure_draws_every_verdict_present(result):
    """Method §12's fourth verdict gets its own colour; an unknown one is drawn grey."""
    subsets = result.subsets.copy()
    targets = subsets.index[(subsets["model"] == "ga") & (subsets["kind"] == "target")]
    subsets.loc[targets, "verdict"] = "out-of-training"
    subsets.loc[targets[:3], "verdict"] = "over-unlearned"
    subsets.loc[targets[3:5], "verdict"] = "something new"
    changed = dataclasses.replace(result, subsets=subsets)
    fig = panel_figure(changed, "ga")
    by_name = {t.name.split(": ")[1].split(" (")[0]: t for t in fig.data[2:]}
    assert len(by_name["over-unlearned"].x) == 3
    assert by_name["over-unlearned"].marker.color == VERDICT_COLORS["over-unlearned"]
    assert by_name["something new"].marker.color == COLORS["inconclusive"]
    assert sum(len(t.x) for t in fig.data[2:]) == result.settings.targets


def test_signal_grid_draws_each_1d_input_as_a_curve():
    from sde_core.viz.figures.distributions import signal_grid

    signals = np.sin(np.linspace(0, 6, 40))[None, :] * np.arange(1, 6)[:, None]
    fig = signal_grid(signals, [f"✓ {i}" for i in range(4)] + ["✗ 1 (is 7)"], [True] * 4 + [False])
    assert len(fig.data) == 5
    np.testing.assert_array_equal(fig.data[4].y, signals[4])
    assert fig.data[4].line.dash == "dash" and fig.data[0].line.dash == "solid"
    assert [a.text for a in fig.layout.annotations][-1] == "✗ 1 (is 7)"
    with pytest.raises(SettingsError, match="one caption"):
        signal_grid(signals, ["x"], [True])
