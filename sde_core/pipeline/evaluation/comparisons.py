"""Paired comparisons between the models of one evaluation (method §15).

Every model of an evaluation is judged on the same plan (:func:`~.plan.draw_subsets` depends
on the pools, the settings and the seed, never on the model): the same references, panels,
targets, controls and split seeds in draw b. A rate's per-draw differences between two models
are therefore independent replicates of the difference, and
:func:`~sde_core.stats.precision.paired_difference` gives its interval; the variance the two
models share (mostly the reference draw's) cancels. Models with a precision design may have run
different numbers of draws: they are compared on the draws both ran.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sde_core.pipeline.evaluation.metric_table import CALIBRATED_OTR, F1, OTR, OVER_UNLEARNED_RATE
from sde_core.pipeline.evaluation.summary import json_number
from sde_core.stats.precision import Difference, paired_difference, unpaired_difference

__all__ = [
    "COMPARED_METRICS",
    "Comparison",
    "compare_models",
    "first_with_role",
    "reference_comparisons",
]


def first_with_role(models: pd.DataFrame, role: str) -> str | None:
    """The name of the first model with ``role`` in a result's ``models`` table (None when there
    is none, or the table has no roles): the one lookup of the table's retrained or original
    model (:meth:`~sde_core.pipeline.workspace.Workspace.first` is the workspace's)."""
    if "role" not in models:
        return None
    names = models.loc[models["role"] == role, "name"].tolist()
    return str(names[0]) if names else None


#: Rates compared between models: ``models``/``draws`` column -> the ``draws`` column of its
#: trials (targets for the target rates, controls for F1).
COMPARED_METRICS: dict[str, str] = {
    OTR.key: "targets",
    CALIBRATED_OTR.key: "targets",
    OVER_UNLEARNED_RATE.key: "targets",
    F1.key: "controls",
}


@dataclass(frozen=True)
class Comparison:
    """One paired difference ``model − reference`` of one rate.

    Attributes:
        model, reference, metric: what is compared. paired: the paired difference and its
            interval (None when withheld: either model's rate is withheld by its gate or fewer
            than two common draws have it). unpaired: the same difference as two independent
            samples (for the width pairing saves). reason: why it is withheld ("" when not).
    """

    model: str
    reference: str
    metric: str
    paired: Difference | None
    unpaired: Difference | None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """``{model, reference, metric, difference, ci, unpaired_ci, draws, reason}``."""
        p, u = self.paired, self.unpaired
        return {
            "model": self.model,
            "reference": self.reference,
            "metric": self.metric,
            "difference": None if p is None else json_number(p.value),
            "ci": None if p is None else [json_number(p.lo), json_number(p.hi)],
            "unpaired_ci": None if u is None else [json_number(u.lo), json_number(u.hi)],
            "draws": None if p is None else p.draws,
            "reason": self.reason or None,
        }


def _withheld(models: pd.DataFrame, name: str, metric: str) -> bool:
    row = models[models["name"] == name]
    return row.empty or not math.isfinite(float(row.iloc[0][metric]))


def compare_models(
    models: pd.DataFrame,
    draws: pd.DataFrame,
    model: str,
    reference: str,
    metric: str,
    confidence: float = 0.95,
) -> Comparison:
    """The paired difference ``model − reference`` of ``metric`` over their common draws.

    Args:
        models: the evaluation's ``models`` table (for the gate: a withheld rate is not
            compared). draws: its ``draws`` table (per-draw rates, targets, controls).
        model, reference: model names. metric: a key of :data:`COMPARED_METRICS`.
        confidence: the intervals' nominal coverage (higher for one of several comparisons
            judged together, e.g. Bonferroni's ``1 − 0.05/k``).
    """
    for name in (model, reference):
        if _withheld(models, name, metric):
            return Comparison(
                model, reference, metric, None, None, f"{name}'s {metric} is withheld"
            )
    a = draws[draws["model"] == model].set_index("draw")
    b = draws[draws["model"] == reference].set_index("draw")
    common = sorted(set(a.index) & set(b.index))
    x = a.loc[common, metric].to_numpy(dtype=np.float64)
    y = b.loc[common, metric].to_numpy(dtype=np.float64)
    trials = a.loc[common, COMPARED_METRICS[metric]].to_numpy(dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y) & (trials >= 1)
    if keep.sum() < 2:
        reason = f"fewer than two common draws with {metric}"
        return Comparison(model, reference, metric, None, None, reason)
    return Comparison(
        model,
        reference,
        metric,
        paired_difference(x[keep], y[keep], trials[keep], confidence),
        unpaired_difference(x[keep], y[keep], trials[keep], confidence),
    )


def reference_comparisons(models: pd.DataFrame, draws: pd.DataFrame) -> list[Comparison]:
    """Each model against the retrained model (when there is one) and against the original,
    and every two unlearned models against each other (the earlier one in the table first),
    for every rate of :data:`COMPARED_METRICS` (the JSON's ``comparisons``)."""
    if models.empty or draws.empty:
        return []
    pairs: list[tuple[str, str]] = []
    for role in ("retrained", "original"):
        refs = models.loc[models["role"] == role, "name"].tolist()
        if refs:
            pairs += [(name, refs[0]) for name in models["name"] if name != refs[0]]
    unlearned = models.loc[models["role"] == "unlearned", "name"].tolist()
    pairs += [(a, b) for i, a in enumerate(unlearned) for b in unlearned[i + 1 :]]
    return [compare_models(models, draws, a, b, m) for a, b in pairs for m in COMPARED_METRICS]
