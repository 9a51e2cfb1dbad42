"""How large the null check must be to fail when it should (method §9, §17), with the interval
the evaluation really uses.

:func:`~sde_core.stats.null_power.null_check_power` gives the binomial power (independent calls,
Clopper–Pearson). The evaluation pools a rate over B draws with the Korn–Graubard interval
(method §12), whose effective number of trials is multiplied by ``(t_{M−1}/t_{B−1})²`` — about
0.50 at B = 5 — and shrinks further with the between-draw variance. :func:`gate_power` simulates
that: each draw judges ``2·pairs/B`` unseen subsets, each falsely called with probability
``true_rate`` independently (the panel a draw's subsets share can only lower the power), and the
gate fires when the one-sided ``1 − α`` lower bound of the pooled rate exceeds the level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sde_core.stats.replication import replicate_proportion

__all__ = ["GatePower", "gate_power", "pairs_for_gate_power"]


@dataclass(frozen=True)
class GatePower:
    """The simulated power of the null check's gate and of its shown 95% interval.

    Attributes:
        pairs, draws: the design. gate: P(the gate fires). interval: P(the 95% interval's
            lower bound exceeds the level). reps: simulations.
    """

    pairs: int
    draws: int
    gate: float
    interval: float
    reps: int


def gate_power(
    pairs: int,
    draws: int,
    level: float = 0.05,
    true_rate: float = 0.10,
    alpha: float = 0.01,
    reps: int = 2000,
    seed: int = 0,
) -> GatePower:
    """The power of the null check's gate with ``pairs`` pairs over ``draws`` draws against a
    false-call rate ``true_rate`` (module docstring)."""
    rng = np.random.default_rng(seed)
    per = np.full(draws, (2 * pairs) // draws)
    per[: (2 * pairs) % draws] += 1
    per = per[per > 0]
    fired = shown = 0
    for _ in range(reps):
        calls = rng.binomial(per, true_rate)
        values = calls / per
        fired += replicate_proportion(values, per, 1.0 - 2.0 * alpha).lo > level
        shown += replicate_proportion(values, per, 0.95).lo > level
    return GatePower(int(pairs), int(draws), fired / reps, shown / reps, int(reps))


def pairs_for_gate_power(
    draws: int,
    power: float = 0.8,
    level: float = 0.05,
    true_rate: float = 0.10,
    alpha: float = 0.01,
    step: int = 10,
    limit: int = 2000,
    reps: int = 500,
) -> int | None:
    """The fewest pairs (in steps of ``step``) whose simulated gate power reaches ``power``
    (None below ``limit``)."""
    for pairs in range(step, limit + 1, step):
        if gate_power(pairs, draws, level, true_rate, alpha, reps).gate >= power:
            return pairs
    return None
