"""Models side by side.

- :func:`comparison_bars` — one metric per model with error bars and the Retrain reference line;
- :func:`draw_strip` — each headline number's per-draw values as dots, with the point value and
  its 95% interval (method §12).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.metric_table import (
    BAR_METRICS,
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    F1,
    INTERVAL_METHODS,
    METRICS,
    OTR,
    REFERENCE_P,
    Metric,
)
from sde_core.viz.figures.style import (
    _TEMPLATE,
    COLORS,
    ROLE_COLORS,
    _layout,
    _metric,
    _model_row,
    model_styles,
)
from sde_core.viz.formatting import AXIS_NUMBERS, UNBOUNDED

__all__ = ["BAR_CHOICES", "DRAW_STRIP_METRICS", "comparison_bars", "draw_strip"]


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
    models: pd.DataFrame, metric: str = OTR.key, *, reference_role: str = "retrained"
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
DRAW_STRIP_METRICS: tuple[Metric, ...] = (OTR, CALIBRATED_OTR, F1, DEPENDENCE_SCORE, REFERENCE_P)


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
