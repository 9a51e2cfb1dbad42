"""Model zoo, architecture registry and safe checkpoint loading/saving.

Architectures are registered in :data:`ARCHITECTURES` by name (``"resnet18"``, ``"allcnn"``,
``"mlp"``, ``"cnn1d"``, ``"fmnist_cnn"``); any torchvision classification model is available as
``"torchvision:<name>"`` (always randomly initialised, never downloaded).

Layers are addressed by qualified module names (``model.named_modules()``) or by aliases
(method §1): ``"logits"`` (output of the final classifier), ``"output"`` (softmax of the logits, the
default layer), ``"penultimate"`` (input of the final classifier, flattened) and, where the
architecture defines them, ``"block1"`` … ``"block4"``. Presets are strings: a module name alone
means that module's output; ``"fc:input"`` its input; ``"fc:softmax"`` the softmax of its output
(see :class:`LayerRef`).

Checkpoints are loaded without executing code: ``torch.load(weights_only=True)`` for
``.pt``/``.pth``, ``safetensors`` for ``.safetensors``, ``torch.jit.load`` for TorchScript
archives. Full pickles are read only with ``trusted=True``. Every failure raises
:class:`~sde_core.errors.CheckpointError`.
"""

from __future__ import annotations

import json
import math
import warnings
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet

from sde_core.common.fsio import atomic_write
from sde_core.errors import CheckpointError

__all__ = [
    "ALIASES",
    "ARCHITECTURES",
    "ArchSpec",
    "LayerRef",
    "build_model",
    "get_arch",
    "layer_presets",
    "load_checkpoint",
    "model_layer_refs",
    "register_architecture",
    "save_checkpoint",
]

ALIASES: tuple[str, ...] = (
    "output",
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

RefKind = Literal["output", "input", "softmax"]


@dataclass(frozen=True)
class LayerRef:
    """Which tensor of which module a layer name denotes.

    Attributes:
        module: qualified module name (``""`` is the whole model).
        kind: ``"output"`` (the module's output), ``"input"`` (its first positional input) or
            ``"softmax"`` (softmax over the last dimension of its output).
    """

    module: str
    kind: RefKind = "output"

    def __str__(self) -> str:
        return self.module if self.kind == "output" else f"{self.module}:{self.kind}"

    @classmethod
    def parse(cls, text: str) -> LayerRef:
        """Parse ``"fc"``, ``"fc:input"`` or ``"fc:softmax"`` (the :meth:`__str__` form)."""
        module, sep, kind = text.partition(":")
        if not sep:
            return cls(module, "output")
        if kind not in ("output", "input", "softmax"):
            raise CheckpointError(
                f"layer reference {text!r} has unknown kind {kind!r}; "
                "use 'module', 'module:input' or 'module:softmax'"
            )
        return cls(module, kind)  # type: ignore[arg-type]


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


class Normalize(nn.Module):
    """Per-channel ``(x - mean) / std`` with ``mean``/``std`` buffers of shape ``(C,)``."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise an ``(N, C, H, W)`` batch."""
        return (x - self.mean[None, :, None, None]) / self.std[None, :, None, None]


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
):
    register_architecture(_spec)


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
    """The :class:`ArchSpec` of a registered name or ``"torchvision:<name>"``.

    Raises:
        CheckpointError: unknown name (the message lists the valid ones).
    """
    if not isinstance(arch, str):
        raise CheckpointError(f"architecture must be a string, got {type(arch).__name__}")
    if arch in ARCHITECTURES:
        return ARCHITECTURES[arch]
    if arch.startswith(_TORCHVISION_PREFIX):
        name = arch[len(_TORCHVISION_PREFIX) :]
        if name not in _torchvision_names():
            raise CheckpointError(
                f"torchvision has no classification model {name!r}; valid names include "
                f"{', '.join(_torchvision_names()[:12])}, ..."
            )
        with torch.device("meta"):
            probe = _build_torchvision(name)
        final = _last_linear(probe)
        presets = _classifier_presets(final) if final is not None else {}
        if all(hasattr(probe, f"layer{i}") for i in range(1, 5)):
            presets.update(_RESNET_BLOCKS)
        size = 299 if name == "inception_v3" else 224
        return ArchSpec(
            name=arch,
            builder=lambda **kw: _build_torchvision(name, **kw),
            default_kwargs={},
            input_shape=(3, size, size),
            layer_presets=presets,
            description=f"torchvision {name} (random initialisation)",
        )
    raise CheckpointError(
        f"unknown architecture {arch!r}; use one of {', '.join(sorted(ARCHITECTURES))} "
        f"or 'torchvision:<name>' (e.g. 'torchvision:resnet50')"
    )


