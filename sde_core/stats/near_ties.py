"""Near-ties: decisions whose inputs lie within float tolerance of their boundary (method §13).

Another CPU computes the same float32 activations up to their last bits (different vector
kernels sum in a different order), so every H value, subset score and attack score may move by
a little. A decision is *stable* when no such movement can change it and a *near-tie* when one
can. These functions answer that question exactly for each decision the evaluation makes, by
pushing every input that lies within tolerance of a boundary to the side that would change the
outcome:

- :func:`jsd_decision_is_near_tie` — the paper's histogram rule (method §4): only values
  within tolerance of a bin edge can change bins; every assignment of those values is tried.
- :func:`rank_verdict_is_near_tie` — the calibrated verdict (method §9): only panel scores
  within tolerance of the target's score can change its ranks; both orders are tried.
- :func:`u_test_range` — the Mann–Whitney gates (method §3, §9): the smallest and largest
  U statistic (and so p-value) that values moved within tolerance can give.
- :func:`boundary_near_ties` — a classifier's decisions (the attack's SVC, argmax accuracy):
  the number of decision values within tolerance of zero.

Tolerances are *relative*: a value ``v`` may move by ``rtol · |v|``. H values are positive
kernel averages whose scale differs by orders of magnitude between models (≈1e-5 for a trained
softmax layer, ≈1e-15 for a random-init model), so an absolute tolerance would be wrong for one
of them; their relative precision depends on how flat the activations are, which
:func:`h_relative_tolerance` measures (method §13 derives it).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from sde_core.stats.hsic import resolve_sigma
from sde_core.stats.jsd import _jsd_probs, histogram_edges

__all__ = [
    "ACTIVATION_RTOL",
    "H_RTOL",
    "MAX_ENUMERATED",
    "U32",
    "UTestRange",
    "activation_conditioning",
    "boundary_near_ties",
    "h_relative_tolerance",
    "jsd_decision_is_near_tie",
    "rank_verdict_is_near_tie",
    "u_test_range",
]

#: Float32's unit roundoff: activations are computed and cached in float32.
U32 = 2.0**-24
#: Relative movement of a float32 activation allowed between machines: 2⁻¹⁶ ≈ 1.5e-5 of the
#: layer's largest magnitude, 256 units of roundoff (measured between native AVX kernels and
#: ``ATEN_CPU_CAPABILITY=default``: ≤ 4.5e-7, 7.5 units, on the demo's softmax outputs;
#: method §13).
ACTIVATION_RTOL = 256 * U32
#: Relative movement of an H value per unit of the activations' conditioning κ (see
#: :func:`h_relative_tolerance`): 256 units of float32 roundoff. Measured movements between
#: two CPUs were 3–6 u·κ on the Fashion-MNIST demo (method §13).
H_RTOL = 256 * U32
#: Above this many at-risk values a histogram decision is called a near-tie without trying
#: every one of the 2^n assignments.
MAX_ENUMERATED = 12


def activation_conditioning(acts: np.ndarray, *, seed: int = 0) -> float:
    """κ = max |a| / median pairwise distance of the rows of ``acts`` ``(n, d)``.

    The kernel sees squared distances; a float32 activation carries an absolute error of order
    ``u · max|a|``, so a distance ``r`` carries a relative error of order ``u · max|a| / r`` and
    so does every H built from such distances. κ is large for flat activations (a random-init
    network: κ ≈ 31 on the Fashion-MNIST demo) and about 1 for a trained softmax layer. The
    median distance uses the median σ rule's seeded sample of at most 1,000 rows. Returns inf
    when all rows are equal.
    """
    x = np.asarray(acts, dtype=np.float64)
    top = float(np.max(np.abs(x))) if x.size else 0.0
    if top == 0.0:
        return float("inf")
    try:
        median = resolve_sigma("median", x, seed=seed)
    except ValueError:  # every row equal: no distance to measure
        return float("inf")
    return top / median


def h_relative_tolerance(acts: np.ndarray, *, seed: int = 0) -> float:
    """How far (relative) another machine may move an H value computed from ``acts``:
    ``H_RTOL · max(κ, 1)`` with κ from :func:`activation_conditioning` (method §13).

    Examples:
        >>> x = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
        >>> h_relative_tolerance(x) == H_RTOL
        True
    """
    return H_RTOL * max(activation_conditioning(acts, seed=seed), 1.0)


def jsd_decision_is_near_tie(
    target_h: np.ndarray,
    it_h: np.ndarray,
    oot_h: np.ndarray,
    bins: int,
    rtol: float = H_RTOL,
) -> bool:
    """Whether moving any H value by at most ``rtol`` of itself can flip the JSD decision.

    The histogram edges span min..max of the three samples, so they move by at most
    ``rtol · max|H|``; a value can change bins only when it lies within its own band plus that
    of the edges of an interior edge. Each such value is tried in both neighbouring bins (all
    ``2^n`` assignments for ``n ≤`` :data:`MAX_ENUMERATED`, else the decision is reported as a
    near-tie). A value exactly on an edge counts as at risk.

    Args:
        target_h, it_h, oot_h: ``(K,)`` H vectors of the target and the two references.
        bins: the histogram bins of the decision. rtol: relative movement of an H value.

    Examples:
        >>> it, oot = np.array([0.9, 1.0, 1.1, 1.0]), np.array([0.1, 0.2, 0.15, 0.2])
        >>> jsd_decision_is_near_tie(np.array([0.95, 1.05, 1.0, 0.98]), it, oot, bins=5)
        False
    """
    samples = [np.asarray(s, dtype=np.float64).ravel() for s in (target_h, it_h, oot_h)]
    edges = histogram_edges(*samples, bins=bins)
    inner = edges[1:-1]
    edge_band = rtol * float(np.max(np.abs(edges[[0, -1]])))
    counts = [np.histogram(s, bins=edges)[0].astype(np.float64) for s in samples]
    at_risk: list[tuple[int, int, int]] = []  # (sample, value's bin, the other bin)
    for k, s in enumerate(samples):
        if inner.size == 0:
            break
        pos = np.searchsorted(inner, s)  # nearest interior edges: inner[pos-1], inner[pos]
        for side in (pos - 1, pos):
            ok = (side >= 0) & (side < inner.size)
            idx = np.flatnonzero(ok)
            dist = np.abs(s[idx] - inner[side[idx]])
            near = idx[dist <= rtol * np.abs(s[idx]) + edge_band]
            for i in near:
                b = min(int(np.searchsorted(edges, s[i], side="right")) - 1, len(edges) - 2)
                e = int(side[i])  # interior edge e separates bins e and e + 1
                other = e + 1 if b == e else e
                at_risk.append((k, b, other))
    if not at_risk:
        return False
    if len(at_risk) > MAX_ENUMERATED:
        return True

    def decision(c: list[np.ndarray]) -> bool:
        pt = c[0] / c[0].sum()
        return _jsd_probs(pt, c[1] / c[1].sum()) <= _jsd_probs(pt, c[2] / c[2].sum())

    base = decision(counts)
    for moves in itertools.product((False, True), repeat=len(at_risk)):
        if not any(moves):
            continue
        c = [x.copy() for x in counts]
        for moved, (k, b, other) in zip(moves, at_risk, strict=True):
            if moved:
                c[k][b] -= 1
                c[k][other] += 1
        if decision(c) != base:
            return True
    return False


def rank_verdict_is_near_tie(
    score: float,
    it_scores: np.ndarray,
    oot_scores: np.ndarray,
    verdict: Callable[[float, np.ndarray, np.ndarray], str],
    rtol: float = H_RTOL,
) -> bool:
    """Whether moving the scores by at most ``rtol`` of themselves can change a rank verdict.

    Only a panel score within ``rtol·(|s| + |s_j|)`` of the target's score ``s`` can change
    sides; each panel's at-risk members are put all above or all below ``s`` (four
    combinations, which contain every rank the verdict can see) and the verdict recomputed.

    Args:
        score: the target's subset score. it_scores, oot_scores: ``(R,)`` panel scores.
        verdict: ``verdict(score, it_scores, oot_scores) -> label`` (e.g. the calibrated
            verdict of method §9 at the evaluation's α).
        rtol: relative movement of a score.
    """
    it = np.asarray(it_scores, dtype=np.float64)
    oot = np.asarray(oot_scores, dtype=np.float64)
    s = float(score)
    risk_it = np.abs(it - s) <= rtol * (abs(s) + np.abs(it))
    risk_oot = np.abs(oot - s) <= rtol * (abs(s) + np.abs(oot))
    if not (risk_it.any() or risk_oot.any()):
        return False
    base = verdict(s, it, oot)
    step = max(abs(s), 1e-300) * 4 * rtol
    for up_it, up_oot in itertools.product((False, True), repeat=2):
        a, b = it.copy(), oot.copy()
        a[risk_it] = s + step if up_it else s - step
        b[risk_oot] = s + step if up_oot else s - step
        if verdict(s, a, b) != base:
            return True
    return False


@dataclass(frozen=True)
class UTestRange:
    """The one-sided Mann–Whitney test ``a > b`` under movements within tolerance.

    Attributes:
        p_value: the p-value of the values as given. p_low, p_high: the smallest and largest
            p-value any movement within tolerance gives. at_risk_pairs: pairs ``(a_i, b_j)``
            within tolerance of each other (0: the test is exactly reproducible).
    """

    p_value: float
    p_low: float
    p_high: float
    at_risk_pairs: int

    def is_near_tie(self, alpha: float) -> bool:
        """Whether the outcome ``p < alpha`` can change within tolerance."""
        return (self.p_low < alpha) != (self.p_high < alpha)


def u_test_range(a: np.ndarray, b: np.ndarray, rtol: float = H_RTOL) -> UTestRange:
    """The p-value range of the one-sided U-test ``a > b`` when values move within ``rtol``.

    Raising every ``a_i`` and lowering every ``b_j`` by its band resolves every at-risk pair in
    favour of ``a`` at once (the largest U, the smallest p); the opposite gives the largest p.
    (H values and subset scores are continuous, so exact ties within a sample, whose tie
    correction would move the p-value at a fixed U, do not occur in practice.)

    Args:
        a, b: ``(n,)`` and ``(m,)`` samples (H values or panel scores). rtol: relative movement.

    Examples:
        >>> r = u_test_range(np.array([3.0, 4.0, 5.0]), np.array([1.0, 2.0, 3.0]))
        >>> r.at_risk_pairs, r.p_low < r.p_value < r.p_high
        (1, True)
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    diff = np.abs(x[:, None] - y[None, :])
    risk = int(np.sum(diff <= rtol * (np.abs(x)[:, None] + np.abs(y)[None, :])))

    def p(u: np.ndarray, v: np.ndarray) -> float:
        return float(stats.mannwhitneyu(u, v, alternative="greater").pvalue)

    base = p(x, y)
    if risk == 0:
        return UTestRange(base, base, base, 0)
    step = rtol * (1 + 1e-6)  # a hair past the band: at-risk pairs change sides
    up, down = 1 + step, 1 - step
    low = p(np.where(x >= 0, x * up, x * down), np.where(y >= 0, y * down, y * up))
    high = p(np.where(x >= 0, x * down, x * up), np.where(y >= 0, y * up, y * down))
    return UTestRange(base, min(low, base), max(high, base), risk)


def boundary_near_ties(values: np.ndarray, tolerance: float) -> int:
    """The number of decision values within ``tolerance`` of the boundary at zero.

    Args:
        values: ``(n,)`` signed decision values (an SVC's ``decision_function``, a top-1 minus
            top-2 probability margin). tolerance: absolute movement allowed.
    """
    v = np.asarray(values, dtype=np.float64)
    return int(np.sum(np.abs(v) <= tolerance))
