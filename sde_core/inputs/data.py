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
- ``activations``: precomputed activations (``.npz`` or ``.parquet``), so any model can be
  audited without loading it (see :mod:`sde_core.inputs.precomputed` for the layouts).
- ``text``: records in JSONL / JSON / CSV / Parquet files or a ``datasets.save_to_disk``
  folder, tokenised with a model folder's tokenizer for language models (see
  :mod:`sde_core.inputs.text_data`).

Every dataset exposes ``class_names`` (Fashion-MNIST's names, CIFAR's meta names, ImageFolder's
folder names, an npz's ``classes`` entry, else the label as text). Generated and resized data
are bounded (:data:`MAX_GENERATED_SAMPLES`, :data:`MAX_IMAGE_SIZE`) and checked before anything
is allocated. Forget sets are index files: :func:`load_index_file` / :func:`save_index_file`
(:mod:`sde_core.inputs.indices`).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from sde_core.common.fsio import atomic_write
from sde_core.common.hashing import array_sha256, file_sha256, stable_hash
from sde_core.common.validation import check_int
from sde_core.errors import DataError
from sde_core.inputs.indices import (
    MAX_CLASSES,
    as_index_array,
    as_labels,
    check_unique,
    excerpt,
    load_index_file,
)
from sde_core.inputs.precomputed import PrecomputedActivations, load_precomputed, npz_arrays
from sde_core.inputs.text_data import TextDataset, parse_template, read_text_source

__all__ = [
    "DATASET_KINDS",
    "FASHION_CLASS_NAMES",
    "MAX_GENERATED_SAMPLES",
    "MAX_IMAGE_SIZE",
    "ArrayDataset",
    "DatasetBundle",
    "DatasetSpec",
    "ImageFileDataset",
    "load_dataset",
    "read_idx",
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
    "text",
)
_SPLITS = ("train", "test")
#: Largest mnist1d ``num_samples`` (about 160 MB of float32 at 40 features).
MAX_GENERATED_SAMPLES = 1_000_000
#: Largest ImageFolder ``image_size`` (pixels per side).
MAX_IMAGE_SIZE = 1024
#: ``options`` keys and what they hold.
_OPTIONS = {
    "normalize": "[mean, std] lists, one value per channel",
    "image_size": f"an integer in [8, {MAX_IMAGE_SIZE}] (imagefolder)",
    "num_samples": f"an integer in [20, {MAX_GENERATED_SAMPLES}] (mnist1d)",
    "train_split": "a number in (0, 1) (mnist1d)",
    "data_seed": "a non-negative integer (mnist1d)",
    "test_path": "the path of a separate test .npz (npz, activations) or test records (text)",
    "class_names": "a list of names, one per class (any kind; overrides the files' names)",
    "tokenizer": "the model folder whose tokenizer tokenises the texts (text)",
    "max_length": "an integer in [4, 8192]: tokens per text (text; default 128)",
    "text_column": "the column holding each record's text (text)",
    "template": "a text naming a record's plain fields in braces, e.g. "
    "'Question: {question}\\nAnswer: {answer}' (text)",
}
#: Longest class name accepted (characters) in ``options.class_names``.
MAX_CLASS_NAME = 100
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
            (npz/activations/text with a separate test file), ``tokenizer``/``max_length``/
            ``text_column``/``template`` (text).
    """

    kind: str
    root: str | Path | None = None
    train_indices: Sequence[int] | str | Path | None = None
    test_indices: Sequence[int] | str | Path | None = None
    train_size: int | None = None
    test_size: int | None = None
    seed: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Type and range checks of every field (no file is read).

        Raises:
            DataError: naming the field and what it must hold.
        """
        if not isinstance(self.kind, str) or self.kind not in DATASET_KINDS:
            raise DataError(
                f"unknown dataset kind {excerpt(self.kind)}; use one of {', '.join(DATASET_KINDS)}"
            )
        for key in ("root", "train_indices", "test_indices"):
            value = getattr(self, key)
            if isinstance(value, bool) or (
                value is not None
                and not isinstance(value, str | os.PathLike | Sequence | np.ndarray)
            ):
                raise DataError(
                    f"dataset {key} must be a path string (or a list of indices), got "
                    f"{type(value).__name__} {excerpt(value)}"
                )
        if isinstance(self.root, Sequence) and not isinstance(self.root, str):
            raise DataError(f"dataset root must be a path string, got {type(self.root).__name__}")
        for key in ("train_size", "test_size"):
            value = getattr(self, key)
            if value is not None:
                check_int(value, f"dataset {key}", minimum=1, error=DataError)
        check_int(self.seed, "dataset seed", minimum=0, maximum=2**63 - 1, error=DataError)
        if not isinstance(self.options, Mapping):
            raise DataError(f"dataset options must be a table, got {type(self.options).__name__}")
        unknown = sorted(str(k) for k in set(self.options) - set(_OPTIONS))
        if unknown:
            raise DataError(
                f"unknown dataset option(s) {[excerpt(k) for k in unknown]}; options: "
                + "; ".join(f"{k}: {v}" for k, v in _OPTIONS.items())
            )
        _check_options(self.options)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base_dir: str | Path | None = None) -> DatasetSpec:
        """Build from a mapping (e.g. a workspace.toml table); relative paths join ``base_dir``.

        Raises:
            DataError: unknown keys, a missing ``kind`` or a mistyped field.
        """
        if not isinstance(data, Mapping):
            raise DataError(f"the dataset table must be a table, got {type(data).__name__}")
        allowed = {f for f in cls.__dataclass_fields__}
        unknown = sorted(str(k) for k in set(data) - allowed)
        if unknown or "kind" not in data:
            raise DataError(
                f"dataset table has unknown keys {[excerpt(k) for k in unknown]} or no 'kind'; "
                f"allowed keys: {sorted(allowed)}"
            )
        values = dict(data)
        if base_dir is not None:
            for key, value in cls(**values).path_fields().items():
                if not Path(value).is_absolute():
                    _set_path(values, key, str(Path(base_dir) / value))
        return cls(**values)

    def path_fields(self) -> dict[str, str]:
        """Every file or folder this spec names, keyed ``root``, ``train_indices``,
        ``test_indices``, ``options.test_path`` (as written)."""
        out: dict[str, str] = {}
        for key in ("root", "train_indices", "test_indices"):
            value = getattr(self, key)
            if isinstance(value, str | os.PathLike):
                out[key] = os.fspath(value)
        for option in ("test_path", "tokenizer"):
            if isinstance(self.options.get(option), str):
                out[f"options.{option}"] = self.options[option]
        return out

    def with_paths(self, paths: Mapping[str, str | Path]) -> DatasetSpec:
        """A copy with the path fields of :meth:`path_fields` replaced (e.g. resolved)."""
        values: dict[str, Any] = {f: getattr(self, f) for f in self.__dataclass_fields__}
        values["options"] = dict(self.options)
        for key, value in paths.items():
            _set_path(values, key, str(value))
        return DatasetSpec(**values)


