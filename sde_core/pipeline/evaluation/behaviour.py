"""The behaviour cross-check of the families without class scores, as its own stage (method §9).

A classifier's behaviour check runs inside every evaluation from its softmax outputs (the
``classic`` stage of :mod:`~.run`). A causal language model and a denoiser have no class
scores, so their check runs the model itself, once per model, data and forget set — whatever
the SDE settings — and is kept apart from the SDE numbers:

- :func:`model_scores` asks the model's family (:mod:`sde_core.families`) for its behaviour
  measure and computes its per-row scores on D_f and D_te: a language model's per-text answer
  loss and likelihood-attack scores (:func:`~sde_core.learning.lm_behaviour.lm_text_scores`),
  a denoiser's per-image denoising loss at each noise level
  (:func:`~sde_core.learning.diffusion.denoising_losses`). They are cached in the stage cache
  (kind ``behaviour``) under the model's files, the data, D_f and :data:`BEHAVIOUR_VERSION`;
  :data:`~sde_core.pipeline.settings.ALGORITHM_VERSION` does not key them, and nothing here
  changes an SDE number.
- :func:`behaviour_rows` turns the scores of a workspace's models into one row per model:
  gaps with their 95% intervals, and each model against the retrained model on the same rows.
- A results store keeps them as units ``behaviour:<model>`` of table :data:`TABLE` in the
  run they belong to (:func:`store_behaviour`, also for a store written before this stage:
  :func:`add_behaviour_units`, ``python -m sde_core evaluate WS --behaviour-only``);
  :func:`with_behaviour` fills the ``models`` rows from them and sets ``evidence_conflict``
  by the family's rule (:func:`behaviour_conflict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from sde_core.common.hashing import array_sha256, file_sha256, stable_hash
from sde_core.families.base import Family
from sde_core.families.registry import family_of_entry
from sde_core.pipeline.evaluation.stages import StageCache
from sde_core.pipeline.evaluation.statistics import accuracy_memory, sde_claims
from sde_core.pipeline.settings import NOISE_LEVELS

__all__ = [
    "BEHAVIOUR_VERSION",
    "FAMILY_MEASURES",
    "TABLE",
    "add_behaviour_units",
    "behaviour_conflict",
    "behaviour_rows",
    "behaviour_unit",
    "forget_row_loss",
    "headline_level",
    "memory_evidence",
    "model_scores",
    "row_family",
    "store_behaviour",
    "stored_behaviour",
    "with_behaviour",
    "workspace_behaviour",
]

#: Version of the behaviour stage's numbers (its cache key; bump when a score changes).
BEHAVIOUR_VERSION = 1
#: The results-store table of the behaviour units.
TABLE = "behaviour"
#: What each family's behaviour check measures, in the words of its result rows
#: (``behaviour_measure``): a classifier's runs in the classic stage.
FAMILY_MEASURES: dict[str, str] = {
    "causal_lm": "mean next-token loss per text on its {span} (nats per token)",
    "denoiser": "denoising loss per image at σ_t = {level} (mean squared error per pixel)",
}
_NAN = float("nan")
_COLUMNS = (
    "loss_gap", "loss_gap_lo", "loss_gap_hi", "loss_gap_vs_retrained",
    "loss_gap_vs_retrained_lo", "loss_gap_vs_retrained_hi", "attack_auc", "attack_auc_lo",
    "attack_auc_hi", "attack_auc_vs_retrained", "attack_auc_vs_retrained_lo",
    "attack_auc_vs_retrained_hi", "zlib_auc", "zlib_auc_lo", "zlib_auc_hi", "mink_auc",
    "mink_auc_lo", "mink_auc_hi", "text_auc", "text_auc_lo", "text_auc_hi",
)  # fmt: skip


def behaviour_unit(model: str) -> str:
    """The results-store unit key of a model's behaviour row."""
    return f"behaviour:{model}"


def _family(entry: Any, layer: str) -> Family:
    return family_of_entry(getattr(entry, "arch", None), layer)


def _levels(layer: str) -> list[float]:
    from sde_core.inputs.denoisers import parse_noise_layer

    level = parse_noise_layer(layer)[1]
    return sorted({*map(float, NOISE_LEVELS), *([] if level is None else [float(level)])})


