"""Plotly figures of an evaluation (UI-free: every builder is a pure function returning a Figure).

Colours are the colour-blind-safe Okabe–Ito palette and mean the same thing in every chart:
in-training references (S_IT, the IT panel, "in-training" verdicts) are blue, out-of-training
references (S_OOT, the OOT panel, "out-of-training" verdicts) orange, target subsets of the
forget set reddish purple, inconclusive verdicts grey.

Builders:

- :func:`hsic_histogram` — H(S_IT), H(S_OOT) and the targets' H on the common JSD bins (Fig. 2);
- :func:`target_overlay` — the pooled target H of 2–4 models on common bins;
- :func:`panel_figure` — subset scores of the reference panels and the targets with verdicts;
- :func:`spread_figure` — subset score vs kernel spread (the spread control of method §9);
- :func:`draw_strip` — each headline number's per-draw values as dots, with the point value and
  its 95% interval (method §12);
- :func:`comparison_bars` — one metric per model with error bars and the Retrain reference line;
- :func:`sweep_figure` — a metric vs σ / layer / subset size / checkpoint (from
  :func:`sde_core.pipeline.sweeps.run_sweep`), with the σ rules marked.

Numbers: axes of split-half HSIC values use SI prefixes (``35µ``) and hover texts are written
by :func:`sde_core.viz.formatting.column_formatter`, the format of the tables and the report.

Export: :data:`PLOTLY_CONFIG` (client-side PNG download from the chart's camera button) and
:func:`figure_to_image` (server-side PNG/SVG through kaleido and a system Chromium).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sde_core.common.sigma import MEDIAN, SQRT_DIM
from sde_core.errors import ExportError, SettingsError
from sde_core.pipeline.evaluation.metric_table import BAR_METRICS, INTERVAL_METHODS, METRICS, Metric
from sde_core.stats.jsd import histogram_edges
from sde_core.viz.formatting import AXIS_NUMBERS, UNBOUNDED, column_formatter

__all__ = [
    "BAR_CHOICES",
    "COLORS",
    "DRAW_STRIP_METRICS",
    "MODEL_COLORS",
    "PLOTLY_CONFIG",
    "ROLE_COLORS",
    "VERDICT_COLORS",
    "comparison_bars",
    "draw_strip",
    "figure_to_image",
    "find_chromium",
    "hsic_histogram",
    "metric_label",
    "model_styles",
    "panel_figure",
    "plotly_config",
    "signal_grid",
    "spread_figure",
    "sweep_figure",
    "target_overlay",
    "with_metric_label",
]

#: Okabe–Ito colours by meaning.
COLORS: dict[str, str] = {
    "it": "#0072B2",  # blue: in-training references and verdicts
    "oot": "#E69F00",  # orange: out-of-training references and verdicts
    "target": "#CC79A7",  # reddish purple: target subsets of the forget set
    "inconclusive": "#999999",  # grey
}
#: Colours of the calibrated verdicts.
VERDICT_COLORS: dict[str, str] = {
    "in-training": COLORS["it"],
    "out-of-training": COLORS["oot"],
    "over-unlearned": "#009E73",  # bluish green: below the out-of-training panel (method §12)
    "inconclusive": COLORS["inconclusive"],
}
#: Colours of the roles (the colour of each original, retrained and random model; model_styles).
ROLE_COLORS: dict[str, str] = {
    "original": "#D55E00",
    "retrained": "#009E73",
    "unlearned": "#56B4E9",
    "random": "#999999",
}
#: Colours of several models (or several selected targets) in one chart.
MODEL_COLORS: tuple[str, ...] = ("#009E73", "#D55E00", "#56B4E9", "#000000", "#CC79A7", "#F0E442")
#: Colours of the unlearned models, in workspace order (the roles' colours are kept for the
#: original, retrained and random models).
_UNLEARNED_COLORS = ("#56B4E9", "#CC79A7", "#0072B2", "#E69F00", "#000000", "#F0E442")
#: Line dashes that tell models apart without colour (grayscale print), in the same order.
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")

#: Fill patterns that tell several selected targets apart (all in the target colour; "/" is
#: S_OOT's hatch and a plain fill S_IT's, so each of the three reads apart in grayscale).
_TARGET_PATTERNS = (".", "\\", "x", "+", "-", "|")
_H_AXIS = "split-half HSIC H(S, h) (unitless)"
_TEMPLATE = "plotly_white"
_IMAGE_FORMATS = ("png", "svg")
_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def plotly_config(filename: str = "sde-chart", fmt: str = "png") -> dict[str, Any]:
    """The ``config`` of ``st.plotly_chart`` / ``fig.show``: the camera button downloads ``fmt``.

    The download happens in the browser (plotly.js), so it needs no server-side Chromium.

    Args:
        filename: downloaded file name without extension.
        fmt: ``"png"`` or ``"svg"``.
    """
    if fmt not in _IMAGE_FORMATS:
        raise SettingsError(f"image format must be one of {_IMAGE_FORMATS}; got {fmt!r}")
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": fmt, "filename": filename, "scale": 2},
    }


#: Default chart config: PNG (at twice the screen resolution) from the camera button.
PLOTLY_CONFIG: dict[str, Any] = plotly_config()


def _metric(metric: str) -> Metric:
    if metric not in METRICS:
        raise SettingsError(f"unknown metric {metric!r}; choose one of {sorted(METRICS)}")
    return METRICS[metric]


def metric_label(metric: str) -> str:
    """The display name of a metric of the metric table (``"calibrated_otr"`` → its label).

    Raises:
        SettingsError: not a metric of the table (the message lists them).
    """
    return _metric(metric).label


def with_metric_label(text: str, metric: str) -> str:
    """``text``, a message stored with a metric's key (``"ft's calibrated_otr is withheld"``),
    with that key, where it stands as a word, replaced by the metric's display name."""
    return re.sub(rf"\b{re.escape(metric)}\b", metric_label(metric), text)


