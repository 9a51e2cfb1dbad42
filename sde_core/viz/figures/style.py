"""The charts' shared look: the Okabe–Ito palette (the same colour means the same thing in every
chart), line dashes and fill patterns, the layout, the metric labels (read from the metric table)
and :data:`PLOTLY_CONFIG` (client-side PNG download from the chart's camera button).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.metric_table import METRICS, Metric

__all__ = [
    "COLORS",
    "MODEL_COLORS",
    "PLOTLY_CONFIG",
    "ROLE_COLORS",
    "VERDICT_COLORS",
    "metric_label",
    "model_styles",
    "plotly_config",
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
#: Formats the server renders (kaleido): the camera button's and PDF.
_SERVER_FORMATS = ("png", "svg", "pdf")


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