def _set_path(values: dict[str, Any], key: str, value: str) -> None:
    if key.startswith("options."):
        values["options"] = {**dict(values.get("options") or {}), key[8:]: value}
    else:
        values[key] = value


def _check_options(options: Mapping[str, Any]) -> None:
    def integer(key: str, low: int, high: int) -> None:
        value = options[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | np.integer)
            or not low <= value <= high
        ):
            raise DataError(f"options.{key} must be {_OPTIONS[key]}, got {excerpt(value)}")

    if "image_size" in options:
        integer("image_size", 8, MAX_IMAGE_SIZE)
    if "num_samples" in options:
        integer("num_samples", 20, MAX_GENERATED_SAMPLES)
    if "data_seed" in options:
        integer("data_seed", 0, 2**32 - 1)
    if "train_split" in options:
        value = options["train_split"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
            raise DataError(
                f"options.train_split must be {_OPTIONS['train_split']}, got {excerpt(value)}"
            )
    if "max_length" in options:
        integer("max_length", 4, 8192)
    for key in ("test_path", "tokenizer", "text_column", "template"):
        if key in options and not isinstance(options[key], str):
            raise DataError(f"options.{key} must be {_OPTIONS[key]}, got {excerpt(options[key])}")
    if "template" in options:
        parse_template(options["template"])  # plain fields only
    if "class_names" in options:
        names = options["class_names"]
        if (
            isinstance(names, str | bytes)
            or not isinstance(names, Sequence)
            or not names
            or not all(isinstance(n, str) and 0 < len(n.strip()) <= MAX_CLASS_NAME for n in names)
        ):
            raise DataError(
                f"options.class_names must be {_OPTIONS['class_names']} (each 1–"
                f"{MAX_CLASS_NAME} characters), got {excerpt(names)}"
            )
    _normalize_option(options)


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
    train: BundleDataset
    test: BundleDataset
    train_labels: np.ndarray
    test_labels: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    is_image: bool
    class_names: list[str]
    fingerprint: str
    source_indices: dict[str, np.ndarray]
    precomputed: PrecomputedActivations | None = None

    def split(self, split: str) -> BundleDataset:
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
        idx = as_index_array(indices, len(dataset), f"{split} image indices")
        return dataset.raw_images(idx)

    def texts(self, split: str, indices: Sequence[int] | np.ndarray) -> list[str] | None:
        """The texts of rows ``indices`` of a text dataset; ``None`` for other data.

        Raises:
            DataError: unknown split or out-of-range indices.
        """
        dataset = self.split(split)
        if not isinstance(dataset, TextDataset):
            return None
        return dataset.sample_texts(indices)


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
                    rgb = img.convert("RGB")
                    if rgb.size != (self.size, self.size):
                        rgb = rgb.resize((self.size, self.size), Image.Resampling.BILINEAR)
                    out[row] = np.asarray(rgb)
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


#: What a :class:`DatasetBundle` split holds: a sized Dataset with ``get_batch``/``raw_images``.
BundleDataset = ArrayDataset | ImageFileDataset | TextDataset


# ----------------------------------------------------------------------------------------------
# Readers
# ----------------------------------------------------------------------------------------------

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


def _read_mnist1d(root: Path | None, options: Mapping[str, Any]) -> dict[str, Any]:
    _check_options(options)  # sizes are bounded before anything is generated
    params = {
        "num_samples": int(options.get("num_samples", 10_000)),
        "train_split": float(options.get("train_split", 0.6)),
        "seed": int(options.get("data_seed", 42)),
    }
    if root is None:
        raise DataError(
            "mnist1d needs root: a .npz file (or folder) to cache the generated arrays in"
        )
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


# ----------------------------------------------------------------------------------------------
# Subsets and loading
# ----------------------------------------------------------------------------------------------


def _subset(spec: DatasetSpec, split: str, n: int) -> np.ndarray:
    given = spec.train_indices if split == "train" else spec.test_indices
    size = spec.train_size if split == "train" else spec.test_size
    if given is not None:
        if isinstance(given, str | os.PathLike):
            return load_index_file(given, n)
        idx = as_index_array(given, n, f"{split}_indices")
        check_unique(idx, f"{split}_indices")
        return idx
    if size is None:
        return np.arange(n, dtype=np.int64)
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or not 0 < size <= n:
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
            f"options.normalize must be [mean, std] (per-channel lists), got {excerpt(value, 40)}"
        ) from exc
    if mean.size == 0 or mean.shape != std.shape or not np.isfinite(np.r_[mean, std]).all():
        raise DataError("options.normalize must be two finite lists of equal length [mean, std]")
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
    root = Path(spec.root) if spec.root is not None else None
    if spec.kind != "mnist1d" and (root is None or not root.exists()):
        raise DataError(
            f"dataset root {root} does not exist; set root to the folder or file holding "
            f"the {spec.kind} data"
        )
    try:
        return _load(spec, root)
    except DataError:
        raise
    except (OSError, ValueError, TypeError, KeyError, IndexError, EOFError, MemoryError) as exc:
        # a malformed file of a known format: name the file, never echo its content
        raise DataError(
            f"cannot read the {spec.kind} data at {root} ({type(exc).__name__}); the files are "
            "corrupt or not in the expected format — re-copy them"
        ) from exc


