"""Layer listing, batched activation extraction with forward hooks, and an on-disk cache.

Layer names are qualified module names, aliases (``output``, ``logits``, ``penultimate``,
``block1``..``block4``; see :mod:`sde_core.inputs.models`) or explicit references such as
``"fc:input"``. A denoiser's layers carry the noise level of the probe they are read from,
``"denoised@0.5"`` or ``"block2@0.5"`` (method §14, :mod:`sde_core.inputs.denoisers`); one
forward pass runs per noise level.
Activations are float32 ``(n, d)`` arrays: each sample's tensor flattened, after global average
pooling of 4-D ``(N, C, H, W)`` and 3-D ``(N, C, L)`` maps when ``pool=True`` (never for a
``":flat"`` reference such as a denoiser's ``denoised`` image). A Hugging Face
model folder (:mod:`sde_core.inputs.hf_models`) offers its pooled hidden states as layers;
``pool=True`` averages them over a text's real tokens, ``pool=False`` takes its last token.

A checkpoint that is code (TorchScript, full pickle), or one read as a ``file:`` architecture (a
class from the user's Python file), is refused unless it is trusted; a trusted one is loaded and
run in a child process, one forward pass per request, and stopped when a step
takes longer than ``time_limit`` seconds (:mod:`sde_core.inputs.isolation`). Weights files are
built from the registered architectures and run in this process.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from sde_core.common.fsio import atomic_write, atomic_write_text
from sde_core.common.hashing import array_sha256, file_sha256, stable_hash
from sde_core.common.validation import as_index_vector, check_int
from sde_core.errors import ActivationError, CheckpointError, DataError
from sde_core.families.registry import family_of
from sde_core.inputs.architectures import ALIASES, LayerRef, model_layer_refs
from sde_core.inputs.checkpoint_files import inspect_checkpoint, untrusted_message
from sde_core.inputs.data import DatasetBundle
from sde_core.inputs.denoisers import noise_layer_name, parse_noise_layer
from sde_core.inputs.external_archs import is_file_arch, parse_file_arch
from sde_core.inputs.isolation import (
    DEFAULT_MEMORY_LIMIT,
    IsolatedWorker,
    check_time_limit,
)
from sde_core.inputs.models import load_checkpoint, load_checkpoint_details
from sde_core.inputs.precomputed import load_precomputed

__all__ = [
    "ActivationCache",
    "CacheStats",
    "LayerInfo",
    "TrustedProbe",
    "align_to_dataset",
    "cached_layers",
    "checkpoint_layers",
    "extract_activations",
    "get_activations",
    "list_layers",
    "probe_trusted_checkpoint",
    "resolve_layer",
    "torch_device",
    "trusted_weights",
]

Progress = Callable[[int, int], None]
_PRECOMPUTED_SUFFIXES = {".npz", ".parquet"}


@dataclass(frozen=True)
class LayerInfo:
    """One addressable layer.

    Attributes:
        name: alias or qualified module name.
        output_shape: per-sample shape of the tensor (no batch dimension).
        module_type: module class name, or ``"alias of <ref>"`` for aliases.
        n_params: parameters of the module including its children (0 for aliases).
        dim: ``d`` of the extracted activation with pooling on.
    """

    name: str
    output_shape: tuple[int, ...]
    module_type: str
    n_params: int
    dim: int


def _is_script(model: nn.Module) -> bool:
    return isinstance(model, torch.jit.ScriptModule)


def _named_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules a model offers as layers: every named module, or only those a wrapper
    exposes (``sde_exposed_modules``: a Hugging Face model's pooled hidden states)."""
    if _is_script(model):
        return []
    exposed = getattr(model, "sde_exposed_modules", None)
    named = [(n, m) for n, m in model.named_modules() if n]
    if exposed is None:
        return named
    keep = set(exposed)
    return [(n, m) for n, m in named if n in keep]


