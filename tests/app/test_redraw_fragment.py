"""The redraw-only settings (bins, α) on Explore (issue 33): drawn by the page's fragment, a
change recomputes no H (the stage cache answers it) and the chart and decisions change to the
library's.

AppTest reruns the whole script on every change (it has no fragment reruns); that a change of
these widgets reruns the fragment only is checked in a real browser
(``tests/app/test_browser_answers.py``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from ui_fixtures import app_test, warm_server

from sde_core.pipeline.evaluation import stages
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace_load import load_workspace

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _warm_server() -> Iterator[None]:
    with warm_server():
        yield


def _explore(**params: str):
    at = app_test(ROOT / "app.py", 120)
    at.switch_page("pages/explore.py")
    at.query_params.update(params)
    return at.run()


def _bin_widths(at) -> set[float]:
    """The bin widths of the histogram of H (its traces share one binning)."""
    widths = set()
    for chart in at.get("plotly_chart"):
        for trace in json.loads(chart.proto.spec)["data"]:
            if trace.get("type") == "histogram" and str(trace.get("name", "")).startswith("S_IT"):
                widths.add(round(float(trace["xbins"]["size"]), 12))
    return widths


def _decisions(at):
    return next(t.value for t in at.dataframe if "D(S, S_IT)" in t.value.columns)


def test_bins_and_alpha_are_drawn_under_their_heading_in_more_settings(ws):
    at = _explore(model="FT", seed="31")
    assert not at.exception, [e.value for e in at.exception]
    more = next(e for e in at.sidebar.expander if e.label == "More settings")
    keys = [w.key for w in more.number_input]
    assert "w_s_bins" in keys and "w_s_alpha" in keys
    assert "**Decision**" in [m.value for m in more.markdown]
    assert any("no H is recomputed" in c.value for c in more.caption)


def test_a_bins_change_recomputes_no_h_and_the_chart_shows_the_new_bins(ws, monkeypatch):
    at = _explore(model="FT", seed="31")
    assert not at.exception, [e.value for e in at.exception]
    before_widths = _bin_widths(at)
    before = _decisions(at)
    assert len(before_widths) == 1

    calls: list[int] = []
    real = stages.compute_h

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("sde_core.pipeline.evaluation.run.compute_h", counted)
    at.number_input(key="w_s_bins").set_value(7).run()
    assert not at.exception, [e.value for e in at.exception]
    assert calls == [], "H was recomputed for a bins change"
    assert dict(at.query_params)["bins"] == "7"
    after_widths = _bin_widths(at)
    assert len(after_widths) == 1 and after_widths != before_widths
    after = _decisions(at)
    # the decisions are the library's at bins = 7 (an independent run: no store, no cache)
    defaults = dataclasses.asdict(load_workspace(ws).defaults)
    settings = EvalSettings.from_mapping(defaults).with_overrides(seed=31, bins=7)
    lib = evaluate_workspace(ws, settings, models=["FT"]).subsets
    lib = lib[lib["kind"] == "target"].sort_values("index")
    shown = after.sort_values("target")
    np.testing.assert_allclose(shown["D(S, S_IT)"].to_numpy(float), lib["d_it"].to_numpy(float))
    np.testing.assert_allclose(shown["D(S, S_OOT)"].to_numpy(float), lib["d_oot"].to_numpy(float))
    old_d = before.sort_values("target")["D(S, S_IT)"].to_numpy(float)
    assert not np.allclose(old_d, shown["D(S, S_IT)"].to_numpy(float))

    at.number_input(key="w_s_alpha").set_value(0.05).run()  # α: also no H
    assert not at.exception, [e.value for e in at.exception]
    assert calls == [], "H was recomputed for an α change"
    assert dict(at.query_params)["alpha"] == "0.05"
