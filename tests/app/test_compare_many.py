"""The Compare page at many models: a workspace of 16 entries whose results are written into
its results store through the store API (each a copy of one of the mnist1d demo's stored
models), so the page answers from the store: filters, the grouped summary, one page of models
in the table, and every model in the CSV."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.many_models import evaluation_running, many_model_workspace
from ui_fixtures import page_on

N_COPIES = 14  # + the original and the retrained model: 16 > the page's 12


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return many_model_workspace(tmp_path_factory.mktemp("many") / "ws", N_COPIES)


@pytest.mark.slow  # 16 models on the Compare page: ~11 s on 2 busy cores
def test_compare_pages_filters_and_groups_many_models(many, monkeypatch):
    with page_on(many, "pages/compare.py", monkeypatch) as at:
        assert any("16 models: filter, group, page" in s.value for s in at.subheader)
        groups = next(d.value for d in at.dataframe if "conflicting" in d.value.columns)
        by_method = dict(zip(groups["method"], groups["models"], strict=True))
        assert by_method == {"ft": 5, "ga": 5, "rl": 4, "retrain": 1, "train": 1}
        assert dict(zip(groups["method"], groups["conflicting"], strict=True))["rl"] == 4
        shown = next(d.value for d in at.dataframe if "name" in d.value.columns
                     and "conflicting" not in d.value.columns)  # fmt: skip
        assert len(shown) == 16  # 20 a page: every model on page 1
        at.multiselect(key="c_f_methods").set_value(["rl"]).run()
        assert not at.exception
        shown = next(d.value for d in at.dataframe if "name" in d.value.columns
                     and "conflicting" not in d.value.columns)  # fmt: skip
        assert set(shown["name"]) == {"original", "retrained", "rl-s2", "rl-s5", "rl-s8", "rl-s11"}
        assert not any(t.label.startswith("Verdicts of") and t.value for t in at.toggle)


@pytest.mark.slow  # 13 of 16 models on the Compare page: ~10 s on 2 busy cores
def test_a_running_evaluation_of_many_models_is_read_as_a_summary(tmp_path, monkeypatch):
    """While an evaluation is adding the rest of many models, the page reads the stored ones'
    headline rows first (the summary: every model's table row, filter and group), as for a
    complete run; the distributions are read for the page of models it draws."""
    import sde_core.services.cascade as cascade

    folder = many_model_workspace(tmp_path / "ws", N_COPIES, stored=13)
    reads: list[tuple[int, bool]] = []
    real = cascade.stored_result

    def spy(store, ws_hash, settings, models, classes=None, *, summary=False):
        reads.append((len(models), summary))
        return real(store, ws_hash, settings, models, classes, summary=summary)

    monkeypatch.setattr(cascade, "stored_result", spy)
    with evaluation_running(folder), page_on(folder, "pages/compare.py", monkeypatch) as at:
        banner = [i.value for i in at.info if "Provisional" in i.value]
        assert banner and "13 of 16 models" in banner[0]
        assert reads[0] == (13, True), reads  # first the stored models' summary
        shown = next(d.value for d in at.dataframe if "name" in d.value.columns
                     and "conflicting" not in d.value.columns)  # fmt: skip
        assert len(shown) == 13


@pytest.mark.slow  # 16 models on the Compare page: ~5 s on 2 busy cores
def test_a_page_run_loads_and_hashes_its_workspace_once(many, monkeypatch):
    """At hundreds of models a load parses every entry and a content hash reads every
    checkpoint: a page run does each once (its sidebar, reads, link and fragments share them)."""
    import pages._common as common

    calls = {"load": 0, "hash": 0}
    real_load, real_hash = common.load_workspace, common.content_hash

    def load(path):
        calls["load"] += 1
        return real_load(path)

    def digest(ws, bundle):
        calls["hash"] += 1
        return real_hash(ws, bundle)

    monkeypatch.setattr(common, "load_workspace", load)
    monkeypatch.setattr(common, "content_hash", digest)
    with page_on(many, "pages/compare.py", monkeypatch) as at:
        assert calls == {"load": 1, "hash": 1}, calls
        calls.update(load=0, hash=0)
        at.run()
        assert not at.exception
        assert calls == {"load": 1, "hash": 1}, calls  # again once, for the new run
