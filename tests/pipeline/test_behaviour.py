"""The behaviour cross-check of the families without class scores
(``pipeline/evaluation/behaviour.py``, method §9): the rows against independent references
(SciPy's Welch test, scikit-learn's ROC AUC), the conflict rule of each family on constructed
cases that fire and that do not, and the stage on a real language-model workspace — units added
to a results store written before it, the SDE columns unchanged, the rows read back merged."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from sde_core.pipeline.evaluation.behaviour import (
    TABLE,
    add_behaviour_units,
    behaviour_conflict,
    behaviour_rows,
    row_family,
    stored_behaviour,
    with_behaviour,
    workspace_behaviour,
)
from sde_core.pipeline.evaluation.stages import StageCache
from sde_core.pipeline.evaluation.statistics import summarize
from sde_core.pipeline.settings import EvalSettings


def _lm_scores(rng: np.random.Generator, shift: float, n_f: int = 60, n_te: int = 90) -> dict:
    base_f, base_te = rng.gamma(4, 0.2, n_f), rng.gamma(4, 0.2, n_te)
    f = base_f - shift
    return {
        "loss_f": f, "loss_te": base_te, "zlib_f": f / 30, "zlib_te": base_te / 30,
        "min_k_f": 2 * f, "min_k_te": 2 * base_te, "text_f": f + 1, "text_te": base_te + 1,
        "answer": np.array([1], dtype=np.int8),
    }  # fmt: skip


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, Any]]:
    rng = np.random.default_rng(11)
    retrained = _lm_scores(rng, 0.0)
    # the same texts: the original's losses are the retrained model's, lower on D_f
    original = {k: v.copy() for k, v in retrained.items()}
    for key in ("loss_f", "zlib_f", "min_k_f", "text_f"):
        original[key] = original[key] - (0.3 if key != "zlib_f" else 0.01)
    names = {"retrained": retrained, "original": original}
    return behaviour_rows(
        names, {"retrained": "retrained", "original": "original"},
        dict.fromkeys(names, "causal_lm"), "layer.1",
    )  # fmt: skip


def test_lm_rows_match_scipy_and_sklearn(rows: dict[str, dict[str, Any]]) -> None:
    rng = np.random.default_rng(11)
    s = _lm_scores(rng, 0.0)
    f, te = s["loss_f"] - 0.3, s["loss_te"]
    row = rows["original"]
    t = stats.ttest_ind(f, te, equal_var=False)
    ci = t.confidence_interval(0.95)
    assert row["loss_gap"] == pytest.approx(f.mean() - te.mean())
    assert (row["loss_gap_lo"], row["loss_gap_hi"]) == pytest.approx((ci.low, ci.high))
    labels = np.r_[np.ones(f.size), np.zeros(te.size)]
    assert row["attack_auc"] == pytest.approx(roc_auc_score(labels, -np.r_[f, te]))
    assert row["attack_auc_lo"] < row["attack_auc"] < row["attack_auc_hi"]
    # against the retrained model, on the same texts: the per-text differences are 0.3 on D_f
    # and 0 on D_te, so the difference-in-differences is exactly -0.3 with no spread
    assert row["loss_gap_vs_retrained"] == pytest.approx(-0.3)
    assert row["attack_auc_vs_retrained"] > 0
    assert row["behaviour_measure"].endswith("on its answer (nats per token)")
    assert "attack_auc_vs_retrained" not in rows["retrained"]  # not against itself


def _models_row(name: str, calibrated_otr: float, over: float = 0.0) -> dict[str, Any]:
    identity = {"name": name, "role": "unlearned", "method": "llm_ga", "layer": "layer.1",
                "dim": 16, "sigma": 1.0, "f1_negatives": "test"}  # fmt: skip
    row = summarize(identity, [], EvalSettings(), {})[0].to_row()
    row.update(calibrated_otr=calibrated_otr, over_unlearned_rate=over, otr_lo=float("nan"))
    return row


def test_the_lm_conflict_fires_when_sde_says_forgotten_but_the_attack_still_knows(rows):
    row = {**_models_row("original", 0.8), **rows["original"]}
    said = behaviour_conflict(row, "causal_lm")
    assert said.startswith("SDE says 80% of the targets out-of-training (calibrated)")
    assert "above the retrained model's by" in said and "conflicting evidence" in said
    # the same behaviour, SDE not claiming forgotten: no conflict
    assert (
        behaviour_conflict({**_models_row("original", 0.1), **rows["original"]}, "causal_lm") == ""
    )
    # SDE says forgotten, behaviour like the retrained model's: no conflict
    like = {**rows["original"], "attack_auc_vs_retrained_lo": -0.05}
    assert behaviour_conflict({**_models_row("ga", 0.9), **like}, "causal_lm") == ""


def test_without_a_retrained_model_the_attack_is_judged_against_chance() -> None:
    rng = np.random.default_rng(5)
    s = _lm_scores(rng, 0.4)
    alone = behaviour_rows({"m": s}, {"m": "unlearned"}, {"m": "causal_lm"}, "final")["m"]
    assert alone["attack_auc_lo"] > 0.5 and "attack_auc_vs_retrained" not in alone
    said = behaviour_conflict({**_models_row("m", 0.0, over=0.9), **alone}, "causal_lm")
    assert "over-unlearned" in said and "above 0.5" in said
    flat = behaviour_rows({"m": _lm_scores(rng, 0.0)}, {"m": "x"}, {"m": "causal_lm"}, "final")
    assert behaviour_conflict({**_models_row("m", 0.9), **flat["m"]}, "causal_lm") == ""


def test_the_denoiser_rule_reads_the_evaluated_noise_level() -> None:
    rng = np.random.default_rng(2)
    levels = np.array([0.1, 0.5, 2.0])
    te = rng.gamma(3, 0.01, (3, 80))
    f = rng.gamma(3, 0.01, (3, 50))
    retrained = {"level": levels, "denoise_f": f, "denoise_te": te}
    memorised = {"level": levels, "denoise_f": f - np.array([[0.0], [0.01], [0.0]]),
                 "denoise_te": te}  # fmt: skip
    scores = {"retrained": retrained, "ga": memorised}
    fams = dict.fromkeys(scores, "denoiser")
    roles = {"retrained": "retrained", "ga": "unlearned"}
    at_half = behaviour_rows(scores, roles, fams, "denoised@0.5")["ga"]
    assert at_half["loss_gap_vs_retrained"] == pytest.approx(-0.01)
    assert at_half["behaviour_measure"].startswith("denoising loss per image at σ_t = 0.5")
    assert {"loss_gap@0.1", "loss_gap@2_hi"} <= set(at_half)
    said = behaviour_conflict({**_models_row("ga", 0.9), **at_half}, "denoiser")
    assert "denoises" not in said and "below the retrained model's" in said
    at_two = behaviour_rows(scores, roles, fams, "denoised@2")["ga"]
    assert behaviour_conflict({**_models_row("ga", 0.9), **at_two}, "denoiser") == ""


def test_with_behaviour_fills_the_rows_and_leaves_other_models(rows) -> None:
    models = pd.DataFrame([_models_row("original", 0.8), _models_row("cnn", 0.9)])
    merged = with_behaviour(models, list(rows.values()))
    by = merged.set_index("name")
    assert by.loc["original", "attack_auc"] == pytest.approx(rows["original"]["attack_auc"])
    assert "conflicting evidence" in by.loc["original", "evidence_conflict"]
    assert math.isnan(by.loc["cnn", "attack_auc"]) and by.loc["cnn", "evidence_conflict"] == ""
    assert list(merged["otr"].isna()) == list(models["otr"].isna())  # SDE columns untouched
    # the family comes from the behaviour row, not from which columns happen to be filled
    assert by.loc["original", "family"] == "causal_lm" and by.loc["cnn", "family"] == ""
    assert row_family(by.loc["original"].to_dict()) == "causal_lm"
    assert row_family(by.loc["cnn"].to_dict()) == "classifier"
    stated = {**by.loc["original"].to_dict(), "family": "denoiser"}
    assert row_family(stated) == "denoiser"  # stated wins over the columns
    older = {k: v for k, v in by.loc["original"].to_dict().items() if k != "family"}
    assert row_family(older) == "causal_lm"  # a row merged before the column: from its AUC


# ------------------------------------------------------------------ a real workspace


@pytest.fixture(scope="module")
def lm_workspace(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("transformers")
    from llm_artefacts import qa_workspace

    return qa_workspace(tmp_path_factory.mktemp("lm_ws"))


def test_the_stage_adds_units_to_a_store_written_before_it(lm_workspace, tmp_path: Path) -> None:
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.pipeline.evaluation.workspace_run import stored_result
    from sde_core.pipeline.store import ResultsStore
    from sde_core.pipeline.workspace import workspace_hash

    ws = lm_workspace
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    settings = EvalSettings(layer="layer.0")
    ws_hash = workspace_hash(ws, data_fingerprint=bundle.fingerprint)
    store = ResultsStore(tmp_path / "results.sqlite")
    run = store.open_run(ws_hash, settings.result_key())
    for name in ("original", "retrained"):  # the SDE units of a store written before the stage
        row = _models_row(name, 0.9)
        tables = {"models": [row], "subsets": [{"model": name, "kind": "it_ref"}],
                  "draws": [{"model": name, "draw": 0}]}  # fmt: skip
        store.put_unit(run.id, name, tables)
    store.mark_complete(run.id)
    before = stored_result(store, ws_hash, settings, ["original", "retrained"])
    assert before is not None and before.models["attack_auc"].isna().all()
    cache = StageCache(tmp_path / "stages")
    assert add_behaviour_units(ws, store, cache=cache) == {run.id: 2}
    assert add_behaviour_units(ws, store, cache=cache) == {run.id: 0}  # the first write wins
    assert cache.hits["behaviour"] == 2  # the second pass ran no model
    assert store.get_run(run.id).status == "complete"
    assert {r["model"] for r in stored_behaviour(store, run.id)} == {"original", "retrained"}
    after = stored_result(store, ws_hash, settings, ["original", "retrained"])
    assert after is not None and TABLE in store.tables(run.id)
    m = after.models.set_index("name")
    assert m.loc["original", "attack_auc_lo"] <= m.loc["original", "attack_auc"]
    assert np.isfinite(m.loc["original", "attack_auc_vs_retrained"])
    filled = {k for r in stored_behaviour(store, run.id) for k in r} | {"evidence_conflict"}
    sde = [c for c in before.models.columns if c not in filled]
    assert "otr" in sde and "loss_gap" not in sde
    pd.testing.assert_frame_equal(before.models[sde], after.models[sde])
    direct = workspace_behaviour(ws, bundle, np.arange(6), "layer.0", cache)
    assert direct["original"]["loss_gap"] == pytest.approx(m.loc["original", "loss_gap"])


def test_the_dashboard_session_answers_the_behaviour_rows_once(lm_workspace, tmp_path) -> None:
    from sde_core.pipeline.evaluation.session import EvaluationSession

    session = EvaluationSession(lm_workspace, cache_dir=tmp_path / "acts", stage_dir=tmp_path)
    rows = session.behaviour("layer.0")
    assert {r["model"] for r in rows} == {"original", "retrained"}
    assert session.behaviour("final") is rows  # settings-independent: one computation
    assert all(r["family"] == "causal_lm" for r in rows)


def test_evaluate_behaviour_only_adds_the_units(lm_workspace, tmp_path, capsys) -> None:
    from sde_core.cli import main
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.pipeline.store import ResultsStore
    from sde_core.pipeline.workspace import workspace_hash

    ws = lm_workspace
    path = tmp_path / "store.sqlite"
    assert main(["evaluate", str(ws.root), "--behaviour-only", "--store", str(path)]) == 0
    assert "no stored run of this workspace" in capsys.readouterr().out
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    with ResultsStore(path) as store:
        run = store.open_run(workspace_hash(ws, data_fingerprint=bundle.fingerprint),
                             EvalSettings(layer="final").result_key())  # fmt: skip
    assert main(["evaluate", str(ws.root), "--behaviour-only", "--store", str(path)]) == 0
    assert f"run {run.id}: 2 behaviour unit(s) added" in capsys.readouterr().out


def test_forget_row_loss_reads_the_family_s_per_row_loss() -> None:
    from sde_core.pipeline.evaluation.behaviour import forget_row_loss, headline_level

    levels = np.array([0.1, 0.5, 2.0])
    f = np.arange(12, dtype=float).reshape(3, 4)
    scores = {"level": levels, "denoise_f": f, "denoise_te": f}
    assert headline_level(levels, "denoised@2") == 2 and headline_level(levels, "final") == 1
    what, values = forget_row_loss(scores, "denoiser", "denoised@2")
    assert what == "denoising loss σ_t=2" and list(values) == [8.0, 9.0, 10.0, 11.0]
    assert list(forget_row_loss(scores, "denoiser", "final")[1]) == [4.0, 5.0, 6.0, 7.0]
    lm = _lm_scores(np.random.default_rng(0), 0.0, n_f=5, n_te=3)
    what, values = forget_row_loss(lm, "causal_lm", "layer.0")
    assert what == "answer loss (nats/token)" and np.array_equal(values, lm["loss_f"])


def test_per_sample_behaviour_of_a_language_model_is_each_text_s_loss(lm_workspace, tmp_path):
    """Each shown row gets the text's answer loss under each model (the row's place in D_f
    looked up, not its place in the list); a row outside D_f has none."""
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.learning.lm_behaviour import lm_text_scores
    from sde_core.pipeline.model_inputs import entry_bundle, load_entry_model
    from sde_core.services.samples import sample_behaviour

    ws = lm_workspace
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    cache = StageCache(tmp_path / "stages")
    rows = [3, 1, 15]  # D_f is rows 0–5: 15 is a retained row
    table = sample_behaviour(ws, bundle, EvalSettings(layer="layer.0"),
                             ["original", "retrained"], rows, cache)  # fmt: skip
    assert table is not None and list(table["row"]) == rows
    for name in ("original", "retrained"):
        entry = ws.model(name)
        texts = entry_bundle(ws, entry, bundle).train
        direct = lm_text_scores(load_entry_model(ws, entry), texts, np.array([3, 1])).loss
        column = table[f"answer loss (nats/token) · {name}"]
        # float32 forward passes over batches of other texts (other padding): ~10 ulp apart
        np.testing.assert_allclose(column[:2], direct, rtol=1e-5)
        assert math.isnan(column[2])
    assert not table.iloc[:2, 1:].equals(table.iloc[:2, 1:].iloc[:, ::-1])  # two models differ


def test_completions_of_each_model_side_by_side(lm_workspace, monkeypatch):
    """Each model's column is its own greedy completion of the row (the library function on
    the model as the workspace loads it); a second call is answered from the cache, running
    no model; no row gives no table."""
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.inputs.hf_models import load_tokenizer
    from sde_core.learning.lm_completions import greedy_completions
    from sde_core.pipeline import model_inputs
    from sde_core.pipeline.model_inputs import entry_bundle, load_entry_model
    from sde_core.services.samples import lm_completions

    ws = lm_workspace
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    settings = EvalSettings(layer="layer.0")
    rows = [4, 0, 17]
    table = lm_completions(ws, bundle, settings, ["original", "retrained"], rows)
    assert table is not None and list(table["row"]) == rows
    assert list(table.columns) == ["row", "prompt", "reference", "completion · original",
                                   "match · original", "completion · retrained",
                                   "match · retrained"]  # fmt: skip
    tokenizer = load_tokenizer(ws.path("models/original"))
    for name in ("original", "retrained"):
        entry = ws.model(name)
        texts = entry_bundle(ws, entry, bundle).train
        direct = greedy_completions(load_entry_model(ws, entry), texts, np.array(rows), tokenizer)
        assert list(table[f"completion · {name}"]) == [c.completion for c in direct]
        assert list(table[f"match · {name}"]) == [c.match for c in direct]
    assert list(table["reference"]) == [c.reference for c in direct]
    assert all(r.startswith("Author") for r in table["reference"])  # the answer, not the question

    def refuse(*_a, **_k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(model_inputs, "load_entry_model", refuse)
    again = lm_completions(ws, bundle, settings, ["original", "retrained"], rows)
    assert again is not None and again.equals(table)
    assert lm_completions(ws, bundle, settings, ["original"], []) is None
