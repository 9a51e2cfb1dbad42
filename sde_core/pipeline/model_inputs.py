"""What one model contributes to an evaluation: its activations, probabilities and labels.

:func:`load_model_inputs` reads a workspace model's activations of the evaluated layer (and of
``output`` for the classic metrics) on D_tr and D_te, from the activation cache or by extracting
them, or from the dataset's precomputed activations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sde_core.inputs.activations import get_activations
from sde_core.pipeline.settings import EvalSettings

__all__ = ["ModelInputs", "Progress", "load_model_inputs"]

#: Progress callback: ``progress(stage, done, total)``.
Progress = Callable[[str, int, int], None]


@dataclass
class ModelInputs:
    """What one model contributes to an evaluation.

    Attributes:
        name, role, method: from the workspace. seconds: the method's wall-clock time.
        train_acts: ``(N_tr, d)`` layer activations on D_tr. test_acts: ``(N_te, d)`` on D_te.
        train_probs, test_probs: ``(N, C)`` softmax outputs for the classic metrics (or None).
        train_labels, test_labels: int labels (or None).
    """

    name: str
    role: str
    train_acts: np.ndarray
    test_acts: np.ndarray
    method: str = ""
    seconds: float | None = None
    train_probs: np.ndarray | None = None
    test_probs: np.ndarray | None = None
    train_labels: np.ndarray | None = None
    test_labels: np.ndarray | None = None


def load_model_inputs(
    entry: Any, ws: Any, bundle: Any, settings: EvalSettings, cache: Any, progress: Progress | None
) -> ModelInputs:
    """Load (or read from the activation cache) one model's activations and probabilities."""
    layers = list(dict.fromkeys([settings.layer, "output"]))
    if bundle.precomputed is not None:
        pre = bundle.precomputed
        acts = {sp: {settings.layer: pre.get(sp, settings.layer)} for sp in ("train", "test")}
        for sp in ("train", "test"):
            if "output" in pre.layers:
                acts[sp]["output"] = pre.get(sp, "output")
    else:
        acts = {}
        for sp in ("train", "test"):
            cb = None
            if progress:

                def cb(done: int, total: int, sp: str = sp) -> None:
                    progress(f"{entry.name}: activations ({sp})", done, total)

            acts[sp] = get_activations(
                ws.path(entry.checkpoint),
                bundle,
                sp,
                layers,
                cache,
                arch=entry.arch,
                device=settings.device,
                pool=settings.pool,
                progress=cb,
            )
    has_probs = "output" in acts["train"] and bundle.num_classes >= 2
    return ModelInputs(
        name=entry.name,
        role=entry.role,
        method=entry.method,
        seconds=entry.seconds,
        train_acts=np.asarray(acts["train"][settings.layer], dtype=np.float64),
        test_acts=np.asarray(acts["test"][settings.layer], dtype=np.float64),
        train_probs=acts["train"].get("output") if has_probs else None,
        test_probs=acts["test"].get("output") if has_probs else None,
        train_labels=bundle.train_labels if has_probs else None,
        test_labels=bundle.test_labels if has_probs else None,
    )
