"""The job graph: a plan variant as self-contained :class:`PlanJob` s with dependencies."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.hashing import stable_hash
from sde_core.pipeline.evaluation.metric_table import ASR
from sde_core.pipeline.plans.params import (
    HistogramParams,
    MethodsParams,
    RetrainedParams,
    ToyParams,
    WorkspaceParams,
)
from sde_core.pipeline.plans.spec import PlanVariant


@dataclass(frozen=True)
class PlanJob:
    """One self-contained unit of work.

    Attributes:
        key: unique key within the plan run (the store's unit key), e.g.
            ``"eval/R=0.1/seed=0/ckpt=0.8/layer=output/sigma=sqrt_dim/n=120"``.
        kind: ``"train"``, ``"unlearn"``, ``"evaluate"``, ``"toy"`` or ``"workspace"``.
        spec: JSON-able description of everything that determines the result.
        labels: JSON-able annotations copied into the result rows (plan, variant, model, ...).
        deps: keys of the jobs whose artefacts this job reads.
    """

    key: str
    kind: str
    spec: dict[str, Any]
    labels: dict[str, Any] = field(default_factory=dict)
    deps: tuple[str, ...] = ()

    def digest(self) -> str:
        """Content hash of ``(kind, spec)``: names the job's artefact folder."""
        return stable_hash({"kind": self.kind, "spec": self.spec})


@dataclass(frozen=True)
class JobContext:
    """Where and how jobs run: the work folder (artefacts, data, activation cache) and device."""

    work: Path
    device: str = "cpu"


@dataclass
class JobResult:
    """What a job returns: store tables (name -> row dicts) and named arrays."""

    tables: dict[str, list[dict[str, Any]]]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def artifact_dir(job: PlanJob, work: Path) -> Path:
    """The content-addressed artefact folder of a ``train`` or ``unlearn`` job."""
    return Path(work) / "artifacts" / f"{job.kind}-{job.digest()[:16]}"


def forget_indices(n_train: int, ratio: float, seed: int) -> np.ndarray:
    """A random forget set: ``round(ratio · n_train)`` sorted int64 indices of D_tr."""
    k = max(1, round(ratio * n_train))
    rng = np.random.default_rng([int(seed), 0x5DE])
    return np.sort(rng.choice(n_train, size=k, replace=False)).astype(np.int64)


def _r(x: float) -> str:
    return f"{x:g}"


def _base_labels(v: PlanVariant) -> dict[str, Any]:
    return {"plan": v.name, "experiment": v.experiment, "variant": v.variant}


def _train_job(v: PlanVariant, seed: int, forget: dict[str, Any] | None) -> PlanJob:
    assert v.setup is not None
    role = "original" if forget is None else "retrained"
    key = f"train/{role}/seed={seed}" + ("" if forget is None else f"/R={_r(forget['ratio'])}")
    spec = {"setup": v.setup.to_dict(), "seed": seed, "forget": forget}
    labels = {
        **_base_labels(v),
        "model": role,
        "role": role,
        "method": "train",
        "seed": seed,
        "forget_ratio": forget["ratio"] if forget else float("nan"),
    }
    return PlanJob(key=key, kind="train", spec=spec, labels=labels)


@dataclass(frozen=True)
class _Point:
    """One evaluation of a plan: a model (its producing job and checkpoint) at one setting.

    ``value`` / ``x`` are the point's position on the plan's sweep axis (``points`` table).
    """

    model: str
    role: str
    method: str
    source: PlanJob
    checkpoint: float
    forget: dict[str, Any]
    seed: int
    layer: str
    sigma: str | float
    subset_size: int
    value: str
    x: float


def _eval_job(
    v: PlanVariant, pt: _Point, key: str, f1_negatives: str, classic: str, histogram: bool
) -> PlanJob:
    """The ``evaluate`` job of a point: ``f1_negatives`` is ``"forget"`` (D_f, retrained
    models of §4.1) or ``"test"`` (D_te, §4.3); ``classic`` is ``"accuracy"`` or ``"asr"``
    (accuracies plus the MIA attack)."""
    assert v.setup is not None
    labels = {
        **_base_labels(v),
        "param": v.sweep,
        "value": pt.value,
        "x": pt.x,
        "seed": pt.seed,
        "model": pt.model,
        "role": pt.role,
        "method": pt.method,
        "forget_ratio": pt.forget["ratio"],
        "subset_size": pt.subset_size,
        "layer": pt.layer,
        "sigma_rule": str(pt.sigma),
        "checkpoint": pt.checkpoint,
    }
    spec = {
        "source": {"kind": pt.source.kind, "digest": pt.source.digest()},
        "dataset": v.setup.dataset,
        "arch": v.setup.arch,
        "forget": pt.forget,
        "checkpoint": pt.checkpoint,
        "layer": pt.layer,
        "sigma": pt.sigma,
        "subset_size": pt.subset_size,
        "seed": pt.seed,
        "eval": v.eval,
        "f1_negatives": f1_negatives,
        "classic": classic,
        "histogram": histogram,
    }
    return PlanJob(key=key, kind="evaluate", spec=spec, labels=labels, deps=(pt.source.key,))


def _has_seed(method: str) -> bool:
    """Whether an unlearning method takes a ``seed`` (its shuffles follow the model seed)."""
    from sde_core.learning.unlearning import METHODS

    return any(f.name == "seed" for f in dataclasses.fields(METHODS[method].params_cls))


def _toy_jobs(v: PlanVariant, p: ToyParams) -> list[PlanJob]:
    spec = {k: getattr(p, k) for k in p.SCHEMA if k != "seeds"}
    return [
        PlanJob(
            key=f"toy/seed={seed}",
            kind="toy",
            spec={**spec, "seed": seed},
            labels={**_base_labels(v), "seed": seed},
        )
        for seed in p.seeds
    ]


def _retrained_jobs(v: PlanVariant, p: RetrainedParams) -> list[PlanJob]:
    """Per (R, seed): train on D_r, then evaluate every checkpoint × layer × σ × n."""
    jobs: list[PlanJob] = []
    for ratio, seed in itertools.product(p.forget_ratios, p.seeds):
        forget = {"ratio": ratio, "seed": p.forget_seed}
        train = _train_job(v, seed, forget)
        jobs.append(train)
        grid = itertools.product(p.checkpoints, enumerate(p.layers), p.sigmas, p.subset_sizes)
        for ckpt, (li, layer), sigma, n in grid:
            value, x = {
                "subset_size": (n, n),
                "forget_ratio": (ratio, ratio),
                "layer": (layer, li),
                "sigma": (sigma, math.nan),  # x becomes the numeric σ once it is known
                "checkpoint": (ckpt, ckpt),
            }[v.sweep]
            pt = _Point(
                "retrained",
                "retrained",
                "retrain",
                train,
                ckpt,
                forget,
                seed,
                layer,
                sigma,
                n,
                str(value),
                float(x),
            )
            key = (
                f"eval/R={_r(ratio)}/seed={seed}/ckpt={_r(ckpt)}/layer={layer}/sigma={sigma}/n={n}"
            )
            jobs.append(_eval_job(v, pt, key, "forget", "accuracy", False))
    return jobs


def _model_jobs(v: PlanVariant, p: MethodsParams | HistogramParams) -> list[PlanJob]:
    """Per seed: h_or on D_tr, h_re on D_r, the unlearned models (``methods``), then one
    evaluation per model and layer."""
    jobs: list[PlanJob] = []
    forget = {"ratio": p.forget_ratio, "seed": p.forget_seed}
    for seed in p.seeds:
        original = _train_job(v, seed, None)
        retrained = _train_job(v, seed, forget)
        jobs += [original, retrained]
        # (model name, role, method, producing job, checkpoint fraction; 0 = initial weights)
        known = {
            "original": ("original", "original", "train", original, 1.0),
            "random": ("random", "random", "init", original, 0.0),
            "retrained": ("retrained", "retrained", "retrain", retrained, 1.0),
        }
        if isinstance(p, HistogramParams):
            models = [known[m] for m in p.models]
            layers: tuple[str, ...] = (p.layer,)
            classic = "accuracy"
        else:
            models = [known["original"]] if p.include_original else []
            models.append(known["retrained"])
            for method, overrides in p.methods.items():
                seeded = {"seed": seed} if _has_seed(method) else {}
                unl = PlanJob(
                    key=f"unlearn/{method}/seed={seed}",
                    kind="unlearn",
                    spec={
                        "original": original.spec,
                        "forget": forget,
                        "method": method,
                        "params": {**seeded, **overrides},
                    },
                    labels={
                        **_base_labels(v),
                        "model": method,
                        "role": "unlearned",
                        "method": method,
                        "seed": seed,
                        "forget_ratio": p.forget_ratio,
                    },
                    deps=(original.key,),
                )
                jobs.append(unl)
                models.append((method, "unlearned", method, unl, 1.0))
            if p.include_random:
                models.append(known["random"])
            layers, classic = p.layers, ASR.key
        for mi, (name, role, method, source, ckpt) in enumerate(models):
            for layer in layers:
                pt = _Point(
                    name,
                    role,
                    method,
                    source,
                    ckpt,
                    forget,
                    seed,
                    layer,
                    p.sigma,
                    p.subset_size,
                    name,
                    float(mi),
                )
                key = f"eval/{name}/seed={seed}/layer={layer}"
                jobs.append(_eval_job(v, pt, key, "test", classic, isinstance(p, HistogramParams)))
    return jobs


def _workspace_jobs(v: PlanVariant, p: WorkspaceParams) -> list[PlanJob]:
    """One ``workspace`` job per seed × layer × pooling (the sweep axis: the layer)."""
    jobs, folder = [], str(Path(p.workspace).resolve())
    for seed in p.seeds:
        for x, layer in enumerate(p.layers):
            for pooling in p.poolings:
                spec = {"workspace": folder, "eval": dict(v.eval), "layer": layer,
                        "pool": pooling == "mean", "seed": seed}  # fmt: skip
                labels = {"plan": v.name, "experiment": v.experiment, "variant": v.variant,
                          "param": v.sweep, "value": f"{layer} {pooling}", "x": float(x),
                          "seed": seed, "pooling": pooling}  # fmt: skip
                key = f"workspace/seed={seed}/layer={layer}/pool={pooling}"
                jobs.append(PlanJob(key=key, kind="workspace", spec=spec, labels=labels))
    return jobs


def build_jobs(v: PlanVariant) -> list[PlanJob]:
    """Every job of a variant, dependencies first.

    Sweep labels: every evaluation's ``param`` is the plan's ``sweep`` and ``value``/``x`` its
    value there (see the module docstring).
    """
    p = v.params
    if isinstance(p, ToyParams):
        return _toy_jobs(v, p)
    if isinstance(p, WorkspaceParams):
        return _workspace_jobs(v, p)
    if isinstance(p, RetrainedParams):
        return _retrained_jobs(v, p)
    return _model_jobs(v, p)
