"""Shared input validation and small array primitives of :mod:`sde_core`.

Every check raises an :class:`~sde_core.errors.SDEError` (by default
:class:`~sde_core.errors.InputError`; pass ``error=`` to raise a module's own subclass) with a
message naming the problem and the fix. Use these instead of hand-rolled ``isinstance`` tests:

- :func:`check_int` — an integer argument (``bool`` and floats refused) within bounds;
- :func:`check_number` — a finite real number within bounds (``bool``, complex, text refused);
- :func:`as_index_vector` — a 1-D vector of row indices into ``n`` rows;
- :func:`as_float_array`, :func:`as_float_vector`, :func:`as_float_matrix` — finite real
  float64 arrays, samples and activations.

Numeric policy (refuse rather than compute garbage):

- Only real numbers are numbers here: complex values (which would lose their imaginary part),
  datetime64/timedelta64 values, text, bytes and ``None`` are refused, never converted.
- Activations are refused when squared Euclidean distances between their rows could overflow
  float64 (magnitudes above ``sqrt(float64 max / (4 d))``, about ``6.7e153 / sqrt(d)``), which
  would otherwise turn every Gaussian kernel value, and so every HSIC value, into NaN.
- A numeric bandwidth σ must lie in [:data:`SIGMA_MIN`, :data:`SIGMA_MAX`], where ``1 / (2σ²)``
  and ``σ²`` are normal float64 numbers (a σ of 1e-160 would otherwise give NaN kernels and one
  below ~1e-162 a division by zero).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from sde_core.errors import InputError, SDEError

__all__ = [
    "SIGMA_MAX",
    "SIGMA_MIN",
    "as_float_array",
    "as_float_matrix",
    "as_float_vector",
    "as_index_vector",
    "check_int",
    "check_number",
    "check_sigma",
    "is_torch_tensor",
    "max_safe_magnitude",
    "squared_distances",
]

#: Smallest numeric bandwidth accepted: σ² = 1e-300 and 1/(2σ²) = 5e299 stay normal float64.
SIGMA_MIN = 1e-150
#: Largest numeric bandwidth accepted: σ² = 1e300 stays finite.
SIGMA_MAX = 1e150

_REAL_KINDS = "biuf"
_KIND_HINTS = {
    "c": "complex values (the imaginary part would be lost): pass the real part or the "
    "magnitude explicitly (x.real or abs(x))",
    "M": "datetime64 values, which are not measurements: convert them to numbers explicitly "
    "(e.g. seconds since a reference time)",
    "m": "timedelta64 values, which are not plain numbers: convert them explicitly (e.g. "
    "x / np.timedelta64(1, 's'))",
    "U": "text values: parse them into numbers first",
    "S": "bytes values: parse them into numbers first",
    "V": "structured records: pass one numeric field",
}


def is_torch_tensor(x: object) -> bool:
    """True for a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _is_integer(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(
    value: object,
    name: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[SDEError] = InputError,
) -> int:
    """Return ``value`` as a Python ``int`` after checking it is an integer within bounds.

    Args:
        value: a Python or NumPy integer; ``bool``, floats (even integral ones), strings and
            ``None`` are refused.
        name: the argument's name, used in the message.
        minimum, maximum: inclusive bounds (``None``: unbounded).
        error: the :class:`~sde_core.errors.SDEError` subclass to raise.

    Raises:
        error: not an integer, or out of bounds.

    Examples:
        >>> check_int(np.int64(3), "epochs", minimum=1)
        3
        >>> check_int(True, "epochs")
        Traceback (most recent call last):
        ...
        sde_core.errors.InputError: epochs must be an integer; got True (bool)
    """
    bounds = _bounds_text(minimum, maximum)
    if not _is_integer(value):
        raise error(f"{name} must be an integer{bounds}; got {_show(value)}")
    number = int(value)  # type: ignore[call-overload]
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        shown = str(number) if abs(number) < 10**40 else f"an integer of {number.bit_length()} bits"
        raise error(f"{name} must be an integer{bounds}; got {shown}")
    return number


def check_number(
    value: object,
    name: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    error: type[SDEError] = InputError,
) -> float:
    """Return ``value`` as a finite Python ``float`` after checking its bounds.

    Args:
        value: a real Python/NumPy number (``int`` or float); ``bool``, complex, strings,
            ``None``, NaN and ±inf are refused.
        name: the argument's name, used in the message.
        gt, ge, lt, le: strict/inclusive lower and upper bounds (``None``: unbounded).
        error: the :class:`~sde_core.errors.SDEError` subclass to raise.

    Raises:
        error: not a finite real number, or out of bounds.

    Examples:
        >>> check_number(2, "lr", gt=0)
        2.0
        >>> check_number(float("nan"), "lr", gt=0)
        Traceback (most recent call last):
        ...
        sde_core.errors.InputError: lr must be a finite real number > 0; got nan
    """
    parts = [
        f"{op} {bound:g}"
        for op, bound in ((">", gt), ("≥", ge), ("<", lt), ("≤", le))
        if bound is not None
    ]
    wanted = f"a finite real number{' ' + ' and '.join(parts) if parts else ''}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise error(f"{name} must be {wanted}; got {_show(value)}")
    number = float(value)
    if (
        not math.isfinite(number)
        or (gt is not None and not number > gt)
        or (ge is not None and not number >= ge)
        or (lt is not None and not number < lt)
        or (le is not None and not number <= le)
    ):
        raise error(f"{name} must be {wanted}; got {number!r}")
    return number


def _bounds_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" between {minimum} and {maximum}"
    if minimum is not None:
        return f" ≥ {minimum}"
    if maximum is not None:
        return f" ≤ {maximum}"
    return ""


def _show(value: object) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python converts to text
        text = f"<{type(value).__name__} too large to print>"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _real_array(values: object, name: str, error: type[SDEError]) -> np.ndarray:
    """``values`` as a real numeric NumPy array (any shape, its own dtype), or ``error``."""
    if is_torch_tensor(values):
        values = values.detach().cpu()  # type: ignore[attr-defined]
        if values.is_complex():  # type: ignore[attr-defined]
            raise error(f"{name} holds {_KIND_HINTS['c']}")
        if str(values.dtype) == "torch.bfloat16":  # type: ignore[attr-defined]
            values = values.float()  # type: ignore[attr-defined]  # numpy has no bfloat16
        values = values.numpy()  # type: ignore[attr-defined]
    if values is None or isinstance(values, (str, bytes)):
        raise error(f"{name} must be a numeric array; got {_show(values)}")
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as exc:
        kind = type(values).__name__
        raise error(f"{name} must be a numeric array; got {kind} ({exc})") from None
    kind = arr.dtype.kind
    if kind == "O":
        arr = _object_to_real(arr, name, error)
    elif kind not in _REAL_KINDS:
        raise error(f"{name} holds {_KIND_HINTS.get(kind, f'values of dtype {arr.dtype}')}")
    return arr


def _object_to_real(arr: np.ndarray, name: str, error: type[SDEError]) -> np.ndarray:
    """An object array of real Python/NumPy numbers as float64 (anything else refused)."""
    for item in arr.flat:
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Real):
            kind = np.asarray(item).dtype.kind if isinstance(item, np.generic) else ""
            what = _KIND_HINTS.get(kind) or (
                f"complex values ({_KIND_HINTS['c'].split('(', 1)[1]}"
                if isinstance(item, numbers.Complex) and not isinstance(item, numbers.Real)
                else f"a non-numeric element {_show(item)}"
            )
            raise error(f"{name} holds {what}")
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise error(f"{name} holds numbers that do not fit float64 ({exc})") from None


