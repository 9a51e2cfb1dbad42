"""Shared input validation and small array primitives of :mod:`sde_core`.

Every check raises :class:`~sde_core.errors.InputError` with a message naming the problem and
the fix.
"""

from __future__ import annotations

import numpy as np

from sde_core.errors import InputError

__all__ = ["as_float_matrix", "check_sigma", "is_torch_tensor", "squared_distances"]


def is_torch_tensor(x: object) -> bool:
    """True for a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def as_float_matrix(acts: object, name: str = "acts") -> np.ndarray:
    """Return ``acts`` as a finite float64 ``(n, d)`` numpy array (1-D input becomes d = 1)."""
    if is_torch_tensor(acts):
        acts = acts.detach().cpu().numpy()  # type: ignore[attr-defined]
    try:
        arr = np.asarray(acts, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{name} must be a numeric array of shape (n, d); got {type(acts).__name__} ({exc})"
        ) from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(
            f"{name} must have shape (n, d); got {arr.ndim}-D shape {arr.shape}: flatten or "
            "pool the activations to one vector per sample first"
        )
    if arr.shape[1] == 0:
        raise InputError(f"{name} has 0 feature columns; pass at least one activation dimension")
    bad = ~np.isfinite(arr)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise InputError(
            f"{name} contains {int(bad.sum())} NaN/inf values (rows {rows[:5].tolist()}"
            f"{'…' if rows.size > 5 else ''}): fix the model/data or drop those samples"
        )
    return np.ascontiguousarray(arr)


def check_sigma(sigma: float, name: str = "sigma") -> float:
    """Return a numeric bandwidth σ as a positive finite float."""
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be 'sqrt_dim', 'median' or a positive number; got {sigma!r}")
    value = float(sigma)
    if not np.isfinite(value) or value <= 0:
        raise InputError(f"{name} must be a positive finite number; got {value}")
    return value


def squared_distances(x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean distances, float64, clipped at 0, exact zeros on a self-diagonal."""
    same = y is None
    y = x if y is None else y
    xx = np.einsum("ij,ij->i", x, x)
    yy = xx if same else np.einsum("ij,ij->i", y, y)
    d2 = x @ y.T  # in place from here on: no n×p temporaries
    d2 *= -2.0
    d2 += xx[:, None]
    d2 += yy[None, :]
    np.maximum(d2, 0.0, out=d2)
    if same:
        np.fill_diagonal(d2, 0.0)
    return d2
