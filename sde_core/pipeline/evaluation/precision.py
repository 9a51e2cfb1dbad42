"""The precision design of one model (method §15): a pilot fixes the draws, Stein's intervals.

With ``settings.precision = W > 0`` a :class:`~.run.ModelRun` first runs the references, targets
and panels of ``pilot_draws`` draws (the pilot), then :func:`design_from_pilot` fixes B, the
draws that bring every headline rate's half-width to W (:func:`~sde_core.stats.precision.
stein_draws`, the largest over :data:`PRECISION_METRICS`), capped at ``max_draws`` (the budget).
The run then computes draws n0 … B − 1 and everything else on all B draws. Every earlier stage is
reused: the plan's draw b is the same whatever B is, and the stage cache keys each batch by its
rows and seed. :func:`with_design` puts Stein's intervals (second stage) into the summary, each
joined with the rate's Korn–Graubard interval over the same draws: near 0 or 1 a rate of a few
targets per draw is far from normal (mostly 0, now and then 1/20) and a pilot may not see one
event; Korn–Graubard's Clopper–Pearson bound covers there, and it is narrower than Stein's
elsewhere, so the union is Stein's interval except near the boundaries.

A rate the gate withholds after the pilot (e.g. calibrated rates when the panels do not
separate) does not drive B and keeps its Korn–Graubard interval (it is withheld anyway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sde_core.pipeline.evaluation.draw_statistics import DrawState
from sde_core.pipeline.evaluation.metric_table import (
    CALIBRATED_OTR,
    OTR,
    OVER_UNLEARNED_RATE,
    Estimate,
)
from sde_core.pipeline.evaluation.summary import ModelSummary
from sde_core.pipeline.settings import EvalSettings
from sde_core.stats.precision import PilotPlan, stein_draws, stein_interval

__all__ = [
    "MISS_REASONS",
    "PRECISION_METRICS",
    "PrecisionDesign",
    "design_from_pilot",
    "miss_reasons",
    "per_draw_rates",
    "precision_json",
    "precision_status",
    "with_design",
]

#: The ways a precision target is missed with budget left (method §15), each by the words
#: its note uses (:func:`with_design` and :func:`_miss_reason` write them, :func:`miss_reasons`
#: reads them back).
_UNDRIVEN = "withheld by the gate"
MISS_REASONS: dict[str, str] = {
    "the pilot's SD below the full run's": "underestimated the full run's",
    "Clopper–Pearson wider than Student t": "Clopper–Pearson's bound on the effective trials",
    "Stein's and Korn–Graubard's centred apart": "Korn–Graubard's is not symmetric about",
    "withheld after the pilot, published after all draws": f"{_UNDRIVEN} after the pilot",
}

#: The headline rates whose half-width the precision target bounds: ``ModelSummary`` point
#: field -> its interval fields.
PRECISION_METRICS: tuple[str, ...] = (OTR.key, CALIBRATED_OTR.key, OVER_UNLEARNED_RATE.key)


@dataclass(frozen=True)
class PrecisionDesign:
    """What the pilot fixed for one model.

    Attributes:
        target: W. n0: pilot draws. plans: each driving rate's :class:`PilotPlan`.
        needed: draws needed for every driving rate to reach W (≥ n0).
        draws: draws run, ``min(needed, budget)``. budget: ``settings.max_draws``.
    """

    target: float
    n0: int
    plans: dict[str, PilotPlan]
    needed: int
    draws: int
    budget: int

    @property
    def budget_spent(self) -> bool:
        """Whether the budget stopped the run before W was reached."""
        return self.draws < self.needed


def per_draw_rates(draws: Sequence[DrawState], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(values, trials)`` of one rate over the draws that have it (``(B,)`` each): OTR from
    the JSD decisions, calibrated OTR and the over-unlearned rate from the panel verdicts."""
    values, trials = [], []
    for d in draws:
        if d.core is None or (metric != OTR.key and d.panel is None):
            continue
        values.append(d.core.otr if metric == OTR.key else getattr(d.panel, metric))
        trials.append(len(d.core.decisions))
    return np.asarray(values, dtype=np.float64), np.asarray(trials, dtype=np.float64)


