"""The paper's decision rule (method §4): Jensen–Shannon divergence (base 2) between histograms
of H on common bins; a target is in-training iff it is closer to S_IT than to S_OOT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sde_core.errors import InputError
from sde_core.stats.checks import as_sample, check_bins, check_span

__all__ = [
    "Decision",
    "decide",
    "histogram_edges",
    "jsd",
]


def histogram_edges(*samples: object, bins: int = 30) -> np.ndarray:
    """Common histogram edges spanning the min..max of all samples (``bins + 1`` edges).

    A zero range (all values equal) gets a unit-width bin around the value.

    Examples:
        >>> print(histogram_edges([0.0, 1.0], [2.0], bins=4))
        [0.  0.5 1.  1.5 2. ]
    """
    nb = check_bins(bins)
    if not samples:
        raise InputError("histogram_edges needs at least one sample")
    arrays = [as_sample(s, f"sample {i}") for i, s in enumerate(samples)]
    lo = min(float(a.min()) for a in arrays)
    hi = max(float(a.max()) for a in arrays)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    check_span(lo, hi)
    edges = np.linspace(lo, hi, nb + 1)
    check_span(lo, hi, edges)
    return edges


def _probabilities(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    counts, _ = np.histogram(x, bins=edges)
    return counts / counts.sum()


def _jsd_probs(p: np.ndarray, q: np.ndarray) -> float:
    mix = 0.5 * (p + q)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_p = np.where(p > 0, p * np.log2(p / mix), 0.0).sum()
        kl_q = np.where(q > 0, q * np.log2(q / mix), 0.0).sum()
    # Clip tiny negative rounding; JSD base 2 lies in [0, 1].
    return float(min(max(0.5 * (kl_p + kl_q), 0.0), 1.0))


def jsd(a: object, b: object, bins: int | Sequence[float] | np.ndarray = 30) -> float:
    """Jensen–Shannon divergence (base 2, in [0, 1]) between the histograms of two samples.

    Args:
        a, b: 1-D samples (e.g. two H vectors).
        bins: the number of common bins spanning min..max of both samples, or explicit edges.

    Returns:
        JSD in bits: 0 for identical histograms, 1 for disjoint support.

    Examples:
        >>> jsd([0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], bins=2)  # same histogram
        0.0
        >>> jsd([0.0, 0.1], [0.9, 1.0], bins=2)  # disjoint histograms
        1.0
    """
    xa, xb = as_sample(a, "a"), as_sample(b, "b")
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        edges = histogram_edges(xa, xb, bins=int(bins))
    else:
        edges = as_sample(bins, "bin edges", min_size=2)
        if np.any(np.diff(edges) <= 0):
            raise InputError("bin edges must be strictly increasing")
        if xa.min() < edges[0] or xb.min() < edges[0] or max(xa.max(), xb.max()) > edges[-1]:
            raise InputError("bin edges must span every value of both samples")
    return _jsd_probs(_probabilities(xa, edges), _probabilities(xb, edges))


@dataclass(frozen=True)
class Decision:
    """The paper's decision for one target subset (method §4).

    Attributes:
        in_training: True iff ``d_it <= d_oot`` (ties count as in-training).
        d_it: JSD (bits) between the target's H histogram and S_IT's.
        d_oot: JSD (bits) between the target's H histogram and S_OOT's.
    """

    in_training: bool
    d_it: float
    d_oot: float

    @property
    def label(self) -> str:
        """``"in-training"`` or ``"out-of-training"``."""
        return "in-training" if self.in_training else "out-of-training"


def decide(target_h: object, it_h: object, oot_h: object, bins: int = 30) -> Decision:
    """Classify a target subset as in- or out-of-training by JSD to the references (method §4).

    Histograms use common bins spanning the min..max of the three samples. A target is
    in-training iff ``D(S, S_IT) < D(S, S_OOT)``; a tie is in-training too, so the evaluation
    never certifies forgetting on a tie.

    Args:
        target_h, it_h, oot_h: ``(K,)`` split-half HSIC vectors of the target and references.
        bins: number of histogram bins (default 30).

    Examples:
        >>> it, oot = [0.9, 1.0, 1.1, 1.0], [0.1, 0.2, 0.15, 0.2]
        >>> decide([0.95, 1.05, 1.0, 0.98], it, oot, bins=5)
        Decision(in_training=True, d_it=0.0, d_oot=1.0)
    """
    t = as_sample(target_h, "target_h")
    it = as_sample(it_h, "it_h")
    oot = as_sample(oot_h, "oot_h")
    edges = histogram_edges(t, it, oot, bins=bins)
    pt = _probabilities(t, edges)
    d_it = _jsd_probs(pt, _probabilities(it, edges))
    d_oot = _jsd_probs(pt, _probabilities(oot, edges))
    return Decision(in_training=bool(d_it <= d_oot), d_it=d_it, d_oot=d_oot)