def _layout(fig: go.Figure, title: str, x: str, y: str, **extra: Any) -> go.Figure:
    fig.update_layout(
        title={"text": title, "y": 0.97, "yanchor": "top"},
        xaxis_title=x,
        yaxis_title=y,
        template=_TEMPLATE,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        margin={"t": 120},
        **extra,
    )
    return fig


def _model_arrays(result: Any, model: str) -> dict[str, np.ndarray]:
    arrays = result.model_arrays(model)
    if not arrays:
        names = result.models["name"].tolist() if len(result.models) else []
        raise SettingsError(f"the result has no model {model!r}; models: {names}")
    return arrays


def _model_row(result: Any, model: str) -> pd.Series:
    rows = result.models[result.models["name"] == model]
    if rows.empty:
        raise SettingsError(
            f"the result has no model {model!r}; models: {result.models['name'].tolist()}"
        )
    return rows.iloc[0]


def _hist(
    x: np.ndarray, name: str, color: str, edges: np.ndarray, what: str, pattern: str = ""
) -> go.Histogram:
    """One histogram trace, legible where traces overlap and in grayscale: a plain translucent
    fill without ``pattern``; with one, only the pattern's lines in ``color`` on a transparent
    ground (overlaps never mix into colours the legend lacks), with a solid outline."""
    size = float(edges[1] - edges[0])
    return go.Histogram(
        x=x,
        name=name,
        marker={
            "color": color,
            "pattern": {"shape": pattern, "fillmode": "replace", "solidity": 0.45},
            "line": {"color": color, "width": 1.5 if pattern else 0.5},
        },
        opacity=0.5 if not pattern else 0.95,
        histnorm="probability",
        # The end is nudged past the last edge so the maximum falls in the last bin.
        xbins={"start": float(edges[0]), "end": float(edges[-1]) + 1e-9 * size, "size": size},
        hovertemplate=f"H in %{{x}}<br>%{{y:.1%}} of {what}<extra>{name}</extra>",
    )


