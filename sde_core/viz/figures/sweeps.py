"""A metric against a setting.

- :func:`sweep_figure` — a metric vs σ / layer / subset size / checkpoint (from
  :func:`sde_core.pipeline.sweeps.run_sweep`), with the σ rules marked;
- :func:`plan_figure` — a metric of an experiment plan's points against its sweep axis;
- :func:`shipped_sweep_answer` — a shipped sweep file's answer in words, and
  :func:`before_gate` its numbers before the gate (drawn only under that label);
- :func:`paired_sweep_answer` — which points beat the sweep's base point, from the paired
  differences on the same draws (never from two intervals' overlap).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sde_core.common.sigma import MEDIAN, SQRT_DIM
from sde_core.common.signed import signed
from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.metric_table import CALIBRATED_OTR, F1, OTR
from sde_core.pipeline.sweeps import interval_side, paired_columns
from sde_core.viz.figures.comparison import _validity, _withheld
from sde_core.viz.figures.style import MODEL_COLORS, _layout, _metric
from sde_core.viz.formatting import AXIS_NUMBERS

__all__ = [
    "PLAN_METRICS",
    "SWEEP_METRICS",
    "before_gate",
    "paired_sweep_answer",
    "plan_figure",
    "shipped_sweep_answer",
    "sweep_figure",
]

#: The metrics of a sweep's charts, side by side (key -> label).
SWEEP_METRICS: dict[str, str] = {m.key: m.label for m in (F1, OTR)}
#: The metrics a plan's chart offers (key -> label).
PLAN_METRICS: dict[str, str] = {m.key: m.label for m in (F1, OTR, CALIBRATED_OTR)}
_RULE_LABELS = {SQRT_DIM: "√d", MEDIAN: "median"}
_SWEEP_AXES = {
    "sigma": "kernel bandwidth σ (activation units)",
    "layer": "layer",
    "subset_size": "subset size n (samples)",
    "checkpoint": "checkpoint (% of training)",
}


def sweep_figure(
    sweep: pd.DataFrame, metric: str = OTR.key, *, markers: Mapping[str, float] | None = None
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


def plan_figure(points: pd.DataFrame, metric: str = F1.key, *, by_layer: bool = False) -> go.Figure:
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


def shipped_sweep_answer(sweep: pd.DataFrame) -> str:
    """A shipped sweep's answer in words: over how many points, and either the range of each
    headline metric per model or — when the gate withholds them — that no verdict is shown,
    with the gate's most common reason.

    Args:
        sweep: :func:`~sde_core.pipeline.sweeps.read_sweep`'s rows (one facet or all).
    """
    param = str(sweep["param"].iloc[0]) if len(sweep) else "?"
    axis = _SWEEP_AXES.get(param, param)
    points = len(sweep)
    parts: list[str] = []
    shown = [m for m in SWEEP_METRICS if m in sweep]
    values = sweep[shown].astype(float) if shown else pd.DataFrame()
    withheld = int(values.isna().all(axis=1).sum()) if shown else points
    if withheld == points:
        reasons = sweep.get("inconclusive_reason", pd.Series(dtype=str)).fillna("")
        first = reasons[reasons != ""].str.split(";").str[0]
        why = first.mode().iloc[0] if not first.empty else "the gate withholds them"
        models = ", ".join(map(str, dict.fromkeys(sweep["model"])))
        return (f"No verdict at any point: every headline number is withheld at all {points} "
                f"points of this sweep over {axis} ({models}) — {why}. The numbers before the "
                "gate are shown only under that label; they are not evidence.")  # fmt: skip
    for model, part in sweep.groupby("model", sort=False):
        ranges = []
        for key in shown:
            spec = _metric(key)
            v = part[key].astype(float).dropna() * spec.scale
            if not v.empty:
                ranges.append(f"{spec.label} {v.min():.3g}–{v.max():.3g}{spec.unit}")
        if ranges:
            parts.append(f"{model}: {', '.join(ranges)}")
    tail = f"; withheld at {withheld} of {points} points" if withheld else ""
    return f"Over {points} points of {axis}: " + "; ".join(parts) + tail + "."


def before_gate(sweep: pd.DataFrame) -> pd.DataFrame:
    """The sweep with each headline metric replaced by its value before the gate (its
    ``<metric>_raw`` column; no interval, no withheld reason): what the gate withheld, for the
    chart labelled "before the gate — not a verdict". Metrics without a raw column stay NaN."""
    out = sweep.copy()
    for key in SWEEP_METRICS:
        raw = f"{key}_raw"
        out[key] = out.get(raw, np.nan)
        for side in ("_lo", "_hi"):
            if f"{key}{side}" in out:
                out[f"{key}{side}"] = np.nan
    out["inconclusive_reason"] = ""
    return out


def _point_name(row: Mapping[Any, Any]) -> str:
    """A sweep point as the answer names it: its σ rule (``0.125*sqrt_dim`` as ``0.125·√d``)
    where the file has one, a checkpoint as its share of training, else its value."""
    rule = row.get("sigma_rule")
    value = rule if isinstance(rule, str) and rule else row.get("value")
    if row.get("param") == "checkpoint" and isinstance(value, int | float):
        return f"the checkpoint at {100 * float(value):.0f}% of training"
    if isinstance(value, int | float):
        return f"{float(value):.3g}"
    return str(value).replace(SQRT_DIM, "√d").replace("*", "·")


def paired_sweep_answer(sweep: pd.DataFrame, metric: str = F1.key) -> str | None:
    """Which points of a sweep beat its base point, in words, from the paired differences
    (:func:`~sde_core.pipeline.sweeps.run_sweep`'s ``paired_base``): per model, whether any
    point is decided once all the compared points are taken together (the interval that holds
    for all at once), then at how many points the difference's own 95% interval lies above 0,
    below 0 or holds 0, with the largest gain. None when the sweep was not paired.

    Args:
        sweep: a sweep's rows (one facet: one noise level or layer).
        metric: a paired metric (F1 by default, the paper's Fig. 6).
    """
    value, lo, hi, all_lo, all_hi = paired_columns(metric)
    if all_hi not in sweep or "paired_base" not in sweep or sweep.empty:
        return None
    label = _metric(metric).label
    bases = sweep["paired_base"]
    at_base = sweep[[_same(v, b) for v, b in zip(sweep["value"], bases, strict=True)]]
    base = str(bases.iloc[0]) if at_base.empty else _point_name(at_base.iloc[0].to_dict())
    parts = []
    for model, part in sweep.groupby("model", sort=False):
        rows = part[np.isfinite(part[value].astype(float))]
        if rows.empty:
            parts.append(f"{model}: no point compared (the gate withholds its {label})")
            continue
        records = rows.to_dict("records")
        together = [(r, interval_side(r[all_lo], r[all_hi])) for r in records]
        names = " and ".join(f"{_point_name(r)} {side}" for r, side in together if side)
        n = f"all {len(rows)} compared points taken together"
        head = (
            f"{model}: {names} {base} even with {n}"
            if names
            else f"{model}: no point differs from {base} with {n}"
        )
        sides = [interval_side(r[lo], r[hi]) for r in records]
        above = [r for r, side in zip(records, sides, strict=True) if side == "above"]
        below = sides.count("below")
        text = (
            f"{head}; point by point, above at {len(above)}, below at {below}, "
            f"undecided at {sides.count(None)}"
        )
        if above:
            best = max(above, key=lambda r: float(r[value]))
            text += (
                f" (the largest gain {signed(best[value])} [{signed(best[lo])}, "
                f"{signed(best[hi])}] at {_point_name(best)}, "
                f"[{signed(best[all_lo])}, {signed(best[all_hi])}] taken together)"
            )
        parts.append(text)
    return (
        f"Against {base}, on the same subsets and splits (the paired {label} difference, "
        "method §15): " + "; ".join(parts) + "."
    )


def _same(value: Any, base: Any) -> bool:
    """Whether a sweep file's value is its paired base (``16.0`` and ``16`` are: a CSV writes
    a number in a column of numbers and words as text)."""
    try:
        return math.isclose(float(value), float(base), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(value) == str(base)
