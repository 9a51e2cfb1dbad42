"""Single forget samples, for the pages (method §18): which ones still look remembered
(:func:`sample_evidence_table`) and what each model still does on them
(:func:`sample_behaviour`: the confidence in the true class and the loss, for the model
under test beside the original and the retrained model)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from sde_core.families.registry import family_of_entry
from sde_core.inputs.data import DatasetBundle
from sde_core.inputs.indices import load_index_file
from sde_core.pipeline.evaluation.per_sample import sample_evidence
from sde_core.pipeline.evaluation.workspace_run import EvaluationResult
from sde_core.pipeline.model_inputs import entry_activations
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import Workspace
from sde_core.services.evaluation import activation_cache, target_subsets

__all__ = ["drill_down_models", "sample_behaviour", "sample_evidence_table"]


def sample_evidence_table(
    ws: Workspace, bundle: DatasetBundle, settings: EvalSettings, result: EvaluationResult,
    model: str,
) -> pd.DataFrame:  # fmt: skip
    """Every forget sample's per-sample evidence under ``model`` (method §18), most remembered
    first: :func:`~sde_core.pipeline.evaluation.per_sample.sample_evidence` on the evaluation's
    own target subsets (nothing recomputed)."""
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train_labels))
    return sample_evidence(result, model, target_subsets(ws, bundle, settings), forget)


def drill_down_models(ws: Workspace, model: str) -> list[str]:
    """``model``, then the workspace's first original and first retrained model (each once)."""
    names = [model]
    for role in ("original", "retrained"):
        found = next((m.name for m in ws.models if m.role == role), None)
        if found is not None and found not in names:
            names.append(found)
    return names


def sample_behaviour(
    ws: Workspace, bundle: DatasetBundle, settings: EvalSettings, models: Sequence[str],
    rows: Sequence[int],
) -> pd.DataFrame | None:  # fmt: skip
    """What each model does on the given rows of D_tr: its softmax confidence in the true class
    and its cross-entropy loss, one column pair per model (``confidence · <model>``,
    ``loss · <model>``), read from the activation cache (or one extraction of those rows).

    Returns:
        None when a model's family has no class outputs (a denoiser or a language model: their
        behaviour check is per set, method §9), or when the dataset has no labels.
    """
    idx = np.asarray(list(rows), dtype=np.int64)
    labels = np.asarray(bundle.train_labels)[idx]
    if idx.size == 0 or (labels < 0).any():
        return None
    entries = [ws.model(name) for name in models]
    if not all(family_of_entry(e.arch, settings.layer).has_class_outputs for e in entries):
        return None  # checked before any extraction: one such model makes the table None
    table = pd.DataFrame({"row": idx})
    for name, entry in zip(models, entries, strict=True):
        probs = entry_activations(
            ws, entry, bundle, "train", "output", activation_cache(ws), indices=idx,
            device=settings.device, pool=settings.pool,
        )["output"]  # fmt: skip
        p_true = np.asarray(probs, dtype=np.float64)[np.arange(idx.size), labels]
        table[f"confidence · {name}"] = p_true
        table[f"loss · {name}"] = -np.log(np.clip(p_true, 1e-12, 1.0))
    return table
