"""The ``options`` of a dataset spec: what each key holds and the bounds checked before anything is
read, generated or resized.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sde_core.errors import DataError
from sde_core.inputs.indices import excerpt
from sde_core.inputs.text_data import parse_template

__all__ = ["MAX_GENERATED_SAMPLES", "MAX_IMAGE_SIZE"]
#: Largest mnist1d ``num_samples`` (about 160 MB of float32 at 40 features).
MAX_GENERATED_SAMPLES = 1_000_000
#: Largest ImageFolder ``image_size`` (pixels per side).
MAX_IMAGE_SIZE = 1024
#: ``options`` keys and what they hold.
_OPTIONS = {
    "normalize": "[mean, std] lists, one value per channel",
    "image_size": f"an integer in [8, {MAX_IMAGE_SIZE}] (imagefolder)",
    "num_samples": f"an integer in [20, {MAX_GENERATED_SAMPLES}] (mnist1d)",
    "train_split": "a number in (0, 1) (mnist1d)",
    "data_seed": "a non-negative integer (mnist1d)",
    "test_path": "the path of a separate test .npz (npz, activations) or test records (text)",
    "class_names": "a list of names, one per class (any kind; overrides the files' names)",
    "tokenizer": "the model folder whose tokenizer tokenises the texts (text)",
    "max_length": "an integer in [4, 8192]: tokens per text (text; default 128)",
    "text_column": "the column holding each record's text (text)",
    "template": "a text naming a record's plain fields in braces, e.g. "
    "'Question: {question}\\nAnswer: {answer}' (text)",
}
#: Longest class name accepted (characters) in ``options.class_names``.
MAX_CLASS_NAME = 100


def _check_options(options: Mapping[str, Any]) -> None:
    def integer(key: str, low: int, high: int) -> None:
        value = options[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | np.integer)
            or not low <= value <= high
        ):
            raise DataError(f"options.{key} must be {_OPTIONS[key]}, got {excerpt(value)}")

    if "image_size" in options:
        integer("image_size", 8, MAX_IMAGE_SIZE)
    if "num_samples" in options:
        integer("num_samples", 20, MAX_GENERATED_SAMPLES)
    if "data_seed" in options:
        integer("data_seed", 0, 2**32 - 1)
    if "train_split" in options:
        value = options["train_split"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
            raise DataError(
                f"options.train_split must be {_OPTIONS['train_split']}, got {excerpt(value)}"
            )
    if "max_length" in options:
        integer("max_length", 4, 8192)
    for key in ("test_path", "tokenizer", "text_column", "template"):
        if key in options and not isinstance(options[key], str):
            raise DataError(f"options.{key} must be {_OPTIONS[key]}, got {excerpt(options[key])}")
    if "template" in options:
        parse_template(options["template"])  # plain fields only
    if "class_names" in options:
        names = options["class_names"]
        if (
            isinstance(names, str | bytes)
            or not isinstance(names, Sequence)
            or not names
            or not all(isinstance(n, str) and 0 < len(n.strip()) <= MAX_CLASS_NAME for n in names)
        ):
            raise DataError(
                f"options.class_names must be {_OPTIONS['class_names']} (each 1–"
                f"{MAX_CLASS_NAME} characters), got {excerpt(names)}"
            )
    _normalize_option(options)


def _normalize_option(options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    value = options.get("normalize")
    if value is None:
        return None
    try:
        mean, std = (np.asarray(v, dtype=np.float32).reshape(-1) for v in value)
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"options.normalize must be [mean, std] (per-channel lists), got {excerpt(value, 40)}"
        ) from exc
    if mean.size == 0 or mean.shape != std.shape or not np.isfinite(np.r_[mean, std]).all():
        raise DataError("options.normalize must be two finite lists of equal length [mean, std]")
    if np.any(std <= 0):
        raise DataError(f"options.normalize std must be positive, got {std.tolist()}")
    return mean, std
