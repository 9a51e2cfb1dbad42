"""The retrain-free scores of each zoo checkpoint (method §17), cached one checkpoint at a time.

Every checkpoint is evaluated blind: as role ``unlearned`` (whatever it is), on its ``output``
layer (its softmax outputs), with one subset plan shared by the whole zoo
(:func:`~sde_core.pipeline.evaluation.plan.draw_subsets`). What is kept per checkpoint
(``<work>/scores/<name>.json``):

- ``row``: SDE's evaluation at the plan's settings (:class:`~.summary.ModelSummary`'s row:
  OTR, calibrated OTR, the dependence score, the null check, the behaviour check's gaps and the
  SVC attack's ASR …), from which the verdict is read;
- ``defaults``: the evaluation in the library's default design (the plan's n, T, K, R with
  the precision target W and the null check sized by ``null_size``; ``MetaPlan.default_settings``):
  its row, whether its null check gates, its time. A draw's subsets come from its own
  generator, so its first B draws are the first pass's (their H read from the stage cache):
  it extends the first pass with more draws and the sized null check, it does not replicate
  it (method §17);
- ``layers``: per other layer of the plan (``[eval] layers``), the evaluation there in the
  first pass's design and subsets, from the checkpoint's activations (its row, its time);
- ``mmd_otr`` / ``w2_otr``: the share of the targets that the MMD² and W2 baselines (method
  §6) place nearer S_OOT than S_IT, against each target's own draw;
- ``loss_auc``: the loss-threshold membership attack's AUC, D_f against D_te (score −loss).

:data:`SCORES` orients every score so that higher means *more forgotten*.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.fsio import atomic_write_json
from sde_core.common.hashing import array_sha256, stable_hash
from sde_core.pipeline.evaluation.metric_table import (
    ACC_GAP,
    ASR,
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    LOSS_GAP,
    OTR,
    raw_column,
)
from sde_core.pipeline.evaluation.plan import SubsetPlan, draw_subsets
from sde_core.pipeline.meta_eval.spec import MetaPlan, ZooData
from sde_core.pipeline.meta_eval.zoo import ZooCheckpoint, ZooProgress, zoo_layer, zoo_probs
from sde_core.pipeline.settings import ALGORITHM_VERSION, PRECISION_RULE_VERSION

__all__ = [
    "NULL_GATE",
    "SCORES",
    "Score",
    "defaults_record",
    "layer_record",
    "null_gated",
    "score_checkpoint",
    "score_zoo",
]

#: The words of the null check's gate in ``inconclusive_reason`` (statistics.null_rates).
NULL_GATE = "the null check calls"


@dataclass(frozen=True)
class Score:
    """A retrain-free score: its column name, label and value from a checkpoint's record
    (higher: more forgotten; NaN when not computed)."""

    name: str
    label: str
    value: Callable[[Mapping[str, Any]], float]


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _row(key: str, sign: float = 1.0, offset: float = 0.0) -> Callable[[Mapping[str, Any]], float]:
    return lambda rec: offset + sign * _num(rec["row"].get(key))


#: The retrain-free scores (the verdict's ordinal is added by the caller, which reads the
#: verdict words: :func:`~sde_core.pipeline.meta_eval.agreement.meta_table`'s ``verdict``).
SCORES: tuple[Score, ...] = (
    Score("sde_otr", f"SDE {OTR.label} (before the gate)", _row(raw_column(OTR.key))),
    Score(
        "sde_calibrated_otr",
        f"SDE {CALIBRATED_OTR.label} (before the gate)",
        _row(raw_column(CALIBRATED_OTR.key)),
    ),
    Score(
        "sde_dependence",
        f"SDE {DEPENDENCE_SCORE.label}, negated",
        _row(raw_column(DEPENDENCE_SCORE.key), -1.0),
    ),
    Score("mmd_otr", "MMD² nearest reference: share of targets out", lambda r: _num(r["mmd_otr"])),
    Score("w2_otr", "W2 nearest reference: share of targets out", lambda r: _num(r["w2_otr"])),
    Score("svc_asr", f"SVC attack {ASR.label}, negated", _row(ASR.key, -1.0)),
    Score("accuracy_gap", f"{ACC_GAP.label} D_f − D_te, negated", _row(ACC_GAP.key, -1.0)),
    Score("forget_loss_gap", f"{LOSS_GAP.label} D_f − D_te", _row(LOSS_GAP.key)),
    Score(
        "loss_attack",
        "loss-threshold attack: 1 − AUC (D_f vs D_te)",
        lambda r: 1.0 - _num(r["loss_auc"]),
    ),
)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return _clean(value.item())
    return value


def _nearest_rates(
    plan: SubsetPlan, train: np.ndarray, test: np.ndarray, sigma: float
) -> dict[str, float]:
    from sde_core.stats.baselines import Distance, nearest_reference_batch

    distances: tuple[Distance, ...] = ("mmd", "wasserstein")
    out, total = dict.fromkeys(distances, 0), 0
    for d in plan.draws:
        targets: list[object] = [train[rows] for rows in d.targets]
        total += len(targets)
        for distance in distances:
            decisions = nearest_reference_batch(
                targets, train[d.it_ref], test[d.oot_ref], distance, sigma
            )
            out[distance] += sum(not dec.in_training for dec in decisions)
    return {"mmd_otr": out["mmd"] / total, "w2_otr": out["wasserstein"] / total}


def _loss_auc(train: np.ndarray, test: np.ndarray, data: ZooData) -> float:
    from sde_core.stats.rank_agreement import rank_auc

    def loss(p: np.ndarray, y: np.ndarray) -> np.ndarray:
        return -np.log(np.clip(p[np.arange(len(y)), y], 1e-12, 1.0))

    f = data.forget
    return rank_auc(-loss(train[f], data.y_train[f]), -loss(test, data.y_test))


def null_gated(row: Mapping[str, Any]) -> bool:
    """Whether an evaluation row's null check withholds its calibrated verdicts."""
    return NULL_GATE in str(row.get("inconclusive_reason") or "")


