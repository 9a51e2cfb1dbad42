"""The Report page while an evaluation elsewhere is storing the models (issue 39): it answers
for the stored models, labelled provisional, with the run's progress, starts no evaluation of
its own and writes no report file; once every model is stored, a refresh gives the report.

Two workspaces: a copy of the mnist1d demo with 8 models whose results store holds 5 of them in
a running run, and one of 16 models (above the page's many-model threshold) holding 10; this
process stands in for the evaluation adding the rest (its driver's marker)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.many_models import evaluation_running, many_model_workspace, store_copies
from streamlit.testing.v1 import AppTest
from ui_fixtures import demo_workspace, page_on

FIRST = ["original", "retrained", "ft", "ga", "rl"]
REST = ["salun", "l1_sparse", "unroll"]
#: An answer box's first line: ``**name** (role) — **label**``.
ANSWER = re.compile(r"^\*\*(?P<name>[^*]+)\*\* \((?P<role>\w+)\) — \*\*")
#: The report files' download buttons.
FILES = {"r_html", "r_json"}

pytestmark = pytest.mark.slow  # the Report page of 8 and 16 models, several AppTest runs


def answered(at: AppTest) -> list[str]:
    """The models of the page's answer boxes (their names as plain text: markdown-escaped)."""
    found = (ANSWER.match(md.value) for md in at.markdown)
    return sorted(m["name"].replace("\\_", "_") for m in found if m)


def downloads(at: AppTest) -> set[str]:
    return {b.key for b in at.get("download_button")}


def banner(at: AppTest) -> str:
    found = [i.value for i in at.info if "Provisional" in i.value]
    assert len(found) == 1, [i.value for i in at.info]
    return found[0]


@pytest.fixture(autouse=True)
def _no_chromium(monkeypatch: pytest.MonkeyPatch) -> None:
    from sde_core.viz.figures import export

    monkeypatch.setattr(export, "_kaleido_installed", lambda: False)  # no Chromium started


def test_the_report_answers_for_the_stored_models_and_writes_files_once_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = demo_workspace(tmp_path / "live", 8)
    store_copies(live, {n: n for n in FIRST}, complete=False)
    with evaluation_running(live), page_on(live, "pages/report.py", monkeypatch) as at:
        assert "5 of 8 models" in banner(at)
        assert not at.get("progress"), "the page started an evaluation of its own"
        assert answered(at) == sorted(FIRST)
        line = next(m.value for m in at.markdown if m.value.startswith("Verdicts of"))
        assert line.startswith("Verdicts of the 5 stored so far of 8 models")
        assert sum(int(n) for n in re.findall(r"\*\*(\d+)\*\*", line)) == 5
        assert not FILES & downloads(at), "a report file of an unfinished run"
        assert any("written once every model is stored" in i.value for i in at.info)
        assert [b.label for b in at.button if b.key.startswith("r_live_")] == [
            "Refresh", "Evaluate the rest here",
        ]  # fmt: skip

        store_copies(live, {n: n for n in REST}, complete=True)
        at.button(key="r_live_refresh_output").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert not [i.value for i in at.info if "Provisional" in i.value]
        assert not at.get("progress")
        assert answered(at) == sorted(FIRST + REST)
        assert downloads(at) >= FILES


def test_many_models_arriving_are_counted_and_paged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    many = many_model_workspace(tmp_path / "many", 14, stored=10)  # 16 models, 10 stored
    with evaluation_running(many), page_on(many, "pages/report.py", monkeypatch) as at:
        assert "10 of 16 models" in banner(at)
        assert not at.get("progress")
        line = next(m.value for m in at.markdown if m.value.startswith("Verdicts of"))
        assert line.startswith("Verdicts of the 10 stored so far of 16 models")
        assert sum(int(n) for n in re.findall(r"\*\*(\d+)\*\*", line)) == 10
        assert any("16 models: filter, group, page" in s.value for s in at.subheader)
        shown = answered(at)
        assert shown and {"original", "retrained"} <= set(shown)
        assert not FILES & downloads(at)
