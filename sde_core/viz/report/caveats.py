"""Method §9's caveats written for a non-expert (:data:`CAVEATS`), and the same caveats quoting
the numbers measured on an evaluation (:func:`measured_caveats`).
"""

from __future__ import annotations

import math
from typing import Any

from sde_core.viz.formatting import (
    format_number,
    format_percent,
)

__all__ = ["CAVEATS", "measured_caveats"]

#: method §9's caveats for a non-expert, as ``{title: explanation}``.
CAVEATS: dict[str, str] = {
    "The paper's reference check is over-confident": (
        "The paper's check compares 200 random splits of ONE subset of training data with 200 "
        "splits of ONE subset of unseen data, as if the splits were independent. They are not. "
        "When we drew both subsets from the same unseen data, where no difference exists, the "
        "check still declared a difference in 20–100% of pairs. 'References valid' is therefore "
        "weaker evidence than its p-value suggests. The calibrated test compares whole subsets "
        "(20 per side) and keeps its false alarms near its nominal rate: see the null-calibration "
        "paragraph for the rates measured on your models."
    ),
    "The score mostly measures spread": (
        "The split-half HSIC of a subset follows how spread out the model's outputs on that "
        "subset are (correlation ≥ 0.99 with a quantity that involves no pairing at all). "
        "Training data often get more confident, more spread-out outputs than unseen data, and "
        "that is what the test detects. The 'score vs spread' chart shows this for your model: "
        "when all points lie on one line, a verdict means 'spread like training data' — a useful "
        "trace of training, but not proof of a deeper statistical dependence."
    ),
    "Where the effect shows up": (
        "The effect is strong on the softmax outputs of models that overfit their training data "
        "(much higher accuracy on training than on test data). It can be weak or absent on "
        "well-regularised models and on inner layers such as the penultimate layer. There, "
        "invalid references are an honest 'cannot tell', not evidence of forgetting."
    ),
    "Check the negative control": (
        "Evaluate a randomly initialised copy of the architecture too (role 'random'). It has "
        "seen no data, so its references should be invalid and its verdicts meaningless. If it "
        "does look like it 'remembers', the differences come from the data themselves (for "
        "example, the forget set differs from the test data), not from training."
    ),
    "No trace found is not a guarantee": (
        "'Consistent with forgetting' means this test found no trace of the forget set; other "
        "attacks might. The goal is to look like the retrained model (retrained without the "
        "forget set), whose out-of-training rate need not be 100%."
    ),
}


def measured_caveats(result: Any) -> dict[str, str]:
    """:data:`CAVEATS` with the numbers measured on this evaluation (method §12's caveats:
    the split-level test's false-alarm rate and the score–spread correlation), so a report
    quotes the open workspace, not constants. Falls back to :data:`CAVEATS` for a result
    without the measurements."""
    try:
        c = result.caveats()
    except (KeyError, AttributeError):
        return dict(CAVEATS)
    out = dict(CAVEATS)

    def span(lo: float, hi: float) -> str:
        if math.isnan(lo):
            return "n/a (no null check ran)"
        a, b = format_percent(lo), format_percent(hi)
        return a if a == b else f"{a}–{b}"

    out["The paper's reference check is over-confident"] = (
        f"The paper's check compares {c.splits} random splits of ONE subset of training data "
        f"with {c.splits} splits of ONE subset of unseen data, as if the splits were "
        "independent. They are not. On this evaluation, pairs of disjoint subsets of the same "
        f"unseen data ({c.null_pairs} pairs per model), where no difference exists, made it "
        f"declare a difference in {span(c.split_fpr_min, c.split_fpr_max)} of pairs (nominal "
        f"level {format_percent(c.alpha)}). The calibrated test, which ranks whole subsets "
        f"against panels of reference subsets, declared one in "
        f"{span(c.calibrated_fpr_min, c.calibrated_fpr_max)} (nominal "
        f"{format_percent(c.alpha_calibrated)}). {c.references_valid} of {c.models} models "
        f"pass the paper's test and {c.panel_valid} the calibrated gate."
    )
    corr = (
        "n/a"
        if math.isnan(c.spread_corr_median)
        else f"{format_number(c.spread_corr_median, digits=3)} (median over models; range "
        f"{format_number(c.spread_corr_min, digits=3)}–"
        f"{format_number(c.spread_corr_max, digits=3)}; within a group of subsets "
        f"{format_number(c.spread_corr_within_min, digits=2)}–"
        f"{format_number(c.spread_corr_within_max, digits=2)})"
    )
    out["The score mostly measures spread"] = (
        "The split-half HSIC of a subset follows how spread out the model's outputs on that "
        f"subset are: on this evaluation the correlation of score and spread is {corr}. "
        "Training data often get more confident, more spread-out outputs than unseen data, and "
        "that is what the test detects. The 'score vs spread' chart shows this for your model: "
        "when all points lie on one line, a verdict means 'spread like training data' — a useful "
        "trace of training, but not proof of a deeper statistical dependence."
    )
    return out