def _inputs(
    name: str,
    train: np.ndarray,
    test: np.ndarray,
    data: ZooData,
    acts: tuple[np.ndarray, np.ndarray] | None = None,
) -> Any:
    """The evaluation's inputs: softmax outputs ``train``/``test``, and the activations of
    another layer (``acts``) where given."""
    from sde_core.pipeline.model_inputs import ModelInputs

    return ModelInputs(
        name=name,
        role="unlearned",
        train_acts=train if acts is None else acts[0],
        test_acts=test if acts is None else acts[1],
        method="",
        train_probs=train,
        test_probs=test,
        train_labels=data.y_train,
        test_labels=data.y_test,
    )


def score_checkpoint(
    name: str,
    train: np.ndarray,
    test: np.ndarray,
    data: ZooData,
    plan: SubsetPlan,
    meta: MetaPlan,
    cache: Any = None,
) -> dict[str, Any]:
    """The record of one checkpoint from its softmax outputs on D_tr and D_te (module
    docstring) at the plan's settings, without the default-design pass (:func:`defaults_record`);
    ``cache``: a :class:`~sde_core.pipeline.evaluation.stages.StageCache` that pass shares."""
    from sde_core.pipeline.evaluation.run_driver import evaluate_arrays

    t0 = time.perf_counter()
    row = evaluate_arrays(_inputs(name, train, test, data), plan, meta.settings, cache=cache)
    summary = row.summary
    return {
        "row": {k: _clean(v) for k, v in summary.items()},
        **_nearest_rates(plan, train, test, float(summary["sigma"])),
        "loss_auc": _loss_auc(train, test, data),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def defaults_record(
    name: str,
    train: np.ndarray,
    test: np.ndarray,
    data: ZooData,
    plan: SubsetPlan,
    meta: MetaPlan,
    cache: Any = None,
) -> dict[str, Any]:
    """One checkpoint in the library's default design (``meta.default_settings``, ``plan``
    drawn for it): its summary row, whether its null check gates, and its time."""
    from sde_core.pipeline.evaluation.run_driver import evaluate_arrays

    t0 = time.perf_counter()
    inputs = _inputs(name, train, test, data)
    row = evaluate_arrays(inputs, plan, meta.default_settings, cache=cache).summary
    return {
        "row": {k: _clean(v) for k, v in row.items()},
        "gated": null_gated(row),
        "seconds": round(time.perf_counter() - t0, 3),
        "precision_rule": PRECISION_RULE_VERSION,
    }


def layer_record(
    unit: ZooCheckpoint,
    work: str | Path,
    train: np.ndarray,
    test: np.ndarray,
    data: ZooData,
    plan: SubsetPlan,
    meta: MetaPlan,
    layer: str,
    cache: Any = None,
) -> dict[str, Any]:
    """One checkpoint at another ``layer`` in the first pass's design and subsets (so the
    layers compare on the same subsets), from its outputs ``train``/``test`` and its
    activations there: its summary row and time."""
    from sde_core.pipeline.evaluation.run_driver import evaluate_arrays

    t0 = time.perf_counter()
    acts = zoo_layer(meta, work, unit, layer, data)
    settings = replace(meta.settings, layer=layer)
    inputs = _inputs(unit.name, train, test, data, acts)
    row = evaluate_arrays(inputs, plan, settings, cache=cache).summary
    return {
        "row": {k: _clean(v) for k, v in row.items()},
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _plans(meta: MetaPlan, data: ZooData) -> tuple[SubsetPlan, SubsetPlan]:
    n_tr, n_te = len(data.x_train), len(data.x_test)
    return (
        draw_subsets(n_tr, n_te, data.forget, meta.settings),
        draw_subsets(n_tr, n_te, data.forget, meta.default_settings),
    )


def score_zoo(
    meta: MetaPlan,
    work: str | Path,
    zoo: list[ZooCheckpoint],
    progress: ZooProgress | None = None,
    cancelled: Callable[[], bool] | None = None,
    compute: bool = True,
) -> dict[str, dict[str, Any]]:
    """Every checkpoint's record, cached in ``<work>/<meta.scores_folder>`` (``scores``): first
    every checkpoint at the plan's settings, then each in the default design
    (``record["defaults"]``, whose first draws are the first pass's: method §17), then at
    each of the plan's other ``layers`` (``record["layers"][layer]``), all with a stage
    cache on disk (``<work>/stages``). A cancelled run returns what is finished and a rerun
    resumes; ``compute=False`` only reads the cached records."""
    from sde_core.pipeline.evaluation.stages import StageCache

    folder = Path(work) / meta.scores_folder
    folder.mkdir(parents=True, exist_ok=True)
    data = meta.load_data()
    plans: tuple[SubsetPlan, SubsetPlan] | None = None
    cache = StageCache(Path(work) / "stages", memory_items=0)
    settings_key = {
        "settings": meta.settings.__dict__,
        "defaults": meta.default_settings.__dict__,
        "version": ALGORITHM_VERSION,
        "forget": array_sha256(data.forget),
    }
    out: dict[str, dict[str, Any]] = {}
    keys: dict[str, str] = {}
    for unit in zoo:
        train, test = zoo_probs(work, unit.name)
        keys[unit.name] = stable_hash(
            {**settings_key, "probs": array_sha256(train) + array_sha256(test)}
        )
        path = folder / f"{unit.name}.json"
        if path.is_file():
            try:
                cached = json.loads(path.read_text())
                if cached.get("key") == keys[unit.name]:
                    out[unit.name] = cached
            except (ValueError, OSError):
                pass
    if not compute:
        return out
    stages: list[tuple[str, Callable[[str], bool]]] = [
        ("scores", lambda n: n not in out),
        # a default-design pass judged by an earlier precision rule is run again (method §15:
        # the rule changes no H, so the stage cache serves it and only its summary is new)
        (
            "default design",
            lambda n: out[n].get("defaults", {}).get("precision_rule") != PRECISION_RULE_VERSION,
        ),
    ]

    def layer_missing(layer: str) -> Callable[[str], bool]:
        return lambda n: layer not in out[n].get("layers", {})

    stages += [(f"layer {layer}", layer_missing(layer)) for layer in meta.layers]
    for stage, wanted in stages:
        todo = [u for u in zoo if u.name in out or stage == "scores"]
        todo = [u for u in todo if wanted(u.name)]
        times: list[float] = []
        for i, unit in enumerate(todo):
            if cancelled is not None and cancelled():
                return out
            plans = plans or _plans(meta, data)
            train, test = zoo_probs(work, unit.name)
            t0 = time.perf_counter()
            if stage == "scores":
                out[unit.name] = {
                    "key": keys[unit.name],
                    **score_checkpoint(unit.name, train, test, data, plans[0], meta, cache),
                }
            elif stage == "default design":
                before = out[unit.name].get("defaults")
                record = defaults_record(unit.name, train, test, data, plans[1], meta, cache)
                if before is not None:  # summarised again under a new precision rule: its
                    # seconds stay the first computation's (the summary alone is the new time)
                    record["summary_seconds"] = record["seconds"]
                    record["seconds"] = before["seconds"]
                out[unit.name]["defaults"] = record
            else:
                layer = stage.removeprefix("layer ")
                out[unit.name].setdefault("layers", {})[layer] = layer_record(
                    unit, work, train, test, data, plans[0], meta, layer, cache
                )
            atomic_write_json(folder / f"{unit.name}.json", out[unit.name])
            times.append(time.perf_counter() - t0)
            if progress is not None:
                left = len(todo) - i - 1
                progress(
                    f"{stage}: {unit.name}",
                    len(todo) - left,
                    len(todo),
                    float(np.mean(times)) * left,
                )
    return out
