"""Single forget samples, for the pages (method §18): which ones still look remembered
(:func:`sample_evidence_table`), what each model still does on them (:func:`sample_behaviour`:
a classifier's confidence in the true class and loss, a language model's or a denoiser's
per-row behaviour loss, for the model under test beside the original and the retrained model),
the drill-down of one target subset to its members (:func:`target_members`) and, for a language
model, what each model writes after the start of each text (:func:`lm_completions`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sde_core.errors import SettingsError
from sde_core.families.registry import family_of_entry
from sde_core.inputs.data import DatasetBundle
from sde_core.inputs.indices import load_index_file
from sde_core.pipeline.evaluation.behaviour import forget_row_loss, model_scores
from sde_core.pipeline.evaluation.per_sample import sample_evidence
from sde_core.pipeline.evaluation.stages import StageCache
from sde_core.pipeline.evaluation.workspace_run import EvaluationResult
from sde_core.pipeline.model_inputs import entry_activations
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import ModelEntry, Workspace
from sde_core.services.evaluation import activation_cache, target_subsets
from sde_core.services.result_cache import ResultCache

if TYPE_CHECKING:
    from sde_core.learning.lm_completions import Completion

__all__ = [
    "drill_down_models", "lm_completions", "sample_behaviour", "sample_evidence_table",
    "target_members",
]  # fmt: skip

#: Completions already written, by model, data and rows (each costs a decoding run).
_COMPLETIONS = ResultCache(max_entries=32)


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
        found = ws.first(role, other_than=model)
        if found is not None and found not in names:
            names.append(found)
    return names


def sample_behaviour(
    ws: Workspace, bundle: DatasetBundle, settings: EvalSettings, models: Sequence[str],
    rows: Sequence[int], cache: StageCache | None = None,
) -> pd.DataFrame | None:  # fmt: skip
    """What each model does on the given rows of D_tr, one column (pair) per model, through
    its family (method §9, §18):

    - a classifier: its softmax confidence in the true class and its cross-entropy loss
      (``confidence · <model>``, ``loss · <model>``), read from the activation cache (or one
      extraction of those rows);
    - a language model or a denoiser: its per-row behaviour loss on D_f (``answer loss
      (nats/token) · <model>``, ``denoising loss σ_t=0.5 · <model>``:
      :func:`~sde_core.pipeline.evaluation.behaviour.forget_row_loss`), from the behaviour
      stage's scores, kept in ``cache`` (the session's stage cache); a row outside D_f is NaN.

    Returns:
        None when the models' families differ, a model has no behaviour of its own (a
        precomputed activations file), no row is given, or a classifier's data have no labels.
    """
    idx = np.asarray(list(rows), dtype=np.int64)
    entries = [ws.model(name) for name in models]
    families = [family_of_entry(e.arch, settings.layer) for e in entries]
    if idx.size == 0 or len({f.name for f in families}) != 1:
        return None  # checked before any extraction or model run
    family = families[0]
    table = pd.DataFrame({"row": idx})
    if not family.has_class_outputs:
        return _forget_losses(ws, bundle, settings, models, idx, cache, table)
    labels = np.asarray(bundle.train_labels)[idx]
    if (labels < 0).any():
        return None
    for name, entry in zip(models, entries, strict=True):
        probs = entry_activations(
            ws, entry, bundle, "train", "output", activation_cache(ws), indices=idx,
            device=settings.device, pool=settings.pool,
        )["output"]  # fmt: skip
        p_true = np.asarray(probs, dtype=np.float64)[np.arange(idx.size), labels]
        table[f"confidence · {name}"] = p_true
        table[f"loss · {name}"] = -np.log(np.clip(p_true, 1e-12, 1.0))
    return table


def _forget_losses(
    ws: Workspace, bundle: DatasetBundle, settings: EvalSettings, models: Sequence[str],
    idx: np.ndarray, cache: StageCache | None, table: pd.DataFrame,
) -> pd.DataFrame | None:  # fmt: skip
    """:func:`sample_behaviour` of a language model or a denoiser (its behaviour stage's
    per-row losses on D_f), or None when a model has none."""
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train_labels))
    position = pd.Series(np.arange(forget.size), index=forget)
    at = position.reindex(idx).to_numpy()  # NaN: not a row of D_f
    inside = ~np.isnan(at)
    for name in models:
        entry = ws.model(name)
        scores = model_scores(ws, entry, bundle, forget, settings.layer, cache, settings.device)
        if scores is None:
            return None
        family = family_of_entry(entry.arch, settings.layer).name
        what, values = forget_row_loss(scores, family, settings.layer)
        column = np.full(idx.size, np.nan)
        column[inside] = values[at[inside].astype(np.int64)]
        table[f"{what} · {name}"] = column
    return table


def target_members(
    ws: Workspace, bundle: DatasetBundle, settings: EvalSettings, result: EvaluationResult,
    model: str, target: int, cache: StageCache | None = None,
    evidence: pd.DataFrame | None = None,
) -> pd.DataFrame:  # fmt: skip
    """The drill-down of one target subset (issue 38): each of its members (rows of D_tr, in
    the subset's order) with its per-sample evidence under ``model`` (method §18: ``evidence``
    and its 95% interval, its ``rank`` among the forget samples) and, beside it, what
    ``model``, the original and the retrained model do on it (:func:`sample_behaviour`).
    ``evidence``: :func:`sample_evidence_table` of the same arguments, when the caller has it.

    Raises:
        SettingsError: ``target`` is not a target of these settings, or the evidence cannot
            be attributed (:func:`sample_evidence_table`).
    """
    targets = target_subsets(ws, bundle, settings)
    if not 0 <= int(target) < len(targets):
        raise SettingsError(f"target subset {target} does not exist: choose 0–{len(targets) - 1}")
    members = pd.DataFrame({"row": np.asarray(targets[int(target)], dtype=np.int64)})
    if evidence is None:
        evidence = sample_evidence_table(ws, bundle, settings, result, model)
    shown = members.merge(evidence[["row", "evidence", "low", "high", "rank"]], on="row",
                          how="left")  # fmt: skip
    behaviour = sample_behaviour(ws, bundle, settings, drill_down_models(ws, model),
                                 shown["row"].tolist(), cache)  # fmt: skip
    return shown if behaviour is None else shown.merge(behaviour, on="row", how="left")


def lm_completions(
    ws: Workspace, bundle: DatasetBundle, settings: EvalSettings, models: Sequence[str],
    rows: Sequence[int],
) -> pd.DataFrame | None:  # fmt: skip
    """The greedy completion of each text ``rows`` of D_tr by each of ``models``, side by side
    (method §18, "Completions";
    :func:`~sde_core.learning.lm_completions.greedy_completions`): columns ``row``,
    ``prompt``, ``reference`` (the answer, or the second half of the text), then
    ``completion · <model>`` and ``match · <model>`` (the share of the reference's tokens the
    completion reproduces at their own position). Each model reads the texts with its own
    tokenizer when its folder has one (then the prompt and reference shown are the first
    model's). Kept per model, data and rows for the process.

    Returns:
        None when the data are not text, no row is given, or a model is not a causal language
        model with weights (a precomputed activations file, another family).

    Raises:
        CheckpointError, DataError, TrainingError: a model or its tokenizer cannot be loaded
            or a text is too short to cut.
    """
    from sde_core.inputs.text_data import TextDataset

    idx = np.asarray(list(rows), dtype=np.int64)
    entries = [ws.model(name) for name in models]
    if (
        idx.size == 0
        or not isinstance(bundle.train, TextDataset)
        or any(e.precomputed for e in entries)
        or any(family_of_entry(e.arch, settings.layer).name != "causal_lm" for e in entries)
    ):
        return None
    table = pd.DataFrame({"row": idx})
    for entry in entries:
        written = _model_completions(ws, bundle, entry, idx, settings.device)
        if "prompt" not in table:
            table["prompt"] = [c.prompt for c in written]
            table["reference"] = [c.reference for c in written]
        table[f"completion · {entry.name}"] = [c.completion for c in written]
        table[f"match · {entry.name}"] = [c.match for c in written]
    return table


def _model_completions(
    ws: Workspace, bundle: DatasetBundle, entry: ModelEntry, idx: np.ndarray, device: str
) -> list[Completion]:
    """One model's completions of rows ``idx`` (:func:`lm_completions`), from the cache."""
    from sde_core.common.hashing import array_sha256, file_sha256, stable_hash
    from sde_core.inputs.hf_models import load_tokenizer
    from sde_core.inputs.text_data import has_tokenizer
    from sde_core.learning.lm_completions import greedy_completions
    from sde_core.pipeline.model_inputs import entry_bundle, load_entry_model

    folder = ws.path(entry.checkpoint, what=f"model {entry.name!r} checkpoint",
                     must_exist=True, contents=True)  # fmt: skip
    key = stable_hash(
        {"model": entry.sha256 or file_sha256(folder), "data": bundle.fingerprint,
         "rows": array_sha256(idx)}
    )  # fmt: skip
    found = _COMPLETIONS.get(key)
    if found is None:
        own = has_tokenizer(folder)
        tokenizer_dir = folder if own else ws.path(
            str(ws.dataset["options"]["tokenizer"]), what="dataset.options.tokenizer",
            must_exist=True, contents=True,
        )  # fmt: skip
        data = entry_bundle(ws, entry, bundle)
        found = greedy_completions(load_entry_model(ws, entry), data.train, idx,
                                   load_tokenizer(tokenizer_dir), device=device)  # fmt: skip
        _COMPLETIONS.put(key, found)
    return list(found)
