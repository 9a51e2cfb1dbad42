"""One reader per dataset kind, in one table, :data:`READERS` (local files only; nothing is
downloaded).

A reader turns a kind's files into ``{"train": (x, y), "test": (x, y), "files": [...]}``
(optionally ``"class_names"``; an ImageFolder's ``x`` are image paths, read on access), which
:func:`sde_core.inputs.data.load_dataset` subsets, fingerprints and wraps. Text datasets are
tokenised records, not arrays (:mod:`sde_core.inputs.text_data`). The kinds:

- ``cifar10`` / ``cifar100``: the python batches (``cifar-10-batches-py/``, ``cifar-100-python/``).
- ``svhn``: ``train_32x32.mat`` and ``test_32x32.mat``.
- ``fashion-mnist``: the four idx files (``.gz`` or not), e.g. Debian's ``dataset-fashion-mnist``
  package at ``/usr/share/datasets/fashion-mnist``.
- ``imagefolder``: ``train/<class>/*`` and ``test/<class>/*`` (or ``val/``), including
  Tiny-ImageNet's ``train/<wnid>/images/*.JPEG`` with ``val/val_annotations.txt``.
- ``npz``: arrays ``x_train, y_train, x_test, y_test`` in one ``.npz``, or ``train.npz`` and
  ``test.npz`` (keys ``x``, ``y``) in a folder.
- ``mnist1d``: generated offline with the ``mnist1d`` package, cached to an ``.npz``.
- ``activations``: precomputed activations (``.npz`` or ``.parquet``), so any model can be
  audited without loading it (see :mod:`sde_core.inputs.precomputed` for the layouts).
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import torch

from sde_core.common.fsio import atomic_write
from sde_core.common.hashing import stable_hash
from sde_core.errors import DataError
from sde_core.inputs.dataset_options import _check_options
from sde_core.inputs.indices import (
    MAX_CLASSES,
    as_labels,
    excerpt,
)
from sde_core.inputs.precomputed import PrecomputedActivations, load_precomputed, npz_arrays

__all__ = ["FASHION_CLASS_NAMES", "READERS", "DatasetReader", "read_idx"]
_SPLITS = ("train", "test")
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
#: Fashion-MNIST's class names, in label order.
FASHION_CLASS_NAMES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


_IDX_DTYPES: dict[int, npt.DTypeLike] = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an idx file (MNIST format), gzip-compressed or not.

    Returns:
        The array with the shape from the header (e.g. ``(N, 28, 28)`` uint8 images).

    Raises:
        DataError: unreadable file, bad magic number or a size that does not match the header.
    """
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read idx file {path}: {exc}; re-copy it") from exc
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise DataError(f"{path} is not an idx file (bad magic number); expected MNIST-format data")
    ndim = data[3]
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    offset = 4 + 4 * ndim
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(data) - offset != expected:
        raise DataError(
            f"{path} holds {len(data) - offset} data bytes but its header {dims} needs {expected}; "
            "the file is truncated or corrupt, re-copy it"
        )
    return (
        np.frombuffer(data, dtype=dtype, offset=offset)
        .reshape(dims)
        .astype(dtype.newbyteorder("="))
    )


class _SafeUnpickler(pickle.Unpickler):
    """Unpickler for CIFAR batches: only numpy arrays, dicts, lists, bytes and strings."""

    _ALLOWED: ClassVar[set[tuple[str, str]]] = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise DataError(f"refusing to unpickle {module}.{name}: CIFAR batches hold only arrays")
        return super().find_class(module, name)