def _set_pooling(model: nn.Module, pool: bool) -> None:
    """Tell a language-model wrapper how to pool token states: ``pool`` true averages over
    the real tokens, false takes the last real token (other models ignore it)."""
    setter = getattr(model, "set_pooling", None)
    if callable(setter):
        setter("mean" if pool else "last")


def resolve_layer(model: nn.Module, name: str) -> LayerRef:
    """Resolve an alias, a qualified module name or ``"module:input|softmax"`` to a LayerRef.

    Raises:
        ActivationError: unknown name (the message lists the valid names).
    """
    if not isinstance(name, str) or not name:
        raise ActivationError(f"layer name must be a non-empty string, got {name!r}")
    base, level = parse_noise_layer(name)
    denoiser = family_of(model).probes_at_noise_levels
    if denoiser and level is None:
        raise ActivationError(
            f"layer {name!r} has no noise level, which a denoiser's layers need (method §14): "
            f"write '{noise_layer_name(base, 0.5)}' for its output at noise level 0.5"
        )
    if level is not None and not denoiser:
        raise ActivationError(
            f"layer {name!r} names a noise level, but only a denoiser is probed at noise "
            f"levels; use {base!r}"
        )
    ref = _resolve_base(model, base, name)
    return ref if level is None else dataclasses.replace(ref, noise=level)


def _resolve_base(model: nn.Module, name: str, full: str) -> LayerRef:
    """:func:`resolve_layer` of a name without a noise level (``full`` is the name as given)."""
    refs = model_layer_refs(model)
    if name in refs:
        return refs[name]
    modules = {n for n, _ in _named_layers(model)}
    module, sep, kind = name.partition(":")
    if module in modules and (not sep or kind in ("output", "input", "softmax", "flat")):
        return LayerRef(module, kind if sep else "output")  # type: ignore[arg-type]
    valid = [a for a in ALIASES if a in refs] + sorted(modules)
    if family_of(model).probes_at_noise_levels:
        valid = [noise_layer_name(v, 0.5) for v in valid]
    shown = ", ".join(valid[:80]) + (f", ... ({len(valid)} in all)" if len(valid) > 80 else "")
    extra = " (TorchScript models expose only their output)" if _is_script(model) else ""
    raise ActivationError(f"unknown layer {full!r}{extra}; valid names: {shown}")


def _process(t: torch.Tensor, kind: str, pool: bool) -> torch.Tensor:
    """Flatten a captured ``(N, ...)`` tensor to ``(N, d)`` float32 (pooled / softmaxed)."""
    if kind == "flat":
        pool = False
    if pool and t.dim() == 4:
        t = t.mean(dim=(2, 3))
    elif pool and t.dim() == 3:
        t = t.mean(dim=2)
    t = t.reshape(t.shape[0], -1).float()
    if kind == "softmax":
        t = torch.softmax(t, dim=1)
    return t.clone()


def _first_tensor(obj: Any) -> torch.Tensor:
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, tuple | list) and obj and isinstance(obj[0], torch.Tensor):
        return obj[0]
    if hasattr(obj, "logits") and isinstance(obj.logits, torch.Tensor):
        return obj.logits
    raise ActivationError(
        f"a layer returned {type(obj).__name__}, not a tensor; choose another layer"
    )


