"""Does the workspace feed a model its inputs as its training did? (issue 40)

Only shapes are checked when a model is added; a model trained on normalised, differently sized
or BGR images still runs on the workspace's inputs, and its activations — and every SDE number
computed from them — then describe a model that sees noise. A model trained on D_r classifies a
sample of D_r far above chance when the inputs are right, so :func:`check_accuracy` runs it on
:data:`SAMPLE_ROWS` rows of D_r and refuses it when it is not significantly better than
predicting the sample's commonest class (one-sided exact binomial test at :data:`ALPHA`): the
message names the numbers, the preprocessing the workspace applies (:func:`preprocessing_text`)
and the option that changes each part of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sde_core.errors import DataError

__all__ = [
    "ALPHA",
    "SAMPLE_ROWS",
    "accuracy_sample",
    "check_accuracy",
    "preprocessing_text",
]

#: Rows of D_r a model is run on when it is added.
SAMPLE_ROWS = 200
#: Level of the exact binomial test "accuracy above the commonest class's share".
ALPHA = 1e-3
#: What each dataset kind's reader gives a model before the workspace's options act on it.
_IMAGE_KINDS = ("cifar10", "cifar100", "svhn", "fashion-mnist", "imagefolder")


def accuracy_sample(
    bundle: Any, forget: np.ndarray | None, rows: int = SAMPLE_ROWS, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``rows`` rows of D_r (training rows outside ``forget``), drawn with ``seed``.

    Returns:
        Inputs float32 ``(k, *input_shape)`` as a model receives them, and their labels ``(k,)``.
    """
    n = len(bundle.train)
    pool = np.setdiff1d(np.arange(n), np.asarray(forget if forget is not None else [], np.int64))
    pick = np.sort(np.random.default_rng(seed).permutation(pool)[: min(rows, pool.size)])
    x, y = bundle.train.get_batch(pick)
    return np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.int64)


def preprocessing_text(bundle: Any) -> str:
    """What the workspace feeds a model, in words, e.g. ``"3×32×32 RGB images, values in [0, 1]
    (no normalisation: --dataset-option normalize=[[mean…],[std…]])"``."""
    spec = bundle.spec
    options = dict(spec.options)
    shape = "×".join(str(v) for v in bundle.input_shape)
    if spec.kind not in _IMAGE_KINDS and not getattr(bundle.train, "is_image", False):
        return f"inputs of shape {shape} as stored (no normalisation)"
    channels = "RGB" if bundle.input_shape[0] == 3 else "grey-scale"
    what = f"{shape} {channels} images, channels first, values in [0, 1]"
    if spec.kind == "imagefolder":
        size = options.get("image_size", 64)
        default = "" if "image_size" in options else ", the default"
        what += f", resized to {size}×{size} px{default} (--dataset-option image_size=N)"
    norm = options.get("normalize")
    if norm is None:
        what += ", no normalisation (--dataset-option normalize=[[mean, …],[std, …]])"
    else:
        what += f", normalised with mean {list(norm[0])} and std {list(norm[1])}"
    return what


def _binomial_p(correct: int, n: int, chance: float) -> float:
    from scipy.stats import binomtest

    return float(binomtest(correct, n, chance, alternative="greater").pvalue)


def check_accuracy(
    outputs: np.ndarray, labels: np.ndarray, bundle: Any, file: Path, workspace: Path
) -> str:
    """Refuse a model whose accuracy on the D_r sample is not above chance.

    Args:
        outputs: the model's outputs ``(k, classes)`` on :func:`accuracy_sample`'s rows.
        labels: their labels ``(k,)``.
        file: the model's checkpoint (named in the message). workspace: the workspace folder.

    Returns:
        The note for the user: the accuracy on the sample.

    Raises:
        DataError: the accuracy is not significantly above the commonest class's share; the
            message names the likely causes and the options that set them.
    """
    out = np.asarray(outputs)
    k = len(labels)
    if out.ndim != 2 or out.shape[0] != k or k == 0 or out.shape[1] < 2:
        return ""
    correct = int((out.argmax(axis=1) == labels).sum())
    chance = max(1.0 / out.shape[1], float(np.bincount(labels).max()) / k)
    p = _binomial_p(correct, k, min(chance, 1 - 1e-12))
    said = f"{correct} of {k} rows of D_r ({100 * correct / k:.1f}%)"
    if p <= ALPHA:
        return f"accuracy on a sample of D_r: {said}; the preprocessing matches"
    raise DataError(
        f"{file} classifies only {said} correctly, not significantly better than chance "
        f"({100 * chance:.1f}%, the commonest class; binomial p = {p:.2g} ≥ {ALPHA:g}): the "
        "workspace most "
        "likely does not preprocess the data as the model's training did, and every SDE number "
        "would describe a model that sees noise. The workspace gives it "
        f"{preprocessing_text(bundle)}. Check, against the training code: the normalisation "
        "(mean and std), the image size, and the channel order (RGB here; a model trained on "
        "BGR images needs the images converted). Set them when creating the workspace, e.g. "
        f"`python -m sde_core workspace init {workspace} --overwrite … --dataset-option "
        "'normalize=[[0.4914,0.4822,0.4465],[0.2470,0.2435,0.2616]]'` (CIFAR-10's usual "
        "values), "
        "or in [dataset.options] of workspace.toml. If the model really is this inaccurate, "
        "add it with --no-accuracy-check (on the Workspace page: untick 'Check its accuracy')"
    )
