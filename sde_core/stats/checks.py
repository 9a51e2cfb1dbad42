"""Input checks shared by the decision statistics (method §3–5, §9, §12): a finite 1-D sample, a
level in (0, 1), a bin count, a seed and a value range float64 can cut into bins.

Each raises :class:`~sde_core.errors.InputError` with a message that names the problem and the
fix.
"""

from __future__ import annotations

import numpy as np

from sde_core.common.validation import as_float_vector, check_int, check_number
from sde_core.errors import InputError

__all__ = [
    "MAX_BINS",
    "as_sample",
    "check_bins",
    "check_level",
    "check_seed",
    "check_span",
]

#: Most histogram bins accepted (as many as the most splits a subset may have).
MAX_BINS = 100_000


def as_sample(x: object, name: str, min_size: int = 1) -> np.ndarray:
    """A finite real 1-D float64 sample (e.g. an H vector) of at least ``min_size`` values."""
    return as_float_vector(x, name, min_size=min_size)


def check_level(alpha: float, name: str = "alpha") -> float:
    """A significance level or confidence strictly between 0 and 1."""
    return check_number(alpha, name, gt=0.0, lt=1.0)


def check_bins(bins: int) -> int:
    """A histogram bin count in ``[2, MAX_BINS]``."""
    return check_int(bins, "bins", minimum=2, maximum=MAX_BINS)


def check_seed(seed: int) -> int:
    """A non-negative integer seed."""
    return check_int(seed, "seed", minimum=0)


def check_span(lo: float, hi: float, edges: np.ndarray | None = None) -> None:
    """Refuse samples whose range float64 cannot cut into the requested bins."""
    if not np.isfinite(hi - lo):
        raise InputError(
            f"the values span [{lo:.3g}, {hi:.3g}], wider than float64 can represent: "
            "rescale them (H values are kernel units, normally in [0, 1])"
        )
    if edges is not None and np.any(np.diff(edges) <= 0):
        raise InputError(
            f"the values span only {hi - lo:.3g} around {lo:.6g}, too narrow to cut into "
            f"{edges.size - 1} float64 bins: use fewer bins"
        )