class _Capture:
    """Forward hooks that store each requested reference's processed batch tensor.

    A denoiser runs one probe per noise level among the references (method §14); a hook stores
    its tensor only during the pass of its own level.
    """

    def __init__(self, model: nn.Module, refs: dict[str, LayerRef], pool: bool) -> None:
        self.refs, self.pool = refs, pool
        self.active: float | None = None
        _set_pooling(model, pool)
        self.values: dict[str, torch.Tensor] = {}
        self.handles: list[Any] = []
        modules = dict(model.named_modules())
        for key, ref in refs.items():
            if ref.module == "":
                continue
            if _is_script(model):
                raise ActivationError(
                    f"layer {key!r} needs hooks, which TorchScript models do not support; use "
                    "'output' or 'logits', or load a state-dict checkpoint"
                )
            module = modules[ref.module]
            if ref.kind == "input":
                self.handles.append(module.register_forward_pre_hook(self._pre_hook(key)))
            else:
                self.handles.append(module.register_forward_hook(self._hook(key, ref.kind)))

    def _pre_hook(self, key: str) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple) -> None:
            if self.refs[key].noise == self.active:
                self.values[key] = _process(_first_tensor(args), "input", self.pool)

        return hook

    def _hook(self, key: str, kind: str) -> Callable[..., None]:
        def hook(_module: nn.Module, _args: tuple, output: Any) -> None:
            if self.refs[key].noise == self.active:
                self.values[key] = _process(_first_tensor(output), kind, self.pool)

        return hook

    def run(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """One forward pass (a denoiser: one probe per noise level); returns
        ``{key: (N, d) tensor}`` for every reference."""
        self.values = {}
        levels = sorted({ref.noise for ref in self.refs.values()}, key=lambda v: v or 0.0)
        for level in levels:
            self.active = level
            if level is None:
                out = model(x)
            else:
                probe = getattr(model, "probe", None)
                if not callable(probe):
                    raise ActivationError(
                        "a layer names a noise level but the model is not a denoiser; drop '@…'"
                    )
                out = probe(x, level)
            for key, ref in self.refs.items():
                if ref.module == "" and ref.noise == level:
                    self.values[key] = _process(_first_tensor(out), ref.kind, self.pool)
        self.active = None
        return self.values

    def close(self) -> None:
        """Remove the hooks."""
        for handle in self.handles:
            handle.remove()
        self.handles = []


def torch_device(device: object) -> torch.device:
    """The torch device named ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``;
    ``"auto"``: CUDA when available, else the CPU), after checking that this machine has it.

    Raises:
        ActivationError: another name (e.g. ``"meta"``, which holds no data, or ``""``), or a
            device this machine does not have (the message says which it has).
    """
    if isinstance(device, torch.device):
        device = str(device)
    if isinstance(device, str) and device.strip() == "auto":  # a CUDA GPU when there is one
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str) or not _DEVICE_NAME.fullmatch(device.strip()):
        raise ActivationError(
            f"device {str(device)[:40]!r} is not a compute device: use 'auto', 'cpu', 'cuda', "
            "'cuda:N' or 'mps'"
        )
    dev = torch.device(device.strip())
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ActivationError(
                f"device {device!r} requested but CUDA is not available on this machine; use "
                "device 'cpu'"
            )
        if dev.index is not None and dev.index >= count:
            raise ActivationError(
                f"device {device!r} does not exist: this machine has {count} CUDA device(s), "
                f"cuda:0 to cuda:{count - 1}"
            )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ActivationError(f"device {device!r} (Apple MPS) is not available; use 'cpu'")
    return dev


_DEVICE_NAME = re.compile(r"cpu|cuda(:[0-9]{1,3})?|mps")


