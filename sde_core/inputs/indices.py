"""Row indices, boolean masks, class labels and forget-set files.

A forget set is a list of row indices into the training split. :func:`load_index_file` reads it
from ``.npy``, ``.txt``, ``.json`` or ``.pt``/``.pth`` (a tensor or a list, read without running
code), as integers or as a boolean mask with one entry per training row. Every check raises
:class:`~sde_core.errors.DataError` naming the problem and the fix; messages quote at most a few
short, escaped excerpts of offending values, never a file's content.

A file is sized up before it is read: a forget set has at most one entry per training row, so
an ``.npy`` header declaring more entries (or more than its bytes hold), or a text, JSON or
``.pt`` file larger than that many entries can take (:data:`TEXT_BYTES_PER_ENTRY`,
:data:`PT_BYTES_PER_ENTRY`), is refused before its data are read.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.fsio import atomic_write_bytes
from sde_core.common.validation import check_int
from sde_core.errors import DataError

__all__ = [
    "INDEX_SUFFIXES",
    "MAX_CLASSES",
    "MAX_INDEX_ENTRIES",
    "PT_BYTES_PER_ENTRY",
    "TEXT_BYTES_PER_ENTRY",
    "as_index_array",
    "as_labels",
    "check_unique",
    "class_indices",
    "excerpt",
    "load_index_file",
    "save_index_file",
]

#: Suffixes :func:`load_index_file` reads.
INDEX_SUFFIXES = (".npy", ".txt", ".json", ".pt", ".pth")
#: Largest number of classes a dataset may have (labels are checked against it before any
#: per-class list is allocated).
MAX_CLASSES = 100_000
#: Most entries an index file may hold when the training-set size is not known yet (e.g.
#: ``workspace validate`` without ``--check-data``); with it, the training-set size.
MAX_INDEX_ENTRIES = 20_000_000
#: Bytes a ``.txt``/``.json`` index file may use per allowed entry (digits, separators,
#: comments), plus :data:`_SLACK_BYTES`.
TEXT_BYTES_PER_ENTRY = 32
#: Bytes a ``.pt``/``.pth`` index file may use per allowed entry (an int64 tensor takes 8, a
#: pickled list of Python ints up to 10), plus :data:`_SLACK_BYTES`.
PT_BYTES_PER_ENTRY = 16
_SLACK_BYTES = 64 * 1024
_EXCERPT = 12
_INT64_MAX = np.iinfo(np.int64).max


def _not_whole(arr: np.ndarray) -> np.ndarray:
    """Mask of the entries of a float array that are not whole numbers (NaN/inf included)."""
    finite = np.isfinite(arr)
    values = np.where(finite, arr, 0)
    return ~finite | (values != np.round(values))


def excerpt(value: object, limit: int = _EXCERPT) -> str:
    """A short rendering of an offending value for an error message: numbers in full (up to 40
    digits), text cut to ``limit`` characters and escaped (``ascii``), never a whole line."""
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool):
        text = str(value)
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = value if isinstance(value, str) else repr(value)
    short = text if len(text) <= limit else text[: limit - 3] + "..."
    return ascii(short) if isinstance(value, str) else ascii(short).strip("'")


def _excerpts(values: Sequence[object], limit: int = 5) -> str:
    shown = ", ".join(excerpt(v) for v in values[:limit])
    return f"[{shown}]" + (f" ({len(values)} in all)" if len(values) > limit else "")


_KIND_NAMES = {"M": "datetime64", "m": "timedelta64", "U": "string", "S": "bytes", "O": "object",
               "c": "complex", "V": "structured", "b": "boolean"}  # fmt: skip


def _kind_name(dtype: np.dtype) -> str:
    return _KIND_NAMES.get(dtype.kind, str(dtype))


def as_index_array(values: Any, n: int, what: str) -> np.ndarray:
    """``values`` as a non-empty 1-D int64 array of row indices in ``[0, n)``.

    Accepts integer arrays of any width (unsigned values are range-checked before any cast, so
    they never wrap around), floats with integral values, and lists of Python integers of any
    size. Booleans, strings, datetimes/timedeltas and fractions are refused.

    Raises:
        DataError: not 1-D, empty, a non-integer value or an index outside ``[0, n)``.
    """
    if isinstance(values, np.ndarray):
        arr = values
    else:
        try:
            arr = np.asarray(values)
        except (TypeError, ValueError, OverflowError) as exc:
            raise DataError(f"{what} must be a flat list of integers ({exc})") from None
    if arr.ndim != 1 or arr.size == 0:
        raise DataError(f"{what} must be a non-empty 1-D list of integers, got shape {arr.shape}")
    kind = arr.dtype.kind
    if kind == "b":
        raise DataError(
            f"{what} holds booleans, not row indices: give integers, or a boolean mask with one "
            f"entry per row ({n} entries)"
        )
    if kind in "iu":
        bad = arr[arr >= n] if kind == "u" else arr[(arr < 0) | (arr >= n)]
        if bad.size:
            raise _out_of_range(what, n, bad.tolist())
        return arr.astype(np.int64)
    if kind == "f":
        fractional = _not_whole(arr)
        if fractional.any():
            raise DataError(
                f"{what} must be integers; offending values: {_excerpts(arr[fractional].tolist())}"
            )
        bad = arr[(arr < 0) | (arr >= n)]
        if bad.size:
            raise _out_of_range(what, n, [int(v) for v in bad.tolist()])
        return arr.astype(np.int64)
    if kind == "O":
        items = arr.tolist()
        wrong = [
            v for v in items
            if isinstance(v, bool) or not isinstance(v, int | float)
            or (isinstance(v, float) and not v.is_integer())
        ]  # fmt: skip
        if wrong:
            raise DataError(f"{what} must be integers; offending values: {_excerpts(wrong)}")
        ints = [int(v) for v in items]
        outside = [v for v in ints if not 0 <= v < n]
        if outside:
            raise _out_of_range(what, n, outside)
        return np.asarray(ints, dtype=np.int64)
    raise DataError(
        f"{what} must be integers, got {_kind_name(arr.dtype)} values; save the indices as "
        "integers (e.g. numpy int64)"
    )


def _out_of_range(what: str, n: int, bad: list[int]) -> DataError:
    return DataError(f"{what} must lie in [0, {n - 1}]; offending values: {_excerpts(bad, 10)}")


def check_unique(idx: np.ndarray, what: str) -> None:
    """Raise :class:`DataError` listing duplicated indices."""
    values, counts = np.unique(idx, return_counts=True)
    dups = values[counts > 1]
    if dups.size:
        raise DataError(
            f"{what} has duplicate indices: {dups[:10].tolist()}; each index may appear once"
        )


def as_labels(values: Any, what: str, rows: int | None = None) -> np.ndarray:
    """Class labels as a 1-D int64 array in ``[0, MAX_CLASSES)``.

    Accepts integers of any width (range-checked before the cast); ``rows`` (when given) is the
    number of samples the labels belong to. Booleans and floats are refused, even with whole
    values: a float or true/false column is most often a score or a mask saved by mistake, and
    reading it as class ids would evaluate against the wrong classes without a word.

    Raises:
        DataError: wrong shape or length, boolean/float/negative/huge or non-numeric labels.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise DataError(f"{what} must be 1-D (one label per row), got shape {arr.shape}")
    if rows is not None and arr.shape[0] != rows:
        raise DataError(f"{what} has {arr.shape[0]} labels for {rows} rows: give one per row")
    kind = arr.dtype.kind
    if kind in "bf":
        frac = _not_whole(arr) if kind == "f" else np.zeros(arr.shape, dtype=bool)
        shown = arr[frac] if frac.any() else arr
        raise DataError(
            f"{what} must be integer class ids, got {_kind_name(arr.dtype)} values (e.g. "
            f"{_excerpts(shown[:5].tolist())}): save the labels as integers (y.astype('int64')), "
            "or check that this column holds class ids and not a score or a mask"
        )
    if kind not in "iu":
        raise DataError(f"{what} must be integer class ids, got {_kind_name(arr.dtype)} values")
    bad = arr[(arr >= MAX_CLASSES) | (arr < 0)] if kind != "u" else arr[arr >= MAX_CLASSES]
    if bad.size:
        raise DataError(
            f"{what} must lie in [0, {MAX_CLASSES - 1}] (class ids); offending values: "
            f"{_excerpts([int(v) for v in bad.tolist()])}"
        )
    return arr.astype(np.int64)


