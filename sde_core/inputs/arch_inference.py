"""Which architecture a bare state dict is: the registered or torchvision architectures whose keys
and shapes it has.

Every candidate is built on PyTorch's ``meta`` device (no memory) with the kwargs its rule reads
from the shapes (``num_classes`` from the head) and kept when its state-dict shapes equal the
checkpoint's; torchvision's classifier families are tried by their marker keys.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from sde_core.errors import CheckpointError
from sde_core.inputs.architectures import (
    _TORCHVISION_PREFIX,
    ARCHITECTURES,
    ArchSpec,
    _last_linear,
    build_model,
)
from sde_core.inputs.builtin_nets import Shapes

__all__ = [
    "TORCHVISION_FAMILIES",
    "candidate_kwargs",
    "infer_architecture_from_shapes",
    "meta_model",
    "shape_report",
    "state_shapes",
]


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
