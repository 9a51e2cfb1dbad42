"""Whole workspaces: :func:`evaluate_workspace` (one job per model, optionally stored) and its
result, :class:`EvaluationResult` (tables, raw arrays, the method §10 JSON document)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from sde_core import errors
from sde_core.errors import ActivationError, CheckpointError, DataError, SDEError, SettingsError
from sde_core.pipeline.evaluation.behaviour import (
    FAMILY_MEASURES,
    behaviour_unit,
    store_behaviour,
    stored_behaviour,
    with_behaviour,
    workspace_behaviour,
)
from sde_core.pipeline.evaluation.caveats import Caveats, caveat_numbers
from sde_core.pipeline.evaluation.class_wise import (
    CLASS_WISE_TABLE,
    ForgetClasses,
    class_wise_json,
    class_wise_table,
    judged_models,
)
from sde_core.pipeline.evaluation.comparisons import reference_comparisons
from sde_core.pipeline.evaluation.metric_table import (
    CALIBRATED_F1,
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    F1,
    OTR,
    OVER_UNLEARNED_RATE,
    PANEL_P,
    REFERENCE_P,
    Metric,
)
from sde_core.pipeline.evaluation.model_evaluation import ModelEvaluation
from sde_core.pipeline.evaluation.near_ties import ModelNearTies, model_near_ties
from sde_core.pipeline.evaluation.plan import SubsetPlan, draw_subsets
from sde_core.pipeline.evaluation.precision import precision_json
from sde_core.pipeline.evaluation.run import STAGES, ModelRun
from sde_core.pipeline.evaluation.run_driver import run_model
from sde_core.pipeline.evaluation.stages import StageCache
from sde_core.pipeline.evaluation.summary import DrawSummary, ModelSummary, model_json
from sde_core.pipeline.model_inputs import Progress, load_model_inputs
from sde_core.pipeline.run_drivers import driving
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import cache_path
from sde_core.stats.hsic import engine_device

__all__ = [
    "INTERVAL_METHODS",
    "NEAR_TIES_TABLE",
    "EvaluationResult",
    "ModelFailure",
    "evaluate_model_job",
    "evaluate_workspace",
    "stage_cache_dir",
    "stored_result",
]

#: The results-store table of each model's near-ties record (``model``, ``record``: the JSON of
#: :meth:`ModelNearTies.to_json`), written where a store keeps only some draws' H arrays
#: (:mod:`sde_core.pipeline.shipped_store`); the read-back uses it instead of the arrays.
NEAR_TIES_TABLE = "near_ties"


def _keys(*metrics: Metric) -> str:
    return ", ".join(m.key for m in metrics)


#: How each headline number's point value and interval are formed (method §12); also in JSON.
INTERVAL_METHODS = {
    _keys(OTR, CALIBRATED_OTR, OVER_UNLEARNED_RATE): (
        "pooled over draws; 95% Korn-Graubard interval (Clopper-Pearson on the effective number "
        "of trials from the between-draw variance, capped at the trials, df = draws - 1)"
    ),
    _keys(F1, CALIBRATED_F1): "control-weighted mean over draws; the same Korn-Graubard interval",
    DEPENDENCE_SCORE.key: (
        "ratio of the draws' mean numerator and denominator; 95% Fieller interval (Student t, "
        "df = draws - 1; unbounded - null bounds - when the denominator is not significant)"
    ),
    _keys(REFERENCE_P, PANEL_P): "median over draws; the range of the draws",
}


def stage_cache_dir(workspace_root: str | Path) -> Path:
    """The default stage cache of a workspace: ``<root>/.sde-cache/stages``."""
    return cache_path(workspace_root, "stages")


#: Errors of one model's own inputs (its file, its layers): that model is reported as not
#: evaluated and the others are evaluated.
MODEL_INPUT_ERRORS = (ActivationError, CheckpointError, DataError)


@dataclass(frozen=True)
class ModelFailure:
    """A model that could not be evaluated because of its own inputs (e.g. its activations file
    lacks the layer): ``name``, the error's ``message`` (naming the fix) and its ``kind`` (the
    :mod:`sde_core.errors` class name)."""

    name: str
    message: str
    kind: str = "ActivationError"

    def error(self) -> SDEError:
        """The failure as the error it was (re-raised when every model failed alike)."""
        kind = getattr(errors, self.kind, None)
        if isinstance(kind, type) and issubclass(kind, SDEError):
            return kind(self.message)
        return ActivationError(self.message)


@dataclass
class EvaluationResult:
    """The result of :func:`evaluate_workspace` (or of an
    :class:`~sde_core.pipeline.evaluation.session.EvaluationSession`).

    Attributes:
        settings: the settings used. workspace_hash: content hash of the workspace.
        models: one row per model (columns of :class:`ModelSummary`, ``name`` first).
        subsets: one row per scored subset (see :class:`ModelEvaluation`).
        arrays: ``{"<model>/<name>": array}`` raw H arrays (see :class:`ModelEvaluation`).
        run_id: the store's run id (None without a store). cached_models: models read back.
        draws: one row per (model, draw) (columns of :class:`DrawSummary`).
        failed: ``{model: message}`` of models not evaluated because of their own inputs.
    """

    settings: EvalSettings
    workspace_hash: str
    models: pd.DataFrame
    subsets: pd.DataFrame
    arrays: dict[str, np.ndarray]
    run_id: int | None = None
    cached_models: list[str] = field(default_factory=list)
    draws: pd.DataFrame = field(default_factory=pd.DataFrame)
    _near_ties: dict[str, ModelNearTies] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    failed: dict[str, str] = field(default_factory=dict)

    def model_arrays(self, name: str) -> dict[str, np.ndarray]:
        """The raw H arrays of one model, keyed without the model prefix."""
        prefix = f"{name}/"
        return {k[len(prefix) :]: v for k, v in self.arrays.items() if k.startswith(prefix)}

    def models_with_arrays(self) -> set[str]:
        """The models whose raw H arrays this result holds (one pass over the keys)."""
        return {key.split("/", 1)[0] for key in self.arrays}

    def model_draws(self, name: str) -> pd.DataFrame:
        """The ``draws`` rows of one model, in draw order."""
        if self.draws.empty:
            return self.draws
        return self.draws[self.draws["model"] == name].sort_values("draw")

    def caveats(self) -> Caveats:
        """The measured caveats of this evaluation (:func:`~.caveats.caveat_numbers`)."""
        return caveat_numbers(self.models, self.settings)

    def near_ties(self, name: str) -> ModelNearTies:
        """The near-ties of one model's decisions (method §13), found once per result (the
        JSON document and the report's table both ask)."""
        if name in self._near_ties:
            return self._near_ties[name]
        row = {str(k): v for k, v in self.models[self.models["name"] == name].iloc[0].items()}
        subsets = self.subsets[self.subsets["model"] == name] if len(self.subsets) else self.subsets
        if subsets.empty or "kind" not in subsets:
            subsets = pd.DataFrame({"kind": [], "draw": [], "score": []})
        ties = model_near_ties(
            self.settings, row, subsets, self.model_arrays(name), self.model_draws(name)
        )
        self._near_ties[name] = ties
        return ties

    def to_json_dict(self) -> dict[str, Any]:
        """The CLI's JSON document (method §10, §12)."""

        def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
            return cast("list[dict[str, Any]]", frame.to_dict("records"))  # column-name keys

        models = {}
        for row in records(self.models):
            entry = model_json(row, records(self.model_draws(row["name"])))
            entry["near_ties"] = self.near_ties(row["name"]).to_json()
            entry.update(precision_json(row))
            entry.update(class_wise_json(row))
            models[row["name"]] = entry
        return {
            "settings": self.settings.result_key(),
            "workspace_hash": self.workspace_hash,
            "intervals": INTERVAL_METHODS,
            "caveats": self.caveats().to_dict() if len(self.models) else None,
            "models": models,
            "comparisons": [c.to_json() for c in reference_comparisons(self.models, self.draws)],
            **({"not_evaluated": dict(self.failed)} if self.failed else {}),
        }