def _model_dtype(model: nn.Module) -> torch.dtype:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def list_layers(
    model: nn.Module, input_shape: Sequence[int], noise_levels: Sequence[float] = ()
) -> list[LayerInfo]:
    """Aliases then every named module, with per-sample output shapes from ONE dry forward pass
    (a batch of two zero inputs of ``input_shape``, in eval mode, on CPU).

    A denoiser's layers are listed once per noise level of ``noise_levels`` (``"denoised@0.5"``,
    method §14); the shapes do not depend on the level.

    Raises:
        ActivationError: invalid ``input_shape``, a model that fails on it, or a denoiser without
            noise levels.
    """
    if not isinstance(model, nn.Module):
        raise ActivationError(f"list_layers needs an nn.Module, got {type(model).__name__}")
    shape = tuple(int(s) for s in input_shape)
    if not shape or any(s <= 0 for s in shape):
        raise ActivationError(
            f"input_shape must be positive sizes like (3, 32, 32), got {input_shape!r}"
        )
    aliases = model_layer_refs(model)
    levels = [float(v) for v in noise_levels]
    if family_of(model).probes_at_noise_levels:
        if not levels or not all(np.isfinite(v) and v > 0 for v in levels):
            raise ActivationError(
                f"a denoiser's layers are listed at noise levels; pass positive noise_levels, "
                f"got {list(noise_levels)!r}"
            )
        aliases = {k: dataclasses.replace(v, noise=levels[0]) for k, v in aliases.items()}
    else:
        levels = []
    modules = _named_layers(model)
    raw: dict[str, tuple[int, ...]] = {}
    handles = []

    def make_hook(name: str) -> Callable[..., None]:
        def hook(_m: nn.Module, _a: tuple, out: Any) -> None:
            if isinstance(out, torch.Tensor):
                raw[name] = tuple(out.shape[1:])
            elif isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
                raw[name] = tuple(out[0].shape[1:])

        return hook

    for name, module in modules:
        handles.append(module.register_forward_hook(make_hook(name)))
    capture = None
    was_training = model.training
    try:
        capture = _Capture(model, dict(aliases), pool=False)
        model.eval()
        x = torch.zeros((2, *shape), dtype=_model_dtype(model), device=_param_device(model))
        with torch.inference_mode():
            values = capture.run(model, x)
    except ActivationError:
        raise
    except Exception as exc:
        raise ActivationError(
            f"the model fails on inputs of shape {shape} ({type(exc).__name__}: {exc}); pass the "
            "per-sample input shape the model expects"
        ) from exc
    finally:
        for h in handles:
            h.remove()
        if capture is not None:
            capture.close()
        model.train(was_training)
    infos = []
    family_aliases = [a for a in aliases if a not in ALIASES]  # a family's own (its order)
    for alias in (*ALIASES, *family_aliases):
        if alias in values:
            ref = aliases[alias]
            kept = ref.kind == "output" and ref.module in raw
            out_shape = raw[ref.module] if kept else tuple(values[alias].shape[1:])
            shown = dataclasses.replace(ref, noise=None)  # the level goes into the name below
            infos.append(
                LayerInfo(alias, out_shape, f"alias of {shown}", 0, _pooled_dim(out_shape))
            )
    for name, module in modules:
        if name in raw:
            n_params = sum(p.numel() for p in module.parameters())
            infos.append(
                LayerInfo(name, raw[name], type(module).__name__, n_params, _pooled_dim(raw[name]))
            )
    if levels:
        return [
            dataclasses.replace(info, name=noise_layer_name(info.name, level))
            for info in infos
            for level in levels
        ]
    return infos


def _pooled_dim(shape: tuple[int, ...]) -> int:
    """``d`` of a pooled per-sample shape: the channels of a 2-D/3-D map, else every entry."""
    if len(shape) in (2, 3):
        return int(shape[0])
    return int(np.prod(shape)) if shape else 1


def _param_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _batches(dataset: Dataset, indices: np.ndarray, batch_size: int) -> Iterable[torch.Tensor]:
    for start in range(0, len(indices), batch_size):
        chunk = indices[start : start + batch_size]
        if hasattr(dataset, "get_batch"):
            yield dataset.get_batch(chunk)[0]
        else:
            items = [dataset[int(i)] for i in chunk]
            yield torch.stack([it[0] if isinstance(it, tuple | list) else it for it in items])


