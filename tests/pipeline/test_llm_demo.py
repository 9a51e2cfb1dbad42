"""The language-model demo (issue 26): its generated corpus, its builder on a tiny recipe, the
loss-based membership-inference AUC against scikit-learn, and the dashboard on the shipped
``assets/demo-facts`` (texts where images would be)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from sde_core.cli import main
from sde_core.inputs.hf_models import HFHiddenStates, load_hf_folder
from sde_core.pipeline.llm_demo import (
    FactsRecipe,
    build_facts_demo,
    default_facts_folder,
    facts_corpus,
    loss_mia_auc,
)
from sde_core.pipeline.workspace_checks import check_workspace
from sde_core.pipeline.workspace_load import load_workspace

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("transformers")  # the optional [llm] extra


def test_loss_mia_auc_is_the_roc_auc_of_low_loss_as_member() -> None:
    rng = np.random.default_rng(0)
    members, outside = rng.normal(0.5, 1, 40), rng.normal(1.0, 1, 30)
    outside[:5] = members[:5]  # ties count half
    want = roc_auc_score(np.r_[np.ones(40), np.zeros(30)], -np.r_[members, outside])
    assert loss_mia_auc(members, outside) == pytest.approx(want, abs=1e-12)
    assert loss_mia_auc(np.zeros(3), np.ones(4)) == 1.0


def test_facts_corpus_is_seeded_and_held_out_words_occur_in_training() -> None:
    records = facts_corpus(30, 20, seed=3)
    assert records == facts_corpus(30, 20, seed=3) != facts_corpus(30, 20, seed=4)
    assert len(records) == 250 and {r["author"] for r in records} == set(range(50))
    names = {r["answer"].split(" was ")[0] for r in records if "born in " in r["answer"]}
    assert len(names) == 50  # one birthplace fact per author, distinct names
    words = {
        split: {w for r in records if (r["author"] < 30) == (split == "train")
                for w in (r["question"] + " " + r["answer"]).replace("'", " ").split()}
        for split in ("train", "test")
    }  # fmt: skip
    assert words["test"] <= words["train"]


@pytest.mark.slow  # builds a demo
def test_build_on_a_tiny_recipe(tmp_path: Path) -> None:
    recipe = replace(
        FactsRecipe(train_authors=12, test_authors=8),
        train={"lr": 3e-3, "epochs": 2, "batch_size": 16, "seed": 0},
        method_params={"llm_ga": {"lr": 1e-4, "epochs": 1}},
    )
    report = build_facts_demo(tmp_path / "facts", recipe, store=False)
    ws = load_workspace(tmp_path / "facts")
    assert [m.name for m in ws.models] == ["original", "retrained", "llm_ga", "random"]
    assert all(m.arch == "hf" and ws.path(m.checkpoint).is_dir() for m in ws.models)
    assert not [p for p in check_workspace(ws, check_data=True) if p.severity == "error"]
    assert np.load(ws.path(ws.forget_indices)).size == 5 * round(0.2 * 12)
    metrics = json.loads((tmp_path / "facts" / "metrics.json").read_text())
    assert set(metrics) == {"original", "retrained", "llm_ga", "random"} == set(report.metrics)
    assert ws.model("llm_ga").hyperparameters["lr"] == 1e-4
    # the command line runs a language-model method on the workspace and adds a model folder
    argv = ["unlearn", str(tmp_path / "facts"), "--method", "llm_gd", "--name", "gd_cli",
            "--param", "lr=1e-3", "--param", "epochs=1"]  # fmt: skip
    assert main(argv) == 0
    entry = load_workspace(tmp_path / "facts").model("gd_cli")
    assert entry.arch == "hf" and entry.method == "llm_gd"
    assert isinstance(load_hf_folder(ws.path(entry.checkpoint)), HFHiddenStates)


@pytest.mark.slow  # > 10 s on 2 cores (make test-slow, CI)
@pytest.mark.skipif(
    not (default_facts_folder() / "results.sqlite").is_file(), reason="demo not built"
)
def test_dashboard_on_the_shipped_facts_demo(tmp_path: Path, monkeypatch) -> None:
    from streamlit.testing.v1 import AppTest

    folder = tmp_path / "demo-facts"
    skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
    shutil.copytree(default_facts_folder(), folder, ignore=skip)
    monkeypatch.setenv("SDE_WORKSPACE", str(folder))
    monkeypatch.setenv("SDE_DATA_ROOTS", str(folder.parent))
    links = {"explore": {"model": "llm_gd", "target": "3"}, "compare": {}, "report": {}}
    for page, params in links.items():  # Explore opened by a deep link to one target subset
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.switch_page(f"pages/{page}.py")
        at.query_params.update(params)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if page == "explore":
            assert any("Target subset 3" in m.value for m in at.markdown)
            texts = [d.value for d in at.dataframe if "text" in d.value.columns]
            assert texts and texts[0]["text"].str.startswith("Question: ").all()
    assert os.environ["SDE_WORKSPACE"] == str(folder)


@pytest.mark.skipif(
    not (default_facts_folder() / "results.sqlite").is_file(), reason="demo not built"
)
def test_shipped_facts_store_answers_its_defaults_without_recomputing(tmp_path: Path) -> None:
    """The shipped store is current (rebuild it with `demo build --dataset facts` when not)."""
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore

    folder = tmp_path / "facts"
    skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
    shutil.copytree(default_facts_folder(), folder, ignore=skip)
    ws = load_workspace(folder)
    with ResultsStore(folder / "results.sqlite") as store:
        result = evaluate_workspace(ws, ws.defaults, store=store)
    names = ["original", "retrained", "llm_ga", "llm_gd", "llm_npo", "random"]
    assert result.cached_models == names
    models = result.models.set_index("name")
    assert models.loc["original", "otr"] <= 0.2 and models.loc["retrained", "otr"] >= 0.8
