"""Precomputed activations: features a model produced elsewhere, read from ``.npz``/``.parquet``.

A file holds, per split (``train`` = D_tr rows, ``test`` = D_te rows, in the dataset's order),
one or more *layers* of ``(n, d)`` numeric features, optionally integer labels, a boolean
``forget`` mask over the training rows and, for a file that holds several models, a ``model``
column. The accepted layouts (``docs/bring-your-own.md`` shows how to export each):

``.npz``, split-prefixed
    ``train_<layer>`` and ``test_<layer>`` arrays ``(n, d)`` (``x_train``/``x_test`` form the
    layer ``"precomputed"``), optional ``y_train``/``y_test`` and ``forget``.
``.npz``, one row per sample
    a ``split`` array ``(N,)`` of ``"train"``/``"test"`` and one ``(N, d)`` array per layer
    (named by its key, e.g. ``hidden_states``); optional ``label``/``labels``/``y`` ``(N,)``,
    ``forget`` (``(N,)`` or one entry per training row), ``model`` ``(N,)``, ``index``.
``.npz``, index arrays
    ``train_idx`` and ``test_idx`` (integer row numbers) selecting the rows of ``(N, d)`` layer
    arrays, in the dataset's order (rows may be stored in any order); optional labels and
    ``forget`` as above. With a ``split`` array as well, an index array takes precedence for
    its split and every row it selects must be marked as that split.
``.parquet``
    one row per sample with a ``split`` column; every other numeric column is a feature
    (columns ``<layer>/<j>`` form layer ``<layer>``, unprefixed ones ``"precomputed"``), a
    list-valued column is a whole layer named after the column; optional ``label``, ``forget``,
    ``index`` and ``model`` columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.errors import DataError
from sde_core.inputs.indices import as_index_array, as_labels, excerpt

__all__ = ["PrecomputedActivations", "load_precomputed", "npz_arrays"]

_SPLITS = ("train", "test")
_LABEL_KEYS = ("label", "labels", "y")
_RESERVED = {"split", "forget", "index", "model", "classes", "train_idx", "test_idx", *_LABEL_KEYS}
_LAYOUTS = (
    "expected one of: (1) arrays train_<layer> and test_<layer> of shape (n, d) (or x_train and "
    "x_test); (2) a 'split' array of 'train'/'test' with one (N, d) array per layer; (3) "
    "'train_idx' and 'test_idx' row numbers into (N, d) layer arrays (with or without 'split') — "
    "see docs/bring-your-own.md"
)


@dataclass
class PrecomputedActivations:
    """Activations computed elsewhere: ``features[split][layer]`` is an ``(n, d)`` float32 array.

    ``forget_mask`` (bool, length of the train split) marks the forget set when the file had one;
    ``labels`` holds int labels per split when the file had them.
    """

    features: dict[str, dict[str, np.ndarray]]
    forget_mask: np.ndarray | None
    source: Path
    labels: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def layers(self) -> list[str]:
        """Layer names available in both splits."""
        return sorted(set(self.features["train"]) & set(self.features["test"]))

    def get(self, split: str, layer: str) -> np.ndarray:
        """The ``(n, d)`` float32 activations of ``layer`` on ``split``.

        Raises:
            DataError: unknown split or layer (the message lists the valid ones).
        """
        if split not in self.features:
            raise DataError(
                f"split {split!r} is not in {self.source}; use one of {sorted(self.features)}"
            )
        if layer not in self.features[split]:
            raise DataError(
                f"layer {layer!r} is not in {self.source}; it holds {', '.join(self.layers)}"
            )
        return self.features[split][layer]


def npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` (read without pickles).

    Raises:
        DataError: unreadable file, or a member that is not a ``.npy`` array.
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, MemoryError, KeyError) as exc:
        raise DataError(
            f"cannot read {path} ({type(exc).__name__}); it must be an .npz of numpy arrays "
            "saved without pickles (numpy.savez)"
        ) from None
    except Exception as exc:  # zipfile/zlib errors of a corrupt archive
        raise DataError(f"cannot read {path} ({type(exc).__name__}); re-save it") from None
    odd = [k for k, v in arrays.items() if not isinstance(v, np.ndarray)]
    if odd:
        raise DataError(
            f"{path} has member(s) {[excerpt(k) for k in odd[:5]]} that are not .npy arrays; an "
            ".npz must hold only numpy arrays (numpy.savez)"
        )
    return arrays


def _features(arr: np.ndarray, where: str) -> np.ndarray:
    if arr.dtype.kind not in "biuf":
        raise DataError(f"{where} must hold numbers, got {arr.dtype} values")
    if arr.ndim == 3:
        raise DataError(
            f"{where} has shape {arr.shape} (one vector per token?): pool it to one vector per "
            "sample first, e.g. the mean over the sequence axis or the first token"
        )
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DataError(f"{where} must be an (n, d) array with n, d >= 1, got shape {arr.shape}")
    with np.errstate(over="ignore", invalid="ignore"):  # out-of-range values become inf: refused
        out = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(out).all():
        raise DataError(f"{where} holds NaN/inf values (or values beyond float32): fix the export")
    return out


def _split_array(values: np.ndarray, where: str) -> np.ndarray:
    if values.ndim != 1 or values.dtype.kind not in "US":
        raise DataError(
            f"{where} must be a 1-D array of 'train'/'test' strings, got {values.dtype}"
        )
    text = values.astype(str)
    bad = sorted(set(text.tolist()) - set(_SPLITS))
    if bad:
        raise DataError(
            f"{where} has values {[excerpt(b) for b in bad[:5]]}; use only 'train' and 'test'"
        )
    return text


def _model_rows(models: np.ndarray | None, model: str | None, path: Path) -> np.ndarray | None:
    """Boolean row selection for ``model`` in a file with a model column (None: all rows)."""
    if models is None:
        return None
    names = models.astype(str)
    present = sorted(set(names.tolist()))
    if model is None:
        if len(present) == 1:
            return None
        raise DataError(
            f"{path} holds several models ({', '.join(excerpt(p) for p in present[:8])}) in its "
            "'model' column: name the model whose activations to read"
        )
    keep = names == model
    if not keep.any():
        raise DataError(
            f"{path} has no rows of model {model!r}; its 'model' column holds "
            f"{', '.join(excerpt(p) for p in present[:8])}"
        )
    return keep


_META_NAME = re.compile(r"^(.*_)?(idx|indices|index|mask)$")
_FORGET_INDICES = ("forget_idx", "forget_indices", "forget_index")


def _is_metadata(key: str, arr: np.ndarray) -> bool:
    """Whether an array beside the layers is row metadata (an index or mask array such as
    ``forget_mask``, ``forget_idx`` or ``retain_idx``): 1-D integers or booleans named so."""
    return bool(_META_NAME.match(key)) and arr.ndim == 1 and arr.dtype.kind in "biu"


def _forget_from_metadata(arrays: dict[str, np.ndarray], path: Path) -> np.ndarray | None:
    """The ``forget`` mask, or the one a ``forget_mask`` / ``forget_idx`` array gives: a mask
    over the rows it is stored for, or indices of D_tr rows (a boolean mask is returned)."""
    if "forget" in arrays:
        return arrays["forget"]
    if "forget_mask" in arrays:
        return arrays["forget_mask"]
    key = next((k for k in _FORGET_INDICES if k in arrays), None)
    if key is None:
        return None
    return np.asarray(arrays[key]).reshape(-1)  # indices: turned into a mask by the caller


def _by_rows(arrays: dict[str, np.ndarray], path: Path, model: str | None) -> dict[str, Any]:
    """Layouts (2) and (3): one row per sample (``split``) or ``train_idx``/``test_idx``."""
    if "split" in arrays:
        split = _split_array(arrays["split"], f"{path}: 'split'")
        n = split.shape[0]
    else:
        n = None
    keep = _model_rows(arrays.get("model"), model, path)
    layers = {k: v for k, v in arrays.items() if k not in _RESERVED and not _is_metadata(k, v)}
    if not layers:
        raise DataError(f"{path} has no feature arrays besides {sorted(arrays)}; {_LAYOUTS}")
    rows = {k: v.shape[0] if v.ndim else 0 for k, v in layers.items()}
    if len(set(rows.values())) != 1:
        raise DataError(f"{path}: layer arrays have different row counts {rows}")
    total = next(iter(rows.values()))
    if n is not None and total != n:
        raise DataError(f"{path}: 'split' has {n} entries but the layer arrays have {total} rows")
    if keep is not None and keep.shape != (total,):
        raise DataError(f"{path}: 'model' must have one entry per row ({total})")
    label_key = next((k for k in _LABEL_KEYS if k in arrays), None)
    labels_all = (
        None if label_key is None else as_labels(arrays[label_key], f"{path}: '{label_key}'", total)
    )
    select: dict[str, np.ndarray] = {}
    for s in _SPLITS:
        key = f"{s}_idx"
        if key in arrays:  # the rows of this split, in the dataset's order
            select[s] = as_index_array(arrays[key], total, f"{path}: '{key}'")
            if n is not None and (split[select[s]] != s).any():
                raise DataError(
                    f"{path}: '{key}' selects rows whose 'split' is not {s!r}; the two arrays "
                    "disagree: fix the export (or keep only one of them)"
                )
            if keep is not None and not keep[select[s]].all():
                raise DataError(f"{path}: '{key}' selects rows of other models than {model!r}")
        else:  # no index array: the rows 'split' marks (see _read_npz), in file order
            mask = split == s
            if keep is not None:
                mask &= keep
            select[s] = np.flatnonzero(mask)
    out: dict[str, Any] = {"features": {s: {} for s in _SPLITS}, "labels": {}}
    for s in _SPLITS:
        for key, arr in layers.items():
            out["features"][s][key] = _features(arr, f"{path}: '{key}'")[select[s]]
        if labels_all is not None:
            out["labels"][s] = labels_all[select[s]]
    forget = _forget_from_metadata(arrays, path)
    out["forget_indices"] = any(k in arrays for k in _FORGET_INDICES) and "forget" not in arrays
    out["forget_indices"] = out["forget_indices"] and "forget_mask" not in arrays
    if forget is not None and not out["forget_indices"]:
        forget = np.asarray(forget)
        if forget.ndim == 1 and forget.shape[0] == total:
            forget = forget[select["train"]]
    out["forget"] = forget
    return out


def _prefixed(arrays: dict[str, np.ndarray], path: Path) -> dict[str, Any]:
    """Layout (1): ``train_<layer>``/``test_<layer>``, ``x_*``, ``y_*``, ``forget``."""
    out: dict[str, Any] = {"features": {s: {} for s in _SPLITS}, "labels": {}}
    for key, arr in arrays.items():
        for s in _SPLITS:
            if _is_metadata(key, arr):
                continue
            if key.startswith(f"{s}_") and len(key) > len(s) + 1:
                out["features"][s][key[len(s) + 1 :]] = _features(arr, f"{path}: '{key}'")
            elif key == f"x_{s}":
                out["features"][s]["precomputed"] = _features(arr, f"{path}: '{key}'")
    for s in _SPLITS:
        if f"y_{s}" in arrays and out["features"][s]:
            rows = next(iter(out["features"][s].values())).shape[0]
            out["labels"][s] = as_labels(arrays[f"y_{s}"], f"{path}: 'y_{s}'", rows)
    out["forget"] = _forget_from_metadata(arrays, path)
    out["forget_indices"] = out["forget"] is not None and not (
        "forget" in arrays or "forget_mask" in arrays
    )
    return out


def _read_npz(path: Path, model: str | None) -> dict[str, Any]:
    arrays = npz_arrays(path)
    if "split" in arrays or ("train_idx" in arrays and "test_idx" in arrays):
        return _by_rows(arrays, path, model)
    if any(k.startswith(("train_", "test_")) or k in ("x_train", "x_test") for k in arrays):
        return _prefixed(arrays, path)
    shapes = {excerpt(k, 24): tuple(v.shape) for k, v in list(arrays.items())[:8]}
    raise DataError(f"{path} holds {shapes}, which is not an activations layout; {_LAYOUTS}")


def _list_column(values: Any, where: str) -> np.ndarray | None:
    """A list-valued column as an ``(n, d)`` array, or None when it is not one."""
    items = list(values)
    if not items or not all(isinstance(v, list | tuple | np.ndarray) for v in items):
        return None
    lengths = {len(v) for v in items}
    if len(lengths) != 1:
        raise DataError(f"{where} holds lists of different lengths {sorted(lengths)[:5]}")
    try:
        return np.stack([np.asarray(v) for v in items])
    except (ValueError, TypeError):
        raise DataError(f"{where} must hold lists of numbers") from None


def _read_parquet(path: Path, model: str | None) -> dict[str, Any]:
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except Exception as exc:
        raise DataError(f"cannot read {path} ({type(exc).__name__}); re-export it") from None
    columns = [str(c) for c in frame.columns]
    frame.columns = columns
    if "split" not in columns:
        raise DataError(
            f"{path} needs a 'split' column with values 'train'/'test'; it has "
            f"{[excerpt(c, 24) for c in columns[:10]]}"
        )
    split = frame["split"].astype(str).to_numpy()
    bad = sorted(set(split.tolist()) - set(_SPLITS))
    if bad:
        raise DataError(
            f"{path} column 'split' has values {[excerpt(b) for b in bad[:5]]}; use only "
            "'train' and 'test'"
        )
    keep = _model_rows(frame["model"].to_numpy() if "model" in columns else None, model, path)
    groups: dict[str, list[str]] = {}
    lists: dict[str, np.ndarray] = {}
    for col in columns:
        if col in _RESERVED:
            continue
        dtype = frame[col].dtype
        if getattr(dtype, "kind", "O") in "iuf":
            layer = col.split("/", 1)[0] if "/" in col else "precomputed"
            groups.setdefault(layer, []).append(col)
        elif getattr(dtype, "kind", "O") == "O":
            stacked = _list_column(frame[col].to_numpy(), f"{path}: column {excerpt(col, 24)}")
            if stacked is not None:
                lists[col] = stacked
    if not groups and not lists:
        raise DataError(
            f"{path} has no feature columns: expected numeric columns (one per dimension, named "
            "'<layer>/<j>') or list-valued columns (one list per row)"
        )
    labels_all = (
        as_labels(frame["label"].to_numpy(), f"{path}: 'label'", len(frame))
        if "label" in columns
        else None
    )
    out: dict[str, Any] = {"features": {s: {} for s in _SPLITS}, "labels": {}}
    for s in _SPLITS:
        rows = split == s
        if keep is not None:
            rows &= keep
        for layer, cols in groups.items():
            values = frame.loc[rows, cols].to_numpy()
            out["features"][s][layer] = _features(values, f"{path}: layer {layer!r}")
        for layer, stacked in lists.items():
            out["features"][s][layer] = _features(stacked[rows], f"{path}: column {layer!r}")
        if labels_all is not None:
            out["labels"][s] = labels_all[rows]
        if s == "train" and "forget" in columns:
            out["forget"] = frame.loc[rows, "forget"].to_numpy()
    out.setdefault("forget", None)
    return out


def load_precomputed(path: str | Path, model: str | None = None) -> PrecomputedActivations:
    """Read precomputed activations in one of the layouts of this module's docstring.

    Args:
        path: the ``.npz`` or ``.parquet`` file.
        model: the model to read from a file with a ``model`` column (a file holding one model
            needs none).

    Raises:
        DataError: unreadable file, an unknown layout (the message lists the accepted ones),
            non-numeric or non-finite features, labels or masks that do not match the rows.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"activations file {path} does not exist; check the path")
    if path.suffix == ".npz":
        raw = _read_npz(path, model)
    elif path.suffix == ".parquet":
        raw = _read_parquet(path, model)
    else:
        raise DataError(f"activations file {path} must be .npz or .parquet")
    features = raw["features"]
    for split in _SPLITS:
        if not features[split]:
            raise DataError(f"{path} has no {split} activations; {_LAYOUTS}")
        sizes = {layer: arr.shape[0] for layer, arr in features[split].items()}
        if len(set(sizes.values())) != 1:
            raise DataError(f"{path}: {split} layers have different row counts {sizes}")
        if 0 in sizes.values():
            raise DataError(f"{path} has no {split} rows")
    n_train = next(iter(features["train"].values())).shape[0]
    forget = raw["forget"]
    mask = None
    if forget is not None and raw.get("forget_indices"):
        forget = as_index_array(np.asarray(forget), n_train, f"{path}: forget indices")
        forget = np.isin(np.arange(n_train), forget)
    if forget is not None:
        forget = np.asarray(forget)
        if forget.dtype.kind not in "biu" or forget.shape != (n_train,):
            raise DataError(
                f"{path}: forget must be a boolean mask with one entry per training row "
                f"({n_train}), got {forget.dtype} {forget.shape}"
            )
        if forget.dtype.kind != "b" and not np.isin(forget, (0, 1)).all():
            raise DataError(f"{path}: forget must hold only true/false (or 1/0)")
        mask = forget.astype(bool)
    return PrecomputedActivations(features, mask, path, dict(raw["labels"]))