def model_styles(models: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """A fixed ``(colour, dash)`` per model of a ``models`` table, the same in every chart:
    the original, retrained and random models keep their role's colour, unlearned models get
    distinct colours in table order; the dash tells them apart in grayscale."""
    out: dict[str, tuple[str, str]] = {}
    unlearned = 0
    for i, (name, role) in enumerate(zip(models["name"], models["role"], strict=True)):
        if role in ROLE_COLORS and role != "unlearned":
            color = ROLE_COLORS[role]
        else:
            color = _UNLEARNED_COLORS[unlearned % len(_UNLEARNED_COLORS)]
            unlearned += 1
        out[str(name)] = (color, _DASHES[i % len(_DASHES)])
    return out


def hsic_histogram(
    result: Any,
    model: str,
    targets: str | Sequence[int] | None = "pooled",
    *,
    bins: int | None = None,
) -> go.Figure:
    """Overlaid histograms of H(S_IT), H(S_OOT) and target H for one model (paper Fig. 2).

    Bins are common to every trace and span min..max of everything shown, as the JSD decision's
    bins do (with one target selected they are exactly that decision's bins).

    Args:
        result: an :class:`~sde_core.pipeline.evaluation.workspace_run.EvaluationResult`.
        model: model name.
        targets: ``"pooled"`` (every split of all T targets in one trace), indices of targets to
            show one trace each (at most 6, told apart by fill patterns), or None (references
            only).
        bins: number of bins (default the evaluation's ``bins``).

    Returns:
        A Figure with traces ``S_IT`` (the ``(K,)`` H values), ``S_OOT`` and the target traces;
        y is the share of splits in each bin.
    """
    arrays = _model_arrays(result, model)
    it_h, oot_h, targets_h = arrays["it_h"], arrays["oot_h"], arrays["targets_h"]
    if targets is None:
        shown: list[tuple[str, np.ndarray]] = []
    elif isinstance(targets, str):
        if targets != "pooled":
            raise SettingsError(f"targets must be 'pooled', indices or None; got {targets!r}")
        shown = [(f"targets (T = {len(targets_h)}, pooled)", targets_h.ravel())]
    else:
        idx = [int(i) for i in targets]
        bad = [i for i in idx if not 0 <= i < len(targets_h)]
        if bad or not idx or len(idx) > len(_TARGET_PATTERNS):
            raise SettingsError(
                f"choose 1–{len(_TARGET_PATTERNS)} target indices in "
                f"0..{len(targets_h) - 1}; got {idx}"
            )
        shown = [(f"target {i}", targets_h[i]) for i in idx]
    nb = int(bins if bins is not None else result.settings.bins)
    edges = histogram_edges(it_h, oot_h, *(h for _, h in shown), bins=nb)
    fig = go.Figure()
    fig.add_trace(_hist(it_h, "S_IT (retained data)", COLORS["it"], edges, "splits"))
    fig.add_trace(_hist(oot_h, "S_OOT (test data)", COLORS["oot"], edges, "splits", "/"))
    for (name, h), pattern in zip(shown, _TARGET_PATTERNS, strict=False):
        fig.add_trace(_hist(h, name, COLORS["target"], edges, "splits", pattern))
    row = _model_row(result, model)
    title = f"{model}: split-half HSIC of references and targets (σ = {row['sigma']:.3g})"
    fig.update_xaxes(**AXIS_NUMBERS)
    return _layout(fig, title, _H_AXIS, "share of splits", barmode="overlay")


def target_overlay(result: Any, models: Sequence[str], *, bins: int | None = None) -> go.Figure:
    """The pooled target H of 2–4 models on common bins.

    Args:
        result: an :class:`~sde_core.pipeline.evaluation.workspace_run.EvaluationResult`
            holding every model.
        models: 2 to 4 model names.
        bins: number of bins (default the evaluation's ``bins``).

    Returns:
        A Figure with one histogram trace per model (its ``(T·K,)`` pooled target H) in the
        model's fixed colour (:func:`model_styles`): the first filled, the others hatched with
        distinct patterns, so they read apart where they overlap and in grayscale.
    """
    names = list(models)
    if not 2 <= len(names) <= 4:
        raise SettingsError(f"overlay 2 to 4 models; got {len(names)}")
    series = [_model_arrays(result, m)["targets_h"].ravel() for m in names]
    edges = histogram_edges(*series, bins=int(bins if bins is not None else result.settings.bins))
    styles = model_styles(result.models)
    fig = go.Figure()
    for i, (name, h) in enumerate(zip(names, series, strict=True)):
        pattern = "" if i == 0 else _TARGET_PATTERNS[(i - 1) % len(_TARGET_PATTERNS)]
        fig.add_trace(_hist(h, name, styles[name][0], edges, "target splits", pattern))
    fig.update_xaxes(**AXIS_NUMBERS)
    return _layout(
        fig,
        "Target subsets of the forget set under several models",
        _H_AXIS,
        "share of target splits",
        barmode="overlay",
    )


def signal_grid(
    signals: np.ndarray, captions: Sequence[str], correct: Sequence[bool], *, columns: int = 4
) -> go.Figure:
    """1-D inputs (mnist1d's 40-point signals) as small curves, one panel per input.

    Args:
        signals: ``(k, d)`` inputs as the model sees them.
        captions: one title per input (``"✓ 7"`` / ``"✗ 1 (is 7)"``).
        correct: whether each prediction is right (wrong ones are drawn in the original
            model's vermilion and dashed, so they read apart in grayscale too).
        columns: panels per row.

    Returns:
        A Figure with one line trace per input, in a grid of ``columns`` columns.
    """
    x = np.asarray(signals, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(captions) or len(x) != len(correct) or len(x) == 0:
        raise SettingsError(
            f"signals must be (k, d) with one caption and one flag per row; got {x.shape}, "
            f"{len(captions)} captions, {len(correct)} flags"
        )
    rows = -(-len(x) // columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=list(captions),
                        horizontal_spacing=0.03, vertical_spacing=0.12)  # fmt: skip
    for i, (signal, right) in enumerate(zip(x, correct, strict=True)):
        fig.add_trace(
            go.Scatter(
                y=signal,
                mode="lines",
                line={
                    "color": "#0072B2" if right else ROLE_COLORS["original"],
                    "dash": "solid" if right else "dash",
                    "width": 1.5,
                },
                name=captions[i],
                showlegend=False,
                hovertemplate="position %{x}<br>value %{y:.3~g}<extra></extra>",
            ),
            row=i // columns + 1,
            col=i % columns + 1,
        )
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    fig.update_annotations(font_size=11)
    fig.update_layout(template=_TEMPLATE, height=130 * rows + 40, margin={"t": 40, "b": 10})
    return fig


def _jitter(n: int) -> np.ndarray:
    """Deterministic vertical offsets (in [-0.3, 0.3]) that spread points of one row."""
    return ((np.arange(n) % 7) - 3) * 0.1


def panel_figure(result: Any, model: str) -> go.Figure:
    """Subset scores of the IT panel, the OOT panel and the targets on one axis (method §9).

    Each point is one subset's score s(S) (mean H over its splits). Targets are coloured by their
    calibrated verdict (blue in-training, orange out-of-training, green over-unlearned, grey
    inconclusive).

    Returns:
        A Figure with traces ``IT panel``, ``OOT panel`` and one per verdict present among the
        targets; rows are at y = 2 (IT), 1 (OOT) and 0 (targets).
    """
    row = _model_row(result, model)
    sub = result.subsets[result.subsets["model"] == model]
    score_text = column_formatter(sub["score"])
    fig = go.Figure()
    for y, kind, name, color in (
        (2, "it_panel", "IT panel (retained data)", COLORS["it"]),
        (1, "oot_panel", "OOT panel (test data)", COLORS["oot"]),
    ):
        part = sub[sub["kind"] == kind]
        fig.add_trace(
            go.Scatter(
                x=part["score"],
                y=y + _jitter(len(part)),
                mode="markers",
                name=name,
                marker={"color": color, "size": 9, "symbol": "circle"},
                customdata=np.c_[part["index"], part["score"].map(score_text)],
                hovertemplate="panel subset %{customdata[0]}<br>score s(S) = %{customdata[1]}"
                f"<extra>{name}</extra>",
            )
        )
    targets = sub[sub["kind"] == "target"]
    jitter = pd.Series(_jitter(len(targets)), index=targets.index)
    # every verdict present gets a trace (one not in VERDICT_COLORS is drawn grey)
    for verdict in dict.fromkeys([*VERDICT_COLORS, *map(str, targets["verdict"].unique())]):
        color = VERDICT_COLORS.get(verdict, COLORS["inconclusive"])
        part = targets[targets["verdict"] == verdict]
        if part.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=part["score"],
                y=jitter[part.index],
                mode="markers",
                name=f"targets: {verdict} ({len(part)})",
                marker={"color": color, "size": 9, "symbol": "diamond", "line": {"width": 0.5}},
                customdata=np.c_[
                    part[["index", "p_in", "p_out"]].to_numpy(dtype=object),
                    part["score"].map(score_text),
                ],
                hovertemplate="target %{customdata[0]}<br>score s(S) = %{customdata[3]}<br>"
                "p_in = %{customdata[1]:.3f}, p_out = %{customdata[2]:.3f}"
                f"<br>verdict: {verdict}<extra></extra>",
            )
        )
    validity = "valid" if bool(row["panel_valid"]) else "INVALID: every verdict is inconclusive"
    fig.update_yaxes(
        tickvals=[0, 1, 2], ticktext=["targets (D_f)", "OOT panel", "IT panel"], range=[-0.6, 2.6]
    )
    fig.update_xaxes(**AXIS_NUMBERS)
    return _layout(
        fig,
        f"{model}: calibrated evidence (panels {validity}, p = {row['panel_p']:.2g})",
        "subset score s(S) = mean split-half HSIC (unitless)",
        "",
    )