def evaluate_model_job(
    workspace: Any,
    bundle: Any,
    plan: SubsetPlan,
    model: str,
    settings: EvalSettings,
    cache_dir: str,
    progress: Progress | None = None,
    stage_dir: str | None = None,
    stages: Sequence[str] = STAGES,
    time_limit: float | None = None,
) -> ModelEvaluation | ModelFailure:
    """One model's evaluation as a self-contained job (run by an :mod:`sde_core.pipeline.engine`),
    or a :class:`ModelFailure` when the model's own inputs cannot be read (its file, its layer).

    Args:
        workspace: the :class:`~sde_core.pipeline.workspace.Workspace` (its files on storage
            every worker can read). bundle: the loaded dataset. plan: the shared subsets.
        model: the model entry's name. settings: evaluation settings.
        cache_dir: the activation cache folder (shared storage on a cluster).
        progress: optional callback (local engine only; not sent to remote workers).
        stage_dir: the stage cache folder (None: no stage cache).
        stages: the stages to run (default all).
        time_limit: seconds each step of a trusted code model may take (None: the default).
    """
    from sde_core.inputs.activation_cache import ActivationCache

    entry = next(m for m in workspace.models if m.name == model)
    try:
        inputs = load_model_inputs(
            entry, workspace, bundle, settings, ActivationCache(cache_dir), progress, time_limit
        )
    except MODEL_INPUT_ERRORS as exc:  # this model's own inputs: the others still run
        return ModelFailure(model, str(exc), type(exc).__name__)
    cache = StageCache(stage_dir, memory_items=256) if stage_dir else None
    return run_model(
        ModelRun(inputs, plan, settings, cache=cache, stages=stages), progress=progress
    )


