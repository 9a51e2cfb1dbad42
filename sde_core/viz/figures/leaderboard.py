"""The method leaderboard: every unlearned model's paired difference to the retrained model and
to the original, with its interval, in one chart sorted by closeness to retraining.

:func:`leaderboard_table` lists, per unlearned model, the paired differences ``model −
retrained`` and ``model − original`` of OTR and calibrated OTR (method §15:
:func:`~sde_core.pipeline.evaluation.comparisons.compare_models`, the paired Student-t interval
over the draws both models ran) and, where the family measures one, the behaviour gap's
difference to the retrained model as stored with the behaviour check (method §9; its interval
is the one the metric table names). Each row carries the words of the paired test: "within
the uncertainty of <reference>" only where the interval contains 0. Models are ordered by the
absolute paired difference of the sort rate to the retrained model, closest first; a model
whose difference is withheld follows the others and says why.

:func:`leaderboard_chart` draws the table as one forest plot (a panel per comparison, the
models on a shared axis in the table's order); a withheld difference is written as "withheld"
in its panel, never drawn as a point at 0. :func:`leaderboard_text` is the table for reading
(the HTML report).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sde_core.pipeline.evaluation.comparisons import compare_models, first_with_role
from sde_core.pipeline.evaluation.metric_table import (
    ATTACK_AUC_VS_RETRAINED,
    CALIBRATED_OTR,
    INTERVAL_METHODS,
    LOSS_GAP,
    LOSS_GAP_VS_RETRAINED,
    OTR,
    Metric,
)
from sde_core.viz.figures.style import _TEMPLATE, COLORS, model_styles, with_metric_label

__all__ = [
    "LEADERBOARD_RATES",
    "SORT_RATE",
    "leaderboard_chart",
    "leaderboard_table",
    "leaderboard_text",
]

#: The rates compared draw by draw (method §15), in the chart's order.
LEADERBOARD_RATES: tuple[Metric, ...] = (CALIBRATED_OTR, OTR)
#: The rate whose paired difference to the retrained model ranks the models by default.
SORT_RATE: Metric = CALIBRATED_OTR
#: The behaviour check's differences to the retrained model (method §9), shown when measured.
_BEHAVIOUR: tuple[Metric, ...] = (LOSS_GAP_VS_RETRAINED, ATTACK_AUC_VS_RETRAINED)
_COLUMNS = [
    "rank", "model", "rate", "vs", "reference", "difference", "low", "high", "unit",
    "interval", "draws", "paired test", "why withheld",
]  # fmt: skip


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _reading(lo: float, hi: float, value: float, reference: str) -> str:
    """The paired test's words: the interval contains 0, or on which side it lies."""
    if lo <= 0.0 <= hi:
        return f"within the uncertainty of {reference}"
    return f"{'above' if value > 0 else 'below'} {reference} (interval excludes 0)"


def _why(models: pd.DataFrame, reason: str, key: str, names: tuple[str, str]) -> str:
    """The comparison's reason in words, with the withheld model's own reason (its gate)."""
    text = with_metric_label(reason, key)
    if "inconclusive_reason" not in models:
        return text
    for name in names:
        found = models.loc[models["name"] == name, "inconclusive_reason"]
        why = found.iloc[0] if len(found) else None
        if reason.startswith(f"{name}'s") and isinstance(why, str) and why.strip():
            return f"{text}: {why.strip().rstrip('.')}"
    return text


def _behaviour_unit(models: pd.DataFrame) -> str:
    measures = [str(m) for m in models.get("behaviour_measure", []) if isinstance(m, str) and m]
    if measures:
        return measures[0]
    found = re.search(r"\(([^()]*)\)\s*$", LOSS_GAP.axis)  # a classifier's loss: its unit
    return found.group(1) if found else ""