def spread_figure(result: Any, model: str) -> go.Figure:
    """Subset score vs kernel spread, the spread control of method §9.

    ``spread(S) = (1 − mean off-diagonal kernel value)² / (n/2)`` needs no pairing; when the
    points lie on one line the score is driven by how spread out the activations are, not by a
    dependence between the halves.

    Returns:
        A Figure with traces ``IT panel``, ``OOT panel`` and ``targets`` (x = spread, y = score).
    """
    row = _model_row(result, model)
    sub = result.subsets[result.subsets["model"] == model]
    score_text, spread_text = column_formatter(sub["score"]), column_formatter(sub["spread"])
    fig = go.Figure()
    for kind, name, color in (
        ("it_panel", "IT panel (retained data)", COLORS["it"]),
        ("oot_panel", "OOT panel (test data)", COLORS["oot"]),
        ("target", "targets (D_f)", COLORS["target"]),
    ):
        part = sub[sub["kind"] == kind]
        fig.add_trace(
            go.Scatter(
                x=part["spread"],
                y=part["score"],
                mode="markers",
                name=name,
                marker={"color": color, "size": 8},
                customdata=np.c_[
                    part["index"], part["spread"].map(spread_text), part["score"].map(score_text)
                ],
                hovertemplate="subset %{customdata[0]}<br>spread = %{customdata[1]}<br>"
                f"score = %{{customdata[2]}}<extra>{name}</extra>",
            )
        )
    fig.update_xaxes(**AXIS_NUMBERS)
    fig.update_yaxes(**AXIS_NUMBERS)
    return _layout(
        fig,
        f"{model}: score vs spread (correlation r = {row['score_spread_corr']:.2f})",
        "kernel spread (1 − mean kernel)² / (n/2) (unitless)",
        "subset score s(S) (unitless)",
    )


def _reference_value(models: pd.DataFrame, column: str, role: str) -> tuple[str, float] | None:
    ref = models[models["role"] == role]
    if ref.empty:
        return None
    value = float(ref.iloc[0][column])
    return (str(ref.iloc[0]["name"]), value) if np.isfinite(value) else None


def _withheld(value: float, reason: Any) -> bool:
    """Whether a NaN value is withheld by the gate (its row gives a reason, method §12)."""
    return not np.isfinite(value) and isinstance(reason, str) and bool(reason.strip())


def _validity(table: pd.DataFrame, spec: Metric) -> list[bool]:
    """Per row, whether the metric is a valid verdict (always True without a validity column)."""
    if spec.valid is None or spec.valid not in table:
        return [True] * len(table)
    return [bool(v) for v in table[spec.valid]]


def _flags(models: pd.DataFrame, column: str) -> list[bool]:
    """A boolean column as a list (False where the column or a value is missing)."""
    if column not in models:
        return [False] * len(models)
    return [bool(v) if isinstance(v, (bool, np.bool_)) else False for v in models[column]]


def _bar_pattern(valid: bool, over_unlearned: bool, conflict: bool) -> str:
    """A bar's fill pattern: ``/`` invalid references, ``x`` over-unlearned, ``.`` evidence
    conflict, none otherwise (so an over-unlearned 100% bar never looks like the retrained one)."""
    if not valid:
        return "/"
    if over_unlearned:
        return "x"
    return "." if conflict else ""


