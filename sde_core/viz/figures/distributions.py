"""Distributions of split-half HSIC values.

- :func:`hsic_histogram` — H(S_IT), H(S_OOT) and the targets' H on the common JSD bins (Fig. 2);
- :func:`target_overlay` — the pooled target H of 2–4 models on common bins;
- :func:`signal_grid` — 1-D inputs (mnist1d's signals) as small curves;
- :func:`panel_figure` — subset scores of the reference panels and the targets with verdicts;
- :func:`spread_figure` — subset score vs kernel spread (the spread control of method §9).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.metric_table import PANEL_P
from sde_core.stats.jsd import histogram_edges
from sde_core.viz.figures.style import (
    _H_AXIS,
    _TARGET_PATTERNS,
    _TEMPLATE,
    COLORS,
    ROLE_COLORS,
    VERDICT_COLORS,
    _layout,
    _model_arrays,
    _model_row,
    model_styles,
)
from sde_core.viz.formatting import AXIS_NUMBERS, column_formatter

__all__ = ["hsic_histogram", "panel_figure", "signal_grid", "spread_figure", "target_overlay"]


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
        f"{model}: calibrated evidence (panels {validity}, p = {row[PANEL_P.key]:.2g})",
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