def model_scores(
    ws: Any,
    entry: Any,
    bundle: Any,
    forget: np.ndarray,
    layer: str,
    cache: StageCache | None = None,
    device: str = "cpu",
) -> dict[str, np.ndarray] | None:
    """A model's per-row behaviour scores on D_f and D_te, or None when its family's check is
    not a stage of its own (a classifier) or the model has no weights (an activations file).

    Returns:
        a language model: ``loss_f``, ``loss_te``, ``zlib_f``, ``zlib_te``, ``min_k_f``,
        ``min_k_te``, ``text_f``, ``text_te`` (float64, one per text) and ``answer`` (1: the
        answer's tokens were scored); a denoiser: ``level`` (σ_t) and ``denoise_f`` /
        ``denoise_te`` (levels × rows).

    Raises:
        CheckpointError, WorkspaceError, TrainingError: the model cannot be loaded or run.
    """
    family = _family(entry, layer)
    if family.name not in FAMILY_MEASURES or entry.precomputed:
        return None
    checkpoint = ws.path(entry.checkpoint, what=f"model {entry.name!r} checkpoint")
    rows_te = np.arange(len(bundle.test))
    levels = _levels(layer) if family.name == "denoiser" else []
    key = stable_hash(
        {
            "stage": "behaviour", "version": BEHAVIOUR_VERSION, "family": family.name,
            "model": entry.sha256 or file_sha256(checkpoint), "data": bundle.fingerprint,
            "forget": array_sha256(np.asarray(forget, dtype=np.int64)), "levels": levels,
        }
    )  # fmt: skip
    if cache is not None and cache.enabled:
        found = cache.get("behaviour", key)
        if found is not None and ("level" in found or "text_f" in found):
            return found
    from sde_core.pipeline.model_inputs import load_entry_model

    model = load_entry_model(ws, entry)
    if family.name == "causal_lm":
        from sde_core.learning.lm_behaviour import lm_text_scores
        from sde_core.pipeline.model_inputs import entry_bundle

        data = entry_bundle(ws, entry, bundle)
        f = lm_text_scores(model, data.train, forget, device=device)
        te = lm_text_scores(model, data.test, rows_te, device=device)
        out = {
            "loss_f": f.loss, "loss_te": te.loss, "zlib_f": f.zlib, "zlib_te": te.zlib,
            "min_k_f": f.min_k, "min_k_te": te.min_k, "text_f": f.text_loss,
            "text_te": te.text_loss,
            "answer": np.asarray([f.span == "answer"], dtype=np.int8),
        }  # fmt: skip
    else:
        from sde_core.learning.diffusion import denoising_losses

        lf = denoising_losses(model, bundle.train, forget, levels)
        lte = denoising_losses(model, bundle.test, rows_te, levels)
        out = {
            "level": np.asarray(levels, dtype=np.float64),
            "denoise_f": np.stack([lf[v] for v in levels]),
            "denoise_te": np.stack([lte[v] for v in levels]),
        }
    if cache is not None and cache.enabled:
        cache.put("behaviour", key, out)
    return out


def _welch(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    from sde_core.learning.metrics import welch_interval

    return welch_interval(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))


def _auc(prefix: str, f: np.ndarray, te: np.ndarray) -> dict[str, float]:
    from sde_core.stats.auc import delong_auc

    e = delong_auc(-f, -te)  # lower loss: more like a member
    return {prefix: e.value, f"{prefix}_lo": e.lo, f"{prefix}_hi": e.hi}


def _lm_row(s: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray] | None) -> dict[str, Any]:
    from sde_core.stats.auc import auc_difference

    gap = _welch(s["loss_f"], s["loss_te"])
    span = "answer" if int(s["answer"][0]) else "whole text"
    row: dict[str, Any] = {
        "behaviour_measure": FAMILY_MEASURES["causal_lm"].format(span=span),
        "loss_gap": gap[0], "loss_gap_lo": gap[1], "loss_gap_hi": gap[2],
        "loss_forget": float(np.mean(s["loss_f"])), "loss_test": float(np.mean(s["loss_te"])),
        **_auc("attack_auc", s["loss_f"], s["loss_te"]),
        **_auc("zlib_auc", s["zlib_f"], s["zlib_te"]),
        **_auc("mink_auc", s["min_k_f"], s["min_k_te"]),
        **_auc("text_auc", s["text_f"], s["text_te"]),
    }  # fmt: skip
    if ref is not None:
        did = _welch(s["loss_f"] - ref["loss_f"], s["loss_te"] - ref["loss_te"])
        d = auc_difference(-s["loss_f"], -s["loss_te"], -ref["loss_f"], -ref["loss_te"])
        row.update(
            loss_gap_vs_retrained=did[0], loss_gap_vs_retrained_lo=did[1],
            loss_gap_vs_retrained_hi=did[2], attack_auc_vs_retrained=d.value,
            attack_auc_vs_retrained_lo=d.lo, attack_auc_vs_retrained_hi=d.hi,
        )  # fmt: skip
    return row