def _finite_float64(arr: np.ndarray, name: str, error: type[SDEError]) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray(arr, dtype=np.float64)
    bad = ~np.isfinite(out)
    if bad.any():
        where = np.argwhere(bad)[:5].tolist()
        raise error(
            f"{name} contains {int(bad.sum())} NaN/inf values (first at index "
            f"{', '.join(str(tuple(w)) if len(w) > 1 else str(w[0]) for w in where)}; values "
            "beyond float64's range count as inf): fix the model/data or drop those samples"
        )
    return out


def as_float_array(
    values: object,
    name: str,
    *,
    ndim: int | None = None,
    error: type[SDEError] = InputError,
) -> np.ndarray:
    """Return ``values`` as a finite real float64 array (of ``ndim`` dimensions when given).

    Raises:
        error: wrong number of dimensions, non-real values (complex, datetime64/timedelta64,
            text, ``None``), or NaN/inf.
    """
    arr = _real_array(values, name, error)
    if ndim is not None and arr.ndim != ndim:
        raise error(f"{name} must be a {ndim}-D array; got shape {arr.shape}")
    return _finite_float64(arr, name, error)


def as_float_vector(
    values: object,
    name: str,
    *,
    min_size: int = 1,
    error: type[SDEError] = InputError,
) -> np.ndarray:
    """Return ``values`` as a finite real float64 1-D array with at least ``min_size`` values.

    Raises:
        error: not 1-D, too short, non-real (complex, datetime, text, ``None``), or NaN/inf.
    """
    arr = _real_array(values, name, error)
    if arr.ndim != 1:
        raise error(f"{name} must be 1-D (one value per split/subset); got shape {arr.shape}")
    if arr.size < min_size:
        raise error(f"{name} needs at least {min_size} values; got {arr.size}")
    return _finite_float64(arr, name, error)