def comparison_bars(
    models: pd.DataFrame, metric: str = "otr", *, reference_role: str = "retrained"
) -> go.Figure:
    """One bar per model for ``metric``, with interval error bars and a reference line.

    Args:
        models: the ``models`` table of an evaluation (``name``, ``role`` and the metric columns).
        metric: a key of :data:`METRICS` (OTR, calibrated OTR, F1 and the dependence score get
            their 95% intervals over the draws as error bars, method §12; an unbounded side of a
            Fieller interval draws no bar).
        reference_role: the role whose value is drawn as a dashed horizontal line (the first
            such model; none when absent or NaN).

    Returns:
        A Figure with one Bar trace (y = value × scale, NaN bars missing; bars of models whose
        references are invalid are hatched ``/`` and labelled, as their verdicts are
        inconclusive; over-unlearned models are cross-hatched ``x`` and labelled, a row with an
        ``evidence_conflict`` dotted and labelled), a text trace with each bar's label above its
        error bar, and, with a reference, one horizontal line shape at the reference model's
        value.
    """
    spec = _metric(metric)
    if metric not in models.columns:
        raise SettingsError(f"the table has no column {metric!r}")
    values = models[metric].astype(float).to_numpy() * spec.scale
    valid = _validity(models, spec)
    reasons = (
        models["inconclusive_reason"].tolist()
        if "inconclusive_reason" in models
        else [None] * len(models)
    )
    bar: dict[str, Any] = {}
    if spec.lo and spec.hi:
        lo = models[spec.lo].astype(float).to_numpy() * spec.scale
        hi = models[spec.hi].astype(float).to_numpy() * spec.scale
        lo, hi = np.where(np.isfinite(lo), lo, np.nan), np.where(np.isfinite(hi), hi, np.nan)
        finite = np.isfinite(values)
        bar["error_y"] = {
            "type": "data",
            "symmetric": False,
            "array": np.where(finite, hi - values, np.nan),
            "arrayminus": np.where(finite, values - lo, np.nan),
            "color": "#444444",
        }
        bar["customdata"] = np.c_[lo, hi]
        f = ".0f" if spec.unit == "%" else ".3g"
        extra = f"<br>95% CI %{{customdata[0]:{f}}}–%{{customdata[1]:{f}}}" + spec.unit
    else:
        extra = ""
    over = _flags(models, "over_unlearned")
    conflicts = [
        isinstance(c, str) and bool(c.strip())
        for c in (
            models["evidence_conflict"] if "evidence_conflict" in models else [None] * len(models)
        )
    ]
    labels = [
        ("withheld" if _withheld(v, why) else spec.fmt(v))
        + ("" if ok else " (invalid refs)")
        + (" over-unlearned" if o and ok else "")
        + (" conflict" if c else "")
        for v, ok, why, o, c in zip(
            models[metric].astype(float), valid, reasons, over, conflicts, strict=True
        )
    ]
    fig = go.Figure(
        go.Bar(
            x=models["name"],
            y=values,
            marker={
                "color": [model_styles(models)[str(n)][0] for n in models["name"]],
                "pattern": {
                    "shape": [
                        _bar_pattern(ok, o, c)
                        for ok, o, c in zip(valid, over, conflicts, strict=True)
                    ]
                },
                "line": {"color": "#333333", "width": 1},
            },
            text=labels,
            textposition="none",  # drawn above the error bar by the text trace below
            hovertemplate=f"%{{x}}<br>{spec.label} = %{{y:.3g}}{spec.unit}{extra}<extra></extra>",
            name=spec.label,
            **bar,
        )
    )
    top = values.copy()
    if "error_y" in bar:
        top = np.fmax(top, values + np.nan_to_num(bar["error_y"]["array"], nan=0.0))
    fig.add_trace(
        go.Scatter(
            x=models["name"],
            y=np.nan_to_num(top, nan=0.0),
            text=labels,
            mode="text",
            textposition="top center",
            hoverinfo="skip",
            showlegend=False,
            cliponaxis=False,
        )
    )
    ref = _reference_value(models, metric, reference_role)
    if ref is not None:
        name, value = ref
        who = name if name == reference_role else f"{name} ({reference_role})"
        fig.add_hline(
            y=value * spec.scale,
            line_dash="dash",
            line_color=ROLE_COLORS.get(reference_role, "#000000"),
            annotation_text=f"{who}: {spec.fmt(value)}",
            annotation_position="top right",
            annotation_bgcolor="rgba(255,255,255,0.8)",
        )
    if spec.bounds is not None:
        fig.update_yaxes(range=[spec.bounds[0], spec.bounds[1] * 1.12])
    return _layout(fig, f"{spec.label} per model", "model", spec.axis, showlegend=False)


#: The bar chart's metric menu (:func:`comparison_bars`): metric key -> label, in menu order.
BAR_CHOICES: dict[str, str] = {key: METRICS[key].label for key in BAR_METRICS}

#: The rows of :func:`draw_strip`, in order (:data:`METRICS` entries).
DRAW_STRIP_METRICS: tuple[Metric, ...] = tuple(
    METRICS[k] for k in ("otr", "calibrated_otr", "f1", "dependence_score", "reference_p")
)


def _interval(row: pd.Series, metric: Metric) -> tuple[float, float]:
    """A metric's interval ``(lo, hi)`` in a ``models`` row (NaN without one)."""
    if metric.lo is None or metric.hi is None:
        return math.nan, math.nan
    return float(row[metric.lo]), float(row[metric.hi])


def _strip_text(x: float, metric: Metric) -> str:
    if not np.isfinite(x):
        return UNBOUNDED if math.isinf(x) else "n/a"
    if metric.unit == "%":
        return f"{100 * x:.0f}%"
    if metric.log:
        return f"{x:.2e}"
    return f"{x:.3g}"


