"""RunProgress: a stored run's models, pace, time left and stall, read from a real store whose
units were written by ``put_unit`` at controlled times."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from sde_core.errors import StoreError
from sde_core.pipeline import store as store_module
from sde_core.pipeline.run_progress import (
    STALL_PACES,
    STALL_SECONDS,
    RunProgress,
    duration_text,
    read_progress,
)
from sde_core.pipeline.store import ResultsStore

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
MODELS = [f"m{i}" for i in range(8)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultsStore]:
    with ResultsStore(tmp_path / "results.sqlite") as opened:
        yield opened


def put_at(monkeypatch: pytest.MonkeyPatch, store: ResultsStore, run_id: int, key: str,
           seconds: float) -> None:  # fmt: skip
    """``put_unit`` of a one-row unit whose ``finished`` time is ``T0 + seconds``."""
    stamp = (T0 + dt.timedelta(seconds=seconds)).isoformat(timespec="seconds")
    monkeypatch.setattr(store_module, "_now", lambda: stamp)
    assert store.put_unit(run_id, key, {"models": [{"name": key}]})


def progress(store: ResultsStore, run_id: int, seconds: float) -> RunProgress:
    """The run's progress over MODELS, seen at ``T0 + seconds``."""
    return read_progress(store, store.get_run(run_id), MODELS, T0 + dt.timedelta(seconds=seconds))


def test_pace_and_time_left_match_a_hand_computation(store, monkeypatch) -> None:
    run = store.open_run("ws", {"layer": "output"})
    for key, at in (("m0", 10), ("m1", 22), ("m2", 31), ("behaviour:m0", 33), ("m3", 40)):
        put_at(monkeypatch, store, run.id, key, at)
    seen = progress(store, run.id, 48)
    assert seen.stored == ("m0", "m1", "m2", "m3")  # the behaviour unit is no model
    assert (seen.count, seen.total, seen.missing) == (4, 8, 4)
    assert seen.first == T0 + dt.timedelta(seconds=10)
    assert seen.last == T0 + dt.timedelta(seconds=40)
    assert seen.pace == pytest.approx((40 - 10) / 3)  # 10 s a model
    assert seen.since_last == pytest.approx(8)
    assert seen.seconds_left == pytest.approx(4 * 10 - 8)  # 32 s
    assert seen.running and seen.partial and not seen.stalled
    assert seen.stall_after == max(STALL_SECONDS, STALL_PACES * 10)
    assert seen.sentence() == (
        "4 of 8 models stored by a running evaluation; the last 8 s ago; about 32 s left at "
        "10 s a model"
    )
    later = seen.at(T0 + dt.timedelta(seconds=100))  # the same stored state, seen later
    assert later.seconds_left == 0.0 and later.since_last == pytest.approx(60)


def test_a_run_with_no_model_for_longer_than_its_pace_allows_is_stalled(store, monkeypatch):
    run = store.open_run("ws", {"layer": "output"})
    for i, at in enumerate((0, 30, 60)):  # 30 s a model: stalled after max(60, 150) s
        put_at(monkeypatch, store, run.id, MODELS[i], at)
    assert not progress(store, run.id, 60 + 150).stalled
    stalled = progress(store, run.id, 60 + 151)
    assert stalled.stalled and stalled.partial
    assert stalled.sentence() == (
        "3 of 8 models stored by a running evaluation; the last 3 min ago; none for more than "
        "2 min: the evaluation may have stopped (rerunning its command resumes it)"
    )
    fast = store.open_run("ws", {"layer": "fast"})
    for i, at in enumerate((0, 1, 2)):  # 1 s a model: the floor of 60 s applies
        put_at(monkeypatch, store, fast.id, MODELS[i], at)
    assert not progress(store, fast.id, 2 + STALL_SECONDS).stalled
    assert progress(store, fast.id, 3 + STALL_SECONDS).stalled


def test_one_model_has_no_pace_and_a_complete_run_never_stalls(store, monkeypatch) -> None:
    run = store.open_run("ws", {"layer": "output"})
    put_at(monkeypatch, store, run.id, "m0", 0)
    one = progress(store, run.id, 20)
    assert one.pace is None and one.seconds_left is None
    assert one.sentence().endswith("the time left is estimated once two models are stored")
    assert not progress(store, run.id, STALL_PACES * STALL_SECONDS).stalled
    assert progress(store, run.id, STALL_PACES * STALL_SECONDS + 1).stalled
    for i, key in enumerate(MODELS[1:], start=1):
        put_at(monkeypatch, store, run.id, key, 10 * i)
    store.mark_complete(run.id)
    done = progress(store, run.id, 10_000)
    assert done.count == done.total == 8 and done.seconds_left == 0.0
    assert not done.running and not done.partial and not done.stalled
    assert done.sentence() == "8 of 8 models stored by a finished evaluation; the last 2.8 h ago"


def test_an_empty_run_and_the_cheap_read_checks_only_the_run_record(store) -> None:
    run = store.open_run("ws", {"layer": "output"})
    empty = read_progress(store, run, MODELS, T0)
    assert empty.count == 0 and empty.first is None and empty.since_last is None
    assert not empty.partial and not empty.stalled
    assert store.unit_times(run.id) == {}
    with pytest.raises(StoreError, match="unknown run id"):
        store.unit_times(run.id + 1)


def test_duration_text() -> None:
    assert [duration_text(s) for s in (0.2, 8, 89, 90, 5399, 5400)] == [
        "1 s", "8 s", "89 s", "2 min", "90 min", "1.5 h",
    ]  # fmt: skip
