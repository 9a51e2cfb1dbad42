"""No verdict when the original or the retrained model is at chance on D_r (issue 40).

``add-model`` refuses an original or retrained classifier that classifies a sample of D_r no
better than chance (:mod:`sde_core.services.preprocessing`): the workspace most likely feeds it
data unlike its training's (normalisation, image size, channel order). A workspace built
before that check, or a model added with ``--no-accuracy-check``, reaches the evaluation
anyway. Its behaviour stage measures the accuracy on all of D_r (``acc_r``), so the shared
result step (:func:`~sde_core.pipeline.evaluation.class_wise.judged_models`) asks
:func:`chance_reason` at every read: when the original's or the retrained model's ``acc_r`` is
not significantly above the commonest class's share of D_r (one-sided exact binomial test,
p ≥ :data:`CHANCE_ALPHA`), every model's verdict is withheld with the numbers — every model
sees the same preprocessing, so none of their numbers describes the models as trained.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sde_core.pipeline.evaluation.metric_table import METRICS

__all__ = [
    "CHANCE_ALPHA",
    "chance_level",
    "chance_reason",
    "withheld_at_chance",
]

#: Level of the test "better than chance" (the add-model check's).
CHANCE_ALPHA = 1e-3
_CHECKED_ROLES = ("original", "retrained")
#: The accuracy on D_r (%), read through the metric table (its label there is "Acc_r").
_ACC_R = next(m.key for m in METRICS.values() if m.label == "Acc_r")


def chance_level(train_labels: np.ndarray, forget: np.ndarray) -> tuple[float, int] | None:
    """``(share of D_r's commonest class, |D_r|)``, or None without class labels (not
    integers, or negative: a text dataset's ``-1``, a regressor's)."""
    labels = np.asarray(train_labels).reshape(-1)
    if not np.issubdtype(labels.dtype, np.integer) or labels.size == 0 or labels.min() < 0:
        return None
    retain = np.setdiff1d(np.arange(labels.size), np.asarray(forget, dtype=np.int64))
    if retain.size == 0:
        return None
    return float(np.bincount(labels[retain]).max() / retain.size), int(retain.size)


def chance_reason(models: pd.DataFrame, chance: float, n_retain: int) -> str:
    """Why no verdict is given when a reference model is at chance on D_r ("" otherwise).

    Args:
        models: the ``models`` table. chance: the commonest class's share of D_r.
        n_retain: |D_r| (the rows ``acc_r`` is measured on).
    """
    from scipy.stats import binomtest

    if models.empty or _ACC_R not in models or "role" not in models or n_retain < 1:
        return ""
    said = []
    for row in models.to_dict("records"):
        acc = row.get(_ACC_R)
        if row.get("role") not in _CHECKED_ROLES or not isinstance(acc, (int, float)):
            continue
        if math.isnan(float(acc)):
            continue
        k = min(n_retain, max(0, round(float(acc) / 100 * n_retain)))
        p = float(binomtest(k, n_retain, chance, alternative="greater").pvalue)
        if p >= CHANCE_ALPHA:
            said.append(
                f"the {row['role']} model {row['name']} classifies {float(acc):.1f}% of D_r "
                f"correctly, not significantly better than chance ({100 * chance:.1f}%, the "
                f"commonest class; binomial p = {p:.2g} ≥ {CHANCE_ALPHA:g})"
            )
    if not said:
        return ""
    return (
        f"{'; '.join(said)}: the workspace most likely does not preprocess the data as the "
        "training did (normalisation, image size, channel order; `workspace init "
        "--dataset-option`), so no model's numbers describe it as trained"
    )


def withheld_at_chance(models: pd.DataFrame, level: tuple[float, int] | None) -> pd.DataFrame:
    """``models`` with every verdict withheld by :func:`chance_reason` (itself when none is).

    Args:
        level: :func:`chance_level` of the workspace (None: no labels, nothing to test).
    """
    if level is None:
        return models
    reason = chance_reason(models, *level)
    if not reason or "inconclusive_reason" not in models:
        return models
    out = models.copy()
    out["inconclusive_reason"] = [
        f"{reason}; {old}" if old else reason for old in out["inconclusive_reason"].fillna("")
    ]
    if "evidence_conflict" in out:
        out["evidence_conflict"] = ""
    return out
