"""The meta-evaluation's summary numbers (method §17): the verdict's ordinal, the null
check's power at both designs, the default-design pass's draws, precision states and
agreement, the confusion of truth and verdict, the withheld verdicts by reason, and the scores
read at the plan's other layers. ``python -m sde_core meta-eval`` writes them to
``meta_eval_<plan>.json``; REPRODUCTION.md quotes them from there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "LAYER_LABELS",
    "VERDICT_SCORE",
    "as_number",
    "confusion",
    "default_design",
    "layer_scores",
    "null_power",
    "withheld_counts",
]

#: The verdict's ordinal (higher: more forgotten) for the meta-evaluation.
VERDICT_SCORE = {
    "consistent with forgetting": 1.0,
    "over-unlearned": 0.75,
    "mixed": 0.5,
    "inconclusive": 0.5,
    "conflicting evidence": 0.25,
    "not forgotten": 0.0,
}


def null_power(settings: Any, default_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The null check's power against a false-call rate of 2α: at the plan's fixed design
    (binomial, Clopper–Pearson as ``stats/null_power.py``, and simulated with the evaluation's
    Korn–Graubard interval over its B draws, ``meta_eval/null_sizing.py``), and for each
    checkpoint's default-design run (its pairs and draws; the panel effect of the shipped
    demos, ``SHIPPED_PANEL_ICC``): the median, least and greatest."""
    from sde_core.pipeline.meta_eval.null_sizing import (
        SHIPPED_PANEL_ICC,
        gate_power,
        pairs_for_gate_power,
    )
    from sde_core.stats.null_power import null_check_power, subsets_for_power

    a, level, draws = settings.alpha, settings.alpha_calibrated, settings.draws
    out: dict[str, Any] = {"level": level, "true_rate": 2 * level, "draws": draws}
    pairs = settings.null_pairs
    gate = null_check_power(2 * pairs, level, 2 * level, 1 - a)
    shown = null_check_power(2 * pairs, level, 2 * level, 0.975)
    simulated = gate_power(pairs, draws, level, 2 * level, a, reps=2000)
    out["fixed_design"] = {
        "pairs": pairs,
        "subsets": 2 * pairs,
        "gate_power": gate.power,
        "interval_power": shown.power,
        "gate_power_kg": simulated.gate,
        "interval_power_kg": simulated.interval,
    }
    designs = sorted(
        {(int(r["null_pairs"]), int(r["draws"])) for r in default_rows if r.get("null_pairs")}
    )
    found = {
        d: gate_power(*d, level, 2 * level, a, reps=2000, icc=SHIPPED_PANEL_ICC) for d in designs
    }
    runs = [
        found[(int(r["null_pairs"]), int(r["draws"]))] for r in default_rows if r.get("null_pairs")
    ]
    if runs:
        interval = np.array([g.interval for g in runs])
        fired = np.array([g.gate for g in runs])
        out["default_design"] = {
            "icc": SHIPPED_PANEL_ICC,
            "checkpoints": len(runs),
            "unseen_subsets_min": min(2 * g.pairs for g in runs),
            "draws_median": float(np.median([g.draws for g in runs])),
            "draws_min": min(g.draws for g in runs),
            "draws_max": max(g.draws for g in runs),
            "interval_power_median": float(np.median(interval)),
            "interval_power_min": float(interval.min()),
            "interval_power_max": float(interval.max()),
            "gate_power_median": float(np.median(fired)),
            "below_80": int(np.sum(interval < 0.8)),
        }
    out["subsets_for_80"] = {
        "gate": subsets_for_power(0.8, level, 2 * level, 1 - a),
        "interval": subsets_for_power(0.8, level, 2 * level, 0.975),
    }
    out["pairs_for_80_kg"] = {
        f"draws_{b}": pairs_for_gate_power(b, 0.8, level, 2 * level, a, step=20, reps=300)
        for b in (draws, 2 * draws)
    }
    train = settings.targets // 2
    out["out_of_training"] = {
        "subsets": train,
        "gate_power": null_check_power(train, level, 2 * level, 1 - a).power,
    }
    return out


