"""The driver: pre-flight checks and :func:`run_plan`, the only writer of the results store."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sde_core.common.hashing import stable_hash
from sde_core.errors import SDEError
from sde_core.pipeline.engine import Engine, LocalEngine, Resources
from sde_core.pipeline.engine import Job as EngineJob
from sde_core.pipeline.plans.execute import _bundle, _manifest, run_job
from sde_core.pipeline.plans.graph import JobContext, JobResult, PlanJob, build_jobs
from sde_core.pipeline.plans.params import (
    MethodsParams,
    RetrainedParams,
    ToyParams,
    WorkspaceParams,
    _fail,
)
from sde_core.pipeline.plans.spec import DEFAULT_RESOURCES, PlanVariant

#: ``workspace_hash`` prefix of a plan's runs in a results store (``"plan:<hash>"``).
PLAN_RUN_PREFIX = "plan:"


def is_plan_run(workspace_hash: str) -> bool:
    """Whether a results-store run with this ``workspace_hash`` belongs to an experiment plan."""
    return str(workspace_hash).startswith(PLAN_RUN_PREFIX)


@dataclass
class PlanRunReport:
    """Outcome of :func:`run_plan`.

    Attributes:
        variant: the resolved variant. run_id: the store run. store_path: the store file.
        jobs: number of jobs. ran: keys of the jobs executed now. skipped: keys read from the
            store. seconds: wall time of this call. data_sizes: ``{"train": N, "test": N}``.
    """

    variant: PlanVariant
    run_id: int
    store_path: Path
    jobs: int
    ran: list[str]
    skipped: list[str]
    seconds: float
    data_sizes: dict[str, int]


def _check_sizes(v: PlanVariant, n_train: int, n_test: int) -> None:
    """Every subset must fit in D_f, D_r and D_te (the fix: smaller n or a larger R)."""
    p = v.params
    if isinstance(p, ToyParams | WorkspaceParams):
        return
    ratios = p.forget_ratios if isinstance(p, RetrainedParams) else (p.forget_ratio,)
    sizes = p.subset_sizes if isinstance(p, RetrainedParams) else (p.subset_size,)
    field_name = "subset_sizes" if isinstance(p, RetrainedParams) else "subset_size"
    for ratio in ratios:
        n_f = max(1, round(ratio * n_train))
        pools = {"D_f": n_f, "D_r": n_train - n_f, "D_te": n_test}
        limit = min(pools.values())
        too_big = [n for n in sizes if n > limit]
        if too_big:
            raise _fail(
                f"{v.path.name} [variant {v.variant}] params.{field_name}",
                f"n = {too_big[0]} exceeds a pool at R = {ratio:g} ({pools}); use n ≤ {limit} "
                "(record the reduction in the variant's notes) or a larger forget ratio",
            )


def check_layers(v: PlanVariant) -> None:
    """Every layer of the plan resolves on the architecture (checked before any training)."""
    from sde_core.inputs.architectures import build_model
    from sde_core.inputs.layers import resolve_layer

    p = v.params
    if v.setup is None or isinstance(p, ToyParams | WorkspaceParams):
        return
    layers = p.layers if isinstance(p, (RetrainedParams, MethodsParams)) else (p.layer,)
    model = build_model(v.setup.arch, **v.setup.arch_kwargs)
    for layer in layers:
        try:
            resolve_layer(model, layer)
        except SDEError as exc:
            raise _fail(f"{v.path.name} [variant {v.variant}] params.layers", str(exc)) from None


def preflight(v: PlanVariant, work: Path) -> dict[str, int]:
    """Checks that need the data or the model: layers resolve, subsets fit their pools.

    Returns:
        ``{"train": |D_tr|, "test": |D_te|}`` (empty for the toy, which makes its own data).

    Raises:
        PlanError: a layer does not exist or a subset size exceeds a pool.
        DataError: the dataset is missing (the message says which files to place where).
    """
    check_layers(v)
    if v.setup is None:
        return {}
    bundle = _bundle(v.setup.dataset, work)
    _check_sizes(v, len(bundle.train), len(bundle.test))
    return {"train": len(bundle.train), "test": len(bundle.test)}


def execute_plan_job(
    job: PlanJob,
    ctx: JobContext,
    dep_jobs: Mapping[str, PlanJob],
    threads: int = 1,
    deps: Mapping[str, Any] | None = None,
) -> JobResult:
    """Engine entry point of one plan job: :func:`run_job` on the dependency *specs*.

    Dependencies hand over content-addressed artefacts on the shared work folder, not their
    results, so the engine's ``deps`` (the dependencies' results) only orders the jobs. The job
    uses exactly ``threads`` torch and BLAS threads (its CPU request), wherever it runs, so a
    local and a Ray run produce bit-identical rows.
    """
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            return run_job(job, ctx, dep_jobs)
    finally:
        torch.set_num_threads(before)


def job_resources(v: PlanVariant, kind: str, device: str) -> Resources:
    """The scheduler request of a job kind: the plan's ``[resources.<kind>]`` table (keys
    ``cpus``, ``gpus``, ``memory_mb``) over :data:`DEFAULT_RESOURCES`; no GPU on a CPU device."""
    table = {**DEFAULT_RESOURCES.get(kind, {}), **v.resources.get(kind, {})}
    gpus = table.get("gpus", 0.0) if device.startswith("cuda") else 0.0
    return Resources(
        cpus=table.get("cpus", 1.0), gpus=gpus, memory_mb=int(table.get("memory_mb", 0))
    )


def run_plan(
    v: PlanVariant,
    work: str | Path,
    store: Any,
    *,
    device: str | None = None,
    progress: bool = True,
    engine: Engine | None = None,
) -> PlanRunReport:
    """Run (or resume) every job of a variant on an engine; only this driver writes the store.

    Args:
        v: the resolved variant (:meth:`Plan.variant`).
        work: work folder for artefacts, generated data and the activation cache (storage every
            worker can read and write when the engine is a cluster).
        store: an open :class:`~sde_core.pipeline.store.ResultsStore`.
        device: overrides the variant's device (``"cpu"``, ``"cuda"``, ``"auto"``).
        progress: draw a tqdm bar with the job counts on stderr.
        engine: where jobs run (default :class:`~sde_core.pipeline.engine.LocalEngine`; a
            :class:`~sde_core.pipeline.engine.RayEngine` gives identical rows).

    Raises:
        PlanError, DataError, TrainingError, SettingsError, EngineError: bad plan, data,
            settings, or a job that failed for good (finished jobs stay in the store).
    """
    from tqdm import tqdm

    from sde_core.learning.training import resolve_device
    from sde_core.pipeline.settings import ALGORITHM_VERSION

    t0 = time.perf_counter()
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    dev = device or v.device
    dev = str(resolve_device(dev)) if dev == "auto" else dev
    sizes = preflight(v, work)
    fingerprint = _bundle(v.setup.dataset, work).fingerprint if v.setup else None
    if isinstance(v.params, WorkspaceParams):  # the workspace's models, data and defaults
        from sde_core.pipeline.plans.workspace_study import workspace_fingerprint

        fingerprint = workspace_fingerprint(v.params)
    settings = {
        "plan": v.name,
        "experiment": v.experiment,
        "variant": v.variant,
        "config": v.config,
        "data": fingerprint,
        "algorithm": ALGORITHM_VERSION,
    }
    key = {"plan": v.plan_hash(), "data": fingerprint, "algorithm": ALGORITHM_VERSION}
    run = store.open_run(
        f"{PLAN_RUN_PREFIX}{stable_hash(key)}",
        settings,
        label=f"plan {v.name} [{v.variant}]",
    )
    finished = store.finished_units(run.id)
    jobs = build_jobs(v)
    by_key = {j.key: j for j in jobs}
    ctx = JobContext(work=work, device=dev)
    # A stored job counts as done unless a later job needs its artefact and this work folder
    # lacks it (e.g. another --out): then it runs again (its store unit is not rewritten).
    done = {
        k: None
        for k in finished
        if k in by_key
        and not (by_key[k].kind in ("train", "unlearn") and _manifest(by_key[k], work) is None)
    }
    skipped = sorted(set(done))
    ran: list[str] = []
    engine_jobs = [
        EngineJob(
            key=j.key,
            fn=execute_plan_job,
            kwargs={
                "job": j,
                "ctx": ctx,
                "dep_jobs": {d: by_key[d] for d in j.deps},
                "threads": max(1, int(job_resources(v, j.kind, dev).cpus)),
            },
            deps=j.deps,
            resources=job_resources(v, j.kind, dev),
            label=f"{j.kind} {j.key}",
        )
        for j in jobs
    ]
    bar = tqdm(total=len(jobs) - len(done), desc=f"{v.name} [{v.variant}]", unit="job",
               disable=not progress)  # fmt: skip

    def on_result(job: EngineJob, result: JobResult) -> None:
        if store.put_unit(run.id, job.key, result.tables, result.arrays):
            ran.append(job.key)
        bar.set_postfix_str(job.key[-40:], refresh=False)
        bar.update(1)

    try:
        (engine or LocalEngine()).run(engine_jobs, done=done, on_result=on_result)
    finally:
        bar.close()
    store.mark_complete(run.id)
    return PlanRunReport(
        variant=v,
        run_id=run.id,
        store_path=Path(store.path),
        jobs=len(jobs),
        ran=ran,
        skipped=skipped,
        seconds=time.perf_counter() - t0,
        data_sizes=sizes,
    )