def headline_level(levels: Sequence[float] | np.ndarray, layer: str) -> int:
    """The position in ``levels`` of a denoiser's headline noise level: the evaluated layer's
    σ_t, or 0.5 for a layer without one (the family's strongest layer)."""
    from sde_core.inputs.denoisers import parse_noise_layer

    at = parse_noise_layer(layer)[1]
    values = [float(v) for v in levels]
    return values.index(float(at)) if at is not None and float(at) in values else values.index(0.5)


def forget_row_loss(
    scores: Mapping[str, np.ndarray], family: str, layer: str
) -> tuple[str, np.ndarray]:
    """One model's behaviour on each row of D_f, from its :func:`model_scores` (in D_f's
    order): ``(what, values)`` — a language model's mean next-token loss on the answer (or the
    whole text), a denoiser's denoising loss at the headline noise level
    (:func:`headline_level`); lower is more like a training member."""
    if family == "causal_lm":
        span = "answer" if int(scores["answer"][0]) else "text"
        return f"{span} loss (nats/token)", np.asarray(scores["loss_f"], dtype=np.float64)
    head = headline_level(scores["level"], layer)
    level = float(scores["level"][head])
    return f"denoising loss σ_t={level:g}", np.asarray(scores["denoise_f"][head], dtype=np.float64)


def _denoiser_row(
    s: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray] | None, layer: str
) -> dict[str, Any]:
    """The headline is the gap at the evaluated layer's noise level (:func:`headline_level`);
    every level's gap is its own column."""
    levels = [float(v) for v in s["level"]]
    head = headline_level(levels, layer)
    row: dict[str, Any] = {}
    for i, level in enumerate(levels):
        gap = _welch(s["denoise_f"][i], s["denoise_te"][i])
        row.update({f"loss_gap@{level:g}": gap[0], f"loss_gap@{level:g}_lo": gap[1],
                    f"loss_gap@{level:g}_hi": gap[2]})  # fmt: skip
        if i == head:
            row.update(loss_gap=gap[0], loss_gap_lo=gap[1], loss_gap_hi=gap[2])
            row["loss_forget"] = float(np.mean(s["denoise_f"][i]))
            row["loss_test"] = float(np.mean(s["denoise_te"][i]))
            row["behaviour_measure"] = FAMILY_MEASURES["denoiser"].format(level=f"{level:g}")
            if ref is not None:
                did = _welch(
                    s["denoise_f"][i] - ref["denoise_f"][i],
                    s["denoise_te"][i] - ref["denoise_te"][i],
                )
                row.update(loss_gap_vs_retrained=did[0], loss_gap_vs_retrained_lo=did[1],
                           loss_gap_vs_retrained_hi=did[2])  # fmt: skip
    return row


def behaviour_rows(
    scores: Mapping[str, Mapping[str, np.ndarray]],
    roles: Mapping[str, str],
    families: Mapping[str, str],
    layer: str,
) -> dict[str, dict[str, Any]]:
    """One behaviour row per model with scores (method §9).

    Each gap is ``D_f − D_te`` of the family's per-row loss (Welch 95% interval); a language
    model adds the AUC of its loss, zlib-ratio and Min-K% attacks on D_f (members) against
    D_te (DeLong 95% interval). Where the workspace has a model of role ``"retrained"`` of the
    same family, every other model is compared with it *on the same rows*: the
    difference-in-differences of the loss gap (Welch interval of the per-row loss differences
    on D_f against those on D_te) and, for a language model, the paired DeLong interval of
    AUC(model) − AUC(retrained).

    Args:
        scores: model → its :func:`model_scores`. roles: model → role. families: model →
            family name. layer: the evaluated layer (a denoiser's headline noise level).
    """
    retrained = next((m for m in scores if roles.get(m) == "retrained"), None)
    out: dict[str, dict[str, Any]] = {}
    for name, s in scores.items():
        ref = None
        if retrained is not None and name != retrained and families[name] == families[retrained]:
            ref = scores[retrained]
        row = _lm_row(s, ref) if families[name] == "causal_lm" else _denoiser_row(s, ref, layer)
        out[name] = {"model": name, "family": families[name], **row}
    return out


