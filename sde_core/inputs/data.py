"""Datasets (local files only, nothing is downloaded), subsets, fingerprints and index files.

:func:`load_dataset` turns a :class:`DatasetSpec` into a :class:`DatasetBundle` with ``train`` and
``test`` torch Datasets (deterministic test-time transforms: uint8 images become float32 in
[0, 1], channels first, optionally normalised), int64 label arrays, and a content
``fingerprint`` used as a cache key. Supported kinds:

- ``cifar10`` / ``cifar100``: the python batches (``cifar-10-batches-py/``, ``cifar-100-python/``).
- ``svhn``: ``train_32x32.mat`` and ``test_32x32.mat``.
- ``fashion-mnist``: the four idx files (``.gz`` or not), e.g. Debian's ``dataset-fashion-mnist``
  package at ``/usr/share/datasets/fashion-mnist``.
- ``imagefolder``: ``train/<class>/*`` and ``test/<class>/*`` (or ``val/``), including
  Tiny-ImageNet's ``train/<wnid>/images/*.JPEG`` with ``val/val_annotations.txt``.
- ``npz``: arrays ``x_train, y_train, x_test, y_test`` in one ``.npz``, or ``train.npz`` and
  ``test.npz`` (keys ``x``, ``y``) in a folder.
- ``mnist1d``: generated offline with the ``mnist1d`` package, cached to an ``.npz``.
- ``activations``: precomputed activations (``.npz`` or ``.parquet`` with a split column), so any
  model can be audited without loading it (see :class:`PrecomputedActivations`).

Forget sets are index files: :func:`load_index_file` / :func:`save_index_file`.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch.utils.data import Dataset

from sde_core.common.fsio import atomic_write, atomic_write_bytes
from sde_core.common.hashing import array_sha256, file_sha256, stable_hash
from sde_core.errors import DataError

__all__ = [
    "DATASET_KINDS",
    "ArrayDataset",
    "DatasetBundle",
    "DatasetSpec",
    "ImageFileDataset",
    "PrecomputedActivations",
    "load_dataset",
    "load_index_file",
    "load_precomputed",
    "read_idx",
    "save_index_file",
]

DATASET_KINDS = (
    "cifar10",
    "cifar100",
    "svhn",
    "fashion-mnist",
    "imagefolder",
    "npz",
    "mnist1d",
    "activations",
)
_SPLITS = ("train", "test")
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}
_FASHION_CLASSES = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]  # fmt: skip
_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


# ----------------------------------------------------------------------------------------------
# Spec and bundle
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetSpec:
    """What data to load.

    Attributes:
        kind: one of :data:`DATASET_KINDS`.
        root: folder or file the data lives in (for ``mnist1d`` the ``.npz`` cache file or folder).
        train_indices / test_indices: explicit subset (a sequence of ints or an index file path).
        train_size / test_size: random subset sizes drawn with ``seed`` (ignored when indices are
            given); ``None`` keeps the whole split.
        seed: seed of the random subsets.
        options: kind-specific settings: ``normalize`` (``[mean, std]`` per channel), ``image_size``
            (imagefolder), ``num_samples``/``train_split``/``data_seed`` (mnist1d), ``test_path``
            (npz/activations with a separate test file).
    """

    kind: str
    root: str | Path | None = None
    train_indices: Sequence[int] | str | Path | None = None
    test_indices: Sequence[int] | str | Path | None = None
    train_size: int | None = None
    test_size: int | None = None
    seed: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base_dir: str | Path | None = None) -> DatasetSpec:
        """Build from a mapping (e.g. a workspace.toml table); relative paths join ``base_dir``.

        Raises:
            DataError: unknown keys or a missing ``kind``.
        """
        allowed = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - allowed)
        if unknown or "kind" not in data:
            raise DataError(
                f"dataset table has unknown keys {unknown} or no 'kind'; "
                f"allowed keys: {sorted(allowed)}"
            )
        values = dict(data)
        if base_dir is not None:
            for key in ("root", "train_indices", "test_indices"):
                if isinstance(values.get(key), str | Path) and not Path(values[key]).is_absolute():
                    values[key] = Path(base_dir) / values[key]
        return cls(**values)


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


@dataclass
class DatasetBundle:
    """A loaded dataset (after subsetting).

    Attributes:
        spec: the spec it was loaded from.
        train / test: torch Datasets yielding ``(x: float32 tensor of input_shape, y: int)``.
        train_labels / test_labels: int64 arrays (``-1`` where labels are unknown).
        num_classes: number of classes (0 when unknown).
        input_shape: per-sample input shape, e.g. ``(1, 28, 28)`` or ``(40,)``.
        is_image: whether inputs are images (thumbnails available via :meth:`images`).
        class_names: one name per class.
        fingerprint: SHA-256 of what identifies the data (file hashes, subset, transform).
        source_indices: per split, the indices of the kept rows in the original split.
        precomputed: the activations for ``kind="activations"``, else ``None``.
    """

    spec: DatasetSpec
    train: Dataset
    test: Dataset
    train_labels: np.ndarray
    test_labels: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    is_image: bool
    class_names: list[str]
    fingerprint: str
    source_indices: dict[str, np.ndarray]
    precomputed: PrecomputedActivations | None = None

    def split(self, split: str) -> Dataset:
        """The ``train`` or ``test`` Dataset.

        Raises:
            DataError: any other split name.
        """
        if split not in _SPLITS:
            raise DataError(f"unknown split {split!r}; use 'train' or 'test'")
        return self.train if split == "train" else self.test

    def labels(self, split: str) -> np.ndarray:
        """int64 labels of ``split``."""
        self.split(split)
        return self.train_labels if split == "train" else self.test_labels

    def images(self, split: str, indices: Sequence[int] | np.ndarray) -> np.ndarray | None:
        """Raw images for thumbnails: uint8 ``(k, H, W)`` (grey) or ``(k, H, W, 3)``; ``None``
        when the data are not images.

        Raises:
            DataError: unknown split or out-of-range indices.
        """
        dataset = self.split(split)
        if not self.is_image or not hasattr(dataset, "raw_images"):
            return None
        idx = _as_index_array(indices, len(dataset), f"{split} image indices")
        return dataset.raw_images(idx)


# ----------------------------------------------------------------------------------------------
# Torch datasets
# ----------------------------------------------------------------------------------------------


def _to_chw_float(
    images: np.ndarray, normalize: tuple[np.ndarray, np.ndarray] | None
) -> torch.Tensor:
    """uint8 ``(k, H, W[, C])`` -> float32 ``(k, C, H, W)`` in [0, 1], optionally normalised."""
    t = torch.from_numpy(np.ascontiguousarray(images))
    t = t.unsqueeze(1) if t.dim() == 3 else t.permute(0, 3, 1, 2)
    t = t.to(torch.float32).div_(255.0)
    if normalize is not None:
        mean, std = (torch.as_tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in normalize)
        t = (t - mean) / std
    return t


class ArrayDataset(Dataset):
    """In-memory samples: uint8 images ``(N, H, W[, C])`` or float feature arrays ``(N, ...)``.

    ``get_batch(indices)`` returns a whole batch as tensors (fast path used by extraction).
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        is_image: bool,
        normalize: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.x, self.y, self.is_image, self.normalize = x, y, is_image, normalize

    def __len__(self) -> int:
        return len(self.x)

    def get_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs ``(k, *input_shape)`` float32 and labels ``(k,)`` int64 for ``indices``."""
        if self.is_image:
            xb = _to_chw_float(self.x[indices], self.normalize)
        else:
            xb = torch.from_numpy(np.ascontiguousarray(self.x[indices], dtype=np.float32))
        return xb, torch.from_numpy(self.y[indices])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        xb, yb = self.get_batch(np.array([i]))
        return xb[0], int(yb[0])

    def raw_images(self, indices: np.ndarray) -> np.ndarray:
        """uint8 images ``(k, H, W)`` or ``(k, H, W, C)``."""
        return np.ascontiguousarray(self.x[indices])


class ImageFileDataset(Dataset):
    """Images read from files, converted to RGB and resized to ``size×size`` (bilinear)."""

    def __init__(
        self,
        paths: list[Path],
        y: np.ndarray,
        size: int,
        normalize: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.paths, self.y, self.size, self.normalize = paths, y, size, normalize

    def __len__(self) -> int:
        return len(self.paths)

    def raw_images(self, indices: np.ndarray) -> np.ndarray:
        """uint8 images ``(k, size, size, 3)``."""
        from PIL import Image

        out = np.empty((len(indices), self.size, self.size, 3), dtype=np.uint8)
        for row, i in enumerate(indices):
            try:
                with Image.open(self.paths[int(i)]) as img:
                    img = img.convert("RGB")
                    if img.size != (self.size, self.size):
                        img = img.resize((self.size, self.size), Image.BILINEAR)
                    out[row] = np.asarray(img)
            except OSError as exc:
                raise DataError(
                    f"cannot read image {self.paths[int(i)]}: {exc}; replace or remove it"
                ) from exc
        return out

    def get_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs ``(k, 3, size, size)`` float32 and labels ``(k,)`` int64."""
        return _to_chw_float(self.raw_images(indices), self.normalize), torch.from_numpy(
            self.y[indices]
        )

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        xb, yb = self.get_batch(np.array([i]))
        return xb[0], int(yb[0])


