"""The dashboard's evaluation cascade and cost policy (sde_core.services.cascade and
.evaluation), without Streamlit: the order of the sources (cache, results store, session), what
is cached, a stopped run, a store that cannot be opened, and when a layer needs a confirmation.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ui_fixtures import TINY_DEFAULTS

import sde_core.services.cascade as cascade
from sde_core.errors import StoreError
from sde_core.pipeline.evaluation.run_driver import EvaluationCancelled
from sde_core.pipeline.evaluation.session import COMPARE_STAGES
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.services.cascade import Evaluations
from sde_core.services.evaluation import (
    CHEAP_SECONDS,
    LayerCost,
    confirmation_token,
    priced_layers,
    runs_without_asking,
)
from sde_core.services.result_cache import ResultCache
from sde_core.services.workspace_info import content_hash, load_bundle

SETTINGS = TINY_DEFAULTS


class FakeSession:
    """Records the session's evaluations; answers with a marker object."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], tuple[str, ...]]] = []

    def evaluate(self, names, settings, *, stages, on_update, cancelled) -> Any:
        self.calls.append((list(names), tuple(stages)))
        assert not cancelled()
        return ("session", tuple(names))


def fake_ws(tmp_path: Path, *names: str) -> Any:
    """What the cascade reads of a workspace: its folder and model names (no store yet)."""
    return SimpleNamespace(root=tmp_path, models=[SimpleNamespace(name=n) for n in names])


