"""Reading a checkpoint file into tensors, without running code unless it is trusted.

Weights load with ``safetensors`` or ``torch.load(weights_only=True)`` under an allowlist that also
admits NumPy scalars/arrays/dtypes; code (a TorchScript archive, a full pickle) loads only when
trusted. The state dict is found as the unlearning code bases and the field's ecosystems save
it: under ``state_dict``/``model`` next to training metadata, ``module.``/``_orig_mod.``
prefixes, ``torch.nn.utils.prune`` pairs ``weight_orig``/``weight_mask`` (folded into
``weight``), Lightning ``.ckpt`` files with their ``hyper_parameters``, and a wrapper's shared
key prefix. A pickle whose tensors would describe far more than its file holds is refused. The
matching of the tensors to an architecture is :mod:`sde_core.inputs.models`.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sde_core.errors import CheckpointError
from sde_core.inputs.checkpoint_files import (
    CheckpointInfo,
    plain_text,
    safe_globals,
    untrusted_message,
)

__all__ = []


_SAFE_LOAD_LOCK = threading.Lock()


_STATE_KEYS = ("state_dict", "model", "model_state_dict", "net")


_PREFIXES = ("module.", "_orig_mod.")


#: Attribute names a wrapper module commonly holds its network under (``self.model = ...``);
#: a Lightning checkpoint's shared first key component is taken whatever its name.
_WRAPPERS = ("model", "net", "module")


_LIGHTNING_KEY = "pytorch-lightning_version"


_NORMALIZE_KEYS = ("normalize.mean", "normalize.std")


#: Tensors of a pickle may describe at most this multiple of the file's size (plus 1 MiB):
#: more means views expanded with zero strides, which would be materialised on load.
_STORED_RATIO = 2


@dataclass
class _Raw:
    """A checkpoint read from disk: a module (trusted code) or a state dict, lazily."""

    module: nn.Module | None = None
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    tensors: Callable[[], dict[str, torch.Tensor]] | None = None
    arch: str | None = None
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hparams: dict[str, Any] = field(default_factory=dict)
    wrapper: str | None = None

    def unwrapped(self, path: Path) -> _Raw | None:
        """The same weights with the shared wrapper prefix (``model.``…) stripped, or None."""
        if self.wrapper is None or self.tensors is None:
            return None
        cut = len(self.wrapper) + 1
        tensors = self.tensors
        note = (
            f"every key of {path.name} starts with {self.wrapper + '.'!r} (the attribute a "
            "wrapper module holds the network under): matched after stripping it"
        )
        return dataclasses.replace(
            self,
            shapes={k[cut:]: v for k, v in self.shapes.items()},
            tensors=lambda: {k[cut:]: v for k, v in tensors().items()},
            wrapper=None,
            notes=[*self.notes, note],
        )


def _wrapper_of(keys: list[str], any_name: bool) -> str | None:
    """The first key component every key shares, when it can be a wrapper's attribute."""
    heads = {k.partition(".")[0] for k in keys}
    if len(heads) != 1 or not all("." in k for k in keys):
        return None
    head = heads.pop()
    return head if any_name or head in _WRAPPERS else None


def _plain_hparams(obj: Any) -> dict[str, Any]:
    """The JSON-serialisable entries of a checkpoint's ``hyper_parameters`` mapping."""
    out: dict[str, Any] = {}
    if not isinstance(obj, Mapping):
        return out
    for key, value in obj.items():
        try:
            if isinstance(key, str) and json.loads(json.dumps(value)) == value:
                out[key] = value
        except (TypeError, ValueError):
            continue
    return out


def _key_plan(keys: list[str]) -> tuple[dict[str, str], list[str]]:
    """How to rename a state dict's keys: the shared ``module.``/``_orig_mod.`` prefixes
    stripped, and the ``X_orig``/``X_mask`` pruning pairs to fold into ``X``."""
    rename = {k: k for k in keys}
    changed = True
    while changed and rename:
        changed = False
        for prefix in _PREFIXES:
            if all(v.startswith(prefix) for v in rename.values()):
                rename = {k: v[len(prefix) :] for k, v in rename.items()}
                changed = True
    names = set(rename.values())
    folds = sorted(
        v[: -len("_orig")]
        for v in names
        if v.endswith("_orig") and f"{v[: -len('_orig')]}_mask" in names
    )
    return rename, folds


