"""The Compare page while an evaluation elsewhere is storing the models: a copy of the mnist1d
demo with 8 models whose results store holds 5 of them in a running run (copies of the demo's
stored models, written through the store API as an evaluation writes them). The page shows
those 5 as provisional and starts no evaluation of its own; once the other 3 are stored, a
rerun shows all 8 as usual. A partial run is shown so only while a driver's marker says an
evaluation is adding the models (sde_core.pipeline.run_drivers); a killed driver's marker makes
it a stopped evaluation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.many_models import evaluation_running, evaluation_stopped, store_copies
from ui_fixtures import demo_workspace, page_on

FIRST = ["original", "retrained", "ft", "ga", "rl"]
REST = ["salun", "l1_sparse", "unroll"]


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """8 models, 5 stored in a running run."""
    folder = demo_workspace(tmp_path / "live", 8)
    store_copies(folder, {n: n for n in FIRST}, complete=False)
    return folder


@pytest.fixture
def live(stored: Path) -> Iterator[Path]:
    """... and this process standing in for the evaluation adding the rest (its marker)."""
    with evaluation_running(stored):
        yield stored


def comparison(at) -> list[str]:
    """The model names of the comparison table."""
    found = next(d.value for d in at.dataframe if "name" in d.value.columns)
    return sorted(found["name"])


@pytest.mark.slow  # the Compare page of 8 models, twice: ~15 s on 2 busy cores
def test_compare_shows_the_stored_models_of_a_running_evaluation(live, monkeypatch) -> None:
    with page_on(live, "pages/compare.py", monkeypatch) as at:
        banner = [i.value for i in at.info if "Provisional" in i.value]
        assert banner and "5 of 8 models" in banner[0], [i.value for i in at.info]
        assert "a running evaluation is adding the rest" in banner[0]
        assert not at.get("progress"), "the page started an evaluation of its own"
        assert comparison(at) == sorted(FIRST)
        assert any("5 of 8 models stored by a running evaluation" in c.value for c in at.caption)
        assert [b.label for b in at.button if b.key.startswith("c_live_")] == [
            "Refresh", "Evaluate the rest here",
        ]  # fmt: skip

        store_copies(live, {n: n for n in REST}, complete=True)
        at.button(key="c_live_refresh_output").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert not [i.value for i in at.info if "Provisional" in i.value]
        assert not at.get("progress")
        assert comparison(at) == sorted(FIRST + REST)


@pytest.mark.slow  # the Compare page of 5 stored models: ~5 s on 2 busy cores
def test_a_stalled_evaluation_is_said_to_have_stopped(live, monkeypatch) -> None:
    """A run with no new model for longer than the stall rule allows (here: any time at all)
    is said to have probably stopped, with its stored models and the offer to evaluate the
    rest; the page still starts nothing by itself."""
    from sde_core.pipeline import run_progress

    monkeypatch.setattr(run_progress, "STALL_SECONDS", -1.0)
    monkeypatch.setattr(run_progress, "STALL_PACES", 0.0)
    with page_on(live, "pages/compare.py", monkeypatch) as at:
        warning = [w.value for w in at.warning if "Provisional" in w.value]
        assert warning and "5 of 8 models" in warning[0] and "may have stopped" in warning[0]
        assert "Rerunning its command resumes it" in warning[0]
        assert not at.get("progress")
        assert comparison(at) == sorted(FIRST)
        assert at.button(key="c_live_here_output").label == "Evaluate the rest here"


@pytest.mark.slow  # the Compare page of 5 stored models: ~5 s on 2 busy cores
def test_a_killed_evaluation_is_said_to_no_longer_run(stored, monkeypatch) -> None:
    """A driver killed halfway leaves its marker behind; its process no longer runs, so the
    page says the evaluation stopped at once (not after the stall rule's minutes), with the
    stored models and the offer to evaluate the rest; it starts nothing by itself."""
    evaluation_stopped(stored)
    with page_on(stored, "pages/compare.py", monkeypatch) as at:
        warning = [w.value for w in at.warning if "Provisional" in w.value]
        assert warning and "5 of 8 models" in warning[0], [w.value for w in at.warning]
        assert "no longer runs" in warning[0] and "Rerunning its command resumes it" in warning[0]
        assert not at.get("progress")
        assert comparison(at) == sorted(FIRST)
