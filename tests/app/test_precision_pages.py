"""The Compare page's planner and paired differences (method §15), with Streamlit's AppTest on
the tiny workspace."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from sde_core.services.view_state import PageView, decode, encode

APP = Path(__file__).resolve().parents[2] / "app.py"


def test_the_precision_target_travels_in_links():
    assert encode(PageView(settings={"precision": 0.1})) == {"W": "0.1"}
    view, problems = decode("compare", {"W": "0.05"})
    assert dict(view.settings) == {"precision": 0.05} and not problems
    view, problems = decode("compare", {"W": "0.7"})
    assert not view.settings and "W=`0.7` is not a number 0 to 0.5" in problems[0]


def test_compare_plans_before_it_runs_and_shows_paired_differences(ws):
    at = AppTest.from_file(str(APP), default_timeout=180)
    at.switch_page("pages/compare.py")
    at.query_params.update({"W": "0.3", "pair": "FT,retrained"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["s_precision"] == pytest.approx(0.3)
    assert any("a pilot of" in i.value for i in at.info)
    assert not [d for d in at.dataframe if "difference" in d.value.columns]  # nothing ran yet
    at.button(key="c_plan_output").click().run()
    assert not at.exception, [e.value for e in at.exception]
    plan = next(i.value for i in at.info if "on this machine" in i.value)
    assert "draws" in plan and "targets" in plan
    at.button(key="c_go_output").click().run()
    assert not at.exception, [e.value for e in at.exception]
    paired = next(d.value for d in at.dataframe if "difference" in d.value.columns)
    assert list(paired["rate"]) == ["OTR", "calibrated OTR", "over-unlearned share", "F1"]
    assert list(paired["unit"]) == ["points"] * 3 + ["F1 units"]  # one unit per row, named
    (forecasts,) = at.session_state["c_forecast"].values()
    assert {f.model for f in forecasts} == {"original", "retrained", "FT", "random"}
    assert all(f.draws >= f.pilot_draws for f in forecasts)
    assert "W=0.3" in next(c.value for c in at.code if "?" in c.value)