def build_model(arch: str, **kwargs: Any) -> nn.Module:
    """A freshly initialised model of architecture ``arch`` (train mode, float32, CPU).

    ``kwargs`` override the architecture's defaults (e.g. ``num_classes=100``). The returned
    module carries ``sde_arch`` and ``sde_arch_kwargs`` attributes used by :func:`save_checkpoint`
    and layer-alias resolution.

    Raises:
        CheckpointError: unknown architecture or invalid keyword arguments.
    """
    spec = get_arch(arch)
    full = {**spec.default_kwargs, **kwargs}
    try:
        model = spec.builder(**full)
    except CheckpointError:
        raise
    except (TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"cannot build {arch!r} with {full}: {exc}; "
            f"valid defaults are {dict(spec.default_kwargs)}"
        ) from exc
    model.sde_arch = arch
    model.sde_arch_kwargs = _jsonable(full)
    return model


def layer_presets(arch: str) -> dict[str, str]:
    """Alias -> layer reference string for ``arch`` (e.g. ``{"penultimate": "fc:input", ...}``).

    Raises:
        CheckpointError: unknown architecture.
    """
    return dict(get_arch(arch).layer_presets)


def model_layer_refs(model: nn.Module) -> dict[str, LayerRef]:
    """Alias -> :class:`LayerRef` valid for this model instance.

    Uses the registered presets when the model was built by :func:`build_model` (only those whose
    module exists); otherwise derives ``output``/``logits``/``penultimate`` from the last
    ``nn.Linear`` (or the whole model's output when there is none). TorchScript models expose
    only ``output`` and ``logits`` (their own output), as they do not support hooks.
    """
    modules = dict(model.named_modules())
    if isinstance(model, torch.jit.ScriptModule):  # no hooks: only the model's own output
        return {"output": LayerRef("", "softmax"), "logits": LayerRef("")}
    arch = getattr(model, "sde_arch", None)
    presets: dict[str, str] = {}
    if isinstance(arch, str):
        try:
            presets = layer_presets(arch)
        except CheckpointError:
            presets = {}
    if not presets:
        final = _last_linear(model)
        presets = (
            _classifier_presets(final)
            if final is not None
            else {"output": ":softmax", "logits": ""}
        )
    refs = {alias: LayerRef.parse(text) for alias, text in presets.items()}
    return {alias: ref for alias, ref in refs.items() if ref.module in modules}


# ----------------------------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------------------------


def _jsonable(obj: Any) -> Any:
    """Round-trip through JSON (tuples become lists) so saved kwargs equal loaded kwargs."""
    try:
        return json.loads(json.dumps(obj))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"architecture kwargs must be JSON-serialisable: {exc}") from exc


@dataclass
class _RawCheckpoint:
    state_dict: dict[str, torch.Tensor] | None
    module: nn.Module | None
    arch: str | None
    arch_kwargs: dict[str, Any]


def _is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError):
        return False
    return any(n.endswith("/constants.pkl") for n in names) and any("/code/" in n for n in names)


