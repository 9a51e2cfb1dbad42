"""A checkpoint's activations on a dataset split, computing only the layers not cached yet.

This is the face of the activation code; each part is one module:

- :mod:`sde_core.inputs.layers`: a model's layers (:func:`~sde_core.inputs.layers.list_layers`,
  :func:`~sde_core.inputs.layers.resolve_layer`) and the forward hooks that capture them.
  Layer names are qualified module names, aliases (``output``, ``logits``, ``penultimate``,
  ``block1``..``block4``, a family's own) or references such as ``"fc:input"``; a denoiser's
  carry the noise level of their probe, ``"denoised@0.5"`` (method §14).
- :mod:`sde_core.inputs.extraction`: the batched extraction, one pass for several layers
  (float32 ``(n, d)`` arrays, pooled maps when ``pool=True``), and the compute device.
- :mod:`sde_core.inputs.activation_cache`: the content-addressed on-disk cache.
- :mod:`sde_core.inputs.trusted_probing`: a checkpoint that is code (TorchScript, a full pickle,
  a ``file:`` class) runs only when trusted, in a child process under a time limit
  (:mod:`sde_core.inputs.isolation`).

Here: :func:`get_activations` and :func:`cached_layers` (a checkpoint's activations, keyed in
the cache by the file's content, its architecture and the dataset), :func:`checkpoint_layers`
(a checkpoint's layers) and :func:`align_to_dataset` (exported activations in the dataset's
order). Weights files are built from the registered architectures and run in this process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.common.validation import check_int
from sde_core.errors import ActivationError, DataError
from sde_core.inputs.activation_cache import ActivationCache
from sde_core.inputs.checkpoint_files import inspect_checkpoint
from sde_core.inputs.data import DatasetBundle
from sde_core.inputs.external_archs import is_file_arch, parse_file_arch
from sde_core.inputs.extraction import Progress, _row_indices, extract_activations
from sde_core.inputs.isolation import check_time_limit
from sde_core.inputs.layers import LayerInfo, list_layers
from sde_core.inputs.models import load_checkpoint
from sde_core.inputs.precomputed import load_precomputed
from sde_core.inputs.trusted_probing import (
    _check_trusted,
    _checkpoint_child,
    _extract_isolated,
)

__all__ = ["align_to_dataset", "cached_layers", "checkpoint_layers", "get_activations"]

_PRECOMPUTED_SUFFIXES = {".npz", ".parquet"}


def align_to_dataset(
    arr: np.ndarray, bundle: DatasetBundle, split: str, file: str | Path
) -> np.ndarray:
    """Rows of exported activations ``arr`` ``(N, d)`` in the order of the dataset's ``split``.

    An export with one row per dataset row is taken as it is; an export of the whole source
    dataset (the dataset being a subsample of it) is indexed by ``bundle.source_indices``.

    Raises:
        ActivationError: ``file`` holds too few rows for either reading.
    """
    n_split = len(bundle.split(split))
    if arr.shape[0] == n_split:
        return arr
    source = bundle.source_indices[split]
    if source.size == 0 or arr.shape[0] <= int(source.max()):
        raise ActivationError(
            f"{file} has {arr.shape[0]} {split} rows but the dataset has {n_split}; "
            "export activations for the same samples, in the dataset's order"
        )
    return arr[source]


def _precomputed_activations(
    path: Path, bundle: DatasetBundle, split: str, names: list[str], indices: np.ndarray | None
) -> dict[str, np.ndarray]:
    pre = load_precomputed(path)
    out = {}
    for name in names:
        try:
            arr = pre.get(split, name if name in pre.layers else _single_layer(pre, name))
        except DataError as exc:
            raise ActivationError(str(exc)) from exc
        arr = align_to_dataset(arr, bundle, split, path)
        out[name] = arr if indices is None else arr[indices]
    return out


def _single_layer(pre: Any, name: str) -> str:
    """Map any requested name to an unnamed single-layer file's ``"precomputed"`` features."""
    if pre.layers == ["precomputed"]:
        return "precomputed"
    raise ActivationError(
        f"layer {name!r} is not in {pre.source}; it holds {', '.join(pre.layers)}"
    )


def _arch_identity(arch: str | None) -> str | None:
    """The architecture as the cache knows it: a ``file:`` class by its file's content and class
    name (not its path), so a moved workspace keeps its cache and an edited file does not."""
    if not is_file_arch(arch):
        return arch
    spec = parse_file_arch(str(arch))
    return f"file:{spec.sha256 or file_sha256(spec.path)}:{spec.class_name}"


def _model_hash(path: Path, arch: str | None, arch_kwargs: Mapping[str, Any] | None = None) -> str:
    """The cache's key of a checkpoint: its file's SHA-256, the architecture it is read as and,
    when given, the builder kwargs."""
    identity: dict[str, Any] = {"file": file_sha256(path), "arch": _arch_identity(arch)}
    if arch_kwargs:
        identity["arch_kwargs"] = dict(arch_kwargs)
    return stable_hash(identity)


def cached_layers(
    checkpoint_path: str | Path,
    bundle: DatasetBundle,
    split: str,
    layers: Sequence[str],
    cache: ActivationCache,
    *,
    arch: str | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    pool: bool = True,
) -> set[str]:
    """The ``layers`` whose whole-split activations ``get_activations`` would read from ``cache``
    without running the model (a precomputed activations file counts as cached).

    Cheap: hashes the checkpoint once and checks that the entries exist, without reading them.
    """
    path = Path(checkpoint_path)
    if path.suffix in _PRECOMPUTED_SUFFIXES:
        return set(layers)
    if not path.exists():
        return set()
    model_hash = _model_hash(path, arch, arch_kwargs)
    return {
        name
        for name in layers
        if cache.contains(cache.key(model_hash, bundle.fingerprint, split, name, pool)[0])
    }


