"""A family's verdict note (the family seam's ``verdict_note``) reaches every verdict text of
its models: the CLI's JSON and lines, the report's JSON and first page, the answer's lines;
a family without one changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.results import synthetic_result

from sde_core.cli.evaluate import json_document, verdict_lines
from sde_core.families.causal_lm import CAUSAL_LM
from sde_core.families.registry import FAMILIES
from sde_core.pipeline.criterion import Criterion
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.services.answer import verdict_notes
from sde_core.viz.answer import workspace_answer
from sde_core.viz.report.document import report_document
from sde_core.viz.report.html_page import answer_html

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "SDE on this family disagrees with behaviour in our measurements: "


@pytest.fixture(scope="module")
def result() -> Any:
    return synthetic_result()


def test_only_the_language_model_family_carries_a_note() -> None:
    assert CAUSAL_LM.verdict_note.startswith(PREFIX)
    assert all(f.verdict_note == "" for f in FAMILIES if f is not CAUSAL_LM)
    facts = load_workspace(ROOT / "assets" / "demo-facts", validate=False)
    notes = verdict_notes(facts, facts.defaults.layer)
    assert set(notes) == {m.name for m in facts.models}
    assert set(notes.values()) == {CAUSAL_LM.verdict_note}
    vision = load_workspace(ROOT / "assets" / "demo", validate=False)
    assert set(verdict_notes(vision, vision.defaults.layer).values()) == {""}


def test_every_verdict_text_carries_the_note(result: Any) -> None:
    names = [str(n) for n in result.models["name"]]
    notes = dict.fromkeys(names, CAUSAL_LM.verdict_note)
    doc = json_document(result, notes)
    assert all(doc["models"][n]["verdict_sentence"].endswith(CAUSAL_LM.verdict_note) for n in names)
    assert all(line.endswith(CAUSAL_LM.verdict_note) for line in verdict_lines(result, notes))
    manifest = {"models": {n: {"arch": "hf"} for n in names}}
    report = report_document(result, manifest)
    for n in names:
        assert CAUSAL_LM.verdict_note in report["models"][n]["explanation"]
        assert report["models"][n]["summary"]["sentence"].endswith(CAUSAL_LM.verdict_note)
        assert report["models"][n]["summary"]["caveat"] == CAUSAL_LM.verdict_note
    answer = workspace_answer(result.models, result.draws, Criterion(), 20, notes=notes)
    assert answer.lines and all(a.sentence.endswith(CAUSAL_LM.verdict_note) for a in answer.lines)
    page = answer_html(result, Criterion(), manifest)
    assert "SDE on this family disagrees with behaviour" in page


def test_a_family_without_a_note_changes_nothing(result: Any) -> None:
    names = [str(n) for n in result.models["name"]]
    plain = json_document(result)
    noted = json_document(result, dict.fromkeys(names, ""))
    assert plain == noted
    report = report_document(result, {"models": {n: {"arch": None} for n in names}})
    assert report["models"] == report_document(result)["models"]
    assert all(PREFIX not in report["models"][n]["explanation"] for n in names)