def as_number(value: Any) -> float:
    """A stored value as a float (None, a NaN written as null: NaN)."""
    return float("nan") if value is None else float(value)


#: The scores read at each of a plan's other layers (``[eval] layers``), by column prefix.
LAYER_LABELS = {
    "sde_verdict": "SDE verdict (ordinal)",
    "sde_otr": "SDE OTR (before the gate)",
    "sde_calibrated_otr": "SDE calibrated OTR (before the gate)",
}


def layer_scores(verdict_label: Any) -> dict[str, Any]:
    """How each of :data:`LAYER_LABELS` is read from an evaluation row."""
    from sde_core.pipeline.evaluation.metric_table import CALIBRATED_OTR, OTR, raw_column

    return {
        "sde_verdict": lambda r: VERDICT_SCORE[verdict_label(r)],
        "sde_otr": lambda r: as_number(r.get(raw_column(OTR.key))),
        "sde_calibrated_otr": lambda r: as_number(r.get(raw_column(CALIBRATED_OTR.key))),
    }


def default_design(
    rows: Sequence[Mapping[str, Any]], default_rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The default-design pass on the zoo: its draws, how often the precision target was
    reached (method §15's states), and how often its verdict is the fixed design's."""
    from sde_core.pipeline.evaluation.precision import miss_reasons, precision_status

    states: dict[str, int] = {}
    reasons: dict[str, int] = {}  # checkpoints "not reached" for each way (method §15)
    missed: list[float] = []
    for r in default_rows:
        row = {k: math.nan if v is None else v for k, v in r.items()}
        found = precision_status(row)
        state = found[0] if found else "fixed design"
        states[state] = states.get(state, 0) + 1
        if state == "not reached":
            missed.append(float(row["precision_half_width"]))
            for kind in miss_reasons(row):
                reasons[kind] = reasons.get(kind, 0) + 1
    both = [r for r in rows if r["verdict_defaults"]]
    same = sum(1 for r in both if r["verdict"] == r["verdict_defaults"])
    draws = [int(r["draws"]) for r in default_rows]
    return {
        "checkpoints": len(default_rows),
        "precision_states": states,
        "miss_reasons": reasons,
        "missed_half_width_min": round(min(missed), 3) if missed else float("nan"),
        "missed_half_width_max": round(max(missed), 3) if missed else float("nan"),
        "draws_median": float(np.median(draws)) if draws else float("nan"),
        "draws_min": min(draws, default=0),
        "draws_max": max(draws, default=0),
        "same_verdict": same,
        "same_verdict_share": same / len(both) if both else float("nan"),
    }


def confusion(
    rows: Sequence[Mapping[str, Any]], truths: Mapping[str, int], column: str
) -> dict[str, dict[str, int]]:
    """Checkpoints by truth and by the verdict in ``column``."""
    return {
        t: {v: sum(1 for r in rows if r["truth"] == t and r[column] == v) for v in VERDICT_SCORE}
        for t in truths
    }


#: Why an inconclusive verdict was withheld, by the words of its ``inconclusive_reason`` (the
#: null check's: ``scores.NULL_GATE``).
_WITHHELD = (
    ("panel outlier", "an outlying panel member"),
    ("reference test", "split-level reference test is not significant"),
    ("panels do not separate", "panels do not separate"),
)


def withheld_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many inconclusive verdicts each reason withheld (the first reason a row names;
    "other" for the rest)."""
    from sde_core.pipeline.meta_eval.scores import NULL_GATE

    reasons = (*_WITHHELD, ("null check", NULL_GATE))
    out = dict.fromkeys([name for name, _ in reasons] + ["other"], 0)
    for row in rows:
        text = str(row.get("inconclusive_reason") or "")
        hits = [(text.find(words), name) for name, words in reasons if words in text]
        out[min(hits)[1] if hits else "other"] += 1
    return out
