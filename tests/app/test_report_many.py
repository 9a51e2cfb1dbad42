"""The Report page at many models (issue 39): on a workspace of 16 entries whose results are
written into its results store (:func:`helpers.many_models.many_model_workspace`) it answers
first with every model's verdicts in one line and grouped by method, then one page of models
(answer boxes, verdicts), and builds the report files only when asked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.many_models import many_model_workspace
from streamlit.testing.v1 import AppTest
from ui_fixtures import page_on

import pages._many as many_page

N_COPIES = 14  # + the original and the retrained model: 16 > the page's 12
#: An answer box's first line: ``**name** (role) — **label**``.
ANSWER = re.compile(r"^\*\*(?P<name>[^*]+)\*\* \((?P<role>\w+)\) — \*\*")

pytestmark = pytest.mark.slow  # 16 models on the Report page: several AppTest runs


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return many_model_workspace(tmp_path_factory.mktemp("many") / "ws", N_COPIES)


def answered(at: AppTest) -> list[str]:
    """The models of the page's answer boxes, in page order."""
    return [m["name"] for m in (ANSWER.match(md.value) for md in at.markdown) if m]


def groups(at: AppTest) -> dict[str, int]:
    """The grouped summary: method -> number of models."""
    frame = next(d.value for d in at.dataframe if "conflicting" in d.value.columns)
    return dict(zip(frame["method"], frame["models"], strict=True))


def downloads(at: AppTest) -> set[str]:
    return {b.key for b in at.get("download_button")}


def test_report_answers_grouped_pages_filters_and_builds_files_on_request(many, monkeypatch):
    from sde_core.viz.figures import export

    monkeypatch.setattr(export, "_kaleido_installed", lambda: False)  # no Chromium started
    monkeypatch.setattr(many_page, "PAGE_SIZE", 6)  # 16 models: three pages
    with page_on(many, "pages/report.py", monkeypatch) as at:
        assert any("16 models: filter, group, page" in s.value for s in at.subheader)
        line = next(m.value for m in at.markdown if m.value.startswith("Verdicts of all 16"))
        counts = [int(n) for n in re.findall(r"\*\*(\d+)\*\*", line)]
        assert sum(counts) == 16 and "conflicting evidence" in line
        assert groups(at) == {"ft": 5, "ga": 5, "rl": 4, "retrain": 1, "train": 1}
        first = answered(at)
        assert first == ["ft-s0", "ga-s1", "rl-s2", "ft-s3", "retrained", "original"]
        # the report files, the manifest and the page's full tables are built on request only
        assert not {"r_html", "r_json", "r_zip"} & downloads(at)
        assert {"r_all_csv_models", "r_all_csv_draws"} <= downloads(at)
        assert not any("SHA-256" in d.value.columns for d in at.dataframe)
        assert not at.get("plotly_chart")  # the charts read distributions: on request

        at.number_input(key="r_page").set_value(2).run()
        assert not at.exception, [e.value for e in at.exception]
        second = answered(at)
        assert len(second) <= 6 + 2
        assert {"retrained", "original"} <= set(second)
        assert not (set(second) - {"retrained", "original"}) & set(first)

        at.toggle(key="r_t_files").set_value(True).run()
        assert not at.exception, [e.value for e in at.exception]
        assert {"r_html", "r_json"} <= downloads(at)
        hashes = next(d.value for d in at.dataframe if "SHA-256" in d.value.columns)
        assert sorted(hashes["model"]) == sorted(second)  # this page's models, pinned
        at.toggle(key="r_t_charts").set_value(True).run()
        assert not at.exception, [e.value for e in at.exception]
        assert len(at.get("plotly_chart")) >= 3

        at.number_input(key="r_page").set_value(1).run()
        at.multiselect(key="r_f_methods").set_value(["rl"]).run()
        assert not at.exception, [e.value for e in at.exception]
        assert groups(at) == {"rl": 4}
        assert set(answered(at)) == {"original", "retrained", "rl-s2", "rl-s5", "rl-s8", "rl-s11"}