def result_tables(
    evaluations: Sequence[ModelEvaluation],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``(models, subsets, draws)`` tables of several models' evaluations."""
    models = pd.DataFrame([ev.summary for ev in evaluations], columns=ModelSummary.columns())
    subsets = pd.DataFrame([row for ev in evaluations for row in ev.subsets])
    draws = pd.DataFrame(
        [d.to_row() for ev in evaluations for d in ev.draws],
        columns=list(DrawSummary.__dataclass_fields__),
    )
    return models, subsets, draws


def evaluate_workspace(
    workspace: Any,
    settings: EvalSettings | None = None,
    *,
    models: Sequence[str] | None = None,
    store: Any = None,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    engine: Any = None,
    stage_dir: str | Path | bool | None = None,
    time_limit: float | None = None,
) -> EvaluationResult:
    """Evaluate every (or the named) model of a workspace.

    Args:
        workspace: a :class:`sde_core.pipeline.workspace.Workspace` or the path of its folder/toml.
        settings: evaluation settings (default: the workspace's ``[defaults]``).
        models: names of the models to evaluate (default: all, in workspace order).
        store: a :class:`sde_core.pipeline.store.ResultsStore`; finished models are read back,
            new ones written as they finish.
        cache_dir: activation cache folder (default ``<workspace>/.sde-cache/activations``).
        progress: ``progress(stage, done, total)`` callback.
        engine: an :class:`sde_core.pipeline.engine.Engine` that runs one job per model (default:
            the in-process :class:`~sde_core.pipeline.engine.LocalEngine`). Results always come
            back to this process, which alone writes the store.
        stage_dir: the stage cache folder (default ``<workspace>/.sde-cache/stages``; False:
            no stage cache).
        time_limit: seconds each step (loading, one batch) of a trusted code model may take
            in its child process (None: :data:`~sde_core.inputs.isolation.DEFAULT_TIME_LIMIT`).

    Raises:
        SettingsError, WorkspaceError, DataError, CheckpointError, ActivationError.
    """
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.inputs.indices import load_index_file
    from sde_core.pipeline.engine import Job, LocalEngine, Resources
    from sde_core.pipeline.workspace import Workspace, workspace_hash
    from sde_core.pipeline.workspace_load import load_workspace

    ws = workspace if isinstance(workspace, Workspace) else load_workspace(workspace)
    if settings is None:
        settings = ws.defaults
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train))
    entries = list(ws.models)
    if models is not None:
        names = {m.name for m in entries}
        missing = sorted(set(models) - names)
        if missing:
            raise SettingsError(f"unknown models {missing}; the workspace has {sorted(names)}")
        entries = [m for m in entries if m.name in set(models)]
    plan = draw_subsets(len(bundle.train), len(bundle.test), forget, settings)
    ws_hash = workspace_hash(ws, data_fingerprint=bundle.fingerprint)
    cache = str(cache_dir or cache_path(ws.root, "activations"))
    stages_at = None
    if stage_dir is not False:
        stages_at = str(stage_dir if stage_dir not in (None, True) else stage_cache_dir(ws.root))
    run = store.open_run(ws_hash, settings.result_key()) if store is not None else None
    done = store.finished_units(run.id) if run is not None else set()
    engine = engine or LocalEngine()
    local = isinstance(engine, LocalEngine)
    gpus = 0.0 if engine_device(settings.device) == "cpu" else 1.0
    jobs = [
        Job(
            key=entry.name,
            fn=evaluate_model_job,
            kwargs={
                "workspace": ws,
                "bundle": bundle,
                "plan": plan,
                "model": entry.name,
                "settings": settings,
                "cache_dir": cache,
                "progress": progress if local else None,
                "stage_dir": stages_at,
                "time_limit": time_limit,
            },
            resources=Resources(cpus=1.0, gpus=gpus),
            label=f"evaluate {entry.name}",
        )
        for entry in entries
        if entry.name not in done
    ]
    cached = [e.name for e in entries if e.name in done]
    finished: list[ModelEvaluation] = []
    failed: dict[str, str] = {}
    failures: list[ModelFailure] = []

    def on_result(job: Job, ev: ModelEvaluation | ModelFailure) -> None:
        if isinstance(ev, ModelFailure):  # not stored: a fixed file is evaluated next time
            failed[ev.name] = ev.message
            failures.append(ev)
        elif run is not None:
            named = {f"{job.key}/{k}": v for k, v in ev.arrays.items()}
            tables = {
                "models": [ev.summary],
                "subsets": ev.subsets,
                "draws": [d.to_row() for d in ev.draws],
                **ev.tables,
            }
            store.put_unit(run.id, job.key, tables, named)
        else:
            finished.append(ev)

    def job_progress(n_finished: int, total: int) -> None:
        if progress:
            progress("models", len(cached) + n_finished, len(entries))

    # with a store each result is written as it arrives and not kept (memory bounded at
    # hundreds of models); without one, on_result keeps what the result needs. While the jobs
    # run, the driver's marker tells pages that models are arriving (run_drivers)
    marking = (
        driving(store.path, run.id, [j.key for j in jobs])
        if run is not None and jobs and not store.read_only
        else nullcontext()
    )
    with marking:
        engine.run(jobs, on_result=on_result, progress=job_progress, keep=False)
    if jobs and len(failed) == len(jobs) and not cached:  # nothing evaluated: one error
        first = failures[0]
        others = len(jobs) - 1
        if others:
            first = ModelFailure(
                first.name,
                f"{first.message} (model {first.name!r}; the other {others} model(s) were not "
                "evaluated either)",
                first.kind,
            )
        raise first.error()
    if progress:
        progress("models", len(entries), len(entries))
    wanted = [m.name for m in entries]
    behaviour = _behaviour_stage(ws, bundle, forget, settings, store, run, done, stages_at)
    if run is not None:
        complete = set(wanted) >= {m.name for m in ws.models} and not failed
        if complete and run.status != "complete" and not store.read_only:
            store.mark_complete(run.id)
        model_df, subset_df, draw_df, arrays = _read_back(store, run.id, wanted)
        class_df = _read_class_wise(store, run.id, wanted)
    else:
        model_df, subset_df, draw_df = result_tables(finished)
        model_df = with_behaviour(model_df, list(behaviour.values()))
        arrays = {f"{ev.model.name}/{k}": v for ev in finished for k, v in ev.arrays.items()}
        class_df = class_wise_table(finished)
    model_df = judged_models(model_df, class_df, ForgetClasses.of(bundle, forget))
    result = EvaluationResult(
        settings=settings,
        workspace_hash=ws_hash,
        models=_in_order(model_df, "name", wanted),
        subsets=_in_order(subset_df, "model", wanted),
        arrays=arrays,
        run_id=None if run is None else run.id,
        cached_models=cached,
        draws=_in_order(draw_df, "model", wanted),
        failed={name: failed[name] for name in wanted if name in failed},
    )
    if run is not None:
        result._near_ties.update(_stored_near_ties(store, run.id, wanted))
    return result