def get_activations(
    checkpoint_path: str | Path,
    bundle: DatasetBundle,
    split: str,
    layers: str | Sequence[str],
    cache: ActivationCache | None,
    *,
    arch: str | None = None,
    device: str | torch.device = "cpu",
    batch_size: int = 256,
    progress: Progress | None = None,
    indices: Sequence[int] | np.ndarray | None = None,
    pool: bool = True,
    arch_kwargs: Mapping[str, Any] | None = None,
    trusted: bool = False,
    time_limit: float | None = None,
) -> dict[str, np.ndarray]:
    """Activations of a checkpoint on ``bundle``'s ``split``, computing only uncached layers.

    A repeat call costs one file read per layer: the model is loaded only when some layer is
    missing, and all missing layers are extracted in one pass. ``checkpoint_path`` may also be a
    precomputed activations file (``.npz``/``.parquet``; see
    :func:`sde_core.inputs.data.load_precomputed`).

    Args:
        arch, arch_kwargs: the architecture and builder kwargs (default: stored or inferred).
        trusted: this checkpoint may be code (TorchScript, full pickle). It is then loaded and
            run in a child process, and each step (loading, one batch) must finish within
            ``time_limit`` seconds (default :data:`DEFAULT_TIME_LIMIT`).

    Returns:
        ``{layer: float32 (n, d)}``; ``n`` is ``len(indices)`` or the split size.

    Raises:
        ActivationError: unknown layer, bad split/indices, cache failures, or a trusted model
            that exceeded the time limit or crashed.
        CheckpointError: the checkpoint cannot be loaded, or is code and not trusted.
    """
    names = list(dict.fromkeys([layers] if isinstance(layers, str) else list(layers)))
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ActivationError(f"layers must be non-empty names such as 'output', got {layers!r}")
    if split not in ("train", "test"):
        raise ActivationError(f"unknown split {split!r}; use 'train' or 'test'")
    n_split = len(bundle.split(split))
    idx = None if indices is None else _row_indices(indices, n_split)
    path = Path(checkpoint_path)
    if path.suffix in _PRECOMPUTED_SUFFIXES:
        return _precomputed_activations(path, bundle, split, names, idx)
    if not path.exists():
        raise ActivationError(f"checkpoint {path} does not exist; check the path")
    kwargs = dict(arch_kwargs or {})
    limit = check_time_limit(time_limit)
    model_hash = _model_hash(path, arch, kwargs)
    result: dict[str, np.ndarray] = {}
    keys: dict[str, tuple[str, dict[str, Any]]] = {}
    for name in names:
        if cache is None:
            continue
        full_digest, full_fields = cache.key(model_hash, bundle.fingerprint, split, name, pool)
        full = cache.load(full_digest)
        if full is not None and full.shape[0] == n_split:
            result[name] = full if idx is None else full[idx]
            continue
        if idx is None:
            keys[name] = (full_digest, full_fields)
            continue
        keys[name] = cache.key(model_hash, bundle.fingerprint, split, name, pool, idx)
        part = cache.load(keys[name][0])
        if part is not None and part.shape[0] == idx.size:
            result[name] = part
    missing = [n for n in names if n not in result]
    if missing:
        info = inspect_checkpoint(path)
        options: dict[str, Any] = {
            "batch_size": batch_size,
            "device": device,
            "pool": pool,
            "indices": idx,
            "progress": progress,
        }
        if info.is_code or is_file_arch(arch):
            _check_trusted(info, arch, trusted)
            computed = _extract_isolated(
                path, arch, kwargs, limit, bundle.split(split), missing, **options
            )
        else:
            model = load_checkpoint(path, arch=arch, **kwargs)
            computed = extract_activations(model, bundle.split(split), missing, **options)
        for name, arr in computed.items():
            if cache is not None:
                digest, fields = keys[name]
                cache.store(digest, arr, fields)
            result[name] = arr
    return {name: result[name] for name in names}


def checkpoint_layers(
    checkpoint_path: str | Path,
    input_shape: Sequence[int],
    *,
    arch: str | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    trusted: bool = False,
    time_limit: float | None = None,
    noise_levels: Sequence[float] = (),
) -> list[LayerInfo]:
    """:func:`list_layers` of a checkpoint file (a trusted code file runs in a child process);
    a denoiser's layers are listed at each of ``noise_levels``.

    Raises:
        CheckpointError: unreadable file, or code without ``trusted``.
        ActivationError: invalid ``input_shape``, a failing model, or the time limit exceeded.
    """
    path = Path(checkpoint_path)
    kwargs = dict(arch_kwargs or {})
    info = inspect_checkpoint(path)
    if not (info.is_code or is_file_arch(arch)):
        return list_layers(load_checkpoint(path, arch=arch, **kwargs), input_shape, noise_levels)
    _check_trusted(info, arch, trusted)
    shape = tuple(
        check_int(s, "input_shape entry", minimum=1, error=ActivationError) for s in input_shape
    )
    with _checkpoint_child(path, arch, kwargs, time_limit) as worker:
        levels = tuple(float(v) for v in noise_levels)
        return worker.request(("layers", shape, levels), "a dry forward pass")
