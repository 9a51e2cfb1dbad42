"""The caveats of an evaluation as measured numbers (method §9, §12), not as constants.

The report and the README quote how far the paper's split-level test is from its nominal level
and how closely the score follows the spread *on the evaluated workspace*; these numbers differ
between datasets (e.g. the score–spread correlation is ≥ 0.99 on the mnist1d demo and lower on
Fashion-MNIST), so they are measured by every evaluation's null check and spread control and
summarised here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from sde_core.pipeline.evaluation.metric_table import (
    NULL_CALIBRATED_FPR,
    SCORE_SPREAD_CORR_WITHIN,
    hi_column,
    lo_column,
)

__all__ = ["Caveats", "caveat_numbers"]


@dataclass(frozen=True)
class Caveats:
    """Measured caveats of one evaluation (pooled over its models).

    Attributes:
        layer, subset_size, draws, splits, models: what was evaluated (draws = per model).
        alpha, alpha_calibrated: the nominal levels.
        null_pairs: disjoint null pairs per model (0: no null check).
        split_fpr_mean, split_fpr_min, split_fpr_max: false-positive rate of the paper's
            split-level U-test on the null pairs (mean and range over models).
        calibrated_fpr_mean, calibrated_fpr_min, calibrated_fpr_max: rate of false
            "in-training" calibrated verdicts on the null subsets.
        spread_corr_median, spread_corr_min, spread_corr_max: pooled score–spread correlation
            per model (median and range over models).
        spread_corr_within_min, spread_corr_within_max: range of the within-group correlations
            (IT panel, OOT panel, targets of one draw) over all models.
        references_valid, panel_valid: how many models pass the paper's test and the gate.
    """

    layer: str
    subset_size: int
    draws: int
    splits: int
    models: int
    alpha: float
    alpha_calibrated: float
    null_pairs: int
    split_fpr_mean: float
    split_fpr_min: float
    split_fpr_max: float
    calibrated_fpr_mean: float
    calibrated_fpr_min: float
    calibrated_fpr_max: float
    spread_corr_median: float
    spread_corr_min: float
    spread_corr_max: float
    spread_corr_within_min: float
    spread_corr_within_max: float
    references_valid: int
    panel_valid: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (NaN as None)."""
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                for k, v in asdict(self).items()}  # fmt: skip


def _stats(values: pd.Series, how: str) -> tuple[float, float, float]:
    x = pd.to_numeric(values, errors="coerce").astype(float)
    x = x[np.isfinite(x)]
    if x.empty:
        return float("nan"), float("nan"), float("nan")
    centre = float(x.mean()) if how == "mean" else float(x.median())
    return centre, float(x.min()), float(x.max())


def caveat_numbers(models: pd.DataFrame, settings: Mapping[str, Any] | Any) -> Caveats:
    """The measured caveats of an evaluation's ``models`` table.

    Args:
        models: the ``models`` table (columns of :class:`~.summary.ModelSummary`).
        settings: the :class:`~sde_core.pipeline.settings.EvalSettings` (or its dict).
    """
    s = settings if isinstance(settings, Mapping) else asdict(settings)
    split = _stats(models["null_split_fpr"], "mean")
    cal = _stats(models[NULL_CALIBRATED_FPR.key], "mean")
    corr = _stats(models["score_spread_corr"], "median")
    within_lo = _stats(models[lo_column(SCORE_SPREAD_CORR_WITHIN.key)], "median")[1]
    within_hi = _stats(models[hi_column(SCORE_SPREAD_CORR_WITHIN.key)], "median")[2]
    pairs = pd.to_numeric(models["null_pairs"], errors="coerce")
    return Caveats(
        layer=str(s["layer"]),
        subset_size=int(s["subset_size"]),
        draws=int(pd.to_numeric(models["draws"]).max()) if len(models) else int(s["draws"]),
        splits=int(s["splits"]),
        models=len(models),
        alpha=float(s["alpha"]),
        alpha_calibrated=float(s["alpha_calibrated"]),
        null_pairs=int(pairs.max()) if len(pairs) and np.isfinite(pairs.max()) else 0,
        split_fpr_mean=split[0],
        split_fpr_min=split[1],
        split_fpr_max=split[2],
        calibrated_fpr_mean=cal[0],
        calibrated_fpr_min=cal[1],
        calibrated_fpr_max=cal[2],
        spread_corr_median=corr[0],
        spread_corr_min=corr[1],
        spread_corr_max=corr[2],
        spread_corr_within_min=within_lo,
        spread_corr_within_max=within_hi,
        references_valid=int(models["references_valid"].astype(bool).sum()),
        panel_valid=int(models["panel_valid"].astype(bool).sum()),
    )