def _behaviour_stage(
    ws: Any,
    bundle: Any,
    forget: np.ndarray,
    settings: EvalSettings,
    store: Any,
    run: Any,
    done: set[str],
    stage_dir: str | None,
) -> dict[str, dict[str, Any]]:
    """The behaviour rows of the models whose family checks behaviour by running the model
    (:mod:`~.behaviour`), written to the run as their own units when it lacks them; nothing
    for a workspace of classifiers (their check is in each evaluation)."""
    from sde_core.families.registry import family_of_entry

    measured = [
        m for m in ws.models
        if family_of_entry(m.arch, settings.layer).name in FAMILY_MEASURES and not m.precomputed
    ]  # fmt: skip
    if not measured or (run is not None and {behaviour_unit(m.name) for m in measured} <= done):
        return {}
    if store is not None and store.read_only:
        return {}
    cache = StageCache(stage_dir, memory_items=64) if stage_dir else None
    rows = workspace_behaviour(ws, bundle, forget, settings.layer, cache, settings.device)
    if run is not None and rows:
        store_behaviour(store, run.id, rows)
    return rows


def stored_result(
    store: Any,
    workspace_hash: str,
    settings: EvalSettings,
    models: Sequence[str],
    classes: ForgetClasses | None = None,
    *,
    summary: bool = False,
) -> EvaluationResult | None:
    """The result of ``models`` at ``settings`` read back from ``store`` — no activation is
    extracted and no HSIC computed — or None when the store lacks one of them. Only the
    ``models``' own rows are read (SQL filters by unit), so a few models of a run of hundreds
    cost what they hold.

    Args:
        store: a :class:`sde_core.pipeline.store.ResultsStore` (read-only is enough).
        workspace_hash: the workspace's content hash. models: the model names, in order.
        classes: the dataset's labels and forget set, for the class-wise step
            (:func:`~.class_wise.judged_models`; None: what the stored rows recorded).
        summary: the ``models`` and ``draws`` tables only — no per-subset rows and no H
            arrays (empty): every headline number, verdict, interval and paired difference,
            for a page that tabulates hundreds of models and draws the distributions of a few
            (read those with a second, full call).

    Raises:
        DamagedUnitError: a stored unit it would read is damaged.
    """
    run = store.find_run(workspace_hash, settings.result_key())
    if run is None:
        return None
    run_id = run.id
    wanted = list(models)
    if not set(wanted) <= store.finished_units(run_id, arrays=False):  # arrays checked as read
        return None
    model_df, subset_df, draw_df, arrays = _read_back(store, run_id, wanted, summary)
    model_df = judged_models(model_df, _read_class_wise(store, run_id, wanted), classes)
    result = EvaluationResult(
        settings=settings,
        workspace_hash=workspace_hash,
        models=_in_order(model_df, "name", wanted),
        subsets=_in_order(subset_df, "model", wanted),
        arrays=arrays,
        run_id=run_id,
        cached_models=wanted,
        draws=_in_order(draw_df, "model", wanted),
    )
    result._near_ties.update(_stored_near_ties(store, run_id, wanted))
    return result