def class_indices(
    labels: np.ndarray, classes: Sequence[int | str], names: Sequence[str]
) -> np.ndarray:
    """Indices of the rows whose label is one of ``classes`` (ids or class names).

    Raises:
        DataError: an unknown class, or classes that select no row.
    """
    wanted: set[int] = set()
    for c in classes:
        if isinstance(c, str) and c.strip().lstrip("-").isdigit():
            c = int(c)
        if isinstance(c, int) and not isinstance(c, bool):
            if not 0 <= c < max(len(names), 1):
                raise DataError(f"class {c} does not exist; the classes are 0..{len(names) - 1}")
            wanted.add(c)
        elif isinstance(c, str) and c in names:
            wanted.add(list(names).index(c))
        else:
            raise DataError(
                f"class {excerpt(c)} is neither a class id nor a class name; names: "
                f"{', '.join(names[:20])}"
            )
    idx = np.flatnonzero(np.isin(labels, sorted(wanted))).astype(np.int64)
    if idx.size == 0:
        raise DataError(f"no training row has class {sorted(wanted)}: choose other classes")
    return idx


def _from_mask(mask: np.ndarray, n: int, what: str) -> np.ndarray:
    if mask.ndim != 1 or mask.shape[0] != n:
        raise DataError(
            f"{what} is a boolean mask of shape {mask.shape}; a mask needs exactly one entry per "
            f"training row ({n}), or give integer indices instead"
        )
    idx = np.flatnonzero(mask).astype(np.int64)
    if idx.size == 0:
        raise DataError(f"{what} is a boolean mask that selects no row; a forget set needs one")
    return idx


