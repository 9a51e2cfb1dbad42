"""The architecture registry: named builders, layer presets, and building a model within a budget.

Architectures are registered in :data:`ARCHITECTURES` by name (``"resnet18"``, ``"allcnn"``,
``"mlp"``, ``"cnn1d"``, ``"fmnist_cnn"`` of :mod:`sde_core.inputs.builtin_nets`, the CIFAR
ResNets ``"resnet20s"`` … ``"resnet110s"`` of the unlearning code bases, the EDM denoiser and the
architectures a model family brings, :mod:`sde_core.families`); any torchvision classification
model is available as ``"torchvision:<name>"`` (always randomly initialised, never downloaded).

Layers are addressed by qualified module names (``model.named_modules()``) or by aliases
(method §1): ``"logits"`` (output of the final classifier), ``"output"`` (softmax of the logits, the
default layer), ``"penultimate"`` (input of the final classifier, flattened) and, where the
architecture defines them, ``"block1"`` … ``"block4"``. Presets are strings: a module name alone
means that module's output; ``"fc:input"`` its input; ``"fc:softmax"`` the softmax of its output
(see :class:`LayerRef`).

Every model is first built on PyTorch's ``meta`` device (no memory) and refused when its
parameters and buffers would need more than a memory budget (:data:`MAX_MODEL_BYTES`), so a
checkpoint's metadata or a workspace entry cannot make the library allocate gigabytes.
Which architecture a bare state dict is, from its keys and shapes, is
:mod:`sde_core.inputs.arch_inference`.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torchvision
from torch import nn

from sde_core.errors import CheckpointError, SDEError
from sde_core.families.registry import FAMILIES, family_of
from sde_core.inputs.builtin_nets import (
    CNN1D,
    MLP,
    AllCNN,
    CifarResNet18,
    FashionCNN,
    Shapes,
    _infer_allcnn,
    _infer_cifar_resnet,
    _infer_cnn1d,
    _infer_edm_unet,
    _infer_fmnist_cnn,
    _infer_mlp,
    _infer_resnet18,
)
from sde_core.inputs.cifar_resnets import CIFAR_RESNET_DEPTHS, CifarResNetS
from sde_core.inputs.denoisers import DENOISED, EDMDenoiser, parse_noise_layer
from sde_core.inputs.external_archs import (
    TIMM_PREFIX,
    accepted_kwargs,
    is_file_arch,
    loaded_file_class,
    parse_file_arch,
    timm_builder,
)

__all__ = [
    "ALIASES",
    "ARCHITECTURES",
    "MAX_MODEL_BYTES",
    "ArchSpec",
    "LayerRef",
    "build_model",
    "build_model_within",
    "get_arch",
    "layer_presets",
    "model_bytes",
    "model_layer_refs",
    "register_architecture",
]

#: Memory budget (bytes of parameters and buffers) of one model built by :func:`build_model`;
#: override with the environment variable ``SDE_MAX_MODEL_BYTES``. 4 GiB holds every
#: torchvision classifier (ViT-H/14: 2.5 GB) and refuses absurd kwargs before any allocation.
MAX_MODEL_BYTES = int(os.environ.get("SDE_MAX_MODEL_BYTES", 4 * 2**30))

ALIASES: tuple[str, ...] = (
    "output",
    DENOISED,
    "logits",
    "penultimate",
    "block1",
    "block2",
    "block3",
    "block4",
)
"""Layer aliases, in the order the UI lists them."""

_TORCHVISION_PREFIX = "torchvision:"


RefKind = Literal["output", "input", "softmax", "flat"]
_KINDS = ("output", "input", "softmax", "flat")


@dataclass(frozen=True)
class LayerRef:
    """Which tensor of which module a layer name denotes.

    Attributes:
        module: qualified module name (``""`` is the whole model).
        kind: ``"output"`` (the module's output), ``"input"`` (its first positional input),
            ``"softmax"`` (softmax over the last dimension of its output) or ``"flat"`` (its
            output flattened, never pooled: a denoiser's image output).
        noise: for a denoiser, the noise level σ_t of the probe the tensor is taken from
            (method §14; written ``@σ_t``); None for every other model.
    """

    module: str
    kind: RefKind = "output"
    noise: float | None = None

    def __str__(self) -> str:
        text = self.module if self.kind == "output" else f"{self.module}:{self.kind}"
        return text if self.noise is None else f"{text}@{self.noise:g}"

    @classmethod
    def parse(cls, text: str) -> LayerRef:
        """Parse ``"fc"``, ``"fc:input"``, ``"fc:softmax"``, ``":flat"`` or any of them with a
        noise level ``"@σ_t"`` (the :meth:`__str__` form)."""
        try:
            base, noise = parse_noise_layer(text)
        except SDEError as exc:
            raise CheckpointError(str(exc)) from None
        module, sep, kind = base.partition(":")
        if not sep:
            return cls(module, "output", noise)
        if kind not in _KINDS:
            raise CheckpointError(
                f"layer reference {text!r} has unknown kind {kind!r}; "
                "use 'module', 'module:input', 'module:softmax' or 'module:flat'"
            )
        return cls(module, kind, noise)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ArchSpec:
    """A registered architecture.

    Attributes:
        name: registry key (``build_model(name)``).
        builder: callable returning a fresh, randomly initialised ``nn.Module``.
        default_kwargs: keyword arguments the builder uses when none are given.
        input_shape: per-sample input shape for the default kwargs, e.g. ``(3, 32, 32)``.
        layer_presets: alias -> layer reference string (see :class:`LayerRef`).
        description: one line for the UI.
        infer_kwargs: maps a state dict's ``{key: shape}`` to builder kwargs (e.g. num_classes
            from the classifier's weight), or ``None`` when the keys do not fit this family.
    """

    name: str
    builder: Callable[..., nn.Module]
    default_kwargs: Mapping[str, Any]
    input_shape: tuple[int, ...]
    layer_presets: Mapping[str, str]
    description: str
    infer_kwargs: Callable[[Mapping[str, tuple[int, ...]]], dict[str, Any] | None] | None = field(
        default=None, compare=False
    )


_RESNET_BLOCKS = {f"block{i}": f"layer{i}" for i in range(1, 5)}


ARCHITECTURES: dict[str, ArchSpec] = {}
"""Registry of named architectures; extend with :func:`register_architecture`."""


def register_architecture(spec: ArchSpec) -> None:
    """Add (or replace) an architecture in :data:`ARCHITECTURES`.

    Raises:
        CheckpointError: if the name is empty, uses the reserved ``torchvision:`` prefix, or a
            preset is not a valid layer reference.
    """
    if not isinstance(spec, ArchSpec):
        raise CheckpointError(f"register_architecture needs an ArchSpec, got {type(spec).__name__}")
    if not spec.name or spec.name.startswith(_TORCHVISION_PREFIX):
        raise CheckpointError(
            f"architecture name {spec.name!r} is empty or uses the reserved "
            f"{_TORCHVISION_PREFIX!r} prefix; choose another name"
        )
    for ref in spec.layer_presets.values():
        LayerRef.parse(ref)
    ARCHITECTURES[spec.name] = spec


def _classifier_presets(final: str) -> dict[str, str]:
    return {"output": f"{final}:softmax", "logits": final, "penultimate": f"{final}:input"}


for _spec in (
    ArchSpec(
        name="resnet18",
        builder=CifarResNet18,
        default_kwargs={"num_classes": 10, "in_channels": 3, "normalize": False},
        input_shape=(3, 32, 32),
        layer_presets={**_classifier_presets("fc"), **_RESNET_BLOCKS},
        description="CIFAR ResNet-18 (3×3 stride-1 stem, no max-pool), 11.2M parameters",
        infer_kwargs=_infer_resnet18,
    ),
    ArchSpec(
        name="allcnn",
        builder=AllCNN,
        default_kwargs={"num_classes": 10, "in_channels": 3, "width": 1.0, "dropout": False},
        input_shape=(3, 32, 32),
        layer_presets={
            **_classifier_presets("classifier.0"),
            "block1": "features.1",
            "block2": "features.2",
            "block3": "features.6",
            "block4": "features.9",
        },
        description="All-CNN with BatchNorm (96-96-192-192-192-192-192-192), 1.4M parameters",
        infer_kwargs=_infer_allcnn,
    ),
    ArchSpec(
        name="mlp",
        builder=MLP,
        default_kwargs={"input_dim": 40, "hidden": (256, 256), "num_classes": 10},
        input_shape=(40,),
        layer_presets={**_classifier_presets("head"), "block1": "body.1", "block2": "body.3"},
        description="MLP 40→256→256→10 (mnist1d demo)",
        infer_kwargs=_infer_mlp,
    ),
    ArchSpec(
        name="cnn1d",
        builder=CNN1D,
        default_kwargs={"length": 40, "channels": 32, "num_classes": 10},
        input_shape=(40,),
        layer_presets={
            **_classifier_presets("head"),
            "block1": "conv1",
            "block2": "conv2",
            "block3": "conv3",
        },
        description="1-D CNN, three stride-2 convolutions (mnist1d)",
        infer_kwargs=_infer_cnn1d,
    ),
    ArchSpec(
        name="fmnist_cnn",
        builder=FashionCNN,
        default_kwargs={
            "in_channels": 1,
            "num_classes": 10,
            "channels": (32, 64),
            "hidden": 128,
            "head_pool": None,
            "input_size": 28,
        },
        input_shape=(1, 28, 28),
        layer_presets={
            **_classifier_presets("classifier.2"),
            "block1": "features.3",
            "block2": "features.7",
            "block3": "classifier.1",
        },
        description="Fashion-MNIST demo CNN: conv32-conv64 (BN, max-pool), linear 128, linear 10",
        infer_kwargs=_infer_fmnist_cnn,
    ),
    ArchSpec(
        name="edm_unet",
        builder=EDMDenoiser,
        default_kwargs={
            "in_channels": 1,
            "channels": (32, 64),
            "emb_dim": 64,
            "sigma_data": 0.5,
            "image_size": 28,
        },
        input_shape=(1, 28, 28),
        layer_presets={
            DENOISED: ":flat",
            "block1": "enc1",
            "block2": "enc2",
            "block3": "mid",
            "block4": "dec1",
        },
        description=(
            "EDM denoiser (Karras et al. 2022 preconditioning) on a small two-level U-Net; "
            "layers are probed at a noise level: 'denoised@0.5', 'block2@0.5' (method §14)"
        ),
        infer_kwargs=_infer_edm_unet,
    ),
    *(
        ArchSpec(
            name=f"resnet{depth}s",
            builder=functools.partial(CifarResNetS, depth),
            default_kwargs={"num_classes": 10, "in_channels": 3, "normalize": True, "head": "fc"},
            input_shape=(3, 32, 32),
            layer_presets={
                **_classifier_presets("fc"),
                "block1": "layer1",
                "block2": "layer2",
                "block3": "layer3",
            },
            description=(
                f"CIFAR ResNet-{depth} (option-A shortcuts, 16/32/64 channels; the resnet{depth}s "
                "of Unlearn-Sparse / SalUn)"
            ),
            infer_kwargs=_infer_cifar_resnet(depth),
        )
        for depth in CIFAR_RESNET_DEPTHS
    ),
):
    register_architecture(_spec)

for _family in FAMILIES:  # the architectures a model family brings (e.g. the signal regressor's)
    for _entry in _family.architectures:
        register_architecture(
            ArchSpec(
                name=_entry.name,
                builder=_entry.builder,
                default_kwargs=_entry.default_kwargs,
                input_shape=_entry.input_shape,
                layer_presets=_entry.layer_presets,
                description=_entry.description,
            )
        )


def _torchvision_names() -> list[str]:
    return sorted(torchvision.models.list_models(module=torchvision.models))


def _build_torchvision(name: str, **kwargs: Any) -> nn.Module:
    if kwargs.get("weights") is not None or kwargs.get("pretrained"):
        raise CheckpointError(
            f"torchvision:{name} is always built without pretrained weights (nothing is "
            "downloaded); load trained weights with load_checkpoint(path, arch=...) instead"
        )
    kwargs = {k: v for k, v in kwargs.items() if k not in ("weights", "pretrained")}
    return torchvision.models.get_model(name, weights=None, **kwargs)


def _last_linear(model: nn.Module) -> str | None:
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    return last


def get_arch(arch: str) -> ArchSpec:
    """The :class:`ArchSpec` of a registered name, ``"torchvision:<name>"``, ``"timm:<name>"``
    (the optional timm package) or ``"file:PATH.py:CLASS"`` (a class of a Python file, available
    only after :func:`~sde_core.inputs.external_archs.load_file_class` admitted that file).

    Raises:
        CheckpointError: unknown name (the message lists the valid forms), timm missing, or a
            ``file:`` architecture that was not admitted (it is code: trusted models only).
    """
    if not isinstance(arch, str):
        raise CheckpointError(f"architecture must be a string, got {type(arch).__name__}")
    if arch in ARCHITECTURES:
        return ARCHITECTURES[arch]
    if arch.startswith(_TORCHVISION_PREFIX):
        return _torchvision_spec(arch)
    if arch.startswith(TIMM_PREFIX):
        return _timm_spec(arch)
    if is_file_arch(arch):
        return _file_spec(arch)
    raise CheckpointError(
        f"unknown architecture {arch!r}; use one of {', '.join(sorted(ARCHITECTURES))}, "
        "'torchvision:<name>' (e.g. 'torchvision:resnet50'), 'timm:<name>' (e.g. "
        "'timm:mobilenetv3_small_100') or 'file:PATH.py:CLASS' (your own class, trusted)"
    )


@functools.lru_cache(maxsize=64)
def _torchvision_spec(arch: str) -> ArchSpec:
    """The spec of ``torchvision:<name>`` (built once per name: a meta probe for the presets)."""
    name = arch[len(_TORCHVISION_PREFIX) :]
    if name not in _torchvision_names():
        raise CheckpointError(
            f"torchvision has no classification model {name!r}; valid names include "
            f"{', '.join(_torchvision_names()[:12])}, ..."
        )
    with torch.device("meta"):
        probe = _build_torchvision(name)
    size = 299 if name == "inception_v3" else 224
    return ArchSpec(
        name=arch,
        builder=lambda **kw: _build_torchvision(name, **kw),
        default_kwargs={},
        input_shape=(3, size, size),
        layer_presets=_head_presets(probe),
        description=f"torchvision {name} (random initialisation)",
    )


def _head_presets(probe: nn.Module) -> dict[str, str]:
    final = _last_linear(probe)
    presets = _classifier_presets(final) if final is not None else {}
    if all(hasattr(probe, f"layer{i}") for i in range(1, 5)):
        presets.update(_RESNET_BLOCKS)
    return presets


def _infer_head_classes(probe: nn.Module) -> Callable[[Shapes], dict[str, Any] | None]:
    """``num_classes`` read from the head's weight of a checkpoint, for a builder taking it."""
    final = _last_linear(probe)

    def infer(shapes: Shapes) -> dict[str, Any] | None:
        head = shapes.get(f"{final}.weight") if final is not None else None
        return {"num_classes": int(head[0])} if head is not None and len(head) == 2 else None

    return infer


@functools.lru_cache(maxsize=32)
def _timm_spec(arch: str) -> ArchSpec:
    name = arch[len(TIMM_PREFIX) :]
    builder, size = timm_builder(name)
    with torch.device("meta"):
        probe = builder()
    return ArchSpec(
        name=arch,
        builder=builder,
        default_kwargs={},
        input_shape=size,
        layer_presets=_head_presets(probe),
        description=f"timm {name} (random initialisation)",
        infer_kwargs=_infer_head_classes(probe),
    )


def _file_spec(arch: str) -> ArchSpec:
    cls = loaded_file_class(arch)
    if cls is None:
        raise CheckpointError(
            f"architecture {arch.partition('#')[0]!r} is code from a Python file: it is run only "
            "for a model you trusted (--trusted on the command line, `python -m sde_core "
            "workspace trust WORKSPACE --model NAME`, the page's trusted box); it was not run"
        )
    takes = accepted_kwargs(cls)
    with torch.device("meta"):
        try:
            probe: nn.Module | None = cls()
        except Exception:  # a class without defaults for every argument: no probe
            probe = None
    return ArchSpec(
        name=arch,
        builder=cls,
        default_kwargs={},
        input_shape=(),
        layer_presets=_head_presets(probe) if probe is not None else {},
        description=f"{cls.__name__} from {parse_file_arch(arch).path.name}",
        infer_kwargs=(
            _infer_head_classes(probe)
            if probe is not None and (takes is None or "num_classes" in takes)
            else None
        ),
    )


def build_model(arch: str, **kwargs: Any) -> nn.Module:
    """A freshly initialised model of architecture ``arch`` (train mode, float32, CPU).

    ``kwargs`` override the architecture's defaults (e.g. ``num_classes=100``). The model is
    sized on the meta device first and refused above :data:`MAX_MODEL_BYTES` (see
    :func:`build_model_within` for another budget). The returned module carries ``sde_arch``
    and ``sde_arch_kwargs`` attributes used by :func:`~sde_core.inputs.models.save_checkpoint`
    and layer-alias resolution. Inside ``with torch.device("meta")`` it builds a meta model.

    Raises:
        CheckpointError: unknown architecture, invalid keyword arguments, or a model larger
            than the budget.
    """
    return build_model_within(arch, kwargs, MAX_MODEL_BYTES)


def build_model_within(arch: str, kwargs: Mapping[str, Any], max_bytes: int | None) -> nn.Module:
    """:func:`build_model` with an explicit memory budget in bytes (``None``: the default).

    Raises:
        CheckpointError: as :func:`build_model`.
    """
    spec = get_arch(arch)
    full = {**spec.default_kwargs, **kwargs}
    limit = MAX_MODEL_BYTES if max_bytes is None else max_bytes
    if torch.get_default_device().type != "meta":  # a real build: size it on meta first
        needed = model_bytes(_construct(spec, arch, full, meta=True))
        if needed > limit:
            raise CheckpointError(
                f"{arch!r} with {full} would need {needed / 2**30:.2f} GiB of weights, more than "
                f"the {limit / 2**30:.2f} GiB budget: check the architecture kwargs (e.g. hidden "
                "sizes), or raise the budget (SDE_MAX_MODEL_BYTES)"
            )
    model = _construct(spec, arch, full, meta=False)
    setattr(model, "sde_arch", arch)  # noqa: B010 - plain attributes, not submodules
    setattr(model, "sde_arch_kwargs", _jsonable(full))  # noqa: B010
    return model


def _construct(spec: ArchSpec, arch: str, full: dict[str, Any], meta: bool) -> nn.Module:
    try:
        if meta:
            with torch.device("meta"):
                return spec.builder(**full)
        return spec.builder(**full)
    except CheckpointError:
        raise
    except Exception as exc:  # any builder failure on user-given kwargs is bad input
        raise CheckpointError(
            f"cannot build {arch!r} with {full}: {exc}; "
            f"valid defaults are {dict(spec.default_kwargs)}"
        ) from exc


def model_bytes(model: nn.Module) -> int:
    """Bytes held by a model's parameters and buffers (works on meta-device models)."""
    tensors = [*model.parameters(), *model.buffers()]
    return int(sum(t.numel() * t.element_size() for t in tensors))


def _jsonable(obj: Any) -> Any:
    """Round-trip through JSON (tuples become lists) so saved kwargs equal loaded kwargs."""
    try:
        return json.loads(json.dumps(obj))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"architecture kwargs must be JSON-serialisable: {exc}") from exc


def layer_presets(arch: str) -> dict[str, str]:
    """Alias -> layer reference string for ``arch`` (e.g. ``{"penultimate": "fc:input", ...}``).

    Raises:
        CheckpointError: unknown architecture.
    """
    return dict(get_arch(arch).layer_presets)


def model_layer_refs(model: nn.Module) -> dict[str, LayerRef]:
    """Alias -> :class:`LayerRef` valid for this model instance.

    Derives ``output``/``logits``/``penultimate`` from the last ``nn.Linear`` (or the whole
    model's output when there is none; a denoiser's is ``denoised``, its flattened output
    image, read at a noise level ``@σ_t`` by the extraction), then applies the registered
    presets of the model's architecture (built by :func:`build_model`) wherever their module
    exists. TorchScript
    models expose only ``output`` and ``logits`` (their own output): they do not support hooks.
    """
    own = getattr(model, "sde_layer_refs", None)
    if isinstance(own, Mapping):  # a wrapper naming its aliases (a Hugging Face model folder)
        return {str(alias): LayerRef.parse(str(text)) for alias, text in own.items()}
    modules = dict(model.named_modules())
    if isinstance(model, torch.jit.ScriptModule):  # no hooks: only the model's own output
        return {"output": LayerRef("", "softmax"), "logits": LayerRef("")}
    final = _last_linear(model)
    family_aliases = family_of(model).output_aliases  # e.g. a denoiser's: its output image
    if family_aliases is not None:
        derived = dict(family_aliases)
    elif final is not None:
        derived = _classifier_presets(final)
    else:
        derived = {"output": ":softmax", "logits": ""}
    arch = getattr(model, "sde_arch", None)
    registered: dict[str, str] = {}
    if isinstance(arch, str):
        try:
            registered = layer_presets(arch)
        except CheckpointError:
            registered = {}
    refs = {alias: LayerRef.parse(text) for alias, text in derived.items()}
    for alias, text in registered.items():  # registered presets win where their module exists
        ref = LayerRef.parse(text)
        if ref.module in modules:
            refs[alias] = ref
    order = {alias: i for i, alias in enumerate(ALIASES)}
    valid = {alias: ref for alias, ref in refs.items() if ref.module in modules}
    return dict(sorted(valid.items(), key=lambda item: order.get(item[0], len(order))))