def max_safe_magnitude(d: int) -> float:
    """The largest absolute activation value whose squared distances cannot overflow float64.

    For ``d`` columns, ``||a - b||² ≤ (2 max|x|)² · d`` must stay below float64's maximum, so
    the bound is ``sqrt(float64 max / (4 d))`` (≈ 6.7e153 for d = 1).
    """
    return math.sqrt(float(np.finfo(np.float64).max) / (4.0 * max(int(d), 1)))


def as_float_matrix(acts: object, name: str = "acts") -> np.ndarray:
    """Return ``acts`` as a finite float64 ``(n, d)`` numpy array (1-D input becomes d = 1).

    Raises:
        InputError: not a real numeric array (complex, datetime64/timedelta64, text and
            ``None`` are refused, never converted), not 1-D/2-D, no columns, NaN/inf values, or
            magnitudes so large that squared distances between rows would overflow float64
            (see :func:`max_safe_magnitude`).
    """
    arr = _real_array(acts, name, InputError)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(
            f"{name} must have shape (n, d); got {arr.ndim}-D shape {arr.shape}: flatten or "
            "pool the activations to one vector per sample first"
        )
    if arr.shape[1] == 0:
        raise InputError(f"{name} has 0 feature columns; pass at least one activation dimension")
    out = _finite_float64(arr, name, InputError)
    if out.size:
        peak = float(np.max(np.abs(out)))
        limit = max_safe_magnitude(out.shape[1])
        if peak > limit:
            raise InputError(
                f"{name} has values up to {peak:.3g} in magnitude; with d = {out.shape[1]} "
                f"columns squared distances between rows would overflow float64 (limit "
                f"{limit:.3g}): rescale the activations (e.g. divide by their standard deviation)"
            )
    return np.ascontiguousarray(out)


def check_sigma(sigma: object, name: str = "sigma") -> float:
    """Return a numeric bandwidth σ as a float in [:data:`SIGMA_MIN`, :data:`SIGMA_MAX`].

    Raises:
        InputError: not a real number (``bool``, complex, text and ``None`` refused), NaN/inf,
            non-positive, or outside the range where Gaussian kernels stay finite in float64.

    Examples:
        >>> check_sigma(2)
        2.0
    """
    if isinstance(sigma, (bool, np.bool_)) or not isinstance(sigma, numbers.Real):
        raise InputError(
            f"{name} must be a positive number (a σ rule is resolved first: "
            f"sde_core.stats.hsic.resolve_sigma); got {_show(sigma)}"
        )
    value = float(sigma)
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{name} must be a positive finite number; got {value}")
    if not SIGMA_MIN <= value <= SIGMA_MAX:
        raise InputError(
            f"{name} = {value:.3g} is outside [{SIGMA_MIN:g}, {SIGMA_MAX:g}], where Gaussian "
            "kernel values stay finite in float64: rescale the activations and σ together "
            "(or use the √d rule)"
        )
    return value


def as_index_vector(
    values: object,
    n: int,
    name: str,
    *,
    allow_empty: bool = False,
    unique: bool = False,
    error: type[SDEError] = InputError,
) -> np.ndarray:
    """Return ``values`` as int64 row indices into ``n`` rows (1-D, each in ``[0, n)``).

    Args:
        values: a list, tuple, NumPy array or torch tensor of integers. Floats (even integral
            ones), booleans, timedelta64 and text are refused: an index file or mask must be
            converted explicitly.
        n: the number of rows the indices point into.
        name: the argument's name, used in the message.
        allow_empty: accept a vector of length 0.
        unique: refuse repeated indices.
        error: the :class:`~sde_core.errors.SDEError` subclass to raise.

    Raises:
        error: wrong type/shape, empty (unless allowed), out of range or repeated (if unique).

    Examples:
        >>> print(as_index_vector([2, 0], 3, "forget"))
        [2 0]
        >>> as_index_vector([0, 3], 3, "forget")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        sde_core.errors.InputError: forget has 1 indices outside [0, 3) (e.g. [3]): ...
    """
    rows = check_int(n, "the number of rows", minimum=0, error=error)
    if is_torch_tensor(values):
        values = values.detach().cpu().numpy()  # type: ignore[attr-defined]
    if values is None or isinstance(values, (str, bytes)):
        raise error(f"{name} must be a 1-D array of integer row indices; got {_show(values)}")
    try:
        idx = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise error(f"{name} must be a 1-D array of integer row indices ({exc})") from None
    if idx.dtype.kind == "O" and idx.size and all(_is_integer(v) for v in idx.flat):
        idx = _object_ints(idx, name, error)
    if idx.ndim != 1:
        raise error(f"{name} must be a 1-D array of row indices; got shape {idx.shape}")
    if idx.size == 0:
        if allow_empty:
            return np.zeros(0, dtype=np.int64)
        raise error(f"{name} is empty; give at least one row index")
    if idx.dtype.kind not in "iu":
        what = _KIND_HINTS.get(idx.dtype.kind, f"dtype {idx.dtype}")
        raise error(
            f"{name} must hold integers (row indices); got {what}"
            + ("" if idx.dtype.kind in _KIND_HINTS else " (convert a mask with np.flatnonzero)")
        )
    if idx.dtype.kind == "u" and int(idx.max()) > np.iinfo(np.int64).max:
        raise error(f"{name} has an index above the int64 range; indices must lie in [0, {rows})")
    out = idx.astype(np.int64)
    bad = out[(out < 0) | (out >= rows)]
    if bad.size:
        raise error(
            f"{name} has {bad.size} indices outside [0, {rows}) (e.g. {bad[:5].tolist()}): "
            f"indices must point into the {rows} rows"
        )
    if unique:
        values, counts = np.unique(out, return_counts=True)
        if values.size != out.size:
            raise error(
                f"{name} has duplicate row indices (e.g. {values[counts > 1][:5].tolist()}); "
                "each row may appear once"
            )
    return out


