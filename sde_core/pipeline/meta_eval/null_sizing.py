"""How large the null check must be to fail when it should (method §9, §17), with the interval
the evaluation really uses.

:func:`~sde_core.stats.null_power.null_check_power` gives the binomial power (independent calls,
Clopper–Pearson). The evaluation pools a rate over B draws with the Korn–Graubard interval
(method §12), whose effective number of trials is multiplied by ``(t_{M−1}/t_{B−1})²`` — about
0.50 at B = 5 — and shrinks further with the between-draw variance. :func:`gate_power` simulates
that: each draw judges ``2·pairs/B`` unseen subsets, each falsely called with probability
``true_rate`` — independently, or with the panel a draw's subsets share moving them together
(``icc``, estimated from the shipped stores by :func:`panel_icc`) — and the gate fires when the
one-sided ``1 − α`` lower bound of the pooled rate exceeds the level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sde_core.pipeline.evaluation.metric_table import NULL_CALIBRATED_FPR, NULL_OUT_OF_TRAINING_FPR
from sde_core.stats.replication import korn_graubard_rows

__all__ = [
    "SHIPPED_PANEL_ICC",
    "GatePower",
    "gate_power",
    "pairs_for_gate_power",
    "panel_icc",
    "stores_panel_icc",
]

#: ρ of :func:`gate_power` on the bundled demos: the median of :func:`panel_icc` over every
#: shipped model's per-draw false in-training and out-of-training rates at the default null
#: check (quartiles 0.025–0.067, up to 0.155; ``bench/null_size_bench.py power``; a test
#: recomputes it from the stores). Method §9 states the null check's power at this ρ.
SHIPPED_PANEL_ICC = 0.045


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
    icc: float = 0.0,
) -> GatePower:
    """The power of the null check's gate with ``pairs`` pairs over ``draws`` draws against a
    false-call rate ``true_rate`` (module docstring).

    ``icc`` (ρ, in [0, 1)) is the share of a call's variance that its draw's panel carries: the
    subsets of one draw are judged against one panel, whose position moves all their calls
    together. A draw's own rate is then Beta-distributed with mean ``true_rate`` and variance
    ``ρ·true_rate·(1 − true_rate)`` (the beta-binomial model; ρ = 0 is independent calls), so
    its m calls have the design effect ``1 + (m − 1)ρ``. :func:`panel_icc` estimates ρ from
    an evaluation's per-draw rates."""
    if not 0.0 <= icc < 1.0:
        raise ValueError(f"icc must be in [0, 1); got {icc!r}")
    rng = np.random.default_rng(seed)
    per = np.full(draws, (2 * pairs) // draws)
    per[: (2 * pairs) % draws] += 1
    per = per[per > 0]
    a = true_rate * (1.0 - icc) / icc if icc > 0 else 0.0
    b = (1.0 - true_rate) * (1.0 - icc) / icc if icc > 0 else 0.0
    values = np.empty((reps, per.size))
    for i in range(reps):  # the draws of one simulated evaluation, in the generator's order
        rates = rng.beta(a, b, size=per.size) if icc > 0 else true_rate
        values[i] = rng.binomial(per, rates) / per
    fired = int(np.sum(korn_graubard_rows(values, per, 1.0 - 2.0 * alpha)[1] > level))
    shown = int(np.sum(korn_graubard_rows(values, per, 0.95)[1] > level))
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


def panel_icc(rates: np.ndarray, counts: np.ndarray) -> float:
    """ρ of :func:`gate_power` estimated from one evaluation's per-draw rates (the share of
    ``counts[b]`` calls of draw b that were false): the between-draw variance beyond the
    binomial's, over ``p̄(1 − p̄)`` (method of moments, floored at 0; NaN with fewer than two
    draws or a pooled rate of 0 or 1)."""
    p = np.asarray(rates, dtype=float)
    m = np.asarray(counts, dtype=float)
    keep = np.isfinite(p) & (m > 0)
    p, m = p[keep], m[keep]
    if p.size < 2:
        return float("nan")
    pooled = float(np.sum(p * m) / np.sum(m))
    if not 0.0 < pooled < 1.0:
        return float("nan")
    within = float(np.mean(pooled * (1.0 - pooled) / m))
    return max(0.0, (float(np.var(p, ddof=1)) - within) / (pooled * (1.0 - pooled)))


def stores_panel_icc(paths: Sequence[str | Path]) -> np.ndarray:
    """:func:`panel_icc` of every model's per-draw false in-training and out-of-training rates
    in the last run of each results store in ``paths`` (opened read-only; a model's training
    subsets are taken as spread evenly over its draws), the finite ones."""
    from sde_core.pipeline.store import ResultsStore

    out = []
    for path in paths:
        with ResultsStore(path, read_only=True) as store:
            run = int(store.list_runs()["id"].iloc[-1])
            draws = store.rows(run, "draws")
            models = store.rows(run, "models")
        trained = dict(zip(models["name"], models["null_train_subsets"].astype(float), strict=True))
        for name, rows in draws.groupby("model"):
            b = len(rows)
            pairs = 2 * rows["null_pairs"].to_numpy(float)
            train = np.full(b, trained[name] / b)
            for column, counts in (
                (NULL_CALIBRATED_FPR.key, pairs),
                (NULL_OUT_OF_TRAINING_FPR.key, train),
            ):
                rho = panel_icc(rows[column].to_numpy(float), counts)
                if np.isfinite(rho):
                    out.append(rho)
    return np.array(out)