def draw_strip(result: Any, model: str) -> go.Figure:
    """Each headline number of one model over the evaluation's B draws (method §12).

    One row per :data:`DRAW_STRIP_METRICS` entry: the per-draw values as dots (hover: the
    draw), the point value as a diamond and its 95% interval as a bar; the row title names the
    interval method. A number the gate withholds shows no dots and no value, only
    "withheld" and the reason; an unbounded (Fieller) side of an interval is drawn to the edge
    of the row and labelled.

    Args:
        result: an :class:`~sde_core.pipeline.evaluation.workspace_run.EvaluationResult` with
            its ``draws`` table (a partial result shows the draws finished so far).
        model: the model's name.

    Returns:
        A Figure with, per shown row, a trace ``"<label>: per-draw values"`` (B points) and a
        trace ``"<label>: point value and 95% interval"``.

    Raises:
        SettingsError: no such model, or the result has no per-draw table.
    """
    row = _model_row(result, model)
    draws = result.model_draws(model) if hasattr(result, "model_draws") else pd.DataFrame()
    if draws is None or draws.empty:
        raise SettingsError(
            f"the result has no per-draw values for {model!r}: evaluate it with this version "
            "(method §12 draws)"
        )
    reason = row.get("inconclusive_reason")
    reason = reason.strip() if isinstance(reason, str) else ""
    n = len(draws)
    planned = int(getattr(result.settings, "draws", n))
    metrics = DRAW_STRIP_METRICS
    titles = []
    for m in metrics:
        lo, hi = _interval(row, m)
        unbounded = " — interval unbounded" if (np.isinf(lo) or np.isinf(hi)) else ""
        titles.append(f"{m.long_label} · 95% interval: {INTERVAL_METHODS[m.interval]}{unbounded}")
    fig = make_subplots(rows=len(metrics), cols=1, subplot_titles=titles, vertical_spacing=0.09)
    for i, m in enumerate(metrics, start=1):
        value = float(row[m.key])
        if m.gate is not None and not np.isfinite(value) and reason:
            suffix = "" if i == 1 else str(i)
            fig.add_annotation(
                text=f"withheld: {reason}", xref=f"x{suffix} domain", yref=f"y{suffix} domain",
                x=0.0, y=0.5, showarrow=False, xanchor="left", font={"color": "#555555"},
            )  # fmt: skip
            fig.update_xaxes(visible=False, row=i, col=1)
            fig.update_yaxes(visible=False, row=i, col=1)
            continue
        per_draw = draws[m.key].astype(float).to_numpy()
        shown = np.isfinite(per_draw)
        labels = [f"draw {int(d) + 1}" for d in draws["draw"]]
        fig.add_trace(
            go.Scatter(
                x=per_draw[shown], y=np.full(int(shown.sum()), 0.3),
                mode="markers", name=f"{m.long_label}: per-draw values",
                marker={"color": COLORS["target"], "size": 10, "opacity": 0.8},
                text=[t for t, ok in zip(labels, shown, strict=True) if ok],
                hovertemplate="%{text}: %{x:.3g}<extra></extra>", showlegend=False,
            ),
            row=i, col=1,
        )  # fmt: skip
        finite = per_draw[shown]
        lo, hi = _interval(row, m)
        span = [x for x in (*finite, value, lo, hi) if np.isfinite(x)]
        if span:
            a, b = min(span), max(span)
            pad = (b - a) * 0.15 or (abs(a) * 0.1 or 0.05)
            edge_lo, edge_hi = a - pad, b + pad
        else:
            edge_lo, edge_hi = 0.0, 1.0
        if m.log:
            edge_lo, edge_hi = max(edge_lo, min(span) / 3 if span else 1e-6), edge_hi
        bar_lo = lo if np.isfinite(lo) else edge_lo
        bar_hi = hi if np.isfinite(hi) else edge_hi
        text = (
            f"{m.long_label} = {_strip_text(value, m)}, 95% interval "
            f"[{_strip_text(lo, m)}, {_strip_text(hi, m)}] over {n} draws"
        )
        fig.add_trace(
            go.Scatter(
                x=[bar_lo, value, bar_hi] if np.isfinite(value) else [],
                y=[-0.3, -0.3, -0.3] if np.isfinite(value) else [],
                mode="lines+markers", name=f"{m.long_label}: point value and 95% interval",
                line={"color": "#333333", "width": 3},
                marker={"symbol": ["line-ns", "diamond", "line-ns"], "size": [14, 13, 14],
                        "color": "#333333", "line": {"width": 2, "color": "#333333"}},
                hovertemplate=f"{text}<extra></extra>", showlegend=False,
            ),
            row=i, col=1,
        )  # fmt: skip
        axis: dict[str, Any] = {"zeroline": False}
        if m.log and span and min(span) > 0:
            axis.update(type="log", **AXIS_NUMBERS)  # p-values as 10⁻¹⁸, never 1f
        elif m.unit == "%":
            axis["tickformat"] = ".0%"
        fig.update_xaxes(row=i, col=1, **axis)
        fig.update_yaxes(visible=False, range=[-0.8, 0.8], row=i, col=1)
    of = "" if n >= planned else f" (of {planned} planned)"
    title = (
        f"{model}: B = {n} independent reference draws{of} — dots: each draw; "
        "◆ and bar: point value and 95% interval"
    )
    fig.update_layout(
        title={"text": title, "y": 0.99, "yanchor": "top", "font": {"size": 14}},
        template=_TEMPLATE, height=110 * len(metrics) + 110, margin={"t": 90, "b": 30},
        showlegend=False,
    )  # fmt: skip
    return fig


_RULE_LABELS = {SQRT_DIM: "√d", MEDIAN: "median"}
_SWEEP_AXES = {
    "sigma": "kernel bandwidth σ (activation units)",
    "layer": "layer",
    "subset_size": "subset size n (samples)",
    "checkpoint": "checkpoint (% of training)",
}


