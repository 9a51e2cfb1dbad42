"""An ImageFolder workspace's image size against the size a model's file says it trained at.

An ImageFolder dataset is resized to ``image_size`` pixels per side (64 by default) before any
model sees it, and a model trained at another size gives outputs far from its training code's
(issue 40: a ResNet-18 trained at 32 px, evaluated at 64 px, gave wrong classes and a verdict on
them). Most checkpoints record no size, but some do: a Lightning checkpoint's
``hyper_parameters``, the ``args`` of a timm ``train.py`` checkpoint (its ``img_size`` or
``input_size``), a Hugging Face folder's ``config.json``. :func:`recorded_image_size` reads
that record (without running code: the same ``weights_only`` load with the plain-data
allow-list as the weights), and :func:`image_size_check` compares it with the workspace's size
at ``add-model``: a mismatch is refused with both sizes and the option that sets it; a match or
no record is said in a note — never silently.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sde_core.errors import DataError

__all__ = [
    "SIZE_KEYS",
    "image_size_check",
    "recorded_image_size",
]

#: Entries that name a training image size, in the order they are looked up.
SIZE_KEYS = ("image_size", "img_size", "input_size", "resolution", "crop_size")
#: Where a checkpoint dictionary keeps its training settings.
_RECORDS = ("hyper_parameters", "args", "config", "hparams")
_TORCH_SUFFIXES = (".ckpt", ".pt", ".pth", ".tar", ".bin")


def _side(value: Any) -> int | None:
    """The side of a square size given as ``n``, ``[h, w]`` or ``[c, h, w]`` (else None)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, (list, tuple)) and len(value) in (2, 3):
        h, w = value[-2], value[-1]
        if isinstance(h, int) and not isinstance(h, bool) and h == w and h > 0:
            return h
    return None


def _from_mapping(record: Mapping[str, Any], where: str) -> tuple[int, str] | None:
    for key in SIZE_KEYS:
        side = _side(record.get(key))
        if side is not None:
            return side, f"{where} {key}"
    return None


def recorded_image_size(path: str | Path) -> tuple[int, str] | None:
    """``(side, where it is recorded)`` of the training image size a model's file records, or
    None (no record, a code file, an unreadable record). Never runs code from the file."""
    from sde_core.inputs.checkpoint_files import inspect_checkpoint, json_object, safe_globals

    path = Path(path)
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            return None
        try:
            return _from_mapping(json_object(config), "config.json")
        except Exception:  # an unreadable config: the folder check reports it
            return None
    if not path.name.lower().endswith(_TORCH_SUFFIXES):
        return None  # safetensors and activation files record no training size
    try:
        if inspect_checkpoint(path).is_code:
            return None
        import torch

        with safe_globals():
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # the weights loader reports an unreadable file
        return None
    if not isinstance(obj, Mapping):
        return None
    for name in _RECORDS:
        record = obj.get(name)
        if isinstance(record, argparse.Namespace):
            record = vars(record)
        if isinstance(record, Mapping):
            found = _from_mapping(record, name)
            if found is not None:
                return found
    return None


def image_size_check(checkpoint: Path, bundle: Any, workspace: Path, refuse: bool = True) -> str:
    """The add-model note on an ImageFolder workspace's image size ("" for other datasets).

    Raises:
        DataError: the file records a training size other than the workspace's and ``refuse``
            (``add-model --no-accuracy-check`` turns the refusal into a warning note).
    """
    spec = getattr(bundle, "spec", None)
    if spec is None or spec.kind != "imagefolder":
        return ""
    options = dict(spec.options)
    size = int(options.get("image_size", 64))
    default = "" if "image_size" in options else " (the default)"
    found = recorded_image_size(checkpoint)
    if found is None:
        return (
            f"image size: the workspace resizes images to {size}×{size} px{default}; "
            f"{checkpoint.name} records no training size — check it against the training code "
            "(--dataset-option image_size=N at workspace init)"
        )
    side, where = found
    if side == size:
        return f"image size {size}×{size} px matches {checkpoint.name}'s {where}"
    message = (
        f"{checkpoint} records training images of {side}×{side} px (its {where}), but the "
        f"workspace resizes images to {size}×{size} px{default}: the model would see inputs of "
        "a size it never trained on, and every SDE number would describe them. Set the size "
        f"when creating the workspace: `python -m sde_core workspace init {workspace} "
        f"--overwrite … --dataset-option image_size={side}` (or image_size in [dataset.options] "
        "of workspace.toml)"
    )
    if refuse:
        raise DataError(
            f"{message}; if the record is wrong, add the model with --no-accuracy-check"
        )
    return f"warning: {message}"
