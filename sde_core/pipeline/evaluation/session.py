"""Interactive evaluation of a workspace: what a dashboard page calls (method §12).

An :class:`EvaluationSession` opens a workspace once and keeps, between calls, the dataset, the
subset plans, each model's activations (from the on-disk activation cache) and the stage cache
(``<workspace>/.sde-cache/stages``, plus an in-memory LRU). Every call then does only the work
its settings change:

- bins or α: no HSIC is recomputed — H comes from the stage cache and only the decisions are
  redone (tens of milliseconds);
- σ: H and the MMD baseline are recomputed; the classic metrics and the exact W2 distances are
  read back;
- n, T, draws or the seed: new subsets, so H is recomputed; the classic metrics are read back
  (they depend on the seed only).

Use from a page (Streamlit keeps one session per workspace with ``st.cache_resource``)::

    session = EvaluationSession("assets/demo")
    for part in session.stream(["original"], settings):      # one model, stage by stage
        ev = part.evaluation()                                # what is finished so far
        draw_histogram(ev.arrays)                             # first after "draw 1: references"
        show_progress(part.label, part.done, part.total)
        if stop_pressed():
            break                                             # finished stages stay cached
    result = session.evaluate(names, settings, on_update=..., cancelled=...)  # Compare page

:data:`EXPLORE_STAGES` and :data:`COMPARE_STAGES` name the stages each page needs (every other
stage can run later, e.g. for the report: the exact W2 baseline is O(n³) per subset pair).
Each :class:`~.run.PartialEvaluation` carries ``model``, ``stage`` (one of
:data:`~.run.STAGES`), ``label``, ``done``/``total`` and ``complete``; its ``evaluation()`` is
the :class:`~.model_evaluation.ModelEvaluation` of everything finished so far (``model.draws``
tells how many draws it covers; headline numbers stay NaN until the first panel is known, with
``inconclusive_reason`` saying so).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

from sde_core.common.hashing import stable_hash
from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.behaviour import (
    FAMILY_MEASURES,
    with_behaviour,
    workspace_behaviour,
)
from sde_core.pipeline.evaluation.class_wise import (
    ForgetClasses,
    class_wise_table,
    judged_models,
)
from sde_core.pipeline.evaluation.model_evaluation import ModelEvaluation
from sde_core.pipeline.evaluation.plan import F1Negatives, SubsetPlan, draw_subsets
from sde_core.pipeline.evaluation.run import STAGES, ModelRun, PartialEvaluation
from sde_core.pipeline.evaluation.run_driver import run_model
from sde_core.pipeline.evaluation.stages import StageCache
from sde_core.pipeline.evaluation.workspace_run import (
    EvaluationResult,
    result_tables,
    stage_cache_dir,
)
from sde_core.pipeline.model_inputs import ModelInputs, Progress, load_model_inputs
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import cache_path

__all__ = ["COMPARE_STAGES", "EXPLORE_STAGES", "PLAN_FIELDS", "EvaluationSession"]

#: What the Explore page shows (histograms, decisions, calibrated panel, F1, null check,
#: accuracies and ASR); the baselines (``"mmd"``, ``"w2"``) are left to the report.
EXPLORE_STAGES: tuple[str, ...] = ("references", "panels", "controls", "null", "classic")
#: What the Compare page's bars and table show (OTR, calibrated OTR, F1, dependence, ASR, Acc).
COMPARE_STAGES: tuple[str, ...] = ("references", "panels", "controls", "classic")

#: Settings that decide the subsets (everything else leaves the plan unchanged).
PLAN_FIELDS = ("subset_size", "targets", "panel_size", "seed", "null_pairs", "baseline_targets",
                "draws", "precision", "max_draws")  # fmt: skip


class EvaluationSession:
    """A workspace opened for repeated, staged evaluations (see the module docstring).

    Args:
        workspace: a :class:`~sde_core.pipeline.workspace.Workspace` or its folder/toml.
        cache_dir: activation cache (default ``<workspace>/.sde-cache/activations``).
        stage_dir: stage cache (default ``<workspace>/.sde-cache/stages``; None keeps stages in
            memory only).
        memory_items: stage results kept in memory.
        max_models: models whose activations are kept in memory.
    """

    def __init__(
        self,
        workspace: Any,
        *,
        cache_dir: str | Path | None = None,
        stage_dir: str | Path | bool | None = True,
        memory_items: int = 8192,
        max_models: int = 24,
    ) -> None:
        from sde_core.inputs.activation_cache import ActivationCache
        from sde_core.inputs.data import load_dataset
        from sde_core.inputs.indices import load_index_file
        from sde_core.pipeline.workspace import Workspace, workspace_hash
        from sde_core.pipeline.workspace_load import load_workspace

        self.workspace = (
            workspace if isinstance(workspace, Workspace) else load_workspace(workspace)
        )
        ws = self.workspace
        self.bundle = load_dataset(ws.dataset_spec())
        self.forget = load_index_file(ws.path(ws.forget_indices), len(self.bundle.train))
        self.workspace_hash = workspace_hash(ws, data_fingerprint=self.bundle.fingerprint)
        self.activations = ActivationCache(cache_dir or cache_path(ws.root, "activations"))
        folder = stage_cache_dir(ws.root) if stage_dir is True else (stage_dir or None)
        self.cache = StageCache(folder, memory_items=memory_items)
        self._plans: OrderedDict[tuple[Any, ...], SubsetPlan] = OrderedDict()
        self._inputs: OrderedDict[tuple[Any, ...], ModelInputs] = OrderedDict()
        self._finished: OrderedDict[tuple[Any, ...], ModelEvaluation] = OrderedDict()
        self._max_models = max_models
        self._behaviour: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        #: the labels and forget set the class-wise step reads (method §16)
        self.classes = ForgetClasses.of(self.bundle, self.forget)

    def defaults(self) -> EvalSettings:
        """The workspace's ``[defaults]`` as settings."""
        return self.workspace.defaults

    def plan(self, settings: EvalSettings) -> SubsetPlan:
        """The subsets for ``settings`` (drawn once per plan-relevant settings)."""
        key = tuple(getattr(settings, f) for f in PLAN_FIELDS)
        with self._lock:
            found = self._plans.get(key)
        if found is None:
            found = draw_subsets(
                len(self.bundle.train), len(self.bundle.test), self.forget, settings
            )
            with self._lock:
                self._plans[key] = found
                while len(self._plans) > 16:
                    self._plans.popitem(last=False)
        return found

    def _inputs_key(self, model: str, settings: EvalSettings) -> tuple[Any, ...]:
        entry = self.workspace.model(model)
        return (entry.name, entry.checkpoint, entry.sha256, settings.layer, settings.pool,
                settings.device)  # fmt: skip

    def inputs(
        self, model: str, settings: EvalSettings, progress: Progress | None = None
    ) -> ModelInputs:
        """One model's activations at ``settings.layer`` (kept in memory between calls)."""
        entry = self.workspace.model(model)
        key = self._inputs_key(model, settings)
        with self._lock:
            found = self._inputs.get(key)
            if found is not None:
                self._inputs.move_to_end(key)
                return found
        loaded = load_model_inputs(
            entry, self.workspace, self.bundle, settings, self.activations, progress
        )
        with self._lock:
            self._inputs[key] = loaded
            while len(self._inputs) > self._max_models:
                self._inputs.popitem(last=False)
        return loaded

    def model_run(
        self,
        model: str,
        settings: EvalSettings,
        *,
        stages: Collection[str] = STAGES,
        f1_negatives: F1Negatives | None = None,
    ) -> ModelRun:
        """A :class:`~.run.ModelRun` of one model that reads and fills this session's caches."""
        return ModelRun(
            self.inputs(model, settings), self.plan(settings), settings,
            f1_negatives=f1_negatives, cache=self.cache, stages=stages,
        )  # fmt: skip

    def stream(
        self, models: Sequence[str], settings: EvalSettings, *, stages: Collection[str] = STAGES
    ) -> Iterator[PartialEvaluation]:
        """Evaluate ``models`` one after another, yielding after every step of each.

        Stop iterating to cancel: every finished stage stays in the cache.
        """
        self._check_models(models)
        for name in models:
            yield from self.model_run(name, settings, stages=stages).steps()

    def evaluate(
        self,
        models: Sequence[str] | None = None,
        settings: EvalSettings | None = None,
        *,
        stages: Collection[str] = STAGES,
        on_update: Callable[[PartialEvaluation], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        progress: Progress | None = None,
    ) -> EvaluationResult:
        """Evaluate models (default all) and return an :class:`~.workspace_run.EvaluationResult`.

        Args:
            models: model names (default: every model, in workspace order).
            settings: evaluation settings (default: the workspace's ``[defaults]``).
            stages: the stages to run (default all of :data:`~.run.STAGES`).
            on_update: called with every :class:`~.run.PartialEvaluation` (per-model progress).
            cancelled: checked between steps; True raises :class:`~.run_driver.EvaluationCancelled`.
            A model already evaluated with the same settings and stages in this session is
            answered from memory (no step runs, so ``on_update`` is not called for it).
            progress: ``progress(stage, done, total)``; ``stage == "models"`` counts models.

        Raises:
            EvaluationCancelled: ``cancelled()`` returned True (finished stages stay cached).
        """
        names = list(models) if models is not None else [m.name for m in self.workspace.models]
        self._check_models(names)
        s = settings or self.defaults()
        evaluations: list[ModelEvaluation] = []
        for i, name in enumerate(names):
            if progress is not None:
                progress("models", i, len(names))
            key = (self._inputs_key(name, s), stable_hash(s.result_key()), tuple(sorted(stages)))
            with self._lock:
                found = self._finished.get(key)
            if found is None:
                run = self.model_run(name, s, stages=stages)
                found = run_model(run, on_update=on_update, cancelled=cancelled, progress=progress)
                with self._lock:
                    self._finished[key] = found
                    while len(self._finished) > 4 * self._max_models:
                        self._finished.popitem(last=False)
            evaluations.append(found)
        if progress is not None:
            progress("models", len(names), len(names))
        model_df, subset_df, draw_df = result_tables(evaluations)
        if "classic" in stages:  # a language model's or a denoiser's behaviour check (§9)
            model_df = with_behaviour(model_df, self.behaviour(s.layer, s.device))
        return EvaluationResult(
            settings=s,
            workspace_hash=self.workspace_hash,
            models=judged_models(model_df, class_wise_table(evaluations), self.classes),
            subsets=subset_df,
            arrays={f"{ev.model.name}/{k}": v for ev in evaluations for k, v in ev.arrays.items()},
            draws=draw_df,
        )

    def behaviour(self, layer: str, device: str = "cpu") -> list[dict[str, Any]]:
        """The behaviour rows of the workspace's language models and denoisers
        (:func:`~.behaviour.workspace_behaviour`; computed once per noise level, then read
        from the stage cache): empty for a workspace of classifiers."""
        from sde_core.families.registry import family_of_entry
        from sde_core.inputs.denoisers import parse_noise_layer

        ws = self.workspace
        if not any(family_of_entry(m.arch, layer).name in FAMILY_MEASURES for m in ws.models):
            return []
        key = (parse_noise_layer(layer)[1], device)
        with self._lock:
            found = self._behaviour.get(key)
        if found is None:
            rows = workspace_behaviour(ws, self.bundle, self.forget, layer, self.cache, device)
            found = list(rows.values())
            with self._lock:
                self._behaviour[key] = found
        return found

    def _check_models(self, models: Sequence[str]) -> None:
        names = {m.name for m in self.workspace.models}
        missing = sorted(set(models) - names)
        if missing:
            raise SettingsError(f"unknown models {missing}; the workspace has {sorted(names)}")
