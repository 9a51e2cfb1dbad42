"""The completions view of a language model's target texts (Explore's drill-down, method §18),
run by AppTest on a written two-model workspace of TOFU-style records: off until its toggle is
on (it runs each model), then the library's table, each model's completion and match share."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytest.importorskip("transformers")

SCRIPT = """
import os
from pages._samples import show_completions
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace_load import load_workspace

ws = load_workspace(os.environ["SDE_TEST_LM_WS"])
show_completions(ws, EvalSettings(layer="layer.0"), "original", 0, [4, 0, 2])
"""


def test_completions_are_shown_behind_their_toggle(tmp_path: Path, monkeypatch) -> None:
    from llm_artefacts import qa_workspace

    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.pipeline.settings import EvalSettings
    from sde_core.services.samples import lm_completions

    ws = qa_workspace(tmp_path / "lm")
    monkeypatch.setenv("SDE_TEST_LM_WS", str(ws.root))
    monkeypatch.setenv("SDE_DATA_ROOTS", str(tmp_path))
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # `pages` imports from the checkout
    at = AppTest.from_string(SCRIPT, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.dataframe, "nothing is run before the toggle is on"
    at.toggle(key="x_completions").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = at.dataframe[0].value
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    expected = lm_completions(ws, bundle, EvalSettings(layer="layer.0"),
                              ["original", "retrained"], [4, 0, 2])  # fmt: skip
    assert expected is not None
    assert list(shown.columns) == list(expected.columns)
    assert list(shown["completion · retrained"]) == list(expected["completion · retrained"])
    caption = " ".join(c.value for c in at.caption)
    share = expected["match · original"].mean()
    exact = int((expected["match · original"] == 1).sum())
    assert f"original {share:.0%} ({exact} of 3 exact)" in caption
    assert "written back at their own position" in caption