def design_from_pilot(
    pilot: Sequence[DrawState], pilot_summary: ModelSummary, settings: EvalSettings
) -> PrecisionDesign:
    """Fix B from the pilot draws (Stein's first stage, for each rate the gate lets through).

    Args:
        pilot: the pilot's draw states (references, targets and panels computed).
        pilot_summary: :func:`~.statistics.summarize` of the pilot (which rates are withheld).
        settings: with ``precision`` > 0.
    """
    plans: dict[str, PilotPlan] = {}
    for metric in PRECISION_METRICS:
        values, trials = per_draw_rates(pilot, metric)
        if np.isfinite(getattr(pilot_summary, metric).value) and values.size >= 2:
            plans[metric] = stein_draws(values, trials, settings.precision)
    n0 = sum(d.core is not None for d in pilot)
    needed = max([n0, *(p.draws for p in plans.values())])
    return PrecisionDesign(
        target=settings.precision,
        n0=n0,
        plans=plans,
        needed=needed,
        draws=min(needed, settings.max_draws),
        budget=settings.max_draws,
    )


def with_design(
    summary: ModelSummary, draws: Sequence[DrawState], design: PrecisionDesign
) -> ModelSummary:
    """``summary`` with Stein's intervals (from the pilot's spread, over all ``draws``) joined
    with its Korn–Graubard intervals (module docstring) for each driving rate the gate
    publishes, and the design's fields (``precision_half_width``: the widest half-width of the
    intervals given, a rate the gate withheld after the pilot but publishes now included with
    its Korn–Graubard interval, since it is shown beside the others)."""
    changes: dict[str, Any] = {
        "precision_target": design.target,
        "draws_needed": float(design.needed),
    }
    widest = float("nan")
    misses: list[str] = []  # why a rate's half-width exceeds W although B was not capped
    for metric in PRECISION_METRICS:
        values, trials = per_draw_rates(draws, metric)
        kg: Estimate = getattr(summary, metric)
        plan = design.plans.get(metric)
        if not np.isfinite(kg.value) or (plan is not None and values.size < plan.n0):
            continue
        if plan is None:  # withheld after the pilot, published now: it did not drive B
            if not design.plans:  # nothing drove B: the target was not applied
                continue
            half = (kg.hi - kg.lo) / 2  # its Korn–Graubard interval is the one given
            if not design.budget_spent and half > design.target:
                misses.append(
                    f"{metric} ±{half:.3f}: {_UNDRIVEN} after the pilot, so it did not drive "
                    f"B, and its Korn–Graubard interval over all {values.size} draws is the "
                    "one given"
                )
            widest = half if not np.isfinite(widest) else max(widest, half)
            continue
        value, lo, hi, stein_half = stein_interval(values, trials, plan)
        kg_lo, kg_hi = kg.lo, kg.hi
        lo, hi = min(lo, kg_lo), max(hi, kg_hi)  # Korn–Graubard guards the boundaries
        changes[metric] = Estimate(value, lo, hi, value)
        half = (hi - lo) / 2  # of the interval published: the join
        if not design.budget_spent and half > design.target:
            why = _miss_reason(values, plan, stein_half, kg, design.target)
            misses.append(f"{metric} ±{half:.3f}: {why}")
        widest = half if not np.isfinite(widest) else max(widest, half)
    changes["precision_half_width"] = widest
    notes = [summary.notes] if summary.notes else []
    if design.budget_spent:
        spent = f" at half-width {widest:.3f}" if np.isfinite(widest) else ""
        notes.append(
            f"precision ±{design.target:g} not reached: budget spent{spent} — the pilot asks "
            f"for {design.needed} draws and the budget is max_draws = {design.budget} (raise "
            "it, or accept the wider intervals)"
        )
    elif misses:
        notes.append(
            f"precision ±{design.target:g} not reached after the {design.draws} draws the pilot "
            f"fixed: {'; '.join(misses)} (Stein's design may not add draws after seeing them, "
            "method §15)"
        )
    if not design.plans:
        notes.append("no precision target applied: every headline rate is withheld after the pilot")
    return replace(summary, notes="; ".join(notes), **changes)


