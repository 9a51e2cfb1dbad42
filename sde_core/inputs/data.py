"""Datasets (local files only, nothing is downloaded), subsets, fingerprints and index files.

:func:`load_dataset` turns a :class:`DatasetSpec` into a :class:`DatasetBundle` with ``train`` and
``test`` torch Datasets (deterministic test-time transforms: uint8 images become float32 in
[0, 1], channels first, optionally normalised), int64 label arrays, and a content
``fingerprint`` used as a cache key. The parts are one module each:
:mod:`~sde_core.inputs.dataset_readers` (one reader per kind, in the table ``READERS``),
:mod:`~sde_core.inputs.array_datasets` (the torch Datasets), :mod:`~sde_core.inputs.dataset_options`
(the ``options`` and their bounds) and, for ``text``, :mod:`~sde_core.inputs.text_data`.

Every dataset exposes ``class_names`` (Fashion-MNIST's names, CIFAR's meta names, ImageFolder's
folder names, an npz's ``classes`` entry, else the label as text). Generated and resized data
are bounded (``MAX_GENERATED_SAMPLES``, ``MAX_IMAGE_SIZE``) and checked before anything
is allocated. Forget sets are index files: :func:`load_index_file` / :func:`save_index_file`
(:mod:`sde_core.inputs.indices`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.hashing import array_sha256, file_sha256, stable_hash
from sde_core.common.validation import check_int
from sde_core.errors import DataError
from sde_core.inputs.array_datasets import ArrayDataset, BundleDataset, ImageFileDataset
from sde_core.inputs.dataset_options import _OPTIONS, _check_options, _normalize_option
from sde_core.inputs.dataset_readers import _SPLITS, READERS, _num_classes
from sde_core.inputs.indices import (
    as_index_array,
    check_unique,
    excerpt,
    load_index_file,
)
from sde_core.inputs.precomputed import PrecomputedActivations
from sde_core.inputs.text_data import TextDataset, read_text_source

__all__ = ["DATASET_KINDS", "DatasetBundle", "DatasetSpec", "is_image_array", "load_dataset"]

#: Every dataset kind: one reader each (:data:`~sde_core.inputs.dataset_readers.READERS`) and
#: ``text``, tokenised records (:mod:`sde_core.inputs.text_data`).
DATASET_KINDS = (*READERS, "text")


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
    if spec.kind == "text":  # tokenised records, not arrays (sde_core.inputs.text_data)
        if root is None:
            raise DataError("a 'text' dataset needs a root (its folder or file); set root")
        return _load_text(spec, root, options)
    reader = READERS[spec.kind]
    raw = reader(root, options)
    precomputed = raw.pop("precomputed", None)
    indices = {s: _subset(spec, s, len(raw[s][0])) for s in _SPLITS}
    if precomputed is not None:
        precomputed = _subset_precomputed(precomputed, indices)
    datasets: dict[str, BundleDataset] = {}
    labels: dict[str, np.ndarray] = {}
    if reader.image_files:
        assert root is not None  # the reader refuses a missing root
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
            array_sets[s] = ArrayDataset(x_sub, labels[s], is_image_array(x_sub), normalize)
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


def is_image_array(x: np.ndarray) -> bool:
    """Whether ``x`` holds uint8 images ``(N, H, W)`` or ``(N, H, W, 3|4)`` (read as images:
    scaled to [0, 1], channels first), not feature rows."""
    return x.dtype == np.uint8 and (x.ndim == 3 or (x.ndim == 4 and x.shape[-1] in (3, 4)))


def _subset_precomputed(
    pre: PrecomputedActivations, indices: Mapping[str, np.ndarray]
) -> PrecomputedActivations:
    features = {s: {k: v[indices[s]] for k, v in pre.features[s].items()} for s in _SPLITS}
    forget = None if pre.forget_mask is None else pre.forget_mask[indices["train"]]
    labels = {s: v[indices[s]] for s, v in pre.labels.items()}
    return PrecomputedActivations(features, forget, pre.source, labels)
