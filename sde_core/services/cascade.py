"""Where the dashboard's evaluations come from: the process's result cache, the workspace's
results store, or a computation — in that order.

:class:`Evaluations` answers one workspace's requests (a full evaluation, the Compare page's
staged one, a sweep, σ markers). The front end passes in what it owns: the process-wide
:class:`~sde_core.services.result_cache.ResultCache`, a callable returning the workspace's
:class:`~sde_core.pipeline.evaluation.EvaluationSession` (the dashboard keeps one per workspace
in its resource cache), and *runners* that wrap a computation with its progress display and
Stop button — so this module never imports Streamlit. A runner returns None when the user
stopped the work; nothing is cached then, and finished models stay in the results store.

Cache keys are content hashes: ``(kind, workspace hash, settings hash, models…)``.

As one of the dashboard's two facades it also re-exports the pipeline names the pages use:
among them the stage lists, the result types and the metric table's handles that a
page reads one by one (``OTR.key``, not the literal ``"otr"``).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, cast

import pandas as pd

from sde_core.common.hashing import stable_hash
from sde_core.errors import SDEError
from sde_core.pipeline.evaluation.class_wise import ForgetClasses
from sde_core.pipeline.evaluation.comparisons import COMPARED_METRICS, compare_models
from sde_core.pipeline.evaluation.metric_table import (
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    F1,
    OTR,
    OVER_UNLEARNING_P,
    PANEL_P,
    REFERENCE_P,
)
from sde_core.pipeline.evaluation.planner import forecast_models, forecast_sentence
from sde_core.pipeline.evaluation.precision import precision_status
from sde_core.pipeline.evaluation.run import PartialEvaluation
from sde_core.pipeline.evaluation.run_driver import EvaluationCancelled
from sde_core.pipeline.evaluation.session import (
    COMPARE_STAGES,
    EXPLORE_STAGES,
    EvaluationSession,
)
from sde_core.pipeline.evaluation.workspace_run import (
    EvaluationResult,
    evaluate_workspace,
    stored_result,
)
from sde_core.pipeline.model_inputs import Progress
from sde_core.pipeline.run_drivers import Drivers, run_drivers
from sde_core.pipeline.run_progress import RunProgress, duration_text, read_progress
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.sweeps import (
    SweepForecast,
    default_paired_base,
    run_sweep,
    sigma_markers,
    sweep_forecast,
)
from sde_core.pipeline.workspace import Workspace
from sde_core.services.evaluation import store_file_state, stored_models
from sde_core.services.result_cache import ResultCache
from sde_core.services.workspace_info import check_records

__all__ = [
    "CALIBRATED_OTR",
    "COMPARED_METRICS",
    "COMPARE_STAGES",
    "DEPENDENCE_SCORE",
    "EXPLORE_STAGES",
    "F1",
    "OTR",
    "OVER_UNLEARNING_P",
    "PANEL_P",
    "REFERENCE_P",
    "EvalSettings",
    "EvaluationCancelled",
    "EvaluationResult",
    "EvaluationSession",
    "Evaluations",
    "PartialEvaluation",
    "Progress",
    "RunProgress",
    "Runner",
    "StagedRunner",
    "StagedWork",
    "compare_models",
    "duration_text",
    "forecast_models",
    "forecast_sentence",
    "open_results_store",
    "precision_status",
    "process_cache",
    "slice_result",
    "warm_workspace",
]

#: ``runner(work)``: run ``work(progress)`` with a progress display; its result, or None when
#: the user stopped it.
Runner = Callable[[Callable[[Progress], Any]], Any]
#: ``work(on_update, cancelled)``: an evaluation by the session, reporting each
#: :class:`PartialEvaluation` and polling ``cancelled()`` between steps.
StagedWork = Callable[[Callable[[PartialEvaluation], None], Callable[[], bool]], EvaluationResult]
#: ``runner(work)`` for a :data:`StagedWork`; None when the user stopped it.
StagedRunner = Callable[[StagedWork], EvaluationResult | None]


#: The process's result cache: one per server, shared by every browser session, and filled by
#: :func:`warm_workspace` before the first visitor arrives.
_PROCESS_CACHE = ResultCache(max_entries=64)


def process_cache() -> ResultCache:
    """The process-wide result cache (see :func:`warm_workspace`)."""
    return _PROCESS_CACHE


def warm_workspace(path: str) -> EvaluationResult | None:
    """Do before the first visit what a cold open of ``path`` would: import the library (torch,
    the HSIC engine and plotly included), load the workspace, its dataset and content hash, read
    its stored evaluation at its defaults into :func:`process_cache`, build each kind of chart
    Explore draws once and draw the target subsets at the defaults.

    Nothing is computed: a workspace whose store lacks its defaults is only loaded. Above
    :data:`WHOLE_READ_MAX` models it reads what a page of hundreds of models reads first —
    every model's headline rows (:meth:`Evaluations.stored_summary`, which verifies the whole
    run) and the first model in full — not every model's distributions.

    Returns:
        The stored result at the workspace's defaults (above :data:`WHOLE_READ_MAX` models:
        the first model's), or None.

    Raises:
        SDEError: the workspace cannot be loaded or its store read.
    """
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.services.evaluation import target_subsets
    from sde_core.services.workspace_info import content_hash, load_bundle
    from sde_core.viz.figures.comparison import draw_strip
    from sde_core.viz.figures.distributions import hsic_histogram, panel_figure, spread_figure

    ws = load_workspace(path)
    if not ws.models:
        return None
    bundle = load_bundle(ws)
    source = Evaluations(ws, content_hash(ws, bundle), _PROCESS_CACHE, _no_session)
    names = [m.name for m in ws.models]
    if len(names) > WHOLE_READ_MAX:
        if source.stored_summary(ws.defaults) is None:
            return None
        names = names[:1]
    result = source.stored(ws.defaults, names)
    if result is not None:
        # what Explore's first run builds besides: each kind of figure once (plotly builds a
        # trace or layout type's validators at its first use in a process) and the target
        # subsets its thumbnails and tables show (a cache of the library)
        first = ws.models[0].name
        hsic_histogram(result, first, "pooled")
        if not result.model_draws(first).empty:
            draw_strip(result, first)
        if "panel_it_h" in result.model_arrays(first):
            panel_figure(result, first)
            spread_figure(result, first)
        target_subsets(ws, bundle, ws.defaults)
    return result


def _no_session() -> EvaluationSession:
    raise SDEError("warm_workspace reads the results store only")


def open_results_store(ws: Workspace, read_only: bool = False) -> ResultsStore:
    """The workspace's results store (in its cache folder); ``read_only`` does not change the
    store file (no upgrade of an older store, no WAL switch). A pass of SQLite's structural
    check is found in and recorded to the workspace's check record (:func:`check_records`),
    so a new process does not re-read an unchanged store of hundreds of MB.

    Raises:
        SDEError: it cannot be opened (a read-only folder, a damaged file).
    """
    return ResultsStore(workspace_store_path(ws.root), read_only=read_only,
                        checks=check_records(ws))  # fmt: skip


def slice_result(result: EvaluationResult, models: Sequence[str]) -> EvaluationResult:
    """The part of ``result`` that concerns ``models`` (every table, array and failure)."""
    wanted = list(models)
    keep = set(wanted)

    def rows(frame: pd.DataFrame, column: str) -> pd.DataFrame:
        if frame.empty or column not in frame:
            return frame
        part = frame[frame[column].isin(keep)]
        rank = part[column].map({name: i for i, name in enumerate(wanted)})
        return part.iloc[rank.argsort(kind="stable")].reset_index(drop=True)

    return EvaluationResult(
        settings=result.settings,
        workspace_hash=result.workspace_hash,
        models=rows(result.models, "name"),
        subsets=rows(result.subsets, "model"),
        arrays={k: v for k, v in result.arrays.items() if k.split("/", 1)[0] in keep},
        run_id=result.run_id,
        cached_models=[n for n in result.cached_models if n in keep],
        draws=rows(result.draws, "model"),
        failed={k: v for k, v in result.failed.items() if k in keep},
    )


#: The last runs' progress reads (:meth:`Evaluations.run_progress`), by store file state: apart
#: from the result cache, so that a page polling a run does not push results out of it.
_PROGRESS = ResultCache(max_entries=16)


#: Above this many models a stored read asks for the models it needs, not the whole run (which
#: a smaller workspace reads once, so that a model change answers from memory).
WHOLE_READ_MAX = 24


class Evaluations:
    """One workspace's evaluations for the dashboard, answered from the cheapest source.

    Args:
        ws: the workspace.
        workspace_hash: its content hash (data, forget set, checkpoints).
        cache: the process-wide result cache (shared by every session of the server).
        session: returns the workspace's :class:`EvaluationSession` (kept between requests).
        store_problem: called with the error when the results store cannot be opened; the
            evaluation then runs without it (its results are kept in ``cache`` only).
    """

    def __init__(
        self,
        ws: Workspace,
        workspace_hash: str,
        cache: ResultCache,
        session: Callable[[], EvaluationSession],
        store_problem: Callable[[SDEError], None] = lambda exc: None,
    ) -> None:
        self.ws = ws
        self.workspace_hash = workspace_hash
        self.cache = cache
        self._session = session
        self._store_problem = store_problem

    def key(self, kind: str, settings: EvalSettings, *extra: Hashable) -> tuple[Hashable, ...]:
        """The cache key of a ``kind`` of answer for ``settings`` (and ``extra`` parts)."""
        return (kind, self.workspace_hash, stable_hash(settings.result_key()), *extra)

    def cached(self, kind: str, settings: EvalSettings, *extra: Hashable) -> Any | None:
        """The cached answer, or None."""
        return self.cache.get(self.key(kind, settings, *extra))

    def remember(self, kind: str, settings: EvalSettings, value: Any, *extra: Hashable) -> None:
        """Cache ``value`` as the ``kind`` answer for ``settings`` (and ``extra`` parts)."""
        self.cache.put(self.key(kind, settings, *extra), value)

    def session(self) -> EvaluationSession:
        """The workspace's interactive session (activations and stage cache kept in memory)."""
        return self._session()

    def _names(self, models: Sequence[str] | None) -> tuple[str, ...]:
        return tuple(models) if models is not None else tuple(m.name for m in self.ws.models)

    def _store(self, read_only: bool = False) -> ResultsStore | None:
        try:
            return open_results_store(self.ws, read_only=read_only)
        except SDEError as exc:
            self._store_problem(exc)
            return None

    def stored(self, settings: EvalSettings, models: Sequence[str]) -> EvaluationResult | None:
        """``models`` at ``settings`` from the cache or the results store only — no activation
        is extracted and no HSIC computed (a cold open of a view the store holds); None when
        neither holds all of them.

        The whole stored run is read once (every model of the workspace, cached as the
        :meth:`evaluate` answer for all of them, which Compare and Report reuse), so a model
        change answers from memory; ``models`` is a slice of it.

        Raises:
            DamagedUnitError: a stored unit it would read is damaged (an SDEError).
        """
        names = self._names(models)
        found = self.cached("evaluation", settings, names)
        if found is not None:
            return found
        every = self._names(None)
        whole = self.cached("evaluation", settings, every)
        if whole is None and not self.store_path_exists():
            return None
        if whole is None:
            with self._read_only_store() as store:
                if store is None:
                    return None
                classes = self.forget_classes()
                if len(every) > WHOLE_READ_MAX and names != every:  # hundreds: the asked ones
                    found = stored_result(store, self.workspace_hash, settings, names, classes)
                else:
                    whole = stored_result(store, self.workspace_hash, settings, every, classes)
                    if whole is None:  # not every model is stored: read the ones asked for
                        found = stored_result(store, self.workspace_hash, settings, names,
                                              classes)  # fmt: skip
            if whole is not None:
                self.remember("evaluation", settings, whole, every)
        if whole is not None:
            found = whole if names == every else slice_result(whole, names)
        if found is not None:
            self.remember("evaluation", settings, found, names)
        return found

    @contextmanager
    def _read_only_store(self) -> Iterator[ResultsStore | None]:
        """The results store opened read-only for one read, closed after it (None when it
        cannot be opened: :meth:`_store` has reported why)."""
        store = self._store(read_only=True)
        try:
            yield store
        finally:
            if store is not None:
                store.close()

    def stored_summary(
        self, settings: EvalSettings, models: Sequence[str] | None = None
    ) -> EvaluationResult | None:
        """Every model (or the named ``models``) at ``settings`` with its headline rows and
        per-draw values only — no per-subset rows, no H arrays (:func:`stored_result` with
        ``summary``): what a page of hundreds of models tabulates, filters and groups, read
        once and cached under those models; a whole result already in the cache serves as
        well. None when the store lacks one of them.

        Raises:
            DamagedUnitError: a stored unit it would read is damaged (an SDEError).
        """
        names = self._names(models)
        for kind in ("evaluation", "summary"):
            found = self.cached(kind, settings, names)
            if found is not None:
                return found
        if not self.store_path_exists():
            return None
        with self._read_only_store() as store:
            if store is None:
                return None
            found = stored_result(store, self.workspace_hash, settings, names,
                                  self.forget_classes(), summary=True)  # fmt: skip
        if found is not None:
            self.remember("summary", settings, found, names)
        return found

    def run_progress(
        self, settings: EvalSettings, now: datetime.datetime | None = None
    ) -> RunProgress | None:
        """How far the stored run at ``settings`` has got over the workspace's models, seen at
        ``now`` (:class:`~sde_core.pipeline.run_progress.RunProgress`), or None when the store
        has no such run. Cheap enough to poll: the run record and its units' keys and times
        only, read again only when the store's files changed (the rows are verified when a
        page reads them with :meth:`stored`), and its drivers' markers, read every time
        (:func:`~sde_core.pipeline.run_drivers.run_drivers`: a few small files).

        Raises:
            DamagedUnitError: the run record is damaged (an SDEError).
        """
        path = workspace_store_path(self.ws.root)
        if not path.is_file():
            return None
        key = ("run_progress", self.workspace_hash, stable_hash(settings.result_key()),
               str(path), store_file_state(path))  # fmt: skip
        found = _PROGRESS.get(key)
        if found is None:
            with self._read_only_store() as store:
                if store is None:
                    return None
                run = store.find_run(self.workspace_hash, settings.result_key())
                found = (None if run is None else read_progress(store, run, self._names(None)),)
            _PROGRESS.put(key, found)
        progress = cast("RunProgress | None", found[0])
        if progress is None:
            return None
        drivers = run_drivers(path, progress.run_id) if progress.running else Drivers()
        return dataclasses.replace(progress.at(now), drivers=drivers)

    def forget_classes(self) -> ForgetClasses | None:
        """The dataset's labels and the forget set, for the class-wise step of a stored result
        (method §16); read once per workspace content and kept in the cache."""
        key = ("forget_classes", self.workspace_hash)
        found = self.cache.get(key)
        if found is None:
            from sde_core.inputs.indices import load_index_file
            from sde_core.services.workspace_info import load_bundle

            bundle = load_bundle(self.ws)
            forget = load_index_file(self.ws.path(self.ws.forget_indices), len(bundle.train))
            found = (ForgetClasses.of(bundle, forget),)
            self.cache.put(key, found)
        return cast("ForgetClasses | None", found[0])

    def store_path_exists(self) -> bool:
        """Whether the workspace has a results store file yet."""
        return workspace_store_path(self.ws.root).is_file()

    def evaluate(
        self, settings: EvalSettings, models: Sequence[str] | None, run: Runner
    ) -> EvaluationResult | None:
        """Every statistic of ``models`` (default: all) at ``settings``: from the cache, else
        by :func:`~sde_core.pipeline.evaluation.workspace_run.evaluate_workspace` through the
        results store (stored models are read back, the others stored as they finish).

        Returns:
            The result, or None when ``run`` reports the work stopped.

        Raises:
            SDEError: the evaluation failed.
        """
        names = self._names(models)
        found = self.cached("evaluation", settings, names)
        if found is not None:
            return found

        def work(progress: Progress) -> EvaluationResult:
            store = self._store()
            try:
                return evaluate_workspace(
                    self.ws, settings, models=list(names), store=store, progress=progress
                )
            finally:
                if store is not None:
                    store.close()

        result = run(work)
        if result is not None:
            self.remember("evaluation", settings, result, names)
        return result

    def compare(
        self, settings: EvalSettings, run: Runner, run_staged: StagedRunner
    ) -> EvaluationResult | None:
        """Every model at ``settings`` for the Compare page: from the cache; from the results
        store when it holds every model (the complete results, :meth:`evaluate` with ``run``);
        else by the session's :data:`COMPARE_STAGES` only (``run_staged``; a second request is
        answered from the session's memory).

        Returns:
            The result, or None when the runner reports the work stopped.

        Raises:
            SDEError: the evaluation failed.
        """
        names = self._names(None)
        found = self.cached("compare", settings, names)
        if found is not None:
            return found
        if set(names) <= stored_models(self.ws, self.workspace_hash, settings):
            result = self.evaluate(settings, names, run)
        else:

            def work(
                on_update: Callable[[PartialEvaluation], None], cancelled: Callable[[], bool]
            ) -> EvaluationResult:
                return self.session().evaluate(
                    list(names), settings, stages=COMPARE_STAGES, on_update=on_update,
                    cancelled=cancelled,
                )  # fmt: skip

            result = run_staged(work)
        if result is not None:
            self.remember("compare", settings, result, names)
        return result

    def sweep(
        self,
        settings: EvalSettings,
        param: str,
        values: Sequence[Any],
        models: Sequence[str],
        run: Runner,
    ) -> pd.DataFrame | None:
        """A sweep of ``param`` over ``values`` (:func:`~sde_core.pipeline.sweeps.run_sweep`):
        from the cache, else computed through the results store (finished points are stored).

        ``run`` may also decline to start (e.g. until the user asks): None then, as when the
        user stopped it.
        """
        extra = (param, stable_hash(list(values)), tuple(models))
        found = self.cached("sweep", settings, *extra)
        if found is not None:
            return found

        base = default_paired_base(settings, param, values)

        def work(progress: Progress) -> pd.DataFrame:
            store = self._store()
            try:
                return run_sweep(self.ws, settings, param, values, models=list(models),
                                 store=store, progress=progress, paired_base=base)  # fmt: skip
            finally:
                if store is not None:
                    store.close()

        table = run(work)
        if table is not None:
            self.remember("sweep", settings, table, *extra)
        return table

    def sweep_forecast(
        self, settings: EvalSettings, param: str, values: Sequence[Any], models: Sequence[str],
        fingerprint: str | None,
    ) -> SweepForecast:  # fmt: skip
        """What :meth:`sweep` would cost (:func:`~sde_core.pipeline.sweeps.sweep_forecast`),
        read from the results store (nothing stored when it has none)."""
        opened = self._read_only_store() if self.store_path_exists() else nullcontext(None)
        with opened as store:
            return sweep_forecast(self.ws, settings, param, values, models, store,
                                  data_fingerprint=fingerprint)  # fmt: skip

    def sigma_markers(self, settings: EvalSettings, model: str) -> dict[str, float]:
        """The σ of the √d and median rules for ``model`` at the settings' layer (cached)."""
        found = self.cached("markers", settings, model)
        if found is None:
            found = sigma_markers(self.ws, settings, model)
            self.remember("markers", settings, found, model)
        return found