def _rate_rows(models: pd.DataFrame, draws: pd.DataFrame, name: str) -> list[dict[str, Any]]:
    rows = []
    for role in ("retrained", "original"):
        reference = first_with_role(models, role)
        if reference is None:
            continue
        for rate in LEADERBOARD_RATES:
            c = compare_models(models, draws, name, reference, rate.key)
            p = c.paired
            row: dict[str, Any] = {
                "model": name, "rate": rate.label, "vs": role, "reference": reference,
                "unit": "points" if rate.unit == "%" else f"{rate.label} units",
                "interval": "paired t over the common draws",
            }  # fmt: skip
            if p is None:
                row["why withheld"] = _why(models, c.reason, rate.key, (name, reference))
            else:
                row.update({
                    "difference": p.value * rate.scale, "low": p.lo * rate.scale,
                    "high": p.hi * rate.scale, "draws": p.draws,
                    "paired test": _reading(p.lo, p.hi, p.value, role),
                })  # fmt: skip
            rows.append(row)
    return rows


def _behaviour_rows(models: pd.DataFrame, name: str) -> list[dict[str, Any]]:
    retrained = first_with_role(models, "retrained")
    if retrained is None:
        return []
    row = models[models["name"] == name].iloc[0]
    rows = []
    for metric in _BEHAVIOUR:
        column = models.get(metric.key)
        if column is None or not np.isfinite(column.astype(float)).any():
            continue  # the family does not measure it
        value = _number(row.get(metric.key))
        lo, hi = _number(row.get(metric.lo)), _number(row.get(metric.hi))
        out: dict[str, Any] = {
            "model": name, "rate": metric.label, "vs": "retrained", "reference": retrained,
            "unit": _behaviour_unit(models) if metric is LOSS_GAP_VS_RETRAINED else "AUC",
            "interval": INTERVAL_METHODS[metric.interval],
        }  # fmt: skip
        if math.isfinite(value) and math.isfinite(lo) and math.isfinite(hi):
            out.update({
                "difference": value, "low": lo, "high": hi,
                "paired test": _reading(lo, hi, value, "retrained"),
            })  # fmt: skip
        else:
            out["why withheld"] = f"{metric.label} is not measured for {name}"
        rows.append(out)
    return rows


def leaderboard_table(
    models: pd.DataFrame, draws: pd.DataFrame, sort_by: Metric = SORT_RATE
) -> pd.DataFrame:
    """Every unlearned model's differences to the retrained model and to the original.

    Args:
        models: an evaluation's ``models`` table. draws: its ``draws`` table.
        sort_by: the rate whose absolute paired difference to the retrained model orders the
            models (closest first; a tie is broken by the other rates of
            :data:`LEADERBOARD_RATES`, then by the table's order; a model whose difference is
            withheld comes after the others). Without a retrained model the table's order is
            kept.

    Returns:
        One row per model and comparison (:data:`_COLUMNS`): ``rank`` (1 = closest to
        retraining), ``rate`` (the metric's label), ``vs`` (the reference's role),
        ``difference``/``low``/``high`` in the rate's shown unit (percentage points for a rate
        shown in %), ``draws``, ``paired test`` (its words) and ``why withheld`` (NaN numbers
        and an empty test then). Empty when the evaluation has no unlearned model.
    """
    if models.empty or "role" not in models:
        return pd.DataFrame(columns=_COLUMNS)
    names = [str(n) for n in models.loc[models["role"] == "unlearned", "name"]]
    rows = {n: _rate_rows(models, draws, n) + _behaviour_rows(models, n) for n in names}

    def distance(name: str, rate: Metric) -> tuple[bool, float]:
        """(withheld, |difference to the retrained model|) of ``rate``."""
        for row in rows[name]:
            if row["rate"] == rate.label and row["vs"] == "retrained":
                d = round(abs(_number(row.get("difference"))), 9)  # ties despite float noise
                return (math.isnan(d), 0.0 if math.isnan(d) else d)
        return (True, 0.0)

    others = [sort_by, *(r for r in LEADERBOARD_RATES if r is not sort_by)]  # ties: next rate
    order = sorted(names, key=lambda n: [distance(n, rate) for rate in others])
    table = pd.DataFrame(
        [
            {"paired test": "", "why withheld": "", **r, "rank": i + 1}
            for i, n in enumerate(order)
            for r in rows[n]
        ],
        columns=_COLUMNS,
    )
    for column in ("difference", "low", "high"):
        table[column] = table[column].astype(float)
    return table


def _panels(table: pd.DataFrame) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for vs in ("retrained", "original"):
        for rate in table.loc[table["vs"] == vs, "rate"]:
            if (rate, vs) not in seen:
                seen.append((rate, vs))
    return seen


