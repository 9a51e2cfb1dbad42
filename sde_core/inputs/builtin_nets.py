"""The networks the architecture registry builds by name, and how each is recognised from a
checkpoint's tensor shapes.

CIFAR ResNet-18, All-CNN, the MLP and 1-D CNN of the mnist1d demo and the Fashion-MNIST demo's
CNN (the CIFAR ResNets of the unlearning code bases are :mod:`sde_core.inputs.cifar_resnets`,
the EDM denoiser :mod:`sde_core.inputs.denoisers`). Each ``_infer_*`` rule maps a state dict's
``{key: shape}`` to the builder's kwargs, or None when the keys are not that network's;
:mod:`sde_core.inputs.architectures` registers them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet

from sde_core.errors import CheckpointError
from sde_core.inputs.cifar_resnets import _CIFAR10_MEAN, _CIFAR10_STD, Normalize

__all__ = []


Shapes = Mapping[str, tuple[int, ...]]


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