def _read_back(
    store: Any, run_id: int, wanted: Sequence[str], summary: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, np.ndarray]]:
    """``(models, subsets, draws, arrays)`` of the ``wanted`` models of a stored run (each
    model's unit read by its key; ``summary``: no subsets and no arrays)."""
    model_df = store.rows(run_id, "models", wanted)
    model_df = ModelSummary.filled_text(model_df[model_df["name"].isin(wanted)])
    model_df = with_behaviour(model_df, stored_behaviour(store, run_id))
    if summary:
        subset_df = pd.DataFrame(columns=store.columns(run_id, "subsets"))
    else:
        subset_df = store.rows(run_id, "subsets", wanted)
        subset_df = subset_df[subset_df["model"].isin(wanted)].reset_index(drop=True)
    draw_df = (
        store.rows(run_id, "draws", wanted)
        if "draws" in store.tables(run_id)
        else pd.DataFrame(columns=list(DrawSummary.__dataclass_fields__))
    )
    draw_df = draw_df[draw_df["model"].isin(wanted)]
    arrays = {} if summary else store.arrays(run_id, [f"{name}/" for name in wanted])
    return model_df, subset_df, draw_df, arrays


def _read_class_wise(store: Any, run_id: int, wanted: Sequence[str]) -> pd.DataFrame:
    """The ``class_wise`` rows of the ``wanted`` models of a stored run (empty when none)."""
    if CLASS_WISE_TABLE not in store.tables(run_id):
        return pd.DataFrame()
    rows = store.rows(run_id, CLASS_WISE_TABLE, wanted)
    return rows[rows["model"].isin(wanted)].reset_index(drop=True)


def _stored_near_ties(store: Any, run_id: int, wanted: Sequence[str]) -> dict[str, ModelNearTies]:
    """The near-ties records a shipped store keeps (:mod:`sde_core.pipeline.shipped_store`:
    found from every H array, of which it keeps the first draws'), by model; empty for a store
    that keeps every array (the near-ties are then found from them)."""
    if NEAR_TIES_TABLE not in store.tables(run_id):
        return {}
    return {
        str(r["model"]): ModelNearTies.from_json(json.loads(str(r["record"])))
        for r in store.records(run_id, NEAR_TIES_TABLE)
        if r["model"] in set(wanted)
    }


def _in_order(table: pd.DataFrame, column: str, names: Sequence[str]) -> pd.DataFrame:
    """Rows of ``table`` in the order of ``names`` (stable within a name), whatever order the
    engine finished the models in."""
    if table.empty:
        return table.reset_index(drop=True)
    rank = table[column].map({name: i for i, name in enumerate(names)})
    return table.iloc[np.argsort(rank.to_numpy(), kind="stable")].reset_index(drop=True)