def _object_ints(idx: np.ndarray, name: str, error: type[SDEError]) -> np.ndarray:
    """An object array of Python integers (too large for int64) as int64, or ``error``."""
    values: list[Any] = list(idx.flat)
    limit = np.iinfo(np.int64)
    if any(v < limit.min or v > limit.max for v in values):
        raise error(f"{name} has indices outside the int64 range; indices must be row numbers")
    return np.asarray(values, dtype=np.int64).reshape(idx.shape)


#: The inner-product formula ``‖a‖² + ‖b‖² − 2a·b`` has an absolute error of about
#: ``eps·√d·max‖x‖²`` (norms about the rows' mean). Where that exceeds this fraction of the squared
#: length scale that matters (``2σ²`` for a Gaussian kernel; the median squared distance
#: otherwise) — e.g. one outlier row 1e10 away from the others — distances are summed pair by pair
#: from the rows themselves, so close rows keep their digits.
DISTANCE_TOLERANCE = 1e-12

#: Floats held by one block of the pair-by-pair computation (bounds its temporary memory).
_DIRECT_BLOCK = 2**22


def inner_product_error(sq_norms: np.ndarray, dim: int) -> float:
    """Absolute error bound of squared distances from the inner-product formula, for rows with
    (mean-centred) squared norms ``sq_norms`` in ``dim`` dimensions."""
    if sq_norms.size == 0:
        return 0.0
    return float(4.0 * np.finfo(np.float64).eps * math.sqrt(max(dim, 1)) * sq_norms.max())


def direct_squared_distances(x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean distances summed pair by pair from the differences of the rows (exact
    to the rounding of each term; ``O(n·p·d)`` with bounded block temporaries)."""
    same = y is None
    y = x if y is None else y
    out = np.empty((x.shape[0], y.shape[0]))
    block = max(1, _DIRECT_BLOCK // max(1, y.shape[0] * x.shape[1]))
    for lo in range(0, x.shape[0], block):
        diff = x[lo : lo + block, None, :] - y[None, :, :]
        np.einsum("ijk,ijk->ij", diff, diff, out=out[lo : lo + block])
    if same:
        out = 0.5 * (out + out.T)  # exactly symmetric
        np.fill_diagonal(out, 0.0)
    return out


def squared_distances(
    x: np.ndarray, y: np.ndarray | None = None, *, scale: float | None = None
) -> np.ndarray:
    """Squared Euclidean distances, float64, clipped at 0, exact zeros on a self-diagonal.

    Rows are centred on their common mean (distances do not change) before the inner-product
    formula. When its error bound exceeds :data:`DISTANCE_TOLERANCE` times ``scale`` (the
    squared length scale that matters; default the median positive squared distance), the
    distances are summed pair by pair instead.
    """
    same = y is None
    shift = x.mean(axis=0) if same else np.concatenate([x, y]).mean(axis=0)
    xc = x - shift
    yc = xc if same else y - shift
    xx = np.einsum("ij,ij->i", xc, xc)
    yy = xx if same else np.einsum("ij,ij->i", yc, yc)
    d2 = xc @ yc.T  # in place from here on: no n×p temporaries
    d2 *= -2.0
    d2 += xx[:, None]
    d2 += yy[None, :]
    np.maximum(d2, 0.0, out=d2)
    if same:
        np.fill_diagonal(d2, 0.0)
    error = inner_product_error(xx if same else np.concatenate([xx, yy]), x.shape[1])
    if error > 0.0:
        if scale is None:
            positive = d2[d2 > 0]
            scale = float(np.median(positive)) if positive.size else 0.0
        if error > DISTANCE_TOLERANCE * scale:
            return direct_squared_distances(x, y)
    return d2