def _load_cifar_pickle(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            obj = _SafeUnpickler(io.BytesIO(fh.read()), encoding="bytes").load()
    except DataError:
        raise
    except Exception as exc:
        raise DataError(
            f"cannot read CIFAR batch {path} ({type(exc).__name__}: {exc}); re-extract it"
        ) from exc
    if not isinstance(obj, dict):
        raise DataError(f"{path} is not a CIFAR batch (expected a dict)")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _missing_files_error(kind: str, root: Path, files: list[str], hint: str) -> DataError:
    return DataError(
        f"{kind} data not found: place {', '.join(files)} under {root} ({hint}); "
        "nothing is downloaded"
    )


def _read_cifar(root: Path, hundred: bool) -> dict[str, Any]:
    folder_name = "cifar-100-python" if hundred else "cifar-10-batches-py"
    folder = root / folder_name if (root / folder_name).is_dir() else root
    if hundred:
        split_files = {"train": ["train"], "test": ["test"]}
        meta_file = "meta"
        label_key, names_key = "fine_labels", "fine_label_names"
    else:
        split_files = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
        meta_file = "batches.meta"
        label_key, names_key = "labels", "label_names"
    needed = [*split_files["train"], *split_files["test"]]
    missing = [f for f in needed if not (folder / f).is_file()]
    if missing:
        url = "cifar-100-python.tar.gz" if hundred else "cifar-10-python.tar.gz"
        raise _missing_files_error(
            "CIFAR-100" if hundred else "CIFAR-10",
            root / folder_name,
            missing,
            f"extract {url} from https://www.cs.toronto.edu/~kriz/ into {root}",
        )
    out: dict[str, Any] = {"files": [folder / f for f in needed]}
    for split in _SPLITS:
        xs, ys = [], []
        for name in split_files[split]:
            batch = _load_cifar_pickle(folder / name)
            if "data" not in batch or label_key not in batch:
                raise DataError(
                    f"{folder / name} lacks 'data' or '{label_key}'; it is not a CIFAR batch"
                )
            xs.append(
                np.asarray(batch["data"], dtype=np.uint8)
                .reshape(-1, 3, 32, 32)
                .transpose(0, 2, 3, 1)
            )
            ys.append(as_labels(np.asarray(batch[label_key]), f"{folder / name} {label_key}"))
        out[split] = (np.concatenate(xs), np.concatenate(ys))
    n_classes = 100 if hundred else 10
    names = [str(i) for i in range(n_classes)]
    if (folder / meta_file).is_file():
        meta = _load_cifar_pickle(folder / meta_file)
        raw_names = meta.get(names_key, [])
        if len(raw_names) == n_classes:
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in raw_names]
        out["files"].append(folder / meta_file)
    out["class_names"] = names
    return out


def _read_svhn(root: Path) -> dict[str, Any]:
    from scipy.io import loadmat

    needed = ["train_32x32.mat", "test_32x32.mat"]
    missing = [f for f in needed if not (root / f).is_file()]
    if missing:
        raise _missing_files_error(
            "SVHN", root, missing, "format 2 files from http://ufldl.stanford.edu/housenumbers/"
        )
    out: dict[str, Any] = {
        "files": [root / f for f in needed],
        "class_names": [str(i) for i in range(10)],
    }
    for split, name in zip(_SPLITS, needed, strict=True):
        try:
            mat = loadmat(root / name)
        except Exception as exc:
            raise DataError(f"cannot read {root / name}: {exc}; re-copy it") from exc
        x = np.asarray(mat["X"], dtype=np.uint8).transpose(3, 0, 1, 2)
        y = np.asarray(mat["y"], dtype=np.int64).reshape(-1) % 10
        out[split] = (x, y)
    return out


def _find_idx(root: Path, stem: str) -> Path | None:
    for folder in (root, root / "FashionMNIST" / "raw", root / "fashion-mnist", root / "raw"):
        for suffix in ("", ".gz"):
            if (folder / f"{stem}{suffix}").is_file():
                return folder / f"{stem}{suffix}"
    return None


def _read_fashion(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"files": [], "class_names": list(FASHION_CLASS_NAMES)}
    stems = [s for pair in _FASHION_FILES.values() for s in pair]
    missing = [s for s in stems if _find_idx(root, s) is None]
    if missing:
        raise _missing_files_error(
            "Fashion-MNIST",
            root,
            [f"{s}.gz" for s in missing],
            "or install Debian's dataset-fashion-mnist and use "
            "root=/usr/share/datasets/fashion-mnist",
        )
    for split, (img_stem, lab_stem) in _FASHION_FILES.items():
        img_path, lab_path = _find_idx(root, img_stem), _find_idx(root, lab_stem)
        assert img_path is not None and lab_path is not None
        x, y = read_idx(img_path), read_idx(lab_path).astype(np.int64)
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DataError(
                f"{img_path} ({x.shape}) and {lab_path} ({y.shape}) do not match; re-copy them"
            )
        out[split] = (x, y)
        out["files"] += [img_path, lab_path]
    return out


def _class_dirs(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir())


def _images_in(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*") if p.suffix.lower() in _IMAGE_SUFFIXES and p.is_file()
    )