def memory_evidence(row: Mapping[str, Any], family: str) -> str:
    """The behaviour's evidence that a model still fits D_f significantly better than unseen
    data, whatever SDE says ("" when it does not, or was not measured; method §9), measured
    against the retrained model where the workspace has one (its D_f is unseen by
    construction, so its own gap is the level of "no memory" for these texts or images):

    - a classifier: its accuracy gap D_f − D_te has a 95% interval above 0;
    - a language model: the paired DeLong 95% interval of AUC(model) − AUC(retrained) of the
      loss attack lies above 0 (no retrained model: the loss attack's AUC interval lies above
      0.5);
    - a denoiser: the 95% interval of its denoising-loss gap minus the retrained model's, at
      the evaluated noise level, lies below 0 (no retrained model: the gap's interval lies
      below 0).
    """
    if family == "classifier":
        return accuracy_memory(row)
    if family == "causal_lm":
        d_lo = _num(row, "attack_auc_vs_retrained_lo")
        auc = (f"loss attack AUC {_num(row, 'attack_auc'):.2f} [{_num(row, 'attack_auc_lo'):.2f}, "
               f"{_num(row, 'attack_auc_hi'):.2f}]")  # fmt: skip
        if np.isfinite(d_lo):
            if not d_lo > 0:
                return ""
            evidence = (
                f"{auc}, above the retrained model's by "
                f"{_num(row, 'attack_auc_vs_retrained'):+.2f} "
                f"(paired 95% CI [{d_lo:+.2f}, {_num(row, 'attack_auc_vs_retrained_hi'):+.2f}])"
            )
        elif _num(row, "attack_auc_lo") > 0.5:
            evidence = f"{auc}, above 0.5"
        else:
            return ""
        return evidence + f"; loss gap D_f − D_te {_gap(row)} nats per token"
    if family == "denoiser":
        d_hi = _num(row, "loss_gap_vs_retrained_hi")
        if np.isfinite(d_hi):
            if not d_hi < 0:
                return ""
            return (
                f"denoising-loss gap D_f − D_te {_gap(row, 4)}, below the retrained model's by "
                f"{_num(row, 'loss_gap_vs_retrained'):+.4f} (95% CI "
                f"[{_num(row, 'loss_gap_vs_retrained_lo'):+.4f}, {d_hi:+.4f}])"
            )
        if _num(row, "loss_gap_hi") < 0:
            return f"denoising-loss gap D_f − D_te {_gap(row, 4)}, below 0"
    return ""


def row_family(row: Mapping[str, Any]) -> str:
    """The family a ``models`` row's behaviour columns belong to: the ``family`` its behaviour
    row carries (:func:`with_behaviour`), else ``"classifier"`` — a classifier's behaviour is
    in its classic metrics, not a behaviour row. A row merged by an older release, without
    ``family``, is read from its columns: a loss attack AUC means ``"causal_lm"``, a
    denoising-loss measure ``"denoiser"``."""
    family = row.get("family")
    if isinstance(family, str) and family:
        return family
    if np.isfinite(_num(row, "attack_auc")):
        return "causal_lm"
    if "denoising" in str(row.get("behaviour_measure") or ""):
        return "denoiser"
    return "classifier"


def behaviour_conflict(row: Mapping[str, Any], family: str) -> str:
    """Why SDE's verdict and the model's behaviour disagree, by the family's rule ("" when they
    do not; method §9): SDE claims forgotten or over-unlearned
    (:func:`~.statistics.sde_claims`) and :func:`memory_evidence` says the model still fits
    D_f better than unseen data. (A classifier's rule is applied where its row is summarised,
    :mod:`.statistics`; here the language model's and the denoiser's.)"""
    claims = sde_claims(
        _num(row, "calibrated_otr"), _num(row, "otr"), _num(row, "otr_lo"),
        bool(row.get("over_unlearned")), _num(row, "over_unlearned_rate"),
    )  # fmt: skip
    if not claims or family not in ("causal_lm", "denoiser"):
        return ""
    evidence = memory_evidence(row, family)
    if not evidence:
        return ""
    return (
        f"SDE says {' and '.join(claims)}, but the model still fits D_f better than unseen data: "
        f"{evidence}: conflicting evidence — SDE's verdict is not certified for this model."
    )


