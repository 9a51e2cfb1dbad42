"""The answer page (the landing view, ``/``): it reads the results store only — without the
stored results it says so and offers Compare and Explore; with them every audited model gets
one line judged by the workspace's criterion, with the scope box. AppTest through app.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_fixtures import app_test, warm_server

from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace_load import load_workspace

APP = Path(__file__).resolve().parents[2] / "app.py"


@pytest.fixture(scope="module", autouse=True)
def _warm_server() -> Iterator[None]:
    with warm_server():
        yield


@pytest.fixture
def copy(ws: Path, tmp_path: Path) -> Path:
    """A copy of the tiny workspace without its results store (inside SDE_DATA_ROOTS)."""
    folder = ws.parent / f"answer-{tmp_path.name}"
    shutil.copytree(ws, folder, ignore=shutil.ignore_patterns("*.sqlite*"))
    return folder


def run(folder: Path):
    at = app_test(APP, 180)
    at.query_params.update({"ws": str(folder)})
    return at.run()


def test_the_landing_page_computes_nothing_and_says_so(copy, monkeypatch):
    def no_evaluation(*args, **kwargs):
        raise AssertionError("the answer page evaluated")

    monkeypatch.setattr("sde_core.services.cascade.evaluate_workspace", no_evaluation)
    monkeypatch.setattr("sde_core.services.cascade.Evaluations.session", no_evaluation)
    at = run(copy)
    assert not at.exception, [e.value for e in at.exception]
    assert any(m.value == "# The answer" or "The answer" in m.value for m in at.title)
    assert any("computes nothing" in i.value for i in at.info)
    assert any("Criterion:" in m.value and "calibrated OTR within 0.1" in m.value
               for m in at.markdown)  # fmt: skip


def test_every_audited_model_gets_one_line_from_the_store(copy):
    ws = load_workspace(copy)
    with ResultsStore(workspace_store_path(copy)) as store:
        evaluate_workspace(ws, ws.defaults, store=store)
    at = run(copy)
    assert not at.exception, [e.value for e in at.exception]
    text = " ".join(m.value for m in at.markdown) + " ".join(w.value for w in at.warning)
    audited = [m.name for m in ws.models if m.role == "unlearned"]
    for name in audited:  # one sentence per audited model, in the criterion's words
        assert any(
            f"{name} counts as forgotten" in text
            or f"{name} is not forgotten" in text
            or f"{name} is undecided" in text
            or f"{name}: conflicting evidence" in text
            or f"{name} went past retraining" in text
            for _ in [0]
        ), name
    assert "original is" not in text, "the yardsticks get no line of their own"
    assert "Scope and limitations" in text and "| Subset size n | 40 |" in text
    captions = " ".join(c.value for c in at.caption)
    assert "vs retrained (paired, 5 draws)" in captions
    assert dict(at.query_params)["ws"] == str(copy)  # the link keeps the folder as sent