def _row_indices(indices: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """Validated int64 row indices into ``n`` rows (non-empty, 1-D, integer, in range)."""
    return as_index_vector(indices, n, "indices", error=ActivationError)


def extract_activations(
    model: nn.Module,
    dataset: Dataset,
    layers: str | Sequence[str],
    *,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    pool: bool = True,
    indices: Sequence[int] | np.ndarray | None = None,
    progress: Progress | None = None,
) -> dict[str, np.ndarray]:
    """Activations of several layers in ONE batched pass (eval mode, ``torch.inference_mode``).

    Args:
        model: any ``nn.Module`` (left in its original train/eval mode afterwards).
        dataset: yields ``(x, y)`` or ``x``; datasets with ``get_batch(indices)`` are batched
            directly.
        layers: names (aliases, module names, ``"module:input"``; a denoiser's with a noise
            level, ``"denoised@0.5"``, one probe per level); a single string is allowed.
        batch_size: samples per forward pass.
        device: ``"cpu"`` or ``"cuda"``; the model is moved there.
        pool: global-average-pool 4-D and 3-D maps (so d is the channel count).
        indices: rows of ``dataset`` to use (default all), in this order.
        progress: called as ``progress(done, total)`` in samples after each batch.

    Returns:
        ``{layer: float32 array (n, d)}`` keyed by the names as given.

    Raises:
        ActivationError: unknown layer (listing the valid names), bad arguments, or a forward
            pass that fails.
    """
    names = [layers] if isinstance(layers, str) else list(layers)
    if not names:
        raise ActivationError("layers is empty; pass at least one layer name such as 'output'")
    batch_size = check_int(batch_size, "batch_size", minimum=1, error=ActivationError)
    n_total = len(dataset)  # type: ignore[arg-type]
    idx = np.arange(n_total, dtype=np.int64) if indices is None else _row_indices(indices, n_total)
    if idx.size == 0:
        raise ActivationError("the dataset is empty; nothing to extract")
    refs = {name: resolve_layer(model, name) for name in dict.fromkeys(names)}
    dev = torch_device(device)
    model.to(dev)
    was_training = model.training
    model.eval()
    capture = _Capture(model, refs, pool)
    outputs: dict[str, np.ndarray] = {}
    done = 0
    try:
        with torch.inference_mode():
            for xb in _batches(dataset, idx, batch_size):
                values = capture.run(
                    model, xb.to(dev, dtype=_model_dtype(model), non_blocking=True)
                )
                for key, val in values.items():
                    if key not in outputs:
                        outputs[key] = np.empty((idx.size, val.shape[1]), dtype=np.float32)
                    outputs[key][done : done + val.shape[0]] = val.cpu().numpy()
                done += xb.shape[0]
                if progress is not None:
                    progress(done, int(idx.size))
    except (ActivationError, DataError):
        raise
    except Exception as exc:
        raise ActivationError(
            f"forward pass failed ({type(exc).__name__}: {exc}); check that the dataset's inputs "
            "fit the model (shape, channels)"
        ) from exc
    finally:
        capture.close()
        model.train(was_training)
    return {name: outputs[name] for name in refs}


# ----------------------------------------------------------------------------------------------
# Cache
# ----------------------------------------------------------------------------------------------


@dataclass
class CacheStats:
    """Counters of an :class:`ActivationCache` since it was opened."""

    hits: int = 0
    misses: int = 0
    rebuilt: int = 0
    stored: int = 0


class ActivationCache:
    """On-disk activation cache: ``<root>/<key[:2]>/<key>.npy`` plus a ``.json`` sidecar.

    The sidecar records shape, dtype, the array's SHA-256 and what the key was made of. An entry
    whose file is unreadable or whose hash differs is deleted and reported as a miss (counted in
    ``stats.rebuilt``), so corrupt data are never returned. Writes are atomic (temp + rename).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ActivationError(
                f"cannot create activation cache folder {self.root}: {exc}"
            ) from exc
        self.stats = CacheStats()

    @staticmethod
    def key(
        model_hash: str,
        fingerprint: str,
        split: str,
        layer: str,
        pool: bool,
        indices: np.ndarray | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The entry digest and the fields it hashes (checkpoint hash, dataset fingerprint, split,
        layer, pooling, and the row subset when not the whole split)."""
        fields = {
            "model": model_hash,
            "data": fingerprint,
            "split": split,
            "layer": layer,
            "pool": bool(pool),
            "rows": None if indices is None else array_sha256(np.asarray(indices, dtype=np.int64)),
        }
        return stable_hash(fields), fields

    def _paths(self, digest: str) -> tuple[Path, Path]:
        folder = self.root / digest[:2]
        return folder / f"{digest}.npy", folder / f"{digest}.json"

    def contains(self, digest: str) -> bool:
        """Whether an entry exists (cheap: no read; :meth:`load` still checks its hash)."""
        npy, meta_path = self._paths(digest)
        return npy.is_file() and meta_path.is_file()

    def load(self, digest: str) -> np.ndarray | None:
        """The cached array, or ``None`` on a miss (a corrupt entry is deleted first)."""
        npy, meta_path = self._paths(digest)
        if not npy.exists() and not meta_path.exists():
            self.stats.misses += 1
            return None
        try:
            meta = json.loads(meta_path.read_text())
            arr = np.load(npy, allow_pickle=False)
            ok = (
                list(arr.shape) == meta["shape"]
                and str(arr.dtype) == meta["dtype"]
                and array_sha256(arr) == meta["sha256"]
            )
        except (OSError, ValueError, KeyError, EOFError):
            ok = False
        if not ok:
            self.delete(digest)
            self.stats.rebuilt += 1
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        return arr

    def store(self, digest: str, array: np.ndarray, fields: dict[str, Any] | None = None) -> None:
        """Write ``array`` (float32 ``(n, d)``) and its sidecar atomically."""
        arr = np.ascontiguousarray(array)
        npy, meta_path = self._paths(digest)
        npy.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "sha256": array_sha256(arr),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "key": fields or {},
        }
        try:
            atomic_write(npy, lambda tmp: _save_npy(tmp, arr))
            atomic_write_text(meta_path, json.dumps(meta))
        except OSError as exc:
            raise ActivationError(
                f"cannot write activation cache entry in {npy.parent}: {exc}"
            ) from exc
        self.stats.stored += 1

    def delete(self, digest: str) -> None:
        """Remove an entry (both files) if present."""
        for p in self._paths(digest):
            p.unlink(missing_ok=True)


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