def _load(spec: DatasetSpec, root: Path | None) -> DatasetBundle:
    options = dict(spec.options)
    normalize = _normalize_option(options)
    precomputed = None
    if spec.kind == "mnist1d":
        raw = _read_mnist1d(root, options)
    elif root is None:
        raise DataError(f"a {spec.kind!r} dataset needs a root (its folder or file); set root")
    elif spec.kind in ("cifar10", "cifar100"):
        raw = _read_cifar(root, spec.kind == "cifar100")
    elif spec.kind == "svhn":
        raw = _read_svhn(root)
    elif spec.kind == "fashion-mnist":
        raw = _read_fashion(root)
    elif spec.kind == "imagefolder":
        raw = _read_imagefolder(root)
    elif spec.kind == "npz":
        raw = _read_npz(root, options)
    elif spec.kind == "text":
        return _load_text(spec, root, options)
    else:
        precomputed = load_precomputed(root)
        raw = _precomputed_raw(precomputed)

    indices = {s: _subset(spec, s, len(raw[s][0])) for s in _SPLITS}
    if precomputed is not None:
        precomputed = _subset_precomputed(precomputed, indices)
    datasets: dict[str, BundleDataset] = {}
    labels: dict[str, np.ndarray] = {}
    if spec.kind == "imagefolder":
        assert root is not None  # refused above: only mnist1d has no root
        size = int(options.get("image_size", 64))
        image_sets: dict[str, ImageFileDataset] = {}
        for s in _SPLITS:
            paths, y = raw[s]
            labels[s] = y[indices[s]]
            image_sets[s] = ImageFileDataset(
                [paths[i] for i in indices[s]], labels[s], size, normalize
            )
        datasets.update(image_sets)
        is_image, input_shape = True, (3, size, size)
        files = [p for s in _SPLITS for p in image_sets[s].paths]
        content = [(str(p.relative_to(root)), p.stat().st_size, file_sha256(p)) for p in files]
    else:
        array_sets: dict[str, ArrayDataset] = {}
        for s in _SPLITS:
            x, y = raw[s]
            labels[s] = y[indices[s]]
            x_sub = x[indices[s]]
            array_sets[s] = ArrayDataset(x_sub, labels[s], _is_image_array(x_sub), normalize)
        datasets.update(array_sets)
        sample = array_sets["train"]
        is_image = sample.is_image
        shape = sample.x.shape[1:]
        input_shape = (
            ((1, *shape) if len(shape) == 2 else (shape[2], shape[0], shape[1]))
            if is_image
            else tuple(shape)
        )
        content = _files_fingerprint(raw["files"])
    class_names = raw.get("class_names") or [str(i) for i in range(_num_classes(labels))]
    if "class_names" in options:  # names do not change a number: not in the fingerprint
        given = [str(n).strip() for n in options["class_names"]]
        if len(given) != len(class_names):
            raise DataError(
                f"options.class_names has {len(given)} names but the data have "
                f"{len(class_names)} classes: give one name per class, in label order"
            )
        class_names = given
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