# ----------------------------------------------------------------------------------------------
# Readers
# ----------------------------------------------------------------------------------------------

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


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
        files = {"train": ["train"], "test": ["test"], "meta": "meta"}
        label_key, names_key = "fine_labels", "fine_label_names"
    else:
        files = {
            "train": [f"data_batch_{i}" for i in range(1, 6)],
            "test": ["test_batch"],
            "meta": "batches.meta",
        }
        label_key, names_key = "labels", "label_names"
    needed = [*files["train"], *files["test"]]
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
        for name in files[split]:
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
            ys.append(np.asarray(batch[label_key], dtype=np.int64))
        out[split] = (np.concatenate(xs), np.concatenate(ys))
    n_classes = 100 if hundred else 10
    names = [str(i) for i in range(n_classes)]
    if (folder / files["meta"]).is_file():
        meta = _load_cifar_pickle(folder / files["meta"])
        raw_names = meta.get(names_key, [])
        if len(raw_names) == n_classes:
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in raw_names]
        out["files"].append(folder / files["meta"])
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
    out: dict[str, Any] = {"files": [], "class_names": list(_FASHION_CLASSES)}
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


def _npz_arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as exc:
        raise DataError(
            f"cannot read {path} ({type(exc).__name__}: {exc}); it must be an .npz without pickles"
        ) from exc