def _check_trusted(info: Any, arch: str | None, trusted: bool) -> None:
    """Refuse code (a code checkpoint, or a ``file:`` architecture) that is not trusted."""
    if trusted:
        return
    if info.is_code:
        raise CheckpointError(untrusted_message(info))
    raise CheckpointError(
        f"architecture {str(arch).partition('#')[0]!r} is code from a Python file: it runs only "
        "for a model you trusted (--trusted, `python -m sde_core workspace trust WORKSPACE "
        "--model NAME`, the page's trusted box); nothing was run"
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


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, arr)


# ----------------------------------------------------------------------------------------------
# Trusted code checkpoints, run in a child process under a time limit
# ----------------------------------------------------------------------------------------------


def _serve_checkpoint(
    path: str, arch: str | None, arch_kwargs: dict[str, Any]
) -> Callable[[tuple[Any, ...]], Any]:
    """Child-process side: load the trusted checkpoint and answer extraction requests.

    Requests: ``("probe", x)`` -> :class:`TrustedProbe` (one forward pass of a float32 batch);
    ``("state",)`` -> ``(arch, arch_kwargs, {name: array})`` (the weights, as NumPy arrays);
    ``("resolve", names)`` -> None (raises on unknown layers);
    ``("batch", names, pool, device, x)`` -> ``{name: float32 (N, d)}`` for a float32 batch;
    ``("layers", input_shape, noise_levels)`` -> ``list[LayerInfo]``.
    """
    loaded = load_checkpoint_details(path, arch=arch, trusted=True, **arch_kwargs)
    model = loaded.model.eval()
    captures: dict[tuple[tuple[str, ...], bool], _Capture] = {}

    def handle(message: tuple[Any, ...]) -> Any:
        op = message[0]
        if op == "probe":
            return _probe(model, loaded.arch, loaded.notes, message[1])
        if op == "state":
            kwargs = dict(getattr(model, "sde_arch_kwargs", None) or {})
            state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
            return getattr(model, "sde_arch", None) or loaded.arch, kwargs, state
        if op == "resolve":
            for name in message[1]:
                resolve_layer(model, name)
            return None
        if op == "layers":
            return list_layers(model, message[1], message[2])
        _, names, pool, device, x = message
        key = (tuple(names), bool(pool))
        if key not in captures:
            captures[key] = _Capture(model, {n: resolve_layer(model, n) for n in names}, pool)
        dev = torch_device(device)
        model.to(dev)
        batch = torch.from_numpy(x).to(dev, dtype=_model_dtype(model))
        with torch.inference_mode():
            values = captures[key].run(model, batch)
        return {n: v.cpu().numpy() for n, v in values.items()}

    return handle


