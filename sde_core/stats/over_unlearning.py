"""The model-level over-unlearning test (method §12): are a model's targets, as a whole,
significantly *less* dependent than unseen data? Fisher's combination over the draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from sde_core.errors import InputError
from sde_core.stats.checks import as_sample

__all__ = [
    "OverUnlearningTest",
    "over_unlearning_test",
]


@dataclass(frozen=True)
class OverUnlearningTest:
    """Model-level over-unlearning test (method §12).

    Attributes:
        p_value: Fisher's combination of the per-draw p-values (small: the targets are, as a
            whole, less dependent than unseen data).
        draw_p_values: per draw, ``(1 + #{r : s(OOT_r) ≤ median target score}) / (R + 1)``.
    """

    p_value: float
    draw_p_values: tuple[float, ...]


def over_unlearning_test(
    target_scores: Sequence[object], oot_panel_scores: Sequence[object]
) -> OverUnlearningTest:
    """Are the targets, as a whole, significantly *less* dependent than unseen data?

    For each independent draw b, the median score of its targets is ranked against its own OOT
    panel: ``p_b = (1 + #{r : s(OOT_r) ≤ median_b}) / (R + 1)``. When the targets are
    exchangeable with the panel the median of several targets concentrates near the panel's
    centre, so ``p_b`` is conservative; the draws are independent, so Fisher's method combines
    them: ``p = P(χ²_{2B} ≥ −2 Σ log p_b)``.

    Args:
        target_scores: per draw, the ``(t_b,)`` scores of its targets.
        oot_panel_scores: per draw, the ``(R,)`` scores of its OOT panel.
    """
    if len(target_scores) == 0 or len(target_scores) != len(oot_panel_scores):
        raise InputError("give the targets' and the OOT panel's scores of every draw (≥ 1)")
    draw_p = []
    for b, (t, oot) in enumerate(zip(target_scores, oot_panel_scores, strict=True)):
        med = float(np.median(as_sample(t, f"target scores of draw {b}")))
        panel = as_sample(oot, f"OOT panel scores of draw {b}")
        draw_p.append((1 + int(np.sum(panel <= med))) / (panel.size + 1))
    statistic = -2.0 * float(np.sum(np.log(draw_p)))
    p = float(stats.chi2.sf(statistic, 2 * len(draw_p)))
    return OverUnlearningTest(p_value=p, draw_p_values=tuple(draw_p))