def _read_npz(root: Path, options: Mapping[str, Any]) -> dict[str, Any]:
    if root.is_file():
        arrays = _npz_arrays(root)
        keys = ("x_train", "y_train", "x_test", "y_test")
        if "test_path" in options:
            test = _npz_arrays(Path(options["test_path"]))
            arrays = {
                "x_train": arrays.get("x"),
                "y_train": arrays.get("y"),
                "x_test": test.get("x"),
                "y_test": test.get("y"),
            }
            files = [root, Path(options["test_path"])]
        else:
            files = [root]
        if any(arrays.get(k) is None for k in keys):
            raise DataError(
                f"{root} needs arrays {keys} (or x, y plus options.test_path); "
                f"it has {sorted(arrays)}"
            )
    else:
        files = [root / "train.npz", root / "test.npz"]
        if not all(f.is_file() for f in files):
            raise DataError(
                f"{root} needs train.npz and test.npz (keys x, y), or pass a single .npz file"
            )
        tr, te = _npz_arrays(files[0]), _npz_arrays(files[1])
        if not {"x", "y"} <= set(tr) or not {"x", "y"} <= set(te):
            raise DataError(f"train.npz and test.npz in {root} need arrays 'x' and 'y'")
        arrays = {"x_train": tr["x"], "y_train": tr["y"], "x_test": te["x"], "y_test": te["y"]}
    out: dict[str, Any] = {"files": files}
    for split in _SPLITS:
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if len(x) != len(y) or y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise DataError(
                f"x_{split} {x.shape} and y_{split} {y.shape} ({y.dtype}) must be n rows "
                "and 1-D integer labels"
            )
        if (
            x.ndim == 4
            and x.shape[1] in (1, 3)
            and x.shape[-1] not in (1, 3)
            and x.dtype == np.uint8
        ):
            x = x.transpose(0, 2, 3, 1)
        if x.ndim == 4 and x.shape[-1] == 1:
            x = x[..., 0]
        out[split] = (x, y.astype(np.int64))
    return out


