"""The Compare page while an evaluation elsewhere is storing the models: a copy of the mnist1d
demo with 8 models whose results store holds 5 of them in a running run (copies of the demo's
stored models, written through the store API as an evaluation writes them). The page shows
those 5 as provisional and starts no evaluation of its own; once the other 3 are stored, a
rerun shows all 8 as usual."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.many_models import store_copies
from ui_fixtures import demo_workspace, page_on

FIRST = ["original", "retrained", "ft", "ga", "rl"]
REST = ["salun", "l1_sparse", "unroll"]


@pytest.fixture
def live(tmp_path: Path) -> Path:
    folder = demo_workspace(tmp_path / "live", 8)
    store_copies(folder, {n: n for n in FIRST}, complete=False)
    return folder


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