def _num(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    try:
        return _NAN if value is None else float(value)
    except (TypeError, ValueError):
        return _NAN


def _gap(row: Mapping[str, Any], digits: int = 3) -> str:
    return (
        f"{_num(row, 'loss_gap'):+.{digits}f} [{_num(row, 'loss_gap_lo'):+.{digits}f}, "
        f"{_num(row, 'loss_gap_hi'):+.{digits}f}]"
    )


def with_behaviour(models: pd.DataFrame, rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """``models`` with each model's behaviour row filled in (its gaps, AUCs, the family's
    ``behaviour_measure`` and its ``family``) and ``evidence_conflict`` set by its family's
    rule (:func:`behaviour_conflict`). Models without a row are left as they are."""
    by_model = {str(r["model"]): r for r in rows}
    if models.empty or not by_model:
        return models
    out = models.copy()
    extra = sorted({k for r in rows for k in r} - set(out.columns) - {"model", "family"})
    words = ("behaviour_measure", "evidence_conflict", "family")
    for column in (*_COLUMNS, *extra, *words):
        if column not in out:
            out[column] = "" if column in words else _NAN
    for column in words:
        out[column] = out[column].astype(object)
    for i in out.index:
        found = by_model.get(str(out.at[i, "name"]))
        if found is None:
            continue
        for key, value in found.items():
            if key != "model":
                out.at[i, key] = value
        merged = {str(k): v for k, v in out.loc[i].items()}
        out.at[i, "evidence_conflict"] = behaviour_conflict(merged, str(found["family"]))
    return out


def workspace_behaviour(
    ws: Any,
    bundle: Any,
    forget: np.ndarray,
    layer: str,
    cache: StageCache | None = None,
    device: str = "cpu",
) -> dict[str, dict[str, Any]]:
    """The behaviour rows of every model of ``ws`` whose family has a behaviour stage
    (:func:`model_scores`, :func:`behaviour_rows`)."""
    from sde_core.errors import SDEError

    scores, roles, families = {}, {}, {}
    for entry in ws.models:
        try:
            s = model_scores(ws, entry, bundle, forget, layer, cache, device)
        except SDEError:  # the model's own files: its SDE evaluation reports the problem
            continue
        if s is not None:
            scores[entry.name] = s
            roles[entry.name] = entry.role
            families[entry.name] = _family(entry, layer).name
    return behaviour_rows(scores, roles, families, layer)


def store_behaviour(store: Any, run_id: int, rows: Mapping[str, Mapping[str, Any]]) -> int:
    """Write each behaviour row as its own unit of run ``run_id``; returns how many were new
    (a unit already stored is kept: the first write wins). A complete run stays complete."""
    status = store.get_run(run_id).status
    written = sum(
        bool(store.put_unit(run_id, behaviour_unit(name), {TABLE: [dict(row)]}))
        for name, row in rows.items()
    )
    if written and status == "complete":
        store.mark_complete(run_id)
    return written


def stored_behaviour(store: Any, run_id: int) -> list[dict[str, Any]]:
    """The behaviour rows stored in run ``run_id`` (none for a run written before the stage)."""
    if TABLE not in store.tables(run_id):
        return []
    return [dict(r) for r in store.records(run_id, TABLE)]


def add_behaviour_units(
    ws: Any, store: Any, *, cache: StageCache | None = None, device: str = "cpu"
) -> dict[int, int]:
    """Add the behaviour units to every run of ``ws`` in ``store`` that lacks them — the cheap
    way to bring a results store written before this stage up to date: each model is run once
    on D_f and D_te (scores cached across runs), no SDE number is recomputed or changed.

    Returns:
        run id → how many behaviour units were written.
    """
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.inputs.indices import load_index_file
    from sde_core.pipeline.workspace import workspace_hash

    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train))
    runs = store.list_runs(workspace_hash(ws, data_fingerprint=bundle.fingerprint))
    written: dict[int, int] = {}
    for run_id, settings in zip(runs["id"], runs["settings"], strict=True):
        layer = str(_settings(settings).get("layer", ""))
        rows = workspace_behaviour(ws, bundle, forget, layer, cache, device)
        written[int(run_id)] = store_behaviour(store, int(run_id), rows) if rows else 0
    return written


def _settings(value: Any) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    import json

    try:
        parsed = json.loads(str(value))
    except ValueError:
        return {}
    return parsed if isinstance(parsed, Mapping) else {}