def _read_mnist1d(root: Path | None, options: Mapping[str, Any]) -> dict[str, Any]:
    params = {
        "num_samples": int(options.get("num_samples", 10_000)),
        "train_split": float(options.get("train_split", 0.6)),
        "seed": int(options.get("data_seed", 42)),
    }
    if params["num_samples"] < 20 or not 0 < params["train_split"] < 1:
        raise DataError(f"mnist1d needs num_samples >= 20 and 0 < train_split < 1, got {params}")
    if root is None:
        raise DataError(
            "mnist1d needs root: a .npz file (or folder) to cache the generated arrays in"
        )
    cache = root if root.suffix == ".npz" else root / f"mnist1d_{stable_hash(params)[:12]}.npz"
    if cache.is_file():
        arrays = _npz_arrays(cache)
        if json.loads(str(arrays.get("params", "{}"))) != params:
            raise DataError(
                f"{cache} was generated with other settings ({arrays.get('params')}); "
                "delete it or change root"
            )
    else:
        arrays = _generate_mnist1d(params)
        atomic_write(cache, lambda tmp: np.savez(tmp, **arrays))
    out: dict[str, Any] = {"files": [cache], "class_names": [str(i) for i in range(10)]}
    out["train"] = (arrays["x"].astype(np.float32), arrays["y"].astype(np.int64))
    out["test"] = (arrays["x_test"].astype(np.float32), arrays["y_test"].astype(np.int64))
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


# ----------------------------------------------------------------------------------------------
# Precomputed activations
# ----------------------------------------------------------------------------------------------


