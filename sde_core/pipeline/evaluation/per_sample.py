"""Which forget samples are still remembered (method §18): :func:`sample_evidence` turns one
model's scored target subsets into a per-sample estimate with its interval.

Each target's position is its subset score placed on its own draw's panels,
``(score − median OOT panel) / (median IT panel − median OOT panel)``: 0 where unseen subsets
of that draw sit, 1 where training subsets sit. :func:`~sde_core.stats.per_sample.
per_sample_evidence` attributes those positions to the subsets' members. The target subsets
are the evaluation's own (:func:`~sde_core.pipeline.evaluation.plan.draw_subsets`, re-drawn
from the settings' seed), so nothing is computed beyond what the result holds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sde_core.errors import SettingsError
from sde_core.stats.per_sample import per_sample_evidence

__all__ = ["SAMPLE_COLUMNS", "sample_evidence", "target_positions"]

#: The columns of :func:`sample_evidence`.
SAMPLE_COLUMNS = ("row", "evidence", "low", "high", "subsets_in", "rank")
_TARGET, _IT_PANEL, _OOT_PANEL = "target", "it_panel", "oot_panel"


def target_positions(result: Any, model: str) -> pd.DataFrame:
    """Each scored target of ``model`` with its position on its draw's panels.

    Returns:
        Columns ``draw, index, position`` (``index``: the row of the evaluation's targets);
        draws whose panels have no gap between their medians are left out (no scale).

    Raises:
        SettingsError: the result has no targets for ``model``.
    """
    sub = result.subsets[result.subsets["model"] == model]
    targets = sub[sub["kind"] == _TARGET]
    if targets.empty:
        names = sorted(set(result.subsets["model"]))
        raise SettingsError(f"the result has no scored targets for {model!r}; models: {names}")
    medians = sub[sub["kind"].isin((_IT_PANEL, _OOT_PANEL))].groupby(["draw", "kind"])["score"]
    panel = medians.median().unstack("kind")
    gap = panel[_IT_PANEL] - panel[_OOT_PANEL]
    scale = gap.where(gap.abs() > 1e-12 * panel.abs().max(axis=1).clip(lower=1e-300))
    merged = targets.join(panel[_OOT_PANEL].rename("oot"), on="draw").join(
        scale.rename("gap"), on="draw"
    )
    merged = merged[np.isfinite(merged["gap"].astype(float))]
    position = (merged["score"].astype(float) - merged["oot"]) / merged["gap"]
    return pd.DataFrame(
        {"draw": merged["draw"].astype(int), "index": merged["index"].astype(int),
         "position": position.astype(float)}
    ).reset_index(drop=True)  # fmt: skip


def sample_evidence(
    result: Any, model: str, targets: np.ndarray, forget: np.ndarray
) -> pd.DataFrame:
    """Every forget sample's attributed position under ``model``, most remembered first.

    Args:
        result: the evaluation. model: a model it holds.
        targets: ``(T, n)`` the evaluation's target subsets (rows of D_tr), e.g.
            :func:`sde_core.services.evaluation.target_subsets`.
        forget: D_f's rows of D_tr.

    Returns:
        :data:`SAMPLE_COLUMNS`: ``row`` (of D_tr), ``evidence`` (1 ≈ like training data, 0 ≈
        like unseen data), its 95% interval ``low``/``high``, ``subsets_in`` and ``rank``
        (1 = highest evidence).

    Raises:
        SettingsError: no targets, or fewer than two with a scale.
    """
    positions = target_positions(result, model)
    if len(positions) < 2:
        raise SettingsError(
            f"{model}: fewer than two targets lie on a scale (its panels do not separate), so "
            "no sample can be placed between training and unseen data"
        )
    all_targets = np.asarray(targets, dtype=np.int64)
    if positions["index"].max() >= len(all_targets):
        raise SettingsError(
            f"the result scored target {int(positions['index'].max())} but only "
            f"{len(all_targets)} target subsets were given: pass the evaluation's own targets"
        )
    members = all_targets[positions["index"].to_numpy()]
    found = per_sample_evidence(
        members, positions["position"].to_numpy(), forget, groups=positions["draw"].to_numpy()
    )
    table = pd.DataFrame(
        {"row": found.rows, "evidence": found.estimate, "low": found.low, "high": found.high,
         "subsets_in": found.subsets_in}
    )  # fmt: skip
    table = table.sort_values("evidence", ascending=False, na_position="last", kind="stable")
    table["rank"] = np.arange(1, len(table) + 1)
    return table.reset_index(drop=True)[list(SAMPLE_COLUMNS)]
