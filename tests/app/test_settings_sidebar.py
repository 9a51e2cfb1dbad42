"""The sidebar's settings come from the settings table (sde_core/pipeline/settings.py): every
setting a researcher may change has a widget with its label, grouped under its heading in
"More settings", and what is changed there goes into the evaluation and into the link."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Checkbox, NumberInput, Selectbox
from ui_fixtures import app_test, warm_server

from sde_core.pipeline.settings import SETTINGS
from sde_core.pipeline.workspace_load import load_workspace

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app.py"
TIMEOUT = 120
#: the sidebar's widgets of the table (the layer and σ have their own widgets)
SIDEBAR = [s for s in SETTINGS if s.widget in ("number", "choice", "toggle")]


@pytest.fixture(scope="module", autouse=True)
def _warm_server() -> Iterator[None]:
    with warm_server():
        yield


def answer_page(**params: str) -> AppTest:
    """The Answer page (it reads the results store only: a changed setting computes nothing)."""
    at = app_test(APP, TIMEOUT)
    at.switch_page("pages/answer.py")
    at.query_params.update(params)
    return at.run()


def widgets(at: AppTest) -> dict[str, NumberInput | Selectbox | Checkbox]:
    """Sidebar widget key -> the widget, of every kind the table declares."""
    return {w.key: w for w in [*at.number_input, *at.selectbox, *at.checkbox] if w.key}


def test_every_setting_a_researcher_may_change_has_a_labelled_widget(ws):
    # only the machine's device stays off the dashboard (workspace.toml and the CLI set it)
    assert {s.name for s in SETTINGS if s.widget == "none"} == {"device"}
    at = answer_page()
    assert not at.exception, [e.value for e in at.exception]
    shown = widgets(at)
    kinds = {"number": NumberInput, "choice": Selectbox, "toggle": Checkbox}
    defaults = load_workspace(ws).defaults
    for entry in SIDEBAR:
        widget = shown[f"w_s_{entry.name}"]
        assert isinstance(widget, kinds[entry.widget]), entry.name
        assert entry.widget_label and widget.label == entry.widget_label
        if isinstance(widget, Selectbox):
            assert list(widget.options) == list(entry.choices)
        # the workspace's defaults are what the widgets start at
        if entry.name in ("estimator", "pool", "alpha", "null_pairs"):
            assert widget.value == getattr(defaults, entry.name), entry.name
    for key in ("w_s_alpha", "w_s_alpha_calibrated", "w_s_pilot_draws", "w_s_max_draws",
                "w_s_null_pairs", "w_s_baseline_targets", "w_s_estimator", "w_s_pool",
                "w_s_bins", "w_s_panel_size", "w_s_draws", "w_s_precision",
                "w_s_targets", "w_s_splits", "w_s_seed", "w_s_subset_size"):  # fmt: skip
        assert key in shown, key


def test_more_settings_groups_them_under_the_tables_headings(ws):
    at = answer_page()
    more = next(e for e in at.sidebar.expander if e.label == "More settings")
    headings = [m.value for m in more.markdown]
    groups = list(dict.fromkeys(s.group for s in SIDEBAR if s.group))
    assert headings == [f"**{g}**" for g in groups]
    assert {"Precision design", "Decision", "Calibrated test"} <= set(groups)
    inside = {w.key for w in [*more.number_input, *more.selectbox, *more.checkbox]}
    assert inside == {f"w_s_{s.name}" for s in SIDEBAR if s.group}


def test_a_changed_setting_reaches_the_link_and_a_link_sets_it(ws):
    at = answer_page()
    at.selectbox(key="w_s_estimator").set_value("unbiased").run()
    at.checkbox(key="w_s_pool").uncheck().run()
    at.number_input(key="w_s_alpha").set_value(0.02).run()
    at.number_input(key="w_s_null_pairs").set_value(12).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    query = dict(at.query_params)
    assert (query["estimator"], query["pool"], query["alpha"], query["nulls"]) == (
        "unbiased", "0", "0.02", "12"
    )  # fmt: skip
    assert at.session_state["s_alpha"] == 0.02 and at.session_state["s_pool"] is False

    opened = answer_page(estimator="unbiased", pool="0", alpha="0.02", nulls="12")
    assert not opened.exception
    assert opened.selectbox(key="w_s_estimator").value == "unbiased"
    assert opened.checkbox(key="w_s_pool").value is False
    assert opened.number_input(key="w_s_alpha").value == 0.02
    assert opened.number_input(key="w_s_null_pairs").value == 12


def test_an_invalid_combination_is_an_inline_error(ws):
    at = answer_page()
    # R = 3 gives a smallest calibrated p of 1/4, above α_cal = 0.05: no verdict is possible
    at.number_input(key="w_s_panel_size").set_value(3).run()
    assert not at.exception
    assert any("smallest calibrated p-value is 1/4" in e.value for e in at.error), [
        e.value for e in at.error
    ]