@dataclass(frozen=True)
class TrustedProbe:
    """What a trusted code checkpoint is, found in the child process that loaded it.

    Attributes:
        arch: the registry architecture its model declares (``None``: TorchScript or unknown).
        arch_kwargs: the builder kwargs it was built with.
        notes: the loader's notes for the user.
        output: the model's output for the probe batch (the first element of a tuple output),
            float32 ``(batch, ...)``; ``None`` when it failed or was not a tensor.
        error: the exception the forward pass raised (its type and first line), else ``""``.
        returned: the type of what the model returned when it was not a tensor, else ``""``.
        class_name: the class of the loaded model object (e.g. a user's ``MyCNN``).
    """

    arch: str | None
    arch_kwargs: dict[str, Any]
    notes: tuple[str, ...]
    output: np.ndarray | None
    error: str = ""
    returned: str = ""
    class_name: str = ""


def _probe(model: nn.Module, arch: str | None, notes: tuple[str, ...], x: Any) -> TrustedProbe:
    """Child-process side of :func:`probe_trusted_checkpoint`."""
    kwargs = dict(getattr(model, "sde_arch_kwargs", None) or {})
    arch = getattr(model, "sde_arch", None) or arch
    name = type(model).__name__
    try:
        with torch.inference_mode():
            out = model(torch.from_numpy(x))
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        first = str(exc).strip().split("\n")[0][:200]
        error = f"{type(exc).__name__}: {first}"
        return TrustedProbe(arch, kwargs, notes, None, error=error, class_name=name)
    if isinstance(out, tuple | list) and out:
        out = out[0]
    if not isinstance(out, torch.Tensor):
        return TrustedProbe(arch, kwargs, notes, None, returned=type(out).__name__, class_name=name)
    return TrustedProbe(arch, kwargs, notes, out.detach().float().cpu().numpy(), class_name=name)


def _checkpoint_child(
    path: Path,
    arch: str | None,
    arch_kwargs: Mapping[str, Any] | None,
    time_limit: float | None,
    *,
    on_cpu: bool = True,
) -> IsolatedWorker:
    """The isolated child that loads a trusted code checkpoint and answers requests about it,
    under ``time_limit`` seconds and, on the CPU, the memory cap (a GPU's driver reserves far
    more address space than it uses, so no cap there)."""
    return IsolatedWorker(
        _serve_checkpoint,
        (str(path), arch, dict(arch_kwargs or {})),
        time_limit=check_time_limit(time_limit),
        memory_limit=DEFAULT_MEMORY_LIMIT if on_cpu else None,
        label=f"the trusted model in {path.name}",
    )