def _load_text(spec: DatasetSpec, root: Path, options: Mapping[str, Any]) -> DatasetBundle:
    """A ``text`` dataset: both splits tokenised, subset like every other kind."""
    source = read_text_source(root, options)
    indices = {s: _subset(spec, s, len(source.splits[s])) for s in _SPLITS}
    texts = {s: source.splits[s].subset(indices[s]) for s in _SPLITS}
    fingerprint = stable_hash(
        {
            "kind": spec.kind,
            "content": [(p.name, file_sha256(p)) for p in source.files],
            "subset": {s: array_sha256(indices[s]) for s in _SPLITS},
            "transform": source.settings,
        }
    )
    return DatasetBundle(
        spec=spec,
        train=texts["train"],
        test=texts["test"],
        train_labels=texts["train"].y,
        test_labels=texts["test"].y,
        num_classes=0,
        input_shape=(2, int(source.settings["max_length"])),
        is_image=False,
        class_names=[],
        fingerprint=fingerprint,
        source_indices=indices,
    )


def _num_classes(labels: Mapping[str, np.ndarray]) -> int:
    top = max(int(arr.max()) if arr.size else -1 for arr in labels.values())
    if top >= MAX_CLASSES:
        raise DataError(f"labels go up to {top}; at most {MAX_CLASSES} classes are supported")
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
        raw[s] = (x, np.full(len(x), -1, dtype=np.int64) if y is None else y)
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