def _read_txt(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8-sig")  # a BOM is not content
    values: list[Any] = []
    bad: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for token in line.split("#", 1)[0].replace(",", " ").split():
            value = _parse_int_token(token)
            if value is None:
                bad.append(f"line {number}: {excerpt(token)}")
            else:
                values.append(value)
    if bad:
        more = f" ({len(bad)} non-integer values in all)" if len(bad) > 1 else ""
        raise DataError(
            f"index file {path} must hold integers separated by spaces, commas or new lines; "
            f"offending values: {bad[0]}{more}"
        )
    return values


def _parse_int_token(token: str) -> int | None:
    try:
        return int(token)
    except ValueError:
        try:
            value = float(token)
        except ValueError:
            return None
        return int(value) if value.is_integer() else None


def _read_json(path: Path) -> Any:
    try:
        values = json.loads(path.read_text(encoding="utf-8-sig"))
    except RecursionError:
        raise DataError(
            f"index file {path} is nested too deeply: expected a flat JSON list of integers "
            'or {"indices": [...]}'
        ) from None
    if isinstance(values, dict):
        values = values.get("indices")
    if not isinstance(values, list) or any(isinstance(v, list | dict) for v in values):
        raise DataError(
            f'index file {path} must hold a flat JSON list of integers or {{"indices": [...]}}'
        )
    wrong = [v for v in values if v is None or isinstance(v, str)]
    if wrong:
        raise DataError(
            f"index file {path} must hold integers; offending values: {_excerpts(wrong)}"
        )
    if values and all(isinstance(v, bool) for v in values):
        return np.asarray(values, dtype=bool)
    if any(isinstance(v, bool) for v in values):
        raise DataError(f"index file {path} mixes booleans and numbers: give integers only")
    return values


def _read_torch(path: Path) -> Any:
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise DataError(
            f"cannot read index file {path} ({type(exc).__name__}); a .pt/.pth forget set must "
            "be a tensor or a list of integers saved with torch.save (read without running code)"
        ) from None
    if isinstance(obj, dict):
        found = [obj[k] for k in ("indices", "forget_indices", "forget", "mask") if k in obj]
        obj = found[0] if len(found) == 1 else None
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy()
    if isinstance(obj, list | tuple) and all(isinstance(v, int) for v in obj):
        if obj and all(isinstance(v, bool) for v in obj):
            return np.asarray(obj, dtype=bool)
        return list(obj)
    raise DataError(
        f"index file {path} must hold a 1-D tensor (or list) of indices or a boolean mask, or a "
        "dict with one of 'indices', 'forget_indices', 'forget', 'mask'"
    )


def _npy_header(path: Path, limit: int, exact: int | None) -> None:
    """Check an ``.npy`` file's header before its data are read: a parsable header, a 1-D
    array of at most ``limit`` entries, and as many data bytes as the header declares."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read(fh)
            offset = fh.tell()
    except Exception as exc:  # a damaged header fails in the parser's own ways
        raise DataError(
            f"cannot read index file {path}: its .npy header is damaged "
            f"({type(exc).__name__}); re-save it with numpy.save"
        ) from None
    if not isinstance(shape, tuple) or len(shape) != 1:
        raise DataError(
            f"index file {path} holds an array of shape {excerpt(str(shape), 40)}; a forget set "
            "is a 1-D list of indices or a boolean mask"
        )
    count = int(shape[0])
    if exact is not None and dtype.kind == "b" and count != exact:
        raise DataError(
            f"index file {path} is a boolean mask of {count} entries; a mask needs exactly one "
            f"entry per training row ({exact}), or give integer indices instead"
        )
    if count > limit:
        raise DataError(
            f"index file {path} declares {count} entries but a forget set of this training set "
            f"holds at most {limit}: check that the file belongs to this dataset"
        )
    if dtype.hasobject:
        raise DataError(f"index file {path} holds Python objects: save integers (numpy int64)")
    if path.stat().st_size - offset < count * dtype.itemsize:
        raise DataError(
            f"index file {path} is truncated: its header declares {count} entries but the file "
            "holds fewer; re-save it"
        )


def _check_file_size(path: Path, suffix: str, limit: int) -> None:
    """Refuse a text/JSON/.pt index file larger than ``limit`` entries can take."""
    per_entry = TEXT_BYTES_PER_ENTRY if suffix in (".txt", ".json") else PT_BYTES_PER_ENTRY
    allowed = per_entry * limit + _SLACK_BYTES
    size = path.stat().st_size
    if size > allowed:
        raise DataError(
            f"index file {path} has {size} bytes, more than a forget set of at most {limit} "
            f"entries takes ({allowed} bytes): check that the file belongs to this dataset"
        )


def load_index_file(path: str | Path, n_train: int | None) -> np.ndarray:
    """Read a forget set (indices into the training split).

    Formats: ``.npy`` (integers or a boolean mask), ``.txt`` (integers separated by whitespace
    or commas, ``#`` comments, UTF-8 with or without a byte-order mark), ``.json`` (a list of
    integers or booleans, or ``{"indices": [...]}``), ``.pt``/``.pth`` (a tensor, a list or a
    dict with ``indices``/``forget``/``mask``; read with ``weights_only``). A boolean mask must
    have one entry per training row.

    ``n_train`` ``None`` means the training-set size is not known yet (checking a workspace
    without loading its data): indices are then checked against :data:`MAX_INDEX_ENTRIES` and
    a mask of any length is accepted (its length is checked once the data are loaded).

    The file's size (an ``.npy`` header's shape) is checked against ``n_train`` before its
    data are read.

    Returns:
        int64 array ``(k,)``, in file order (a mask gives increasing order).

    Raises:
        DataError: missing/unreadable/oversized file, non-integers, out-of-range values,
            duplicates, a mask of the wrong length or an empty set (the message names a few
            offending values).
    """
    path = Path(path)
    known = n_train is not None
    n = (
        check_int(n_train, "n_train (the training-set size)", minimum=1, error=DataError)
        if known
        else MAX_INDEX_ENTRIES
    )
    suffix = path.suffix.lower()
    if suffix not in INDEX_SUFFIXES:
        raise DataError(f"index file {path} must end in {', '.join(INDEX_SUFFIXES)}")
    if not path.is_file():
        raise DataError(f"index file {path} does not exist; check the path")
    try:
        if suffix == ".npy":
            _npy_header(path, n, n if known else None)
            values: Any = np.load(path, allow_pickle=False)
        else:
            _check_file_size(path, suffix, n)
            read = {".json": _read_json, ".txt": _read_txt}.get(suffix, _read_torch)
            values = read(path)
    except DataError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        kind = type(exc).__name__
        raise DataError(
            f"cannot read index file {path} ({kind}); re-save it as {suffix} indices"
        ) from None
    if isinstance(values, list) and not values:
        raise DataError(f"index file {path} is empty; a forget set needs at least one index")
    if isinstance(values, np.ndarray) and values.dtype.kind == "b":
        return _from_mask(values, n if known else values.size, f"index file {path}")
    idx = as_index_array(values, n, f"index file {path}")
    check_unique(idx, f"index file {path}")
    return idx


def save_index_file(path: str | Path, indices: Sequence[int] | np.ndarray) -> Path:
    """Write indices as ``.npy`` (int64), ``.txt`` (one per line) or ``.json`` (a list),
    atomically.

    Raises:
        DataError: an unsupported suffix, non-integer, negative, duplicate or empty indices.
    """
    path = Path(path)
    arr = np.asarray(indices)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
        raise DataError(
            f"indices must be a non-empty 1-D integer array, got {arr.dtype} {arr.shape}"
        )
    if arr.dtype.kind == "i" and (arr < 0).any():
        raise DataError(
            f"indices must be non-negative; offending values: {arr[arr < 0][:10].tolist()}"
        )
    if arr.dtype.kind == "u" and (arr > _INT64_MAX).any():
        raise DataError("indices must be below 2**63")
    arr = arr.astype(np.int64)
    check_unique(arr, "indices")
    if path.suffix == ".npy":
        buffer = io.BytesIO()
        np.save(buffer, arr)
        content = buffer.getvalue()
    elif path.suffix == ".txt":
        content = ("\n".join(str(int(v)) for v in arr) + "\n").encode()
    elif path.suffix == ".json":
        content = json.dumps([int(v) for v in arr]).encode()
    else:
        raise DataError(f"index file {path} must end in .npy, .txt or .json")
    return atomic_write_bytes(path, content)