def probe_trusted_checkpoint(
    path: str | Path,
    x: np.ndarray,
    *,
    arch: str | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    time_limit: float | None = None,
) -> TrustedProbe:
    """Load a trusted code checkpoint in a child process and run it once on ``x``.

    Used to add a trusted model to a workspace: the file's code runs only in the child, under
    ``time_limit`` seconds per step (default :data:`DEFAULT_TIME_LIMIT`) and
    :data:`~sde_core.inputs.isolation.DEFAULT_MEMORY_LIMIT`; its process tree is killed after.

    Args:
        x: a float32 batch of dataset inputs ``(batch, *input_shape)``.

    Raises:
        CheckpointError: the file cannot be loaded (re-raised from the child).
        ActivationError: the time or memory limit was exceeded, or the child crashed.
    """
    file = Path(path)
    with _checkpoint_child(file, arch, arch_kwargs, time_limit) as worker:
        probe: TrustedProbe = worker.request(
            ("probe", np.ascontiguousarray(x, dtype=np.float32)), "a forward pass of 2 samples"
        )
    return probe


def trusted_weights(
    path: str | Path,
    *,
    arch: str | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    time_limit: float | None = None,
) -> nn.Module:
    """The model of a trusted code checkpoint rebuilt in this process from its weights alone.

    The file is loaded in a child process (under ``time_limit`` seconds and the memory cap);
    only its architecture name, kwargs and weights come back, and the model is built here
    from the registry, so none of the file's code runs in this process (used to unlearn from
    or train on such a model).

    Raises:
        CheckpointError: the file's model is not a registry architecture (e.g. TorchScript),
            or cannot be loaded.
        ActivationError: the time or memory limit was exceeded, or the child crashed.
    """
    from sde_core.inputs.architectures import build_model

    file = Path(path)
    with _checkpoint_child(file, arch, arch_kwargs, time_limit) as worker:
        name, kwargs, state = worker.request(("state",), "reading its weights")
    if name is None:
        raise CheckpointError(
            f"{file.name} is {inspect_checkpoint(file).describe()} without a registry "
            "architecture: it can be evaluated (in its own process) but not rebuilt from its "
            "weights; save its weights as a state dict of a registry architecture"
        )
    model = build_model(name, **{**kwargs, **dict(arch_kwargs or {})})
    try:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{file.name}: its weights do not fit {name!r} ({exc})") from None
    return model.eval()


def _extract_isolated(
    path: Path,
    arch: str | None,
    arch_kwargs: dict[str, Any],
    time_limit: float,
    dataset: Dataset,
    names: list[str],
    *,
    batch_size: int,
    device: str | torch.device,
    pool: bool,
    indices: np.ndarray | None,
    progress: Progress | None,
) -> dict[str, np.ndarray]:
    """:func:`extract_activations` of a trusted code checkpoint, run in a child process."""
    batch_size = check_int(batch_size, "batch_size", minimum=1, error=ActivationError)
    n_total = len(dataset)  # type: ignore[arg-type]  # map-style datasets have a length
    idx = np.arange(n_total, dtype=np.int64) if indices is None else indices
    if idx.size == 0:
        raise ActivationError("the dataset is empty; nothing to extract")
    outputs: dict[str, np.ndarray] = {}
    done = 0
    on_cpu = torch_device(device).type == "cpu"
    with _checkpoint_child(path, arch, arch_kwargs, time_limit, on_cpu=on_cpu) as worker:
        worker.request(("resolve", names), "checking the layer names")
        for xb in _batches(dataset, idx, batch_size):
            x = xb.detach().cpu().float().numpy()
            values = worker.request(
                ("batch", names, pool, str(device), x), f"a forward pass of {x.shape[0]} samples"
            )
            for key, val in values.items():
                if key not in outputs:
                    outputs[key] = np.empty((idx.size, val.shape[1]), dtype=np.float32)
                outputs[key][done : done + val.shape[0]] = val
            done += x.shape[0]
            if progress is not None:
                progress(done, int(idx.size))
    return {name: outputs[name] for name in names}


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
