"""Several models' full distributions side by side: :func:`small_multiples` draws, per model,
H(S_IT), H(S_OOT) and the pooled target H (paper Fig. 2) as histograms on common bins or as
empirical CDFs, one panel per model on shared axes, so a reader compares where each model's
targets sit between its two references — and how far apart the references themselves are.

Shared axes are the honest default: a model whose references nearly coincide shows it as two
overlapping curves, not as a panel stretched to look separated. ``shared=False`` gives each
panel its own x range for reading a narrow model's shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sde_core.errors import SettingsError
from sde_core.stats.jsd import histogram_edges
from sde_core.viz.figures.style import _H_AXIS, _TEMPLATE, COLORS, _model_arrays, _model_row
from sde_core.viz.formatting import AXIS_NUMBERS
from sde_core.viz.verdicts.labels import verdict_label

__all__ = ["MAX_SMALL_MULTIPLES", "SMALL_MULTIPLE_VIEWS", "ecdf", "small_multiples"]

#: The two views: histograms on common bins, or empirical CDFs (no binning choice at all).
SMALL_MULTIPLE_VIEWS = ("histogram", "ecdf")
#: At most this many panels (three rows of three).
MAX_SMALL_MULTIPLES = 9
_SERIES = (
    ("it_h", "S_IT (retained data)", "it"),
    ("oot_h", "S_OOT (test data)", "oot"),
    ("targets_h", "targets (pooled)", "target"),
)


def ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of ``values`` as step points: sorted ``x`` and ``F(x) = i / n``
    (the share of values ≤ x; ties give one step of their combined height)."""
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if x.size == 0:
        return x, x
    last = np.r_[x[1:] != x[:-1], True]  # the last of each run of ties
    return x[last], (np.flatnonzero(last) + 1) / x.size


def _trace(
    view: str, values: np.ndarray, name: str, colour: str, edges: np.ndarray, first: bool
) -> go.Scatter | go.Histogram:
    common = {"name": name, "legendgroup": name, "showlegend": first}
    if view == "ecdf":
        x, y = ecdf(values)
        return go.Scatter(
            x=x, y=y, mode="lines", line={"color": colour, "shape": "hv", "width": 2},
            hovertemplate=f"H ≤ %{{x}}: %{{y:.1%}}<extra>{name}</extra>", **common,
        )  # fmt: skip
    size = float(edges[1] - edges[0])
    return go.Histogram(
        x=values, marker={"color": colour, "line": {"color": colour, "width": 0.5}},
        opacity=0.5, histnorm="probability",
        xbins={"start": float(edges[0]), "end": float(edges[-1]) + 1e-9 * size, "size": size},
        hovertemplate=f"H in %{{x}}: %{{y:.1%}} of splits<extra>{name}</extra>", **common,
    )  # fmt: skip


def small_multiples(
    result: Any,
    models: Sequence[str],
    *,
    view: str = "histogram",
    bins: int | None = None,
    shared: bool = True,
    columns: int = 3,
) -> go.Figure:
    """One panel per model with its S_IT, S_OOT and pooled target H.

    Args:
        result: an :class:`~sde_core.pipeline.evaluation.workspace_run.EvaluationResult`.
        models: 1 to :data:`MAX_SMALL_MULTIPLES` model names, in panel order.
        view: ``"histogram"`` (common bins over every panel, the evaluation's ``bins`` unless
            given) or ``"ecdf"``.
        bins: number of histogram bins.
        shared: one x axis (and one y axis) for every panel; False: each panel its own range
            (histogram bins then span that panel's values).
        columns: panels per row.

    Returns:
        A Figure with three traces per panel (S_IT, S_OOT, targets), each panel titled with the
        model's name, role and verdict label.
    """
    names = list(models)
    if not 1 <= len(names) <= MAX_SMALL_MULTIPLES:
        raise SettingsError(f"choose 1 to {MAX_SMALL_MULTIPLES} models; got {len(names)}")
    if view not in SMALL_MULTIPLE_VIEWS:
        raise SettingsError(f"view must be one of {SMALL_MULTIPLE_VIEWS}; got {view!r}")
    arrays = {
        m: {key: np.asarray(a[key], dtype=np.float64).ravel() for key, _, _ in _SERIES}
        for m, a in ((m, _model_arrays(result, m)) for m in names)
    }
    rows_ = {m: {str(k): v for k, v in _model_row(result, m).items()} for m in names}
    nb = int(bins if bins is not None else result.settings.bins)
    everything = [arrays[m][key] for m in names for key, _, _ in _SERIES]
    common_edges = histogram_edges(*everything, bins=nb)
    cols = max(1, min(int(columns), len(names)))
    rows = math.ceil(len(names) / cols)
    titles = [f"{m} ({rows_[m]['role']}): {verdict_label(rows_[m])}" for m in names]
    fig = make_subplots(
        rows=rows, cols=cols, subplot_titles=titles, shared_xaxes="all" if shared else False,
        shared_yaxes="all" if shared else False, horizontal_spacing=0.06,
        vertical_spacing=0.12 if rows > 1 else 0.0,
    )  # fmt: skip
    for i, m in enumerate(names):
        row, col = divmod(i, cols)
        edges = common_edges
        if not shared:
            edges = histogram_edges(*(arrays[m][key] for key, _, _ in _SERIES), bins=nb)
        for key, label, colour in _SERIES:
            trace = _trace(view, arrays[m][key], label, COLORS[colour], edges, first=i == 0)
            fig.add_trace(trace, row=row + 1, col=col + 1)
    y_title = "share of values ≤ H" if view == "ecdf" else "share of splits"
    fig.update_xaxes(**AXIS_NUMBERS)
    for col in range(1, cols + 1):
        fig.update_xaxes(title_text=_H_AXIS if col == (cols + 1) // 2 else "", row=rows, col=col)
    fig.update_yaxes(title_text=y_title, col=1)
    what = "empirical CDFs" if view == "ecdf" else "histograms"
    axes = "shared axes" if shared else "each panel on its own axes"
    fig.update_layout(
        title={"text": f"Split-half HSIC per model: S_IT, S_OOT and targets ({what}, {axes})",
               "y": 0.98, "yanchor": "top"},
        template=_TEMPLATE, barmode="overlay", height=300 * rows + 140,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.04, "x": 0},
        margin={"t": 130},
    )  # fmt: skip
    return fig