def _fold_shapes(
    shapes: Mapping[str, tuple[int, ...]], rename: dict[str, str], folds: list[str], path: Path
) -> dict[str, tuple[int, ...]]:
    out = {rename[k]: tuple(v) for k, v in shapes.items()}
    for base in folds:
        orig, mask = out.pop(f"{base}_orig"), out.pop(f"{base}_mask")
        if orig != mask:
            raise CheckpointError(
                f"{path.name}: pruning pair {base}_orig {orig} and {base}_mask {mask} differ in "
                "shape; the file is damaged"
            )
        out[base] = orig
    return out


def _fold_tensors(
    state: Mapping[str, torch.Tensor], rename: dict[str, str], folds: list[str]
) -> dict[str, torch.Tensor]:
    out = {rename[k]: v for k, v in state.items()}
    for base in folds:
        orig, mask = out.pop(f"{base}_orig"), out.pop(f"{base}_mask")
        out[base] = orig * mask.to(orig.dtype)
    return out


def _fold_note(path: Path, folds: list[str], state: Mapping[str, torch.Tensor]) -> str:
    total = sum(state[b].numel() for b in folds)
    zeros = sum(int((state[b] == 0).sum()) for b in folds)
    return (
        f"{path.name} is a pruned model (torch.nn.utils.prune): folded {len(folds)} mask(s) into "
        f"the weights (weight = weight_orig × weight_mask); {zeros / max(total, 1):.1%} of those "
        "weights are zero"
    )


