"""Model zoo and architecture registry: named builders, layer presets, shape-based inference.

Architectures are registered in :data:`ARCHITECTURES` by name (``"resnet18"``, ``"allcnn"``,
``"mlp"``, ``"cnn1d"``, ``"fmnist_cnn"`` and the CIFAR ResNets ``"resnet20s"`` …
``"resnet110s"`` of the unlearning code bases); any torchvision classification model is
available as ``"torchvision:<name>"`` (always randomly initialised, never downloaded).

Layers are addressed by qualified module names (``model.named_modules()``) or by aliases
(method §1): ``"logits"`` (output of the final classifier), ``"output"`` (softmax of the logits, the
default layer), ``"penultimate"`` (input of the final classifier, flattened) and, where the
architecture defines them, ``"block1"`` … ``"block4"``. Presets are strings: a module name alone
means that module's output; ``"fc:input"`` its input; ``"fc:softmax"`` the softmax of its output
(see :class:`LayerRef`).

Every model is first built on PyTorch's ``meta`` device (no memory) and refused when its
parameters and buffers would need more than a memory budget (:data:`MAX_MODEL_BYTES`), so a
checkpoint's metadata or a workspace entry cannot make the library allocate gigabytes.
:func:`infer_architecture_from_shapes` names the registered or torchvision architecture whose
state-dict keys and shapes a checkpoint has (``num_classes`` read from the head's shape).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet

from sde_core.errors import CheckpointError, SDEError
from sde_core.families.registry import FAMILIES, family_of
from sde_core.inputs.cifar_resnets import CIFAR_RESNET_DEPTHS, CifarResNetS, Normalize
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
    "TORCHVISION_FAMILIES",
    "ArchSpec",
    "LayerRef",
    "build_model",
    "build_model_within",
    "candidate_kwargs",
    "get_arch",
    "infer_architecture_from_shapes",
    "layer_presets",
    "meta_model",
    "model_bytes",
    "model_layer_refs",
    "register_architecture",
    "shape_report",
    "state_shapes",
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
_CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
_CIFAR10_STD = (0.2470, 0.2435, 0.2616)

Shapes = Mapping[str, tuple[int, ...]]

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


# ----------------------------------------------------------------------------------------------
# Architectures
# ----------------------------------------------------------------------------------------------


class CifarResNet18(ResNet):
    """ResNet-18 for 32×32 inputs: 3×3 stride-1 stem, no max-pool (torchvision key names).

    Module names: ``normalize`` (optional), ``conv1``, ``bn1``, ``layer1``..``layer4``,
    ``avgpool``, ``fc``. Input ``(N, C, 32, 32)`` -> logits ``(N, num_classes)``.
    """

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        normalize: bool = False,
        mean: tuple[float, ...] = _CIFAR10_MEAN,
        std: tuple[float, ...] = _CIFAR10_STD,
    ) -> None:
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=num_classes)
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        self.maxpool = nn.Identity()
        if normalize:
            if len(mean) != in_channels or len(std) != in_channels:
                raise CheckpointError(
                    f"normalize mean/std need {in_channels} values (one per channel); "
                    f"got {len(mean)} and {len(std)}"
                )
            self.normalize: nn.Module | None = Normalize(tuple(mean), tuple(std))
        else:
            self.normalize = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, num_classes)`` of an ``(N, C, H, W)`` batch."""
        if self.normalize is not None:
            x = self.normalize(x)
        return super().forward(x)


