"""Class-wise forgetting (method §16): the one shared step judges a class-wise workspace alike
on every path that builds a result — ``evaluate_workspace``, ``stored_result`` (the cold-open
read-back), the dashboard session's ``evaluate`` and ``session_result`` (finished and
streamed) — and its decisions follow the class-matched test."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sde_core.inputs.architectures import build_model
from sde_core.learning.training import save_weights
from sde_core.pipeline.evaluation import class_wise
from sde_core.pipeline.evaluation.accuracy_gate import chance_level
from sde_core.pipeline.evaluation.class_wise import (
    CLASS_WISE_COLUMNS,
    ForgetClasses,
    judged_models,
)
from sde_core.pipeline.evaluation.run_driver import run_model
from sde_core.pipeline.evaluation.session import EvaluationSession
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace, stored_result
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.workspace import ModelEntry, Workspace
from sde_core.pipeline.workspace_write import rehash_models, write_workspace
from sde_core.services.evaluation import session_result
from sde_core.viz.verdicts.labels import verdict_label
from sde_core.viz.verdicts.summary import summarize_verdict

KWARGS = {"input_dim": 4, "hidden": [8], "num_classes": 4}


def _class_wise_workspace(root: Path) -> None:
    """4 classes, 100 training and 80 test rows each; D_f = every training row of class 0."""
    rng = np.random.default_rng(0)
    y_tr, y_te = np.repeat(np.arange(4), 100), np.repeat(np.arange(4), 80)
    centres = rng.normal(scale=2.0, size=(4, 4))
    np.savez(
        root / "data.npz",
        x_train=(centres[y_tr] + rng.normal(size=(400, 4))).astype(np.float32),
        y_train=y_tr,
        x_test=(centres[y_te] + rng.normal(size=(320, 4))).astype(np.float32),
        y_test=y_te,
    )
    np.save(root / "forget.npy", np.flatnonzero(y_tr == 0))
    ws = Workspace(root.resolve(), {"kind": "npz", "root": "data.npz"}, "forget.npy", name="cw")
    for i, (name, role) in enumerate((("original", "original"), ("other", "unlearned"))):
        torch.manual_seed(i)
        save_weights(build_model("mlp", **KWARGS), root / f"{name}.safetensors", arch="mlp")
        ws.add_model(ModelEntry(name=name, role=role, arch="mlp", arch_kwargs=KWARGS,
                                checkpoint=f"{name}.safetensors"))  # fmt: skip
    rehash_models(ws)
    write_workspace(ws)


SETTINGS = EvalSettings(subset_size=20, sigma=2.5, targets=4, draws=2, splits=10, panel_size=20,
                        null_pairs=4, baseline_targets=2, device="cpu")  # fmt: skip


def _view(result) -> list[tuple]:
    rows = result.models.to_dict("records")
    out = []
    for r in rows:
        cells = tuple(
            "nan" if isinstance(r[c], float) and math.isnan(r[c]) else r[c]
            for c in CLASS_WISE_COLUMNS
        )
        out.append((r["name"], verdict_label(r), r["inconclusive_reason"], cells))
    return out


def test_every_path_judges_a_class_wise_workspace_alike(tmp_path, monkeypatch):
    monkeypatch.setattr(class_wise, "PERMUTATIONS", 19)  # the paths, not the level, are tested
    _class_wise_workspace(tmp_path)
    store = ResultsStore(tmp_path / "results.sqlite")
    evaluated = evaluate_workspace(tmp_path, SETTINGS, store=store, stage_dir=False)
    names = ["original", "other"]
    session = EvaluationSession(tmp_path, stage_dir=False)
    classes = session.classes
    assert classes is not None and classes.mix_reason()
    stored = stored_result(store, evaluated.workspace_hash, SETTINGS, names, classes)
    stored_alone = stored_result(store, evaluated.workspace_hash, SETTINGS, names)
    from_session = session.evaluate(settings=SETTINGS)
    evaluations = [run_model(session.model_run(n, SETTINGS)) for n in names]
    shown = session_result(session.workspace_hash, SETTINGS, evaluations)
    shown_with = session_result(session.workspace_hash, SETTINGS, evaluations, classes)
    first = _view(evaluated)
    assert all(r[2].startswith("D_f's classes are not those") for r in first)
    assert all(r[3][0] in ("", "not forgotten", "consistent with forgetting") for r in first)
    for other in (stored, stored_alone, from_session, shown, shown_with):
        assert other is not None and _view(other) == first
    # the class-matched numbers travel to the JSON document
    doc = evaluated.to_json_dict()["models"]["original"]
    assert set(doc["class_wise"]) >= {"verdict", "p_toward_training", "power"}
    # a streamed, partial result is withheld as well: its test runs when the run finishes
    part = next(iter(session.stream(["original"], SETTINGS)))
    partial = session_result(session.workspace_hash, SETTINGS, [part.evaluation()])
    row = partial.models.to_dict("records")[0]
    assert verdict_label(row) == "inconclusive"
    assert "has not finished" in row["inconclusive_reason"]


def _rows() -> pd.DataFrame:
    base = {"references_valid": True, "otr": 1.0, "otr_lo": 0.9, "otr_hi": 1.0,
            "over_unlearned": False, "inconclusive_reason": "",
            "evidence_conflict": ""}  # fmt: skip
    names = ["forgot", "kept", "opposite", "weak", "conflict", "missing"]
    return pd.DataFrame([{**base, "name": n, "role": "unlearned"} for n in names])


def _cw(name: str, p_in: float, p_opp: float, sep: int = 4, gap_lo: float = -0.05) -> dict:
    return {"model": name, "mix_reason": "", "classes": "3", "alpha": 0.01, "reason": "",
            "p_in": p_in, "p_opposite": p_opp, "z": -1.0, "direction": -1,
            "power_separated": sep, "power_tested": 4, "acc_forget": 0.5, "acc_unseen": 0.45,
            "gap_lo": gap_lo, "gap_hi": 0.1}  # fmt: skip


def test_the_decisions_follow_the_class_matched_test_and_say_what_they_cannot():
    rng = np.random.default_rng(1)
    train, test = rng.integers(0, 10, 3000), rng.integers(0, 10, 1000)
    names = tuple(f"c{i}" for i in range(10))
    one_class = ForgetClasses(train, test, np.flatnonzero(train == 3), 10, names)
    random = ForgetClasses(train, test, rng.choice(3000, 300, replace=False), 10, names)
    cw = pd.DataFrame([_cw("forgot", 0.4, 0.6), _cw("kept", 0.005, 1.0),
                       _cw("opposite", 0.99, 0.005), _cw("weak", 0.4, 0.6, sep=2),
                       _cw("conflict", 0.3, 0.7, gap_lo=0.2)])  # fmt: skip
    rows = _rows()
    assert judged_models(rows, cw, random) is rows  # a random forget set: nothing changes
    judged = judged_models(rows, cw, one_class)
    out = judged.to_dict("records")
    assert [verdict_label(r) for r in out] == [
        "consistent with forgetting", "not forgotten", "inconclusive", "inconclusive",
        "conflicting evidence", "inconclusive",
    ]  # fmt: skip
    assert "class c3" in out[0]["class_wise_sentence"]
    assert summarize_verdict(out[1], 4).sentence.startswith("kept has NOT forgotten class c3")
    assert "direction opposite to training" in out[2]["inconclusive_reason"]
    assert "no power" in out[3]["inconclusive_reason"]
    assert "above 0" in out[4]["evidence_conflict"]
    assert "evaluate again" in out[5]["inconclusive_reason"]
    assert all(r["inconclusive_reason"].startswith("D_f's classes are not those") for r in out)
    assert (judged["otr"] == rows["otr"]).all()  # the numbers stay, withheld
    assert rows["inconclusive_reason"].eq("").all()  # the input is not changed


def test_a_reference_model_at_chance_on_d_r_withholds_every_verdict():
    rng = np.random.default_rng(2)
    train, test = rng.integers(0, 10, 3000), rng.integers(0, 10, 1000)
    classes = ForgetClasses(train, test, rng.choice(3000, 300, replace=False), 10)
    rows = _rows().iloc[:2].assign(role=["original", "unlearned"], acc_r=[97.0, 11.0])
    assert judged_models(rows, None, classes) is rows  # the unlearned model may be inaccurate
    at_chance = rows.assign(acc_r=[11.0, 97.0])
    judged = judged_models(at_chance, None, classes).to_dict("records")
    assert [verdict_label(r) for r in judged] == ["inconclusive", "inconclusive"]
    assert all("the original model forgot classifies 11.0% of D_r" in r["inconclusive_reason"]
               and "normalisation, image size, channel order" in r["inconclusive_reason"]
               for r in judged)  # fmt: skip
    assert judged_models(at_chance, None, None) is at_chance  # no labels: nothing to test
    chance, n_retain = chance_level(train, classes.forget)
    noted = pd.DataFrame([{"model": "forgot", "mix_reason": "", "chance": chance,
                           "n_retain": n_retain}])  # fmt: skip
    again = judged_models(at_chance, noted, None).to_dict("records")  # the level the runs noted
    assert [r["inconclusive_reason"] for r in again] == [r["inconclusive_reason"] for r in judged]


def test_no_chance_level_without_class_labels():
    """A text dataset's labels are -1 and a regressor's are floats: no class to be at chance
    of (the accuracy gate then asks nothing), never a crash in ``np.bincount``."""
    forget = np.arange(3)
    assert chance_level(np.full(12, -1, dtype=np.int64), forget) is None
    assert chance_level(np.linspace(0.0, 1.0, 12), forget) is None
    assert chance_level(np.array([0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 0, 0]), forget) == (5 / 9, 9)