def leaderboard_chart(table: pd.DataFrame, models: pd.DataFrame) -> go.Figure:
    """The leaderboard as one forest plot: a panel per comparison (rate × reference), one row
    per unlearned model in the table's order (closest to retraining on top), the paired
    difference as a point with its interval and a line at 0; a withheld difference is written
    "withheld" at the panel's left edge (its reason in the table), never drawn as a value.

    Args:
        table: :func:`leaderboard_table`'s table. models: the ``models`` table (colours).
    """
    panels = _panels(table)
    order: Sequence[str] = list(dict.fromkeys(table.sort_values("rank", kind="stable")["model"]))
    fig = make_subplots(
        rows=1, cols=max(1, len(panels)), shared_yaxes=True, horizontal_spacing=0.03,
        subplot_titles=[f"{rate} − {vs}" for rate, vs in panels],
    )  # fmt: skip
    styles = model_styles(models)
    for col, (rate, vs) in enumerate(panels, start=1):
        part = table[(table["rate"] == rate) & (table["vs"] == vs)].set_index("model")
        shown = part[np.isfinite(part["difference"].to_numpy(dtype=float))]
        unit = str(part["unit"].iloc[0]) if len(part) else ""
        fig.add_trace(
            go.Scatter(
                x=shown["difference"], y=list(shown.index), mode="markers",
                marker={"size": 10, "color": [styles.get(m, (COLORS["target"], ""))[0]
                                              for m in shown.index]},
                error_x={"type": "data", "symmetric": False,
                         "array": shown["high"] - shown["difference"],
                         "arrayminus": shown["difference"] - shown["low"], "color": "#444444"},
                customdata=np.c_[shown["low"], shown["high"], shown["paired test"]],
                hovertemplate=f"%{{y}}: %{{x:+.3g}} {unit} [%{{customdata[0]:+.3g}}, "
                "%{customdata[1]:+.3g}]<br>%{customdata[2]}<extra></extra>",
                showlegend=False, name=f"{rate} − {vs}",
            ),
            row=1, col=col,
        )  # fmt: skip
        fig.add_vline(x=0, line={"color": "#888888", "dash": "dash"}, row=1, col=col)
        fig.update_xaxes(title_text=unit, zeroline=False, row=1, col=col)
        axis = "x" if col == 1 else f"x{col}"
        for model in part.index[~np.isfinite(part["difference"].to_numpy(dtype=float))]:
            fig.add_annotation(
                x=0.02, xref=f"{axis} domain", y=model, yref="y", text="withheld",
                showarrow=False, xanchor="left", font={"color": COLORS["inconclusive"]},
                hovertext=str(part.loc[model, "why withheld"]),
            )  # fmt: skip
    fig.update_yaxes(categoryorder="array", categoryarray=list(order), autorange="reversed")
    fig.update_layout(
        title={"text": "Method leaderboard: paired differences (95% intervals), closest to "
               "retraining first", "y": 0.98, "yanchor": "top"},
        template=_TEMPLATE, height=max(260, 90 + 45 * len(order)), margin={"t": 100},
    )  # fmt: skip
    return fig


def _shown(value: float, unit: str) -> str:
    text = f"{value:+.1f}" if unit == "points" else f"{value:+.3g}"
    return text.replace("-", "−")


def leaderboard_text(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`leaderboard_table` for reading (the report): one row per model and comparison,
    ``"−57.0 [−74.9, −39.1]"`` in the comparison's unit, "withheld" and why where withheld."""
    rows = []
    for r in table.to_dict("records"):
        finite = math.isfinite(_number(r["difference"]))
        rows.append({
            "rank": r["rank"], "model": r["model"], "difference": f"{r['rate']} − {r['vs']}",
            "value [95% CI]": (
                f"{_shown(r['difference'], r['unit'])} [{_shown(r['low'], r['unit'])}, "
                f"{_shown(r['high'], r['unit'])}]" if finite else "withheld"
            ),
            "unit": r["unit"], "interval": r["interval"],
            "paired test, or why withheld": r["paired test"] if finite else r["why withheld"],
        })  # fmt: skip
    return pd.DataFrame(rows)