def _read_imagefolder(root: Path) -> dict[str, Any]:
    train_dir = root / "train"
    test_dir = next((root / n for n in ("test", "val") if (root / n).is_dir()), None)
    if not train_dir.is_dir() or test_dir is None:
        raise DataError(
            f"imagefolder root {root} needs train/<class>/<images> and test/<class>/<images> "
            "(or val/ with Tiny-ImageNet's val_annotations.txt)"
        )
    classes = _class_dirs(train_dir)
    if not classes:
        raise DataError(f"{train_dir} has no class folders; put images under train/<class>/")
    lookup = {c: i for i, c in enumerate(classes)}
    out: dict[str, Any] = {"class_names": classes, "files": []}
    train = [(p, lookup[c]) for c in classes for p in _images_in(train_dir / c)]
    annotations = test_dir / "val_annotations.txt"
    if annotations.is_file():
        test = []
        for line in annotations.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) < 2:
                continue
            if parts[1] not in lookup:
                raise DataError(
                    f"{annotations} names class {parts[1]!r}, which has no train/ folder"
                )
            test.append((test_dir / "images" / parts[0], lookup[parts[1]]))
    else:
        unknown = sorted(set(_class_dirs(test_dir)) - set(classes))
        if unknown:
            raise DataError(
                f"{test_dir} has class folders {unknown} that train/ lacks; make them match"
            )
        test = [(p, lookup[c]) for c in _class_dirs(test_dir) for p in _images_in(test_dir / c)]
    for split, rows in zip(_SPLITS, (train, test), strict=True):
        if not rows:
            raise DataError(
                f"no images found for split {split!r} under {root}; "
                f"supported: {sorted(_IMAGE_SUFFIXES)}"
            )
        paths = [p for p, _ in rows]
        out[split] = (paths, np.array([label for _, label in rows], dtype=np.int64))
    return out


