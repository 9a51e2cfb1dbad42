"""CIFAR ResNet-20/32/44/56/110 (He et al. 2016, §4.2) with the option-A shortcut.

The state-dict layout is that of the ``resnet20s`` … ``resnet110s`` models used by the public
unlearning code bases (Unlearn-Sparse, Unlearn-Saliency/SalUn ``models/ResNets.py``, after
Idelbayev's ``pytorch_resnet_cifar10``): an optional ``normalize`` module with ``mean``/``std``
buffers, ``conv1``/``bn1`` (16 channels), ``layer1``..``layer3`` of ``(depth − 2) / 6`` basic
blocks each (16, 32, 64 channels; ``conv1, bn1, conv2, bn2`` per block), global average pooling
and a linear head named ``fc`` (the unlearning code bases) or ``linear`` (the original
repository). The option-A shortcut of a down-sampling block subsamples by 2 and zero-pads the
channels, so it has no parameters and no state-dict entries.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CIFAR_RESNET_DEPTHS", "CifarResNetS", "Normalize", "OptionABlock", "OptionAShortcut"]

#: Depths of the family (6n + 2 layers, n blocks per stage).
CIFAR_RESNET_DEPTHS = (20, 32, 44, 56, 110)

_CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
_CIFAR10_STD = (0.2470, 0.2435, 0.2616)


class OptionAShortcut(nn.Module):
    """Identity shortcut of a down-sampling block: ``x[:, :, ::2, ::2]`` zero-padded by
    ``planes // 4`` channels on each side (no parameters)."""

    def __init__(self, planes: int) -> None:
        super().__init__()
        self.pad = planes // 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, C, H, W)`` -> ``(N, C + 2·pad, ⌈H/2⌉, ⌈W/2⌉)``."""
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad), "constant", 0.0)


class OptionABlock(nn.Module):
    """Basic residual block ``relu(bn2(conv2(relu(bn1(conv1 x)))) + shortcut(x))``."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = (
            OptionAShortcut(planes) if stride != 1 or in_planes != planes else nn.Sequential()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block on an ``(N, C, H, W)`` map."""
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Normalize(nn.Module):
    """``(x - mean) / std`` per channel; buffers ``mean`` and ``std`` of shape ``(C,)``."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise an ``(N, C, H, W)`` batch."""
        mean, std = self.get_buffer("mean"), self.get_buffer("std")
        return (x - mean[None, :, None, None]) / std[None, :, None, None]


class CifarResNetS(nn.Module):
    """CIFAR ResNet of depth 6n + 2 (0.27M parameters at depth 20, 0.85M at 56).

    Input ``(N, in_channels, 32, 32)`` -> logits ``(N, num_classes)``. Module names:
    ``normalize`` (when ``normalize=True``), ``conv1``, ``bn1``, ``layer1``..``layer3``, and the
    head ``fc`` or ``linear`` (``head=``).
    """

    def __init__(
        self,
        depth: int = 20,
        num_classes: int = 10,
        normalize: bool = True,
        head: str = "fc",
        in_channels: int = 3,
        mean: tuple[float, ...] = _CIFAR10_MEAN,
        std: tuple[float, ...] = _CIFAR10_STD,
    ) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"depth must be 6n + 2 with n ≥ 1 (20, 32, 44, 56, 110); got {depth}")
        if head not in ("fc", "linear"):
            raise ValueError(f"head must be 'fc' or 'linear'; got {head!r}")
        blocks = (depth - 2) // 6
        self.head_name = head
        if normalize:
            if len(mean) != in_channels or len(std) != in_channels:
                raise ValueError(f"mean/std need {in_channels} values (one per channel)")
            self.normalize: nn.Module | None = Normalize(tuple(mean), tuple(std))
        else:
            self.normalize = None
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.in_planes = 16
        self.layer1 = self._stage(16, blocks, 1)
        self.layer2 = self._stage(32, blocks, 2)
        self.layer3 = self._stage(64, blocks, 2)
        self.add_module(head, nn.Linear(64, num_classes))
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Conv2d):
                nn.init.kaiming_normal_(module.weight)

    def _stage(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = []
        for s in [stride] + [1] * (blocks - 1):
            layers.append(OptionABlock(self.in_planes, planes, s))
            self.in_planes = planes
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, num_classes)`` of an ``(N, C, H, W)`` batch."""
        if self.normalize is not None:
            x = self.normalize(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        head: nn.Module = getattr(self, self.head_name)
        return head(out)
