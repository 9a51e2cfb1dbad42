"""A model's layers: listing them with their shapes and resolving a layer name to a reference.

Layer names are qualified module names, aliases (``output``, ``logits``, ``penultimate``,
``block1``..``block4``; see :mod:`sde_core.inputs.architectures`) or explicit references such as
``"fc:input"``. A denoiser's layers carry the noise level of the probe they are read from,
``"denoised@0.5"`` or ``"block2@0.5"`` (method §14, :mod:`sde_core.inputs.denoisers`). A Hugging
Face model folder (:mod:`sde_core.inputs.hf_models`) offers its pooled hidden states as layers.

The forward hooks that capture a layer's tensor (pooled, softmaxed or flattened) serve both the
dry pass that lists the layers and the extraction (:mod:`sde_core.inputs.extraction`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from sde_core.errors import ActivationError
from sde_core.families.registry import family_of
from sde_core.inputs.architectures import ALIASES, LayerRef, model_layer_refs
from sde_core.inputs.denoisers import noise_layer_name, parse_noise_layer

__all__ = ["LayerInfo", "list_layers", "resolve_layer"]


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