def _strip_prefix(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    for prefix in ("module.", "_orig_mod."):
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return dict(state)


def _parse_loaded(obj: Any, path: Path) -> _RawCheckpoint:
    if isinstance(obj, nn.Module):
        return _RawCheckpoint(None, obj, getattr(obj, "sde_arch", None), {})
    if not isinstance(obj, Mapping):
        raise CheckpointError(
            f"{path} holds a {type(obj).__name__}, not a state dict; save the model with "
            "save_checkpoint or torch.save(model.state_dict(), path)"
        )
    arch, kwargs = obj.get("arch"), obj.get("arch_kwargs") or {}
    for key in ("state_dict", "model", "model_state_dict", "net"):
        if isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    state = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not state or len(state) != len(obj) or not all(isinstance(k, str) for k in state):
        raise CheckpointError(
            f"{path} is not a model checkpoint: expected a mapping of parameter names to tensors "
            "(optionally under 'state_dict' or 'model'); save with save_checkpoint"
        )
    if isinstance(kwargs, str):
        kwargs = json.loads(kwargs)
    return _RawCheckpoint(
        _strip_prefix(state), None, arch if isinstance(arch, str) else None, dict(kwargs)
    )


def _read_safetensors(path: Path) -> _RawCheckpoint:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
        state = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - safe_open is not a dict
    if not state:
        raise CheckpointError(f"{path} holds no tensors; it is not a model checkpoint")
    kwargs = json.loads(meta["arch_kwargs"]) if "arch_kwargs" in meta else {}
    return _RawCheckpoint(_strip_prefix(state), None, meta.get("arch"), kwargs)


def _read_checkpoint(path: Path, trusted: bool) -> _RawCheckpoint:
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    if _is_torchscript(path):
        with warnings.catch_warnings():  # torch.jit is deprecated but reads existing archives
            warnings.simplefilter("ignore", FutureWarning)
            module = torch.jit.load(str(path), map_location="cpu")
        return _RawCheckpoint(None, module, None, {})
    with open(path, "rb") as fh:
        head = fh.read(16)
    if len(head) >= 8 and path.suffix not in (".pt", ".pth", ".bin", ".ckpt"):
        # safetensors files start with an 8-byte header length followed by '{'
        n = int.from_bytes(head[:8], "little")
        if head[8:9] == b"{" and n < 100_000_000:
            return _read_safetensors(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not trusted)
    except Exception as exc:
        text = str(exc).split("\n")[0]
        if "weights_only" in str(exc) or "Unsupported global" in str(exc):
            raise CheckpointError(
                f"{path} is a full pickle that would import or run code ({text[:200]}); it was NOT "
                "executed. Re-save it as a state dict or safetensors, or pass trusted=True only if "
                "you created the file yourself"
            ) from exc
        raise
    return _parse_loaded(obj, path)


def _shape_report(model: nn.Module, state: Mapping[str, torch.Tensor]) -> tuple[list, list, list]:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = [
        (k, tuple(state[k].shape), tuple(expected[k].shape))
        for k in sorted(set(state) & set(expected))
        if tuple(state[k].shape) != tuple(expected[k].shape)
    ]
    return missing, unexpected, mismatched


def _fmt_keys(keys: list, limit: int = 8) -> str:
    shown = ", ".join(str(k) for k in keys[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def _candidate_kwargs(spec: ArchSpec, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    if spec.infer_kwargs is None:
        return {}
    try:
        return spec.infer_kwargs(shapes) or {}
    except (KeyError, IndexError, ZeroDivisionError, TypeError):
        return {}


def _matches(arch: str, kwargs: dict[str, Any], state: Mapping[str, torch.Tensor]) -> bool:
    try:
        with torch.device("meta"):
            probe = build_model(arch, **kwargs)
    except CheckpointError:
        return False
    missing, unexpected, mismatched = _shape_report(probe, state)
    return not (missing or unexpected or mismatched)


def _infer_arch(state: Mapping[str, torch.Tensor], path: Path) -> tuple[str, dict[str, Any]]:
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    hits = []
    for name, spec in ARCHITECTURES.items():
        kwargs = _candidate_kwargs(spec, shapes)
        if spec.infer_kwargs is not None and not kwargs:
            continue
        if _matches(name, kwargs, state):
            hits.append((name, kwargs))
    if len(hits) == 1:
        return hits[0]
    found = "several architectures" if hits else "no registered architecture"
    raise CheckpointError(
        f"cannot infer the architecture of {path}: its {len(state)} keys match {found}"
        f"{' (' + ', '.join(h[0] for h in hits) + ')' if hits else ''}; pass arch= (one of "
        f"{', '.join(sorted(ARCHITECTURES))} or 'torchvision:<name>') and its kwargs"
    )


def _load_state(model: nn.Module, state: dict[str, torch.Tensor], arch: str, path: Path) -> None:
    expected = model.state_dict()
    for key in ("normalize.mean", "normalize.std"):
        if key in state and key in expected and state[key].numel() == expected[key].numel():
            state[key] = state[key].reshape(expected[key].shape)
    missing, unexpected, mismatched = _shape_report(model, state)
    if missing or unexpected or mismatched:
        parts = []
        if missing:
            parts.append(f"missing keys: {_fmt_keys(missing)}")
        if unexpected:
            parts.append(f"unexpected keys: {_fmt_keys(unexpected)}")
        if mismatched:
            shown = [f"{k} {s} vs expected {e}" for k, s, e in mismatched]
            parts.append(f"shape mismatches: {_fmt_keys(shown, 5)}")
        raise CheckpointError(
            f"{path} does not fit architecture {arch!r} — "
            + "; ".join(parts)
            + ". Check arch= and its kwargs (e.g. num_classes)"
        )
    cast = {
        k: v.to(expected[k].dtype)
        if v.is_floating_point() and expected[k].is_floating_point()
        else v
        for k, v in state.items()
    }
    model.load_state_dict(cast, strict=True)


def load_checkpoint(
    path: str | Path, arch: str | None = None, trusted: bool = False, **arch_kwargs: Any
) -> nn.Module:
    """Load a model checkpoint safely and return the model in eval mode (float32, CPU).

    Args:
        path: ``.pt``/``.pth`` state dict (plain or under ``state_dict``/``model``; ``module.``
            prefixes stripped), ``.safetensors``, or a TorchScript archive.
        arch: architecture name; when ``None`` it is read from the file's metadata (files written
            by :func:`save_checkpoint`) or inferred when exactly one registered architecture fits
            the keys and shapes.
        trusted: allow full pickles (``torch.load(weights_only=False)``), which can run code.
            Only for files you created yourself.
        **arch_kwargs: builder kwargs overriding the stored/inferred ones.

    Raises:
        CheckpointError: missing/truncated/corrupt file, a pickle that would run code, or keys
            and shapes that do not fit the architecture (the message lists them).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist or is not a file; check the path")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes); re-save or re-copy it")
    try:
        raw = _read_checkpoint(path, trusted)
    except CheckpointError:
        raise
    except Exception as exc:
        first = str(exc).strip().split("\n")[0][:300]
        raise CheckpointError(
            f"cannot read checkpoint {path} ({type(exc).__name__}: {first}); "
            "the file is truncated, "
            "corrupt or not a PyTorch/safetensors/TorchScript checkpoint"
        ) from exc
    if raw.module is not None:
        model = raw.module.float().eval()
        if arch is not None and not isinstance(model, torch.jit.ScriptModule):
            model.sde_arch = arch
        return model
    assert raw.state_dict is not None
    state = raw.state_dict
    if arch is not None:
        kwargs = dict(raw.arch_kwargs) if raw.arch == arch else {}
        if not kwargs:
            spec = get_arch(arch)
            kwargs = _candidate_kwargs(spec, {k: tuple(v.shape) for k, v in state.items()})
        kwargs.update(arch_kwargs)
    elif raw.arch is not None:
        arch, kwargs = raw.arch, {**raw.arch_kwargs, **arch_kwargs}
    else:
        arch, kwargs = _infer_arch(state, path)
        kwargs.update(arch_kwargs)
    model = build_model(arch, **kwargs)
    _load_state(model, state, arch, path)
    return model.eval()


def _canonicalize_safetensors(path: Path) -> None:
    """Rewrite a safetensors header with sorted keys, so equal tensors give equal bytes.

    The safetensors writer serialises the header from an unordered map, so two processes that
    save the same weights and metadata may order its keys differently (different SHA-256, which
    would defeat content-hash caches). The rewritten file holds the same tensors and metadata.
    """
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    ordered = {key: header[key] for key in sorted(header)}
    if "__metadata__" in ordered:
        ordered["__metadata__"] = dict(sorted(ordered["__metadata__"].items()))
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size :])


def save_checkpoint(
    model: nn.Module,
    path: str | Path,
    arch: str,
    arch_kwargs: Mapping[str, Any] | None = None,
    half: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Save ``model``'s state dict so that :func:`load_checkpoint` needs no ``arch``.

    ``.safetensors`` paths get safetensors with metadata ``{"arch", "arch_kwargs" (JSON), ...}``;
    any other suffix (``.pt``/``.pth``) a ``{"state_dict", "arch", "arch_kwargs", "metadata"}``
    dict loadable with ``weights_only=True``. ``half=True`` stores floating tensors as float16
    (half the size; loading casts back to float32). ``arch_kwargs`` defaults to the kwargs the
    model was built with. Writes atomically (temporary file + rename). Returns the path.

    Raises:
        CheckpointError: unknown architecture, non-serialisable kwargs/metadata, or a model
            whose state dict does not fit ``arch``.
    """
    if not isinstance(model, nn.Module):
        raise CheckpointError(f"save_checkpoint needs an nn.Module, got {type(model).__name__}")
    path = Path(path)
    get_arch(arch)
    if arch_kwargs is None:
        arch_kwargs = (
            getattr(model, "sde_arch_kwargs", {})
            if getattr(model, "sde_arch", None) == arch
            else {}
        )
    kwargs = _jsonable(dict(arch_kwargs))
    meta = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in (metadata or {}).items()}
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    with torch.device("meta"):
        probe = build_model(arch, **kwargs)
    _load_state_check(probe, state, arch)
    if half:
        state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}

    def write(tmp: Path) -> None:
        if path.suffix == ".safetensors":
            from safetensors.torch import save_file

            header = {**meta, "arch": arch, "arch_kwargs": json.dumps(kwargs)}
            save_file(state, str(tmp), metadata=header)
            _canonicalize_safetensors(tmp)
        else:
            document = {"state_dict": state, "arch": arch, "arch_kwargs": kwargs, "metadata": meta}
            torch.save(document, tmp)

    atomic_write(path, write)
    return path


def _load_state_check(probe: nn.Module, state: Mapping[str, torch.Tensor], arch: str) -> None:
    missing, unexpected, mismatched = _shape_report(probe, state)
    if missing or unexpected or mismatched:
        raise CheckpointError(
            f"the model does not fit architecture {arch!r} (missing {_fmt_keys(missing)}; "
            f"unexpected {_fmt_keys(unexpected)}; mismatched {_fmt_keys(mismatched, 3)}); "
            "pass the arch and arch_kwargs it was built with"
        )