def _state_from(obj: Mapping[Any, Any], path: Path) -> tuple[dict[str, torch.Tensor], str | None]:
    """The tensor mapping inside a loaded document and the key it was found under."""
    for key in _STATE_KEYS:
        if isinstance(obj.get(key), Mapping):
            inner = obj[key]
            break
    else:
        key, inner = None, obj
    state = {k: v for k, v in inner.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
    if not state or len(state) != len(inner):
        found = ", ".join(sorted(str(k) for k in obj)[:8])
        raise CheckpointError(
            f"{path.name} is not a model checkpoint: expected parameter names mapped to tensors "
            f"(optionally under 'state_dict' or 'model'); its top-level keys are {found}"
        )
    return state, key


def _parse_loaded(obj: Any, path: Path) -> _Raw:
    if isinstance(obj, nn.Module):
        return _Raw(module=obj, arch=getattr(obj, "sde_arch", None))
    if not isinstance(obj, Mapping):
        raise CheckpointError(
            f"{path.name} holds a {type(obj).__name__}, not a state dict; save the model with "
            "save_checkpoint or torch.save(model.state_dict(), path)"
        )
    lightning = obj.get(_LIGHTNING_KEY) if isinstance(obj.get("state_dict"), Mapping) else None
    state, _ = _state_from(obj, path)
    arch, kwargs = obj.get("arch"), obj.get("arch_kwargs") or {}
    if isinstance(kwargs, str):
        kwargs = _json_kwargs(kwargs, path)
    if not isinstance(kwargs, Mapping):
        raise CheckpointError(f"{path.name}: its 'arch_kwargs' is not a mapping of kwargs")
    _check_stored_bytes(state, path)
    rename, folds = _key_plan(list(state))
    shapes = _fold_shapes({k: tuple(v.shape) for k, v in state.items()}, rename, folds, path)
    folded = _fold_tensors(state, rename, folds)
    notes = [_fold_note(path, folds, folded)] if folds else []
    hparams = _plain_hparams(obj.get("hyper_parameters"))
    if lightning is not None:
        notes.insert(
            0,
            f"{path.name} is a Lightning checkpoint (version {lightning}): read its "
            "state_dict; its hyper_parameters are default architecture kwargs",
        )
    return _Raw(
        shapes=shapes,
        tensors=lambda: folded,
        arch=arch if isinstance(arch, str) else None,
        arch_kwargs=dict(kwargs),
        notes=notes,
        hparams=hparams,
        wrapper=_wrapper_of(list(shapes), any_name=lightning is not None),
    )


def _json_kwargs(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise CheckpointError(
            f"{path.name}: its stored 'arch_kwargs' is not valid JSON; pass the architecture "
            "and its kwargs explicitly"
        ) from None


def _check_stored_bytes(state: Mapping[str, torch.Tensor], path: Path) -> None:
    size = path.stat().st_size
    described = sum(t.numel() * t.element_size() for t in state.values())
    if described > _STORED_RATIO * size + 2**20:
        raise CheckpointError(
            f"{path.name} describes {described / 2**20:.0f} MiB of weights but the file holds "
            f"only {size / 2**20:.1f} MiB (tensors expanded without data); it was not loaded"
        )


def _read_safetensors(path: Path) -> _Raw:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
        keys = list(fh.keys())
        shapes = {k: tuple(fh.get_slice(k).get_shape()) for k in keys}
    if not keys:
        raise CheckpointError(f"{path.name} holds no tensors; it is not a model checkpoint")
    rename, folds = _key_plan(keys)

    def tensors() -> dict[str, torch.Tensor]:
        with safe_open(str(path), framework="pt") as fh:
            state = {k: fh.get_tensor(k) for k in keys}
        return _fold_tensors(state, rename, folds)

    kwargs = _json_kwargs(meta["arch_kwargs"], path) if "arch_kwargs" in meta else {}
    if not isinstance(kwargs, Mapping):
        raise CheckpointError(f"{path.name}: its 'arch_kwargs' metadata is not a mapping")
    notes = [f"{path.name}: folded {len(folds)} pruning mask(s) into the weights"] if folds else []
    folded_shapes = _fold_shapes(shapes, rename, folds, path)
    return _Raw(
        shapes=folded_shapes,
        tensors=tensors,
        arch=meta.get("arch"),
        arch_kwargs=dict(kwargs),
        notes=notes,
        wrapper=_wrapper_of(list(folded_shapes), any_name=False),
    )


_WO_REASON = re.compile(
    r"WeightsUnpickler error:\s*(.*?)(?:\n\s*\n|Check the documentation|$)", re.S
)


def _torch_load(path: Path, info: CheckpointInfo) -> Any:
    """``torch.load`` of a torch.save file: weights-only (plus NumPy) unless it is trusted code."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if info.is_code:  # only reached with trusted=True
                return torch.load(path, map_location="cpu", weights_only=False)
            # torch's allowlist context is process-wide: one such load at a time, so a
            # thread leaving it cannot withdraw the NumPy entries from another's load
            with _SAFE_LOAD_LOCK, safe_globals():
                return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if info.is_code:
            raise
        found = _WO_REASON.search(str(exc))
        reason = plain_text(found.group(1) if found else str(exc), 200)
        raise CheckpointError(
            f"{path.name} was not loaded: it holds objects a weights-only load refuses "
            f"({reason}). Nothing in it was run. If you trust the person who made this file, "
            "trust it yourself: --trusted on the command line, `python -m sde_core workspace "
            "trust WORKSPACE --model NAME`, or the 'trusted' box in the dashboard"
        ) from None


def _read(path: Path, info: CheckpointInfo, trusted: bool) -> _Raw:
    if info.format == "safetensors":
        return _read_safetensors(path)
    if info.is_code and not trusted:
        raise CheckpointError(untrusted_message(info))
    if info.format == "torchscript":
        with warnings.catch_warnings():  # torch.jit is deprecated but reads existing archives
            warnings.simplefilter("ignore")
            return _Raw(module=torch.jit.load(str(path), map_location="cpu"))
    if info.format == "pickle":
        if not info.is_code:
            raise CheckpointError(
                f"{path.name} is a plain Python pickle without tensors, not a model checkpoint: "
                "save models with torch.save(model.state_dict(), path) or safetensors"
            )
        with open(path, "rb") as fh:  # trusted code: the user opted in for this file
            return _parse_loaded(pickle.load(fh), path)
    return _parse_loaded(_torch_load(path, info), path)