@pytest.fixture
def full_runs(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """evaluate_workspace replaced by a recorder (returns a marker per call)."""
    calls: list[dict] = []

    def evaluate_workspace(ws, settings, *, models, store, progress) -> Any:
        calls.append({"models": models, "store": store})
        progress("draws", 1, 1)
        return ("full", tuple(models), len(calls))

    monkeypatch.setattr(cascade, "evaluate_workspace", evaluate_workspace)
    return calls


def run_now(work):
    return work(lambda stage, done, total: None)


def stop_at_once(work):
    """A runner whose user pressed Stop: the first progress report cancels the work."""

    def cancel(stage: str, done: int, total: int) -> None:
        raise EvaluationCancelled(None)

    try:
        return work(cancel)
    except EvaluationCancelled:
        return None


def test_a_cached_answer_runs_nothing_and_a_stopped_run_is_not_cached(tmp_path, full_runs):
    source = Evaluations(fake_ws(tmp_path, "a", "b"), "h" * 64, ResultCache(), FakeSession)
    assert source.evaluate(SETTINGS, None, stop_at_once) is None
    assert len(full_runs) == 1
    first = source.evaluate(SETTINGS, None, run_now)
    assert first == ("full", ("a", "b"), 2)
    assert full_runs[-1]["store"] is not None  # computed through the results store

    def never(work):
        raise AssertionError("a cached answer ran again")

    assert source.evaluate(SETTINGS, ["a", "b"], never) is first
    other = SETTINGS.with_overrides(bins=12)
    assert source.evaluate(other, None, run_now) == ("full", ("a", "b"), 3)  # other settings


def test_compare_uses_the_session_unless_the_store_holds_every_model(
    tmp_path, full_runs, monkeypatch
):
    session = FakeSession()
    source = Evaluations(fake_ws(tmp_path, "a", "b"), "h" * 64, ResultCache(), lambda: session)
    staged = source.compare(SETTINGS, run_now, lambda work: work(lambda part: None, bool))
    assert staged == ("session", ("a", "b"))
    assert session.calls == [(["a", "b"], tuple(COMPARE_STAGES))] and not full_runs
    assert source.compare(SETTINGS, run_now, lambda work: None) is staged  # from the cache

    monkeypatch.setattr(cascade, "stored_models", lambda ws, h, s: {"a", "b"})
    other = SETTINGS.with_overrides(seed=1)
    complete = source.compare(other, run_now, lambda work: pytest.fail("used the session"))
    assert complete == ("full", ("a", "b"), 1) and len(session.calls) == 1
    assert source.cached("evaluation", other, ("a", "b")) is complete  # Explore/Report reuse it


def test_a_store_that_cannot_be_opened_is_reported_and_the_evaluation_runs(
    tmp_path, full_runs, monkeypatch
):
    def broken(ws, read_only=False):
        raise StoreError("results.sqlite is damaged: run evaluate --repair")

    monkeypatch.setattr(cascade, "open_results_store", broken)
    problems: list[Exception] = []
    source = Evaluations(
        fake_ws(tmp_path, "a"), "h" * 64, ResultCache(), FakeSession, problems.append
    )
    assert source.evaluate(SETTINGS, None, run_now) == ("full", ("a",), 1)
    assert full_runs[0]["store"] is None
    assert [str(p) for p in problems] == ["results.sqlite is damaged: run evaluate --repair"]


def cost(seconds: float | None, extract: list[str]) -> LayerCost:
    return LayerCost("output", [], [], extract, 100 * len(extract), seconds)


def test_a_layer_runs_without_asking_when_ready_or_cheap():
    assert runs_without_asking(cost(None, []))
    assert runs_without_asking(cost(CHEAP_SECONDS, ["a"]))
    assert not runs_without_asking(cost(CHEAP_SECONDS + 0.1, ["a"]))
    assert not runs_without_asking(cost(None, ["a"]))  # unknown speed: ask
    token = confirmation_token("h" * 64, SETTINGS, "penultimate")
    assert token == confirmation_token("h" * 64, SETTINGS.with_overrides(layer="output"),
                                       "penultimate")  # fmt: skip
    assert token != confirmation_token("h" * 64, SETTINGS, "output")


def test_throughput_is_measured_once_per_architecture(tiny_workspace):
    folder = tiny_workspace
    ws = load_workspace(folder)
    bundle = load_bundle(ws)
    settings = SETTINGS.with_overrides(layer="penultimate")
    cache = ResultCache()
    timed: list[str] = []

    def measuring(name: str):
        timed.append(name)
        return nullcontext()

    # layers no test extracts: every model needs an extraction before they can be evaluated
    layers = ["cost-probe-a", "cost-probe-b"]
    costs = priced_layers(ws, bundle, settings, layers, content_hash(ws, bundle), cache,
                          measuring)  # fmt: skip
    assert len(timed) == 1, "all four models share one architecture"
    assert all(c.extract and c.seconds is not None and c.seconds > 0 for c in costs)
    again = priced_layers(ws, bundle, settings, layers, content_hash(ws, bundle), cache,
                          measuring)  # fmt: skip
    assert len(timed) == 1 and [c.seconds for c in again] == [c.seconds for c in costs]


def test_a_view_the_store_holds_is_read_back_without_computing(tiny_workspace, monkeypatch):
    """Evaluations.stored answers from the results store alone (no evaluation, no session),
    with exactly the stored tables and H arrays of the models asked for, in their order."""
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore, workspace_store_path

    ws = load_workspace(tiny_workspace)
    ws_hash = content_hash(ws, load_bundle(ws))
    with ResultsStore(workspace_store_path(ws.root)) as store:
        full = evaluate_workspace(ws, SETTINGS, store=store)
    names = [m.name for m in ws.models]

    def no_evaluation(*args, **kwargs):
        raise AssertionError("a stored view was computed")

    monkeypatch.setattr(cascade, "evaluate_workspace", no_evaluation)
    source = Evaluations(ws, ws_hash, ResultCache(), no_evaluation)
    picked = [names[-1], names[0]]
    found = source.stored(SETTINGS, picked)
    assert found is not None and list(found.models["name"]) == picked
    for name in picked:
        assert (
            found.models[found.models["name"] == name]
            .reset_index(drop=True)
            .equals(full.models[full.models["name"] == name].reset_index(drop=True))
        )
        assert (
            found.subsets[found.subsets["model"] == name]
            .reset_index(drop=True)
            .equals(full.subsets[full.subsets["model"] == name].reset_index(drop=True))
        )
        assert (
            found.model_draws(name)
            .reset_index(drop=True)
            .equals(full.model_draws(name).reset_index(drop=True))
        )
        mine, theirs = found.model_arrays(name), full.model_arrays(name)
        assert sorted(mine) == sorted(theirs) and "targets_h" in mine
        assert all((mine[k] == theirs[k]).all() for k in mine)
    assert set(found.models["name"]) == set(picked)
    assert source.cached("evaluation", SETTINGS, tuple(names)) is not None  # the whole run
    assert source.stored(SETTINGS.with_overrides(bins=SETTINGS.bins + 1), picked) is None


def test_at_many_models_a_read_takes_the_asked_models_and_a_summary_the_rest(
    tiny_workspace, monkeypatch
):
    """Above WHOLE_READ_MAX models a stored read asks the store for the models' own units
    (SQL filters), and the summary of every model holds its headline rows and draws, the
    same as a full read's, without subsets or H arrays."""
    import pandas as pd

    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore, workspace_store_path

    ws = load_workspace(tiny_workspace)
    ws_hash = content_hash(ws, load_bundle(ws))
    with ResultsStore(workspace_store_path(ws.root)) as store:
        full = evaluate_workspace(ws, SETTINGS, store=store)
    names = [m.name for m in ws.models]
    monkeypatch.setattr(cascade, "WHOLE_READ_MAX", 1)
    reads: list[tuple[str, list[str] | None]] = []
    real = ResultsStore.records

    def spy(self, run_id, table, units=None):
        reads.append((table, None if units is None else sorted(units)))
        return real(self, run_id, table, units)

    monkeypatch.setattr(ResultsStore, "records", spy)
    source = Evaluations(ws, ws_hash, ResultCache(), FakeSession)
    picked = [names[-1], names[0]]
    found = source.stored(SETTINGS, picked)
    assert found is not None and list(found.models["name"]) == picked
    per_model = [(t, u) for t, u in reads if t in ("models", "subsets", "draws")]
    assert per_model and all(u == sorted(picked) for _, u in per_model)
    assert source.cached("evaluation", SETTINGS, tuple(names)) is None  # no whole-run read
    for name in picked:
        mine, theirs = found.model_arrays(name), full.model_arrays(name)
        assert sorted(mine) == sorted(theirs) and all((mine[k] == theirs[k]).all() for k in mine)
        assert len(found.subsets[found.subsets["model"] == name]) == len(
            full.subsets[full.subsets["model"] == name]
        )
    reads.clear()
    summary = source.stored_summary(SETTINGS)
    assert summary is not None and list(summary.models["name"]) == names
    assert "subsets" not in {t for t, _ in reads} and summary.subsets.empty
    assert summary.arrays == {}
    pd.testing.assert_frame_equal(summary.models.reset_index(drop=True),
                                  full.models.reset_index(drop=True))  # fmt: skip
    pd.testing.assert_frame_equal(summary.draws.reset_index(drop=True),
                                  full.draws.reset_index(drop=True))  # fmt: skip
    assert source.stored_summary(SETTINGS) is summary  # cached


def test_warming_reads_the_default_view_into_the_process_cache(tiny_workspace, monkeypatch):
    """The stored result at the defaults lands in the process cache, and the target subsets
    Explore's first run shows are drawn before it (the library's cache of them)."""
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore, workspace_store_path
    from sde_core.services import evaluation as evaluation_service

    ws = load_workspace(tiny_workspace)
    with ResultsStore(workspace_store_path(ws.root)) as store:  # the defaults are stored
        evaluate_workspace(ws, ws.defaults, store=store)
    evaluation_service._TARGETS.clear()
    found = cascade.warm_workspace(str(tiny_workspace))
    names = tuple(m.name for m in ws.models)
    assert found is not None and list(found.models["name"]) == list(names)
    source = Evaluations(
        ws, content_hash(ws, load_bundle(ws)), cascade.process_cache(), FakeSession
    )
    assert source.cached("evaluation", ws.defaults, names) is found
    drawn: list[int] = []
    monkeypatch.setattr(evaluation_service, "draw_subsets",
                        lambda *a, **k: drawn.append(1))  # fmt: skip
    subsets = evaluation_service.target_subsets(ws, load_bundle(ws), ws.defaults)
    assert drawn == [] and subsets.shape[0] == ws.defaults.targets


def test_warming_many_models_reads_the_summary_and_one_model_in_full(tiny_workspace, monkeypatch):
    """Above WHOLE_READ_MAX models the warm-up reads what a page of hundreds of models reads
    first — every model's headline rows (verifying the run) and the first model in full — and
    never every model's distributions."""
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore, workspace_store_path

    ws = load_workspace(tiny_workspace)
    with ResultsStore(workspace_store_path(ws.root)) as store:
        evaluate_workspace(ws, ws.defaults, store=store)
    monkeypatch.setattr(cascade, "WHOLE_READ_MAX", 1)
    monkeypatch.setattr(cascade, "_PROCESS_CACHE", ResultCache())
    found = cascade.warm_workspace(str(tiny_workspace))
    names = tuple(m.name for m in ws.models)
    assert found is not None and list(found.models["name"]) == [names[0]]
    assert found.model_arrays(names[0])  # its distributions, for the first chart
    source = Evaluations(
        ws, content_hash(ws, load_bundle(ws)), cascade.process_cache(), FakeSession
    )
    summary = source.cached("summary", ws.defaults, names)
    assert summary is not None and list(summary.models["name"]) == list(names)
    assert summary.arrays == {}
    assert source.cached("evaluation", ws.defaults, names) is None  # no whole-run read


def test_a_running_runs_progress_is_read_once_per_store_state(tmp_path, monkeypatch) -> None:
    """Evaluations.run_progress: None without a store or a run; the run's models stored (not
    its other units), read again only once the store's files changed, seen at the time asked."""
    import datetime as dt

    from sde_core.pipeline.store import ResultsStore, workspace_store_path

    source = Evaluations(fake_ws(tmp_path, "a", "b", "c"), "ws", ResultCache(), FakeSession)
    assert source.run_progress(SETTINGS) is None  # no store yet
    reads: list[int] = []
    real = cascade.read_progress

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cascade, "read_progress", counted)
    with ResultsStore(workspace_store_path(tmp_path)) as store:
        run = store.open_run("ws", SETTINGS.result_key())
        for key in ("a", "behaviour:a", "b"):
            store.put_unit(run.id, key, {"models": [{"name": key}]})
    first = source.run_progress(SETTINGS)
    assert first is not None and first.stored == ("a", "b") and first.total == 3
    assert first.partial and not first.stalled
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    seen = source.run_progress(SETTINGS, now=later)
    assert seen is not None and seen.now == later and seen.stalled and len(reads) == 1
    with ResultsStore(workspace_store_path(tmp_path)) as store:
        store.put_unit(run.id, "c", {"models": [{"name": "c"}]})
    done = source.run_progress(SETTINGS)
    assert done is not None and done.count == 3 and not done.partial and len(reads) == 2
    assert source.run_progress(SETTINGS.with_overrides(bins=SETTINGS.bins + 1)) is None