def _read_npz(root: Path, options: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("x_train", "y_train", "x_test", "y_test")
    if root.is_file():
        arrays = npz_arrays(root)
        classes = arrays.get("classes")
        if "test_path" in options:
            test = npz_arrays(Path(options["test_path"]))
            renamed = {"x_train": arrays.get("x"), "y_train": arrays.get("y")}
            renamed |= {"x_test": test.get("x"), "y_test": test.get("y")}
            arrays = {k: v for k, v in renamed.items() if v is not None}
            files = [root, Path(options["test_path"])]
        else:
            files = [root]
        if any(arrays.get(k) is None for k in keys):
            found = [excerpt(k, 24) for k in sorted(arrays)[:12]]
            raise DataError(
                f"{root} needs arrays {keys} (or x, y plus options.test_path), optionally "
                f"'classes' (class names); it has {found}"
            )
    else:
        files = [root / "train.npz", root / "test.npz"]
        if not all(f.is_file() for f in files):
            raise DataError(
                f"{root} needs train.npz and test.npz (keys x, y), or pass a single .npz file"
            )
        tr, te = npz_arrays(files[0]), npz_arrays(files[1])
        if not {"x", "y"} <= set(tr) or not {"x", "y"} <= set(te):
            raise DataError(f"train.npz and test.npz in {root} need arrays 'x' and 'y'")
        arrays = {"x_train": tr["x"], "y_train": tr["y"], "x_test": te["x"], "y_test": te["y"]}
        classes = tr.get("classes")
    out: dict[str, Any] = {"files": files}
    for split in _SPLITS:
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim < 2 or x.shape[0] == 0 or 0 in x.shape:
            raise DataError(
                f"x_{split} must hold one sample per row (n, ...) with n >= 1, got shape {x.shape}"
            )
        if x.dtype.kind not in "biuf":
            raise DataError(f"x_{split} must hold numbers, got {x.dtype} values")
        y = as_labels(y, f"y_{split}", rows=x.shape[0])
        if (
            x.ndim == 4
            and x.shape[1] in (1, 3)
            and x.shape[-1] not in (1, 3)
            and x.dtype == np.uint8
        ):
            x = x.transpose(0, 2, 3, 1)
        if x.ndim == 4 and x.shape[-1] == 1:
            x = x[..., 0]
        out[split] = (x, y)
    if classes is not None:
        out["class_names"] = _class_name_list(classes, out, root)
    return out


def _class_name_list(classes: np.ndarray, raw: Mapping[str, Any], root: Path) -> list[str]:
    """The npz ``classes`` entry as a list of names, one per class id."""
    if classes.ndim != 1 or classes.dtype.kind not in "US" or classes.size == 0:
        raise DataError(
            f"{root}: 'classes' must be a 1-D array of class-name strings, got "
            f"{classes.dtype} {classes.shape}"
        )
    top = max(int(raw[s][1].max()) if raw[s][1].size else -1 for s in _SPLITS)
    if classes.size <= top:
        raise DataError(
            f"{root}: 'classes' names {classes.size} classes but the labels go up to {top}: "
            "give one name per class id"
        )
    return [c.decode("utf-8", "replace") if isinstance(c, bytes) else str(c) for c in classes]


def _read_mnist1d(root: Path, options: Mapping[str, Any]) -> dict[str, Any]:
    _check_options(options)  # sizes are bounded before anything is generated
    params = {
        "num_samples": int(options.get("num_samples", 10_000)),
        "train_split": float(options.get("train_split", 0.6)),
        "seed": int(options.get("data_seed", 42)),
    }
    cache = root if root.suffix == ".npz" else root / f"mnist1d_{stable_hash(params)[:12]}.npz"
    if cache.is_file():
        arrays = npz_arrays(cache)
        try:
            stored = json.loads(str(arrays.get("params", "{}")))
        except (ValueError, RecursionError):
            stored = None
        if stored != params or not {"x", "y", "x_test", "y_test"} <= set(arrays):
            raise DataError(
                f"{cache} was generated with other settings or is not an mnist1d cache; "
                "delete it or change root"
            )
    else:
        arrays = _generate_mnist1d(params)
        atomic_write(cache, lambda tmp: np.savez(tmp, allow_pickle=False, **arrays))
    out: dict[str, Any] = {"files": [cache], "class_names": [str(i) for i in range(10)]}
    for split, (xk, yk) in zip(_SPLITS, (("x", "y"), ("x_test", "y_test")), strict=True):
        x = arrays[xk]
        if x.ndim != 2 or x.dtype.kind not in "iuf":
            raise DataError(f"{cache}: {xk} must be an (n, 40) float array; delete the cache")
        out[split] = (x.astype(np.float32), as_labels(arrays[yk], f"{cache}: {yk}", len(x)))
    return out


def _generate_mnist1d(params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Generate mnist1d offline, restoring the global RNG states the package overwrites."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.train_split, args.seed = (
        params["num_samples"],
        params["train_split"],
        params["seed"],
    )
    np_state, py_state, torch_state = (
        np.random.get_state(),  # noqa: NPY002 - mnist1d seeds the legacy global RNG
        random.getstate(),
        torch.get_rng_state(),
    )
    try:
        data = make_dataset(args)
    finally:
        np.random.set_state(np_state)  # noqa: NPY002 - restore what mnist1d overwrote
        random.setstate(py_state)
        torch.set_rng_state(torch_state)
    return {k: np.asarray(data[k]) for k in ("x", "y", "x_test", "y_test")} | {
        "params": np.array(json.dumps(params))
    }


def _num_classes(labels: Mapping[str, np.ndarray]) -> int:
    top = max(int(arr.max()) if arr.size else -1 for arr in labels.values())
    if top >= MAX_CLASSES:
        raise DataError(f"labels go up to {top}; at most {MAX_CLASSES} classes are supported")
    return top + 1


def _precomputed_raw(pre: PrecomputedActivations) -> dict[str, Any]:
    """Present precomputed activations like a dataset (first layer as inputs, labels or -1)."""
    layer = pre.layers[0] if pre.layers else next(iter(pre.features["train"]))
    raw: dict[str, Any] = {"files": [pre.source]}
    labels = pre.labels
    for s in _SPLITS:
        x = pre.features[s][layer]
        y = labels.get(s)
        raw[s] = (x, np.full(len(x), -1, dtype=np.int64) if y is None else y)
    if all(s in labels for s in _SPLITS):
        raw["class_names"] = [str(i) for i in range(_num_classes({s: raw[s][1] for s in _SPLITS}))]
    else:
        raw["class_names"] = []
    return raw


def _read_activations(root: Path, options: Mapping[str, Any]) -> dict[str, Any]:
    """Precomputed activations presented like a dataset, the file's contents under
    ``"precomputed"``."""
    pre = load_precomputed(root)
    return {**_precomputed_raw(pre), "precomputed": pre}


@dataclass(frozen=True)
class DatasetReader:
    """How one dataset kind is read.

    Attributes:
        kind: the spec's ``kind``.
        read: ``(root, options) -> raw``, the layout of this module's docstring.
        image_files: its ``x`` are image paths read on access (an ImageFolder), not arrays.
        root_hint: what its ``root`` names, for the message when there is none.
    """

    kind: str
    read: Callable[[Path, Mapping[str, Any]], dict[str, Any]]
    image_files: bool = False
    root_hint: str = "its folder or file"

    def __call__(self, root: Path | None, options: Mapping[str, Any]) -> dict[str, Any]:
        """The raw splits of the data at ``root``.

        Raises:
            DataError: no root, or files missing or malformed (the message names them).
        """
        if root is None:
            raise DataError(f"a {self.kind!r} dataset needs a root ({self.root_hint}); set root")
        return self.read(root, options)


#: Every array dataset kind, in the order the user is offered them.
READERS: dict[str, DatasetReader] = {
    reader.kind: reader
    for reader in (
        DatasetReader("cifar10", lambda root, _: _read_cifar(root, hundred=False)),
        DatasetReader("cifar100", lambda root, _: _read_cifar(root, hundred=True)),
        DatasetReader("svhn", lambda root, _: _read_svhn(root)),
        DatasetReader("fashion-mnist", lambda root, _: _read_fashion(root)),
        DatasetReader("imagefolder", lambda root, _: _read_imagefolder(root), image_files=True),
        DatasetReader("npz", _read_npz),
        DatasetReader(
            "mnist1d", _read_mnist1d,
            root_hint="a .npz file (or folder) to cache the generated arrays in",
        ),
        DatasetReader("activations", _read_activations),
    )
}  # fmt: skip