def sweep_figure(
    sweep: pd.DataFrame, metric: str = "otr", *, markers: Mapping[str, float] | None = None
) -> go.Figure:
    """A metric against the swept parameter, one line per model.

    Args:
        sweep: the table of :func:`sde_core.pipeline.sweeps.run_sweep` (one ``param`` only).
        metric: a key of :data:`METRICS` that is a column of ``sweep``.
        markers: ``{rule name: σ}`` vertical marker lines (e.g. from
            :func:`sde_core.pipeline.sweeps.sigma_markers`); only for σ sweeps.

    Returns:
        A Figure with one line per model (x = numeric σ for σ sweeps, the layer name, n, or the
        checkpoint in % of training; open markers where the references are invalid), one
        ``"<model>: withheld"`` trace labelled "withheld" above the plot, with a dotted
        vertical line at each x, where the gate withholds the number (method §12; never drawn
        at a value; the reason on hover) and one
        vertical dotted line trace per marker, named ``"<rule> rule: σ = …"`` (e.g.
        ``"√d rule: σ = 6.32"``). σ axes are logarithmic when the values span ≥ 10×.
    """
    spec = _metric(metric)
    params = sweep["param"].unique().tolist()
    if len(params) != 1 or params[0] not in _SWEEP_AXES:
        raise SettingsError(f"sweep_figure needs the rows of one sweep; got params {params}")
    param = params[0]
    if markers and param != "sigma":
        raise SettingsError("σ markers belong on a σ sweep")
    if param == "sigma":
        x_col = sweep["sigma"].astype(float)
    elif param == "checkpoint":
        x_col = sweep["value"].astype(float) * 100
    else:
        x_col = sweep["value"]
    fig = go.Figure()
    withheld: list[tuple[int, str, pd.Series, list[str]]] = []
    for i, (model, part) in enumerate(sweep.groupby("model", sort=False)):
        order = np.argsort(x_col[part.index].to_numpy()) if param != "layer" else None
        rows = part if order is None else part.iloc[order]
        x = x_col[rows.index]
        y = rows[metric].astype(float).to_numpy() * spec.scale
        reasons = (
            rows["inconclusive_reason"].tolist()
            if "inconclusive_reason" in rows
            else [None] * len(rows)
        )
        gated = [_withheld(v, why) for v, why in zip(y, reasons, strict=True)]
        if any(gated):
            why = [str(w) for w, g in zip(reasons, gated, strict=True) if g]
            withheld.append((i, str(model), x[gated], why))
        trace: dict[str, Any] = {}
        if spec.lo and spec.hi and spec.lo in rows:
            trace["error_y"] = {
                "type": "data",
                "symmetric": False,
                "array": rows[spec.hi].astype(float).to_numpy() * spec.scale - y,
                "arrayminus": y - rows[spec.lo].astype(float).to_numpy() * spec.scale,
            }
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines+markers",
                name=str(model),
                line={"color": MODEL_COLORS[i % len(MODEL_COLORS)]},
                marker={
                    "symbol": ["circle" if ok else "circle-open" for ok in _validity(rows, spec)],
                    "size": 9,
                },
                customdata=rows[["references_valid"]].to_numpy(),
                hovertemplate=f"{model}<br>{param} = %{{x}}<br>{spec.label} = %{{y:.3g}}"
                f"{spec.unit}<br>references valid: %{{customdata[0]}}<extra></extra>",
                **trace,
            )
        )
    all_y = sweep[metric].astype(float).to_numpy() * spec.scale
    finite = all_y[np.isfinite(all_y)]
    if spec.bounds is not None:
        y_span = spec.bounds
    elif finite.size:
        y_span = (float(finite.min()), float(finite.max()))
    else:
        y_span = (0.0, 1.0)
    # A withheld point is marked, never silently dropped — and never drawn at a value: a
    # dotted vertical line over the whole height at its x, and a "withheld" label above the
    # plot (on a hidden [0, 1] axis, so no y value is implied; the reason on hover).
    for i, model, x, why in withheld:
        colour = MODEL_COLORS[i % len(MODEL_COLORS)]
        for at in x:
            fig.add_shape(type="line", x0=at, x1=at, y0=0, y1=1, xref="x", yref="paper",
                          line={"color": colour, "dash": "dot", "width": 1.5})  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[1.0] * len(x),
                yaxis="y2",
                mode="markers+text",
                text=["withheld"] * len(x),
                textposition="top center",
                cliponaxis=False,
                name=f"{model}: withheld",
                marker={"symbol": "triangle-down-open", "size": 10, "color": colour},
                customdata=np.array(why, dtype=object)[:, None],
                hovertemplate=f"{model}<br>{param} = %{{x}}<br>withheld: %{{customdata[0]}}"
                "<extra></extra>",
            )
        )
    if withheld:
        fig.update_layout(
            yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True}
        )
    for (rule, sigma), dash in zip(
        (markers or {}).items(), ("dot", "dashdot", "dash"), strict=False
    ):
        label = _RULE_LABELS.get(rule, rule)
        fig.add_trace(
            go.Scatter(
                x=[float(sigma), float(sigma)],
                y=list(y_span),
                mode="lines",
                name=f"{label} rule: σ = {float(sigma):.3g}",
                line={"color": "#000000", "dash": dash, "width": 1.5},
                hovertemplate=f"{label} rule: σ = {float(sigma):.4g}<extra></extra>",
            )
        )
    if param == "sigma":
        xs = np.r_[x_col.to_numpy(dtype=float), [float(s) for s in (markers or {}).values()]]
        if xs.size and xs.min() > 0 and xs.max() / xs.min() >= 10:
            fig.update_xaxes(type="log", **AXIS_NUMBERS)
    elif param == "layer":
        fig.update_xaxes(type="category")
    return _layout(fig, f"{spec.label} vs {_SWEEP_AXES[param]}", _SWEEP_AXES[param], spec.axis)