def test_the_stored_models_of_a_partial_run_are_never_cached_as_every_model(tmp_path) -> None:
    """A page shows the stored models of a running run with Evaluations.stored of those models:
    their answer is cached for them only, so the whole answer is read once every model is
    stored, not served from the partial read."""
    from helpers.many_models import store_copies as store_demo_results
    from ui_fixtures import demo_workspace

    folder = demo_workspace(tmp_path / "live", 8)
    store_demo_results(folder, {n: n for n in ("original", "retrained", "ft")}, complete=False)
    ws = load_workspace(folder)
    source = Evaluations(ws, content_hash(ws, load_bundle(ws)), ResultCache(), FakeSession)
    settings = ws.defaults
    every = [m.name for m in ws.models]
    progress = source.run_progress(settings)
    assert progress is not None and progress.partial and progress.count == 3
    present = [n for n in every if n in set(progress.stored)]
    part = source.stored(settings, present)
    assert part is not None and list(part.models["name"]) == present
    assert source.cached("evaluation", settings, tuple(every)) is None
    assert source.stored(settings, every) is None
    store_demo_results(folder, {n: n for n in every[3:]}, complete=True)
    whole = source.stored(settings, every)
    assert whole is not None and list(whole.models["name"]) == every
    assert source.cached("evaluation", settings, tuple(every)) is whole