def load_precomputed(path: str | Path) -> PrecomputedActivations:
    """Read precomputed activations.

    Formats:
        ``.npz``: ``train_<layer>`` / ``test_<layer>`` arrays ``(n, d)`` (or ``x_train``/``x_test``
        for a single layer called ``"precomputed"``), optional ``y_train``, ``y_test`` and
        ``forget`` (bool mask over train rows).
        ``.parquet``: one row per sample with a ``split`` column (``train``/``test``), optional
        ``forget`` (bool) and ``label`` columns; every other numeric column is a feature. Columns
        named ``<layer>/<j>`` form layer ``<layer>``; unprefixed ones form ``"precomputed"``.

    Raises:
        DataError: unreadable file, missing split column/keys, non-finite values.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"activations file {path} does not exist; check the path")
    features: dict[str, dict[str, np.ndarray]] = {"train": {}, "test": {}}
    labels: dict[str, np.ndarray] = {}
    forget = None
    if path.suffix == ".npz":
        arrays = _npz_arrays(path)
        for key, arr in arrays.items():
            for split in _SPLITS:
                if key.startswith(f"{split}_"):
                    features[split][key[len(split) + 1 :]] = arr
                elif key == f"x_{split}":
                    features[split]["precomputed"] = arr
                elif key == f"y_{split}":
                    labels[split] = arr
        forget = arrays.get("forget")
    elif path.suffix == ".parquet":
        import pandas as pd

        try:
            frame = pd.read_parquet(path)
        except Exception as exc:
            raise DataError(
                f"cannot read {path} ({type(exc).__name__}: {exc}); re-export it"
            ) from exc
        if "split" not in frame.columns:
            raise DataError(
                f"{path} needs a 'split' column with values 'train'/'test'; "
                f"it has {list(frame.columns)[:10]}"
            )
        bad = sorted(set(frame["split"].astype(str)) - set(_SPLITS))
        if bad:
            raise DataError(f"{path} column 'split' has values {bad}; use only 'train' and 'test'")
        feature_cols = [
            c for c in frame.columns
            if c not in ("split", "forget", "label", "index")
            and np.issubdtype(frame[c].dtype, np.number)
        ]  # fmt: skip
        groups: dict[str, list[str]] = {}
        for col in feature_cols:
            layer = str(col).split("/", 1)[0] if "/" in str(col) else "precomputed"
            groups.setdefault(layer, []).append(col)
        for split in _SPLITS:
            part = frame[frame["split"].astype(str) == split]
            for layer, cols in groups.items():
                features[split][layer] = part[cols].to_numpy(dtype=np.float32)
            if "label" in frame.columns:
                labels[split] = part["label"].to_numpy()
            if split == "train" and "forget" in frame.columns:
                forget = part["forget"].to_numpy().astype(bool)
    else:
        raise DataError(f"activations file {path} must be .npz or .parquet")
    for split in _SPLITS:
        if not features[split]:
            raise DataError(f"{path} has no {split} activations; see load_precomputed's formats")
        for layer, arr in features[split].items():
            if arr.ndim != 2 or not np.isfinite(arr).all():
                raise DataError(
                    f"{path}: {split}/{layer} must be a finite (n, d) array, got shape {arr.shape}"
                )
            features[split][layer] = np.ascontiguousarray(arr, dtype=np.float32)
        sizes = {arr.shape[0] for arr in features[split].values()}
        if len(sizes) != 1:
            raise DataError(f"{path}: {split} layers have different row counts {sorted(sizes)}")
    n_train = next(iter(features["train"].values())).shape[0]
    if forget is not None and (forget.shape != (n_train,)):
        raise DataError(f"{path}: forget mask has shape {forget.shape}, expected ({n_train},)")
    mask = None if forget is None else forget.astype(bool)
    return PrecomputedActivations(
        features, mask, path, {s: np.asarray(v, dtype=np.int64) for s, v in labels.items()}
    )


# ----------------------------------------------------------------------------------------------
# Subsets and loading
# ----------------------------------------------------------------------------------------------


def _as_index_array(values: Any, n: int, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0:
        raise DataError(f"{what} must be a non-empty 1-D list of integers, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        if (
            np.issubdtype(arr.dtype, np.floating)
            and np.all(np.isfinite(arr))
            and np.all(arr == np.round(arr))
        ):
            arr = arr.astype(np.int64)
        else:
            bad = [
                v
                for v in arr.tolist()
                if not (isinstance(v, int | float) and float(v).is_integer())
            ][:5]
            raise DataError(f"{what} must be integers; offending values: {bad}")
    arr = arr.astype(np.int64)
    out_of_range = arr[(arr < 0) | (arr >= n)]
    if out_of_range.size:
        raise DataError(
            f"{what} must lie in [0, {n - 1}]; offending values: {out_of_range[:10].tolist()}"
            + (f" ({out_of_range.size} in all)" if out_of_range.size > 10 else "")
        )
    return arr


def _subset(spec: DatasetSpec, split: str, n: int) -> np.ndarray:
    given = spec.train_indices if split == "train" else spec.test_indices
    size = spec.train_size if split == "train" else spec.test_size
    if given is not None:
        if isinstance(given, str | Path):
            return load_index_file(given, n)
        idx = _as_index_array(given, n, f"{split}_indices")
        _check_unique(idx, f"{split}_indices")
        return idx
    if size is None:
        return np.arange(n, dtype=np.int64)
    if not isinstance(size, int) or not 0 < size <= n:
        raise DataError(
            f"{split}_size must be an integer in [1, {n}] (the {split} split's size), got {size!r}"
        )
    rng = np.random.default_rng([spec.seed, 0 if split == "train" else 1])
    return np.sort(rng.choice(n, size=size, replace=False)).astype(np.int64)


def _normalize_option(options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    value = options.get("normalize")
    if value is None:
        return None
    try:
        mean, std = (np.asarray(v, dtype=np.float32).reshape(-1) for v in value)
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"options.normalize must be [mean, std] (per-channel lists), got {value!r}"
        ) from exc
    if np.any(std <= 0):
        raise DataError(f"options.normalize std must be positive, got {std.tolist()}")
    return mean, std


def _files_fingerprint(files: list[Path]) -> list[tuple[str, int, str]]:
    return [(p.name, p.stat().st_size, file_sha256(p)) for p in files]


def load_dataset(spec: DatasetSpec) -> DatasetBundle:
    """Load ``spec`` from local files into a :class:`DatasetBundle` (nothing is downloaded).

    Raises:
        DataError: unknown kind, missing files (the message says which files to place where),
            corrupt files, or invalid subset options.
    """
    if not isinstance(spec, DatasetSpec):
        raise DataError(f"load_dataset needs a DatasetSpec, got {type(spec).__name__}")
    if spec.kind not in DATASET_KINDS:
        raise DataError(
            f"unknown dataset kind {spec.kind!r}; use one of {', '.join(DATASET_KINDS)}"
        )
    root = Path(spec.root) if spec.root is not None else None
    if spec.kind != "mnist1d" and (root is None or not root.exists()):
        raise DataError(
            f"dataset root {root} does not exist; set root to the folder or file holding "
            f"the {spec.kind} data"
        )
    options = dict(spec.options)
    normalize = _normalize_option(options)
    precomputed = None
    assert root is not None or spec.kind == "mnist1d"
    if spec.kind in ("cifar10", "cifar100"):
        raw = _read_cifar(root, spec.kind == "cifar100")  # type: ignore[arg-type]
    elif spec.kind == "svhn":
        raw = _read_svhn(root)  # type: ignore[arg-type]
    elif spec.kind == "fashion-mnist":
        raw = _read_fashion(root)  # type: ignore[arg-type]
    elif spec.kind == "imagefolder":
        raw = _read_imagefolder(root)  # type: ignore[arg-type]
    elif spec.kind == "npz":
        raw = _read_npz(root, options)  # type: ignore[arg-type]
    elif spec.kind == "mnist1d":
        raw = _read_mnist1d(root, options)
    else:
        precomputed = load_precomputed(root)  # type: ignore[arg-type]
        raw = _precomputed_raw(precomputed)

    indices = {s: _subset(spec, s, len(raw[s][0])) for s in _SPLITS}
    if precomputed is not None:
        precomputed = _subset_precomputed(precomputed, indices)
    datasets: dict[str, Dataset] = {}
    labels: dict[str, np.ndarray] = {}
    if spec.kind == "imagefolder":
        size = int(options.get("image_size", 64))
        for s in _SPLITS:
            paths, y = raw[s]
            labels[s] = y[indices[s]]
            datasets[s] = ImageFileDataset(
                [paths[i] for i in indices[s]], labels[s], size, normalize
            )
        is_image, input_shape = True, (3, size, size)
        files = [p for s in _SPLITS for p in datasets[s].paths]
        content = [(str(p.relative_to(root)), p.stat().st_size, file_sha256(p)) for p in files]  # type: ignore[arg-type]
    else:
        for s in _SPLITS:
            x, y = raw[s]
            labels[s] = y[indices[s]]
            x_sub = x[indices[s]]
            datasets[s] = ArrayDataset(x_sub, labels[s], _is_image_array(x_sub), normalize)
        sample = datasets["train"]
        is_image = sample.is_image  # type: ignore[attr-defined]
        shape = sample.x.shape[1:]  # type: ignore[attr-defined]
        input_shape = (
            ((1, *shape) if len(shape) == 2 else (shape[2], shape[0], shape[1]))
            if is_image
            else tuple(shape)
        )
        content = _files_fingerprint(raw["files"])
    class_names = raw.get("class_names") or [str(i) for i in range(_num_classes(labels))]
    fingerprint = stable_hash(
        {
            "kind": spec.kind,
            "content": content,
            "subset": {s: array_sha256(indices[s]) for s in _SPLITS},
            "transform": {k: v for k, v in options.items() if k in ("normalize", "image_size")},
        }
    )
    return DatasetBundle(
        spec=spec,
        train=datasets["train"],
        test=datasets["test"],
        train_labels=labels["train"],
        test_labels=labels["test"],
        num_classes=len(class_names),
        input_shape=tuple(int(v) for v in input_shape),
        is_image=is_image,
        class_names=list(class_names),
        fingerprint=fingerprint,
        source_indices=indices,
        precomputed=precomputed,
    )


def _num_classes(labels: Mapping[str, np.ndarray]) -> int:
    top = max(int(arr.max()) if arr.size else -1 for arr in labels.values())
    return top + 1


def _is_image_array(x: np.ndarray) -> bool:
    return x.dtype == np.uint8 and (x.ndim == 3 or (x.ndim == 4 and x.shape[-1] in (3, 4)))


def _precomputed_raw(pre: PrecomputedActivations) -> dict[str, Any]:
    """Present precomputed activations like a dataset (first layer as inputs, labels or -1)."""
    layer = pre.layers[0] if pre.layers else next(iter(pre.features["train"]))
    raw: dict[str, Any] = {"files": [pre.source]}
    labels = pre.labels
    for s in _SPLITS:
        x = pre.features[s][layer]
        y = labels.get(s)
        raw[s] = (
            x,
            np.full(len(x), -1, dtype=np.int64) if y is None else np.asarray(y, dtype=np.int64),
        )
    if all(s in labels for s in _SPLITS):
        raw["class_names"] = [str(i) for i in range(_num_classes({s: raw[s][1] for s in _SPLITS}))]
    else:
        raw["class_names"] = []
    return raw


def _subset_precomputed(
    pre: PrecomputedActivations, indices: Mapping[str, np.ndarray]
) -> PrecomputedActivations:
    features = {s: {k: v[indices[s]] for k, v in pre.features[s].items()} for s in _SPLITS}
    forget = None if pre.forget_mask is None else pre.forget_mask[indices["train"]]
    labels = {s: v[indices[s]] for s, v in pre.labels.items()}
    return PrecomputedActivations(features, forget, pre.source, labels)


# ----------------------------------------------------------------------------------------------
# Index files (forget sets)
# ----------------------------------------------------------------------------------------------


def _check_unique(idx: np.ndarray, what: str) -> None:
    values, counts = np.unique(idx, return_counts=True)
    dups = values[counts > 1]
    if dups.size:
        raise DataError(
            f"{what} has duplicate indices: {dups[:10].tolist()}; each index may appear once"
        )


def load_index_file(path: str | Path, n_train: int) -> np.ndarray:
    """Read a forget set (indices into the training split) from ``.npy``, ``.txt`` or ``.json``.

    ``.txt``: integers separated by whitespace or commas (``#`` comments allowed); ``.json``: a
    list of integers or ``{"indices": [...]}``.

    Returns:
        int64 array ``(k,)``, in file order.

    Raises:
        DataError: missing/unreadable file, non-integers, out-of-range values, duplicates or an
            empty list (the message names the offending values).
    """
    path = Path(path)
    if not isinstance(n_train, int | np.integer) or n_train <= 0:
        raise DataError(
            f"n_train must be a positive integer (the training-set size), got {n_train!r}"
        )
    if not path.is_file():
        raise DataError(f"index file {path} does not exist; check the path")
    try:
        if path.suffix == ".npy":
            values: Any = np.load(path, allow_pickle=False)
        elif path.suffix == ".json":
            values = json.loads(path.read_text())
            if isinstance(values, dict):
                values = values.get("indices")
        elif path.suffix == ".txt":
            text = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
            tokens = text.replace(",", " ").split()
            values = [_parse_int_token(t, path) for t in tokens]
        else:
            raise DataError(f"index file {path} must be .npy, .txt or .json")
    except DataError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DataError(
            f"cannot read index file {path} ({type(exc).__name__}: {exc}); re-save it"
        ) from exc
    if values is None or (isinstance(values, list) and not values):
        raise DataError(f"index file {path} is empty; a forget set needs at least one index")
    if isinstance(values, list) and any(
        isinstance(v, bool) or not isinstance(v, int | float) for v in values
    ):
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int | float)][:5]
        raise DataError(f"index file {path} must hold integers; offending values: {bad}")
    idx = _as_index_array(values, int(n_train), f"index file {path}")
    _check_unique(idx, f"index file {path}")
    return idx


def _parse_int_token(token: str, path: Path) -> int | str:
    try:
        return int(token)
    except ValueError:
        try:
            value = float(token)
        except ValueError:
            return token
        return int(value) if value.is_integer() else token


def save_index_file(path: str | Path, indices: Sequence[int] | np.ndarray) -> Path:
    """Write indices as ``.npy`` (int64), ``.txt`` (one per line) or ``.json`` (a list).

    Raises:
        DataError: an unsupported suffix, non-integer, negative, duplicate or empty indices.
    """
    path = Path(path)
    arr = np.asarray(indices)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise DataError(
            f"indices must be a non-empty 1-D integer array, got {arr.dtype} {arr.shape}"
        )
    if (arr < 0).any():
        raise DataError(
            f"indices must be non-negative; offending values: {arr[arr < 0][:10].tolist()}"
        )
    arr = arr.astype(np.int64)
    _check_unique(arr, "indices")
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