def _kaleido_installed() -> bool:
    return importlib.util.find_spec("kaleido") is not None


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable (``$BROWSER_PATH`` first), or None."""
    configured = os.environ.get("BROWSER_PATH")
    if configured and os.path.isfile(configured):
        return configured
    for name in _CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def figure_to_image(fig: go.Figure, fmt: str = "png", *, scale: float = 2.0) -> bytes:
    """Render ``fig`` to PNG or SVG bytes on the server, offline.

    Uses kaleido (≥ 1.0) with a system Chromium (Debian: ``apt-get install chromium``); nothing is
    downloaded. Without them, use the chart's camera button, which exports PNG in the browser.

    Args:
        fig: the figure.
        fmt: ``"png"`` or ``"svg"``.
        scale: pixel-density factor of a PNG (2 = twice the layout size).

    Raises:
        ExportError: kaleido or Chromium is missing, or rendering failed.
    """
    if fmt not in _IMAGE_FORMATS:
        raise SettingsError(f"image format must be one of {_IMAGE_FORMATS}; got {fmt!r}")
    hint = "or use the chart's camera button, which downloads a PNG in the browser"
    if not _kaleido_installed():
        raise ExportError(
            f"{fmt.upper()} export on the server needs the kaleido package and Chromium "
            f"(pip install kaleido; apt-get install chromium); {hint}"
        )
    if find_chromium() is None:
        raise ExportError(
            f"{fmt.upper()} export on the server needs Chromium (apt-get install chromium, or "
            f"set BROWSER_PATH); {hint}"
        )
    try:
        return fig.to_image(format=fmt, scale=scale)
    except Exception as exc:  # kaleido/Chromium failures come as many types
        raise ExportError(f"{fmt.upper()} export failed ({exc}); {hint}") from exc


def plan_figure(points: pd.DataFrame, metric: str = "f1", *, by_layer: bool = False) -> go.Figure:
    """A metric of an experiment plan's ``points`` table against its sweep axis.

    One line per (model, layer), the mean over seeds (and forget ratios unless they are the
    axis) with the across-seed standard deviation as error bars. A σ sweep marks the σ of its
    ``sqrt_dim`` and ``median`` entries with vertical lines (one per distinct σ: the median rule
    differs by layer) and has a logarithmic axis when σ spans ≥ 10×.

    Args:
        points: the ``points`` table of a :func:`sde_core.pipeline.plans.run_plan` run (columns
            ``param``, ``value``, ``x``, ``model``, ``layer``, ``seed`` and the metric).
        metric: a key of :data:`METRICS` that is a column of ``points``.
        by_layer: plot a σ sweep against its layers instead (one line per model and σ entry),
            e.g. F1 against a denoiser's noise level (``denoised@σ_t``, method §14).
    """
    spec = _metric(metric)
    if points.empty or metric not in points:
        raise SettingsError(f"the plan table has no {metric!r} values yet")
    param = str(points["param"].iloc[0])
    if by_layer:
        if param != "sigma":
            raise SettingsError("only a σ sweep's points can be read against the layer")
        return _plan_by_layer(points, spec, metric)
    fig = go.Figure()
    groups = points.groupby(["model", "layer"], sort=False)
    for i, ((model, layer), part) in enumerate(groups):
        stats = part.groupby("x", sort=True).agg(
            value=("value", "first"), mean=(metric, "mean"), sd=(metric, "std"), n=(metric, "size")
        )
        y = stats["mean"].to_numpy(dtype=float) * spec.scale
        sd = np.nan_to_num(stats["sd"].to_numpy(dtype=float)) * spec.scale
        categorical = param in ("layer", "method", "model")
        fig.add_trace(
            go.Scatter(
                x=stats["value"] if categorical else stats.index,
                y=y,
                error_y={"type": "data", "array": sd},
                mode="lines+markers",
                name=f"{model} · {layer}",
                line={"color": MODEL_COLORS[i % len(MODEL_COLORS)]},
                customdata=stats[["n"]].to_numpy(),
                hovertemplate=f"{model} · {layer}<br>{param} = %{{x}}<br>{spec.label} = "
                f"%{{y:.3g}}{spec.unit} (mean of %{{customdata[0]}})<extra></extra>",
            )
        )
    if param == "sigma":
        _plan_sigma_markers(fig, points)
    return _layout(fig, f"{spec.label} against {param}", param, f"{spec.label}{spec.unit}")


def _plan_sigma_markers(fig: go.Figure, points: pd.DataFrame) -> None:
    """Vertical lines at the σ of a plan's ``sqrt_dim`` and ``median`` entries; log σ axis."""
    x = points["x"].astype(float)
    for (rule, label), dash in zip(_RULE_LABELS.items(), ("dot", "dashdot"), strict=False):
        rows = points[points["value"].astype(str) == rule]
        for layer, part in rows.groupby("layer", sort=False):
            sigma = float(part["x"].astype(float).mean())
            if not math.isfinite(sigma):
                continue
            name = f"{label} rule: σ = {sigma:.3g}"
            if rows["layer"].nunique() > 1 and rule != SQRT_DIM:
                name += f" ({layer})"
            fig.add_vline(x=sigma, line={"color": "#000000", "dash": dash, "width": 1})
            fig.add_trace(
                go.Scatter(x=[sigma], y=[None], mode="lines", name=name,
                           line={"color": "#000000", "dash": dash, "width": 1})
            )  # fmt: skip
            if rule == SQRT_DIM:
                break  # √d is one number per dimension: the layers of one plan share it
    finite = x[np.isfinite(x)]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() >= 10:
        fig.update_xaxes(type="log")


def _plan_by_layer(points: pd.DataFrame, spec: Any, metric: str) -> go.Figure:
    """A σ-sweep plan's metric against its layers: one line per (model, σ entry)."""
    fig = go.Figure()
    layers = list(dict.fromkeys(points["layer"].astype(str)))
    for i, ((model, value), part) in enumerate(points.groupby(["model", "value"], sort=False)):
        stats = part.groupby("layer", sort=False).agg(mean=(metric, "mean"), sd=(metric, "std"))
        stats = stats.reindex([layer for layer in layers if layer in stats.index])
        fig.add_trace(
            go.Scatter(
                x=list(stats.index),
                y=stats["mean"].to_numpy(dtype=float) * spec.scale,
                error_y={"type": "data",
                         "array": np.nan_to_num(stats["sd"].to_numpy(dtype=float)) * spec.scale},
                mode="lines+markers",
                name=f"{model} · σ = {value}",
                line={"color": MODEL_COLORS[i % len(MODEL_COLORS)]},
            )
        )  # fmt: skip
    fig.update_xaxes(type="category")
    return _layout(fig, f"{spec.label} against the layer", "layer", f"{spec.label}{spec.unit}")