def _conv_bn_relu(c_in: int, c_out: int, kernel: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class AllCNN(nn.Module):
    """All-CNN as used in unlearning work (Golatkar et al.), with BatchNorm conv blocks.

    ``features``: 96-96-192(s2)-drop-192-192-192(s2)-drop-192-192(1×1), global average pool,
    flatten; ``classifier.0``: Linear(192·width, num_classes). Input ``(N, C, 32, 32)``.
    """

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        width: float = 1.0,
        dropout: bool = False,
    ) -> None:
        super().__init__()
        c1, c2 = int(96 * width), int(192 * width)
        if c1 < 1:
            raise CheckpointError(f"allcnn width {width} gives no filters; use width >= 0.02")

        def drop() -> nn.Module:
            return nn.Dropout(0.5) if dropout else nn.Identity()

        self.features = nn.Sequential(
            _conv_bn_relu(in_channels, c1, 3, 1),
            _conv_bn_relu(c1, c1, 3, 1),
            _conv_bn_relu(c1, c2, 3, 2),
            drop(),
            _conv_bn_relu(c2, c2, 3, 1),
            _conv_bn_relu(c2, c2, 3, 1),
            _conv_bn_relu(c2, c2, 3, 2),
            drop(),
            _conv_bn_relu(c2, c2, 3, 1),
            _conv_bn_relu(c2, c2, 1, 1),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(nn.Linear(c2, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, num_classes)``."""
        return self.classifier(self.features(x))


class MLP(nn.Module):
    """Fully connected ReLU network: ``body`` (Linear, ReLU pairs) then ``head`` (Linear).

    Input ``(N, input_dim)`` (any trailing shape is flattened) -> logits ``(N, num_classes)``.
    """

    def __init__(
        self, input_dim: int = 40, hidden: tuple[int, ...] = (256, 256), num_classes: int = 10
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = input_dim
        for h in hidden:
            layers += [nn.Linear(width, int(h)), nn.ReLU()]
            width = int(h)
        self.flatten = nn.Flatten()
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, num_classes)``."""
        return self.head(self.body(self.flatten(x)))


class CNN1D(nn.Module):
    """Small 1-D CNN for mnist1d (Greydanus 2020 style): three stride-2 convs, linear head.

    Input ``(N, length)`` or ``(N, 1, length)`` -> logits ``(N, num_classes)``.
    """

    def __init__(self, length: int = 40, channels: int = 32, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(1, channels, 5, stride=2, padding=2)
        self.conv2 = nn.Conv1d(channels, channels, 3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(channels, channels, 3, stride=2, padding=1)
        self.act = nn.ReLU()
        out_len = length
        for _ in range(3):
            out_len = (out_len - 1) // 2 + 1
        self.flatten = nn.Flatten()
        self.head = nn.Linear(channels * out_len, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, num_classes)``."""
        if x.dim() == 2:
            x = x.unsqueeze(1)
        x = self.act(self.conv1(x))
        x = self.act(self.conv2(x))
        x = self.act(self.conv3(x))
        return self.head(self.flatten(x))


class FashionCNN(nn.Module):
    """Demo CNN (method §11): conv(32)-BN-ReLU-pool, conv(64)-BN-ReLU-pool, linear(hidden), linear.

    ``head_pool`` (optional) average-pools the feature map to ``head_pool×head_pool`` before the
    hidden layer, shrinking the head (e.g. 3 gives 64·9 inputs instead of 64·49).
    Input ``(N, in_channels, input_size, input_size)`` -> logits ``(N, num_classes)``.
    """

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        channels: tuple[int, int] = (32, 64),
        hidden: int = 128,
        head_pool: int | None = None,
        input_size: int = 28,
    ) -> None:
        super().__init__()
        c1, c2 = (int(c) for c in channels)
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 3, padding=1, bias=False),
            nn.BatchNorm2d(c1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1, bias=False),
            nn.BatchNorm2d(c2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = input_size // 4
        if head_pool is not None:
            self.pool: nn.Module = nn.AdaptiveAvgPool2d(head_pool)
            side = head_pool
        else:
            self.pool = nn.Identity()
        self.flatten = nn.Flatten()
        self.classifier = nn.Sequential(
            nn.Linear(c2 * side * side, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, num_classes)``."""
        return self.classifier(self.flatten(self.pool(self.features(x))))


# ----------------------------------------------------------------------------------------------
# Key-shape based kwarg inference (for checkpoints without an ``arch`` field)
# ----------------------------------------------------------------------------------------------


def _infer_resnet18(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any] | None:
    if "fc.weight" not in shapes or "conv1.weight" not in shapes:
        return None
    return {
        "num_classes": shapes["fc.weight"][0],
        "in_channels": shapes["conv1.weight"][1],
        "normalize": "normalize.mean" in shapes,
    }


def _infer_allcnn(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any] | None:
    if "classifier.0.weight" not in shapes or "features.0.0.weight" not in shapes:
        return None
    return {
        "num_classes": shapes["classifier.0.weight"][0],
        "in_channels": shapes["features.0.0.weight"][1],
        "width": shapes["features.0.0.weight"][0] / 96,
    }


def _infer_mlp(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any] | None:
    if "head.weight" not in shapes:
        return None
    hidden = []
    i = 0
    while f"body.{i}.weight" in shapes:
        hidden.append(shapes[f"body.{i}.weight"][0])
        i += 2
    first = shapes["body.0.weight"] if hidden else shapes["head.weight"]
    return {"input_dim": first[1], "hidden": hidden, "num_classes": shapes["head.weight"][0]}


def _infer_cnn1d(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any] | None:
    if "conv1.weight" not in shapes or "head.weight" not in shapes:
        return None
    channels = shapes["conv1.weight"][0]
    out_len = shapes["head.weight"][1] // max(channels, 1)
    return {
        "length": out_len * 8,  # three stride-2 convs; exact for lengths divisible by 8
        "channels": channels,
        "num_classes": shapes["head.weight"][0],
    }


def _infer_fmnist_cnn(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any] | None:
    needed = (
        "features.0.weight",
        "features.4.weight",
        "classifier.0.weight",
        "classifier.2.weight",
    )
    if not all(k in shapes for k in needed):
        return None
    c2 = shapes["features.4.weight"][0]
    side = math.isqrt(shapes["classifier.0.weight"][1] // max(c2, 1))
    return {
        "in_channels": shapes["features.0.weight"][1],
        "num_classes": shapes["classifier.2.weight"][0],
        "channels": [shapes["features.0.weight"][0], c2],
        "hidden": shapes["classifier.0.weight"][0],
        "head_pool": None if side == 7 else side,
    }


def _infer_cifar_resnet(depth: int) -> Callable[[Shapes], dict[str, Any] | None]:
    blocks = (depth - 2) // 6

    def infer(shapes: Shapes) -> dict[str, Any] | None:
        head = "fc" if "fc.weight" in shapes else "linear" if "linear.weight" in shapes else None
        conv1 = shapes.get("conv1.weight", ())
        last, extra = f"layer3.{blocks - 1}.conv1.weight", f"layer3.{blocks}.conv1.weight"
        if head is None or len(conv1) != 4 or conv1[0] != 16 or last not in shapes:
            return None
        if extra in shapes:
            return None
        return {
            "num_classes": shapes[f"{head}.weight"][0],
            "in_channels": conv1[1],
            "normalize": "normalize.mean" in shapes,
            "head": head,
        }

    return infer


_RESNET_BLOCKS = {f"block{i}": f"layer{i}" for i in range(1, 5)}


def _infer_edm_unet(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any] | None:
    if "stem.weight" not in shapes or "enc2.conv1.weight" not in shapes:
        return None
    if "embed.mlp.0.weight" not in shapes:
        return None
    return {
        "in_channels": shapes["stem.weight"][1],
        "channels": [shapes["stem.weight"][0], shapes["enc2.conv1.weight"][0]],
        "emb_dim": shapes["embed.mlp.0.weight"][0],
    }


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


# ----------------------------------------------------------------------------------------------
# Architecture inference from state-dict shapes
# ----------------------------------------------------------------------------------------------

#: torchvision classifier families recognised from a bare state dict: a family is tried when
#: its marker keys are present, then each member whose keys equal the checkpoint's.
TORCHVISION_FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "resnet": (
        ("conv1.weight", "layer4.0.conv1.weight", "fc.weight"),
        (
            "resnet18",
            "resnet34",
            "resnet50",
            "resnet101",
            "resnet152",
            "resnext50_32x4d",
            "resnext101_32x8d",
            "resnext101_64x4d",
            "wide_resnet50_2",
            "wide_resnet101_2",
        ),
    ),
    "vgg": (
        ("features.0.weight", "classifier.6.weight"),
        ("vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn"),
    ),
    "densenet": (
        ("features.denseblock1.denselayer1.conv1.weight", "classifier.weight"),
        ("densenet121", "densenet161", "densenet169", "densenet201"),
    ),
    "mobilenet": (
        ("features.0.0.weight",),
        ("mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large"),
    ),
    "efficientnet": (
        ("features.1.0.block.0.0.weight", "classifier.1.weight"),
        (
            *(f"efficientnet_b{i}" for i in range(8)),
            "efficientnet_v2_s",
            "efficientnet_v2_m",
            "efficientnet_v2_l",
        ),
    ),
}


def shape_report(
    expected: Shapes, found: Shapes
) -> tuple[list[str], list[str], list[tuple[str, tuple[int, ...], tuple[int, ...]]]]:
    """Missing keys, unexpected keys and ``(key, found shape, expected shape)`` mismatches."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    mismatched = [
        (k, tuple(found[k]), tuple(expected[k]))
        for k in sorted(set(found) & set(expected))
        if tuple(found[k]) != tuple(expected[k])
    ]
    return missing, unexpected, mismatched


def state_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """``{state-dict key: shape}`` of a model (meta-device models included)."""
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def meta_model(arch: str, **kwargs: Any) -> nn.Module:
    """``build_model(arch, **kwargs)`` on the meta device: shapes only, no memory."""
    with torch.device("meta"):
        return build_model(arch, **kwargs)


def _fits(arch: str, kwargs: dict[str, Any], shapes: Shapes) -> bool:
    try:
        probe = meta_model(arch, **kwargs)
    except CheckpointError:
        return False
    missing, unexpected, mismatched = shape_report(state_shapes(probe), shapes)
    return not (missing or unexpected or mismatched)


def candidate_kwargs(spec: ArchSpec, shapes: Shapes) -> dict[str, Any]:
    """The builder kwargs ``spec`` infers from a state dict's shapes (``{}`` when none)."""
    if spec.infer_kwargs is None:
        return {}
    try:
        return spec.infer_kwargs(shapes) or {}
    except (KeyError, IndexError, ZeroDivisionError, TypeError, ValueError):
        return {}


@functools.lru_cache(maxsize=64)
def _torchvision_layout(name: str) -> tuple[frozenset[str], str | None]:
    """The state-dict keys of ``torchvision:<name>`` and the key of its head's weight."""
    probe = meta_model(f"{_TORCHVISION_PREFIX}{name}")
    head = _last_linear(probe)
    return frozenset(probe.state_dict()), None if head is None else f"{head}.weight"


def _torchvision_candidates(shapes: Shapes) -> list[tuple[str, dict[str, Any]]]:
    keys = frozenset(shapes)
    hits = []
    for markers, members in TORCHVISION_FAMILIES.values():
        if not all(m in shapes for m in markers):
            continue
        for name in members:
            layout, head = _torchvision_layout(name)
            if layout != keys or head is None or len(shapes[head]) != 2:
                continue
            kwargs = {"num_classes": int(shapes[head][0])}
            if _fits(f"{_TORCHVISION_PREFIX}{name}", kwargs, shapes):
                hits.append((f"{_TORCHVISION_PREFIX}{name}", kwargs))
    return hits


def infer_architecture_from_shapes(shapes: Shapes) -> list[tuple[str, dict[str, Any]]]:
    """Every architecture whose state-dict keys and shapes equal ``shapes`` exactly.

    Registered architectures are tried with the kwargs their ``infer_kwargs`` reads from the
    shapes; when none fits, the torchvision families of :data:`TORCHVISION_FAMILIES` are tried
    with ``num_classes`` read from the head's weight. Nothing is allocated (meta device).

    Returns:
        ``[(arch, kwargs), ...]``: exactly one entry when the architecture is identified.
    """
    hits = []
    for name, spec in ARCHITECTURES.items():
        kwargs = candidate_kwargs(spec, shapes)
        if spec.infer_kwargs is not None and not kwargs:
            continue
        if _fits(name, kwargs, shapes):
            hits.append((name, kwargs))
    return hits or _torchvision_candidates(shapes)