def _miss_reason(values: np.ndarray, plan: PilotPlan, stein_half: float, kg: Estimate,
                 target: float) -> str:  # fmt: skip
    """Why a rate's published (joined) interval is wider than W although the budget did not
    cap B, in words (method §15): the pilot's SD below the full run's, or Clopper–Pearson wider
    than Student's t at the same spread — each leaves Korn–Graubard's half above W — or, with
    both halves within W, the two intervals centred apart, so that their join is wider."""
    joined = (
        f"so the Korn–Graubard interval over all {values.size} draws, joined to Stein's "
        f"±{stein_half:.3f}, is the wider"
    )
    kg_half = (kg.hi - kg.lo) / 2
    if max(stein_half, kg_half) <= target:
        return (
            f"Stein's ±{stein_half:.3f} and the Korn–Graubard interval over all {values.size} "
            f"draws (±{kg_half:.3f}) each hold the target, but Korn–Graubard's is not "
            "symmetric about the rate, and the join of the two, which is the interval given, "
            "is wider"
        )
    full_sd = float(np.std(values, ddof=1)) if values.size > 1 else float("nan")
    if full_sd > plan.sd:
        return (
            f"the pilot's per-draw SD {plan.sd:.3f} underestimated the full run's "
            f"{full_sd:.3f}, {joined}"
        )
    return (
        f"at the pilot's per-draw SD {plan.sd:.3f} (the full run's: {full_sd:.3f}) "
        f"Clopper–Pearson's bound on the effective trials is wider than Stein's Student t, "
        f"{joined}"
    )


def miss_reasons(row: Mapping[str, Any]) -> list[str]:
    """The :data:`MISS_REASONS` a models row's notes give for a missed precision target (one
    per way, in the order of the dict; empty when the target was reached or not applied)."""
    notes = str(row.get("notes") or "")
    return [kind for kind, words in MISS_REASONS.items() if words in notes]


def precision_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """A model's ``precision`` entry of the JSON document (method §10, §15) from its ``models``
    row: ``{"precision": {target, half_width, draws, draws_needed, reached}}``, or nothing for a
    fixed-design row (so fixed-design documents are unchanged)."""
    target = float(row.get("precision_target", float("nan")))
    if not math.isfinite(target):
        return {}
    half = float(row["precision_half_width"])
    needed = int(row["draws_needed"])
    return {
        "precision": {
            "target": target,
            "half_width": half if math.isfinite(half) else None,
            "draws": int(row["draws"]),
            "draws_needed": needed,
            "reached": bool(math.isfinite(half) and half <= target and row["draws"] >= needed),
        }
    }


def precision_status(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(state, sentence)`` of a precision-design row (its ``models`` row), or None for a
    fixed-design row: ``state`` is ``"reached"``, ``"not reached"`` (the interval given is
    wider than W with budget left: the reason, one of :data:`MISS_REASONS`, follows in the
    sentence), ``"not reached (budget
    spent)"`` or ``"not applied"`` (every driving rate withheld after the pilot); the sentence
    gives the widest half-width and the draws, e.g. "precision ±0.1 reached: widest half-width
    0.094 after 36 draws (the pilot asked for 36)". The CLI and Explore print it."""
    target = float(row.get("precision_target", float("nan")))
    if not math.isfinite(target):
        return None
    half = float(row["precision_half_width"])
    draws, needed = int(row["draws"]), int(row["draws_needed"])
    notes = str(row.get("notes") or "")
    if not math.isfinite(half):
        state = "not applied"
    elif draws < needed:
        state = "not reached (budget spent)"
    elif not half <= target:
        state = "not reached"
    else:
        state = "reached"
    widest = f"widest half-width {half:.3f}" if math.isfinite(half) else "no rate to bound"
    sentence = (
        f"precision ±{target:g} {state}: {widest} after {draws} draws (the pilot asked for "
        f"{needed})"
    )
    lead = f"precision ±{target:g} not reached"
    why = [n.strip() for n in notes.split("; ") if n.strip().startswith((lead, "no precision"))]
    if state != "reached" and why:
        reason = why[0].removeprefix(lead).lstrip(" :")
        sentence += f" — {reason}"
    return state, sentence
