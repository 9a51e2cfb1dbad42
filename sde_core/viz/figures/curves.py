"""Checkpoint curves (:mod:`sde_core.pipeline.curves`): OTR, calibrated OTR and the behaviour
gap against the training epoch or unlearning step, one or several models on one chart, with the
retrained model's calibrated OTR ± W and the best checkpoint marked; and the curves' answer in
words (:func:`curves_answer`).

A withheld number is never drawn at a value (a "withheld" mark above the plot, as on the sweep
charts), a point not stored is left out and named in the answer, and a point whose behaviour
conflicts with its verdict is drawn as an ✕ with the conflict on hover: a conflict is never
drawn as a success, and never chosen as the best checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sde_core.pipeline.evaluation.metric_table import ACC_GAP, CALIBRATED_OTR, LOSS_GAP, OTR
from sde_core.viz.figures.style import _TEMPLATE, MODEL_COLORS

__all__ = ["behaviour_metric", "curves_answer", "curves_figure"]

_CONFLICT = "#D55E00"


def behaviour_metric(table: pd.DataFrame) -> str:
    """The behaviour gap the curves show: the accuracy gap when stored, else the loss gap."""
    if ACC_GAP.key in table and table[ACC_GAP.key].notna().any():
        return ACC_GAP.key
    return LOSS_GAP.key


def _x_title(table: pd.DataFrame) -> str:
    roles = set(table["role"])
    if roles == {"original"}:
        return "training epoch (0: initial weights)"
    if "original" not in roles:
        return "unlearning epoch (0: the model it unlearned from)"
    return "epoch: of training (original) or of unlearning (0: the start of each run)"


def curves_figure(
    table: pd.DataFrame,
    *,
    reference: tuple[str, float] | None = None,
    width: float = 0.1,
    best: Mapping[str, Any] | None = None,
) -> go.Figure:
    """The curves of :func:`~sde_core.pipeline.curves.curve_table`'s rows.

    Top panel: calibrated OTR (solid, with its 95% interval) and the paper's OTR (dotted) per
    model, the retrained model's calibrated OTR as a dashed line with its ±W band, and a star at
    each model's best checkpoint. Bottom panel: the behaviour gap (:func:`behaviour_metric`)
    with its interval; 0 is no gap.

    Args:
        reference: ``(retrained model, calibrated OTR)``. width: W of the rule.
        best: model → :class:`~sde_core.pipeline.curves.BestCheckpoint` (or None).
    """
    gap = behaviour_metric(table)
    gap_spec = ACC_GAP if gap == ACC_GAP.key else LOSS_GAP
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.62, 0.38],
                        vertical_spacing=0.08)  # fmt: skip
    stored = table[table["stored"]]
    for i, (model, part) in enumerate(stored.groupby("model", sort=False)):
        colour = MODEL_COLORS[i % len(MODEL_COLORS)]
        part = part.sort_values("step")
        conflict = part["evidence_conflict"].astype(bool).to_numpy()
        symbols = ["x-thin-open" if c else "circle" for c in conflict]
        hover = [f"conflicting evidence: {t[:160]}" if t else "behaviour consistent"
                 for t in part["evidence_conflict"]]  # fmt: skip
        for spec, dash, show in ((CALIBRATED_OTR, "solid", True), (OTR, "dot", False)):
            y = part[spec.key].to_numpy(dtype=float) * spec.scale
            trace: dict[str, Any] = {}
            if show:
                lo = part[f"{spec.key}_lo"].to_numpy(dtype=float) * spec.scale
                hi = part[f"{spec.key}_hi"].to_numpy(dtype=float) * spec.scale
                trace["error_y"] = {"type": "data", "symmetric": False, "array": hi - y,
                                    "arrayminus": y - lo}  # fmt: skip
            fig.add_trace(go.Scatter(
                x=part["step"], y=y, mode="lines+markers", name=f"{model}: {spec.label}",
                line={"color": colour, "dash": dash},
                marker={"symbol": symbols, "size": 10 if show else 6,
                        "line": {"color": _CONFLICT, "width": 2}},
                customdata=np.array(hover, dtype=object)[:, None],
                hovertemplate=f"{model}<br>epoch %{{x:g}}<br>{spec.label} = %{{y:.1f}}%"
                "<br>%{customdata[0]}<extra></extra>", **trace,
            ), row=1, col=1)  # fmt: skip
        withheld = part[part[CALIBRATED_OTR.key].isna()]
        if not withheld.empty:
            fig.add_trace(go.Scatter(
                x=withheld["step"], y=[100.0] * len(withheld), mode="markers+text",
                text=["withheld"] * len(withheld), textposition="top center",
                marker={"symbol": "triangle-down-open", "size": 10, "color": colour},
                name=f"{model}: withheld", customdata=withheld[["inconclusive_reason"]],
                hovertemplate=f"{model}<br>epoch %{{x:g}}<br>withheld: %{{customdata[0]}}"
                "<extra></extra>",
            ), row=1, col=1)  # fmt: skip
        g = part[gap].to_numpy(dtype=float) * gap_spec.scale
        glo = part[f"{gap}_lo"].to_numpy(dtype=float) * gap_spec.scale
        ghi = part[f"{gap}_hi"].to_numpy(dtype=float) * gap_spec.scale
        fig.add_trace(go.Scatter(
            x=part["step"], y=g, mode="lines+markers", name=f"{model}: {gap_spec.label}",
            line={"color": colour, "dash": "dashdot"}, marker={"symbol": "diamond", "size": 7},
            error_y={"type": "data", "symmetric": False, "array": ghi - g, "arrayminus": g - glo},
            hovertemplate=f"{model}<br>epoch %{{x:g}}<br>{gap_spec.label} = %{{y:.3g}}"
            "<extra></extra>",
        ), row=2, col=1)  # fmt: skip
        chosen = (best or {}).get(str(model))
        if chosen is not None:
            fig.add_trace(go.Scatter(
                x=[chosen.step], y=[chosen.calibrated_otr * 100], mode="markers+text",
                text=["best"], textposition="bottom center", name=f"{model}: best checkpoint",
                marker={"symbol": "star", "size": 18, "color": colour,
                        "line": {"color": "#000000", "width": 1}},
                hovertemplate=f"{model}: best checkpoint, epoch %{{x:g}}<extra></extra>",
            ), row=1, col=1)  # fmt: skip
    if reference is not None:
        name, value = reference
        steps = table["step"].astype(float)
        x0, x1 = (float(steps.min()), float(steps.max())) if len(steps) else (0.0, 1.0)
        band_lo, band_hi = max(0.0, value - width) * 100, min(1.0, value + width) * 100
        fig.add_trace(go.Scatter(
            x=[x0, x1, x1, x0, x0], y=[band_lo, band_lo, band_hi, band_hi, band_lo],
            fill="toself", mode="lines",
            line={"width": 0}, fillcolor="rgba(0,0,0,0.08)", hoverinfo="skip",
            name=f"{name} ± W (W = {width:g})",
        ), row=1, col=1)  # fmt: skip
        fig.add_trace(go.Scatter(
            x=[x0, x1], y=[value * 100] * 2, mode="lines",
            line={"color": "#000000", "dash": "dash", "width": 1.5},
            name=f"{name}: {CALIBRATED_OTR.label} {value * 100:.0f}%",
        ), row=1, col=1)  # fmt: skip
    fig.add_hline(y=0, line={"color": "#999999", "width": 1}, row=2, col=1)
    fig.update_yaxes(title_text="OTR (%)", range=[-5, 112], row=1, col=1)
    fig.update_yaxes(title_text=gap_spec.axis, row=2, col=1)
    fig.update_xaxes(title_text=_x_title(table), row=2, col=1)
    fig.update_layout(
        title={"text": "Checkpoint curves: calibrated OTR, OTR and the behaviour gap",
               "y": 0.98, "yanchor": "top"},
        template=_TEMPLATE, height=620, margin={"t": 140},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    )  # fmt: skip
    return fig


def curves_answer(curves: Any) -> list[str]:
    """The curves' answer in words, first sentence first: the best checkpoint of each model
    by the stated rule (or why there is none), what is missing, and the conflicts.

    Args:
        curves: a :class:`~sde_core.services.curves.CheckpointCurves`.
    """
    table = curves.table
    lines: list[str] = []
    for model, part in table.groupby("model", sort=False):
        chosen = curves.best.get(model)
        stored = part[part["stored"]]
        if stored.empty:
            lines.append(f"**{model}**: no point of its curve is stored at these settings.")
            continue
        if curves.reference is None:
            head = "no best checkpoint can be named: the retrained model's calibrated OTR is "
            head += "not stored (or is withheld) at these settings"
        elif chosen is None:
            head = "no checkpoint meets the rule"
        else:
            head = (f"the best checkpoint is epoch {chosen.step:g} (calibrated OTR "
                    f"{chosen.calibrated_otr * 100:.0f}% against the retrained model's "
                    f"{chosen.reference * 100:.0f}%)")  # fmt: skip
        conflicts = stored[stored["evidence_conflict"].astype(bool)]
        tail = ""
        if not conflicts.empty:
            steps = ", ".join(f"{s:g}" for s in conflicts["step"])
            tail = f"; conflicting evidence (behaviour disagrees with the verdict) at epoch {steps}"
        withheld = stored[stored[CALIBRATED_OTR.key].isna()]
        if not withheld.empty:
            tail += f"; withheld at epoch {', '.join(f'{s:g}' for s in withheld['step'])}"
        lines.append(f"**{model}**: {head}{tail}.")
    missing = table[~table["stored"]]
    if not missing.empty:
        pts = ", ".join(f"{m} @ {s:g}" for m, s in zip(missing["model"], missing["step"],
                                                         strict=True))  # fmt: skip
        secs = curves.seconds
        guess = f" (forecast ~{secs:.0f} s)" if secs is not None and not math.isnan(secs) else ""
        lines.append(f"Not stored at these settings: {pts}{guess}.")
    return lines
