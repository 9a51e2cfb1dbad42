"""The meta-evaluation (method §17): its statistics against textbook references, the truth
labelling on a synthetic case, the zoo's quantisations, the plan's checks, the agreement table
on rows with known answers, and the command on a tiny zoo (slow)."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sde_core.cli import main
from sde_core.errors import InputError, PlanError
from sde_core.pipeline.meta_eval.agreement import meta_table, null_check_share
from sde_core.pipeline.meta_eval.spec import load_meta_plan, meta_plan_names
from sde_core.pipeline.meta_eval.summary import VERDICT_SCORE, default_design, withheld_counts
from sde_core.pipeline.meta_eval.truth import (
    behaviour_measures,
    label_truth,
    lira_member_share,
)
from sde_core.pipeline.meta_eval.zoo import quantise_model, zoo_units
from sde_core.stats.rank_agreement import bootstrap_interval, concordance, rank_auc, spearman

# ----------------------------------------------------------------------------- statistics


def _pairwise_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """The textbook definition: the share of (positive, negative) pairs ordered right."""
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_rank_auc_is_the_share_of_pairs_ordered_right_ties_half():
    rng = np.random.default_rng(3)
    for _ in range(20):
        pos = rng.integers(0, 6, size=rng.integers(1, 15)).astype(float)
        neg = rng.integers(0, 6, size=rng.integers(1, 15)).astype(float)
        assert rank_auc(pos, neg) == pytest.approx(_pairwise_auc(pos, neg), abs=1e-12)
    assert rank_auc([2.0, 3.0], [0.0, 1.0]) == 1.0
    assert rank_auc([0.0], [1.0]) == 0.0
    assert np.isnan(rank_auc([], [1.0]))


def test_spearman_equals_the_textbook_formula_without_ties_and_midrank_pearson_with_them():
    rng = np.random.default_rng(4)
    x, y = rng.permutation(12).astype(float), rng.permutation(12).astype(float)
    n = x.size
    textbook = 1 - 6 * np.sum((x - y) ** 2) / (n * (n * n - 1))  # x, y are their own ranks
    assert spearman(x, y) == pytest.approx(textbook, abs=1e-12)
    a = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0])
    b = np.array([2.0, 1.0, 4.0, 4.0, 3.0, 6.0, 7.0])
    ra = np.array([1.0, 2.5, 2.5, 4.0, 6.0, 6.0, 6.0])  # midranks by hand
    rb = np.array([2.0, 1.0, 4.5, 4.5, 3.0, 6.0, 7.0])
    assert spearman(a, b) == pytest.approx(np.corrcoef(ra, rb)[0, 1], abs=1e-12)
    assert spearman(x, x) == pytest.approx(1.0)
    assert np.isnan(spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    with pytest.raises(InputError, match="paired"):
        spearman([1.0, 2.0, 3.0], [1.0, 2.0])


def test_concordance_counts_same_signs_and_half_a_tie():
    assert concordance([1.0, -2.0, 0.0, 3.0], [2.0, -1.0, 5.0, -1.0]) == pytest.approx(
        (1 + 1 + 0.5 + 0) / 4
    )
    assert concordance([1.0, 2.0], [0.0, 1.0]) == 1.0  # a pair whose truth did not move is left out
    assert np.isnan(concordance([1.0], [0.0]))


def test_bootstrap_interval_is_seeded_covers_the_mean_and_keeps_strata_sizes():
    rng = np.random.default_rng(5)
    x = rng.normal(1.0, 1.0, size=200)
    lo, hi = bootstrap_interval(lambda i: float(x[i].mean()), x.size, 500, seed=1)
    assert (lo, hi) == bootstrap_interval(lambda i: float(x[i].mean()), x.size, 500, seed=1)
    se = x.std(ddof=1) / np.sqrt(x.size)  # the normal interval: the percentile one is close
    assert lo == pytest.approx(x.mean() - 1.96 * se, abs=0.4 * se)
    assert hi == pytest.approx(x.mean() + 1.96 * se, abs=0.4 * se)
    labels = ["a"] * 3 + ["b"] * 7
    seen = []

    def count(i: np.ndarray) -> float:
        seen.append(int(np.sum(np.asarray(labels, dtype=object)[i] == "a")))
        return 0.0

    bootstrap_interval(count, 10, 50, strata=labels)
    assert set(seen) == {3}
    assert all(np.isnan(v) for v in bootstrap_interval(lambda i: float("nan"), 10, 20))


# ----------------------------------------------------------------------------- truth


def _probs(confidence: np.ndarray, labels: np.ndarray, classes: int = 4) -> np.ndarray:
    """Softmax-like rows with ``confidence`` on the label, the rest spread evenly."""
    p = np.tile(((1 - confidence) / (classes - 1))[:, None], (1, classes))
    p[np.arange(labels.size), labels] = confidence
    return p


def test_truth_labels_a_synthetic_zoo():
    """Retrained models are unsure on D_f, originals sure: a checkpoint like the retrained
    models forgot, one like the originals remembers, one far below both is over-unlearned."""
    rng = np.random.default_rng(6)
    n = 300
    labels = rng.integers(0, 4, n)
    base_out, base_in = rng.uniform(0.3, 0.6, n), rng.uniform(0.9, 0.99, n)
    models = {}
    for s in range(5):
        models[f"re{s}"] = _probs(np.clip(base_out + rng.normal(0, 0.03, n), 0.26, 0.99), labels)
        models[f"or{s}"] = _probs(np.clip(base_in + rng.normal(0, 0.005, n), 0.26, 0.999), labels)
    models["like_re"] = _probs(base_out, labels)
    models["like_or"] = _probs(base_in, labels)
    models["flat"] = _probs(np.full(n, 0.26), labels)
    originals, retrained = [f"or{s}" for s in range(5)], [f"re{s}" for s in range(5)]
    measures = behaviour_measures(models, labels, originals, retrained)
    assert measures["like_or"]["lira_member_share"] > 0.9
    assert measures["like_re"]["lira_member_share"] < 0.1
    truths = label_truth(measures, originals, retrained)
    assert truths["like_re"].label == "forgot"
    assert truths["like_or"].label == "remembers"
    assert truths["flat"].label == "over-unlearned"
    assert all(truths[r].label == "forgot" for r in retrained)  # τ is their own spread
    assert all(truths[o].label == "remembers" for o in originals)
    assert truths["like_or"].graded > truths["like_re"].graded > truths["flat"].graded
    with pytest.raises(InputError, match="at least three"):
        behaviour_measures(models, labels, originals[:2], retrained)


def test_lira_share_calls_members_by_the_likelihood_ratio():
    phi_in = np.array([[4.0, 4.0], [6.0, 6.0]])
    phi_out = np.array([[-1.0, -1.0], [1.0, 1.0]])  # same variance per side (2 and 2)
    assert lira_member_share(np.array([5.0, 0.0]), phi_in, phi_out) == 0.5
    assert lira_member_share(np.array([3.0, 2.6]), phi_in, phi_out) == 1.0  # beyond 2.5
    assert lira_member_share(np.array([2.4, 2.4]), phi_in, phi_out) == 0.0
    with pytest.raises(InputError, match="two models"):
        lira_member_share(np.zeros(2), phi_in[:1], phi_out)


# ----------------------------------------------------------------------------- zoo and plan


def test_quantised_models_hold_4_bit_rows_and_int8_stays_close():
    import torch

    from sde_core.inputs.architectures import build_model

    torch.manual_seed(0)
    model = build_model("mlp", input_dim=8, hidden=[16], num_classes=3).eval()
    x = torch.randn(20, 8)
    four = quantise_model(model, "int4")
    for module in four.modules():
        if isinstance(module, torch.nn.Linear):
            for row in module.weight.detach():
                assert len(torch.unique(row)) <= 16
    eight = quantise_model(model, "int8")
    with torch.no_grad():
        assert torch.allclose(eight(x), model(x), atol=0.05)
        assert not torch.equal(four(x), model(x))
    with pytest.raises(PlanError, match="int8 or int4"):
        quantise_model(model, "int2")


def test_the_shipped_plan_has_a_zoo_of_at_least_60_with_every_kind():
    assert "mnist1d" in meta_plan_names()
    plan = load_meta_plan("mnist1d")
    units = zoo_units(plan)
    kinds = {u.kind for u in units}
    assert {"original", "retrained", "unlearned", "weak", "relearned", "quantised"} <= kinds
    assert sum(u.kind != "reference" for u in units) >= 60
    assert len(plan.original_seeds) >= 5 and len(plan.retrained_seeds) >= 5
    assert all(len(runs) >= 3 for runs in plan.methods.values())
    names = {u.name for u in units}
    assert all(u.parent in names for u in units if u.parent)  # every parent is built too
    order = [u.name for u in units]
    assert all(order.index(u.parent) < order.index(u.name) for u in units if u.parent)


def test_plan_errors_name_the_field_and_the_fix(tmp_path):
    with pytest.raises(PlanError, match="no meta-evaluation plan"):
        load_meta_plan("nonexistent")
    path = tmp_path / "p.toml"
    path.write_text(
        'demo = "mnist1d"\n[model]\narch = "mlp"\n[zoo]\noriginal_seeds = [0, 1]\n'
        "retrained_seeds = [0, 1]\nbases = [0]\n[zoo.methods]\nmagic = [{ epochs = 1 }]\n"
    )
    with pytest.raises(PlanError, match=r"zoo.methods.magic: unknown method"):
        load_meta_plan(path)
    path.write_text(
        'demo = "mnist1d"\n[model]\narch = "mlp"\n[zoo]\noriginal_seeds = [0, 1]\n'
        "retrained_seeds = [0, 1]\nbases = [7]\n"
    )
    with pytest.raises(PlanError, match=r"zoo\.bases"):
        load_meta_plan(path)
    base = (
        'demo = "mnist1d"\n[model]\narch = "mlp"\n[zoo]\noriginal_seeds = [0, 1]\n'
        "retrained_seeds = [0, 1]\nbases = [0]\n[eval]\n"
    )
    for extra, match in (
        ("sized_null_pairs = 145\n", r"sized_null_pairs is no longer read.*null_size"),
        ("[eval.default_design]\nsplits = 3\n", r"default_design: unknown field\(s\) \['splits'\]"),
        ("[eval.default_design]\nprecision = 0.0\n", r"precision must be > 0"),
        ("[eval.default_design]\nnull_size = -1\n", r"null_size"),
        ('layers = ["output"]\n', r"eval.layers must be a list of distinct layer names"),
        ("layers = 3\n", r"eval.layers must be a list"),
        ('layers = ["penultimat"]\n', r"eval.layers: unknown layer 'penultimat'; valid names: "),
    ):
        path.write_text(base + extra)
        with pytest.raises(PlanError, match=match):
            load_meta_plan(path)
    # the model is built (on the meta device) at load, not an hour into the zoo
    path.write_text(base.replace('arch = "mlp"', 'arch = "mlpp"'))
    with pytest.raises(PlanError, match=r"p.toml model: .*mlpp"):
        load_meta_plan(path)
    path.write_text(base.replace('arch = "mlp"', 'arch = "mlp"\nkwargs = { widht = 3 }'))
    with pytest.raises(PlanError, match=r"p.toml model: .*widht"):
        load_meta_plan(path)
    path.write_text(base.replace('arch = "mlp"', 'arch = "mlp"\nkwargs = "wide"'))
    with pytest.raises(PlanError, match=r"model.kwargs must be a table"):
        load_meta_plan(path)


def test_another_evaluation_seed_keeps_the_zoo_and_its_keys():
    plan = load_meta_plan("fashion-mnist")
    other = plan.with_eval_seed(7)
    assert other.name == "fashion-mnist-seed7" and other.scores_folder == "scores-seed7"
    assert other.settings.seed == other.default_settings.seed == 7
    assert other.settings == plan.settings.__class__(**{**plan.settings.__dict__, "seed": 7})
    assert [u.key(other) for u in zoo_units(other)] == [u.key(plan) for u in zoo_units(plan)]
    assert plan.scores_folder == "scores" and plan.settings.seed == 0
    for bad in (-1, 1.5, True, "2", 2**32):  # the settings' own check and bound
        with pytest.raises(PlanError, match="evaluation seed"):
            plan.with_eval_seed(bad)  # type: ignore[arg-type]


def test_the_shipped_plan_s_second_pass_is_the_library_s_default_design():
    from sde_core.pipeline.meta_eval.zoo import RUN_SEED_OFFSET
    from sde_core.pipeline.settings import PRECISION_FIELDS, EvalSettings

    plan = load_meta_plan("mnist1d")
    library = EvalSettings()
    assert plan.settings.precision == 0.0 and plan.default_settings.precision > 0
    for name in PRECISION_FIELDS:
        assert getattr(plan.default_settings, name) == getattr(library, name)
    for name in ("subset_size", "targets", "splits", "panel_size", "seed"):
        assert getattr(plan.default_settings, name) == getattr(plan.settings, name)
    runs = [u for u in zoo_units(plan) if u.kind in ("unlearned", "weak")]
    assert all(u.params["seed"] == RUN_SEED_OFFSET + u.base for u in runs)
    assert {u.params["k"] for u in runs if u.method == "eu_k"} == {1, 2, 3}
    assert plan.layers == ("penultimate",)


# ----------------------------------------------------------------------------- agreement


def _rows() -> list[dict]:
    """Six checkpoints: a perfect score ("good") and one that ignores relearning ("stuck")."""
    rows = []
    spec = [("re", "retrained", "", "forgot", -1.0), ("or", "original", "", "remembers", 9.0),
            ("u1", "unlearned", "", "forgot", 0.0), ("u2", "unlearned", "", "remembers", 5.0),
            ("r1", "relearned", "u1", "remembers", 4.0),
            ("q1", "quantised", "u1", "forgot", 0.5)]  # fmt: skip
    for name, kind, parent, truth, graded in spec:
        rows.append({"checkpoint": name, "kind": kind, "parent": parent, "truth": truth,
                     "graded_truth": graded, "method": "ft" if kind == "relearned" else
                     ("int8" if kind == "quantised" else ""), "good": -graded,
                     "stuck": 1.0 if name in ("re", "u1", "r1", "q1") else 0.0,
                     "null_gated_defaults": name == "u2"})  # fmt: skip
    return rows


def test_meta_table_scores_a_perfect_score_one_and_catches_a_stuck_one():
    rows = _rows()
    table = meta_table(rows, {"good": "good", "stuck": "stuck"}, resamples=40, seed=0)
    good, stuck = table.rows
    assert good["auc"] == 1.0 and good["spearman"] == pytest.approx(1.0)
    assert good["relearn"] == 1.0 and good["int8"] == 1.0
    assert stuck["relearn"] == 0.5  # relearning did not move it: a tie
    assert stuck["auc"] == pytest.approx(
        _pairwise_auc(np.array([1.0, 1.0, 1.0, 1.0]), np.array([0.0, 0.0, 1.0]))
    )
    assert table.truth_moves["relearn"] == pytest.approx(4.0)
    assert table.checkpoints == 6


def test_null_check_share_compares_wrong_verdicts_gated_and_not():
    rows = _rows()
    for r in rows:
        r["verdict_ordinal"] = 1.0  # "consistent with forgetting" everywhere
    share = null_check_share(rows, "verdict_ordinal")
    assert share["gated"] == pytest.approx(1 / 6)
    assert share["wrong_gated"] == 1.0  # u2 remembers, called forgotten, gated
    assert share["wrong_free"] == pytest.approx(2 / 5)  # "or" and "r1" remember: wrong


# ----------------------------------------------------------------------------- the command


def _tiny_plan(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 8))

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 4, n)
        return (centres[y] + 1.5 * rng.normal(size=(n, 8))).astype(np.float32), y.astype(np.uint8)

    (xtr, ytr), (xte, yte) = draw(300), draw(240)
    np.savez(folder / "data.npz", x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    np.save(folder / "forget.npy", np.arange(0, 300, 5))
    plan = folder / "tiny.toml"
    plan.write_text(
        """name = "tiny"
title = "tiny zoo"
data_folder = "."
[model]
arch = "mlp"
kwargs = { input_dim = 8, hidden = [32], num_classes = 4 }
[train]
optimizer = "adam"
lr = 1e-2
weight_decay = 0.0
epochs = 20
batch_size = 32
[zoo]
original_seeds = [0, 1, 2]
retrained_seeds = [0, 1, 2]
reference_seed = 9
bases = [0]
[zoo.methods]
ft = [{ epochs = 1 }, { epochs = 5 }]
ga = [{ lr = 1e-3 }, { lr = 1e-2 }]
[zoo.weak]
ft = { lr = 1e-6, epochs = 1 }
[zoo.returns]
relearn = { fraction = 0.2, lr = 0.01, epochs = 3, batch_size = 8 }
quantise = ["int8", "int4"]
[eval]
subset_size = 20
targets = 8
splits = 20
draws = 2
panel_size = 20
null_pairs = 2
baseline_targets = 0
layers = ["penultimate"]
[eval.default_design]
null_size = 16
max_draws = 4
pilot_draws = 2
[meta]
bootstrap = 100
"""
    )
    return plan


@pytest.mark.slow
def test_meta_eval_command_on_a_tiny_zoo_writes_the_table_and_resumes(tmp_path, capsys):
    plan = _tiny_plan(tmp_path)
    work, out = tmp_path / "work", tmp_path / "out"
    args = ["meta-eval", str(plan), "--work", str(work), "--out", str(out)]
    assert main(args) == 0
    assert "17 checkpoints" in capsys.readouterr().out
    with open(out / "meta_eval_tiny.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert table[0]["score"] == "sde_verdict"
    assert table[-1]["score"] == "retrain_avg_gap"
    assert {"sde_otr", "sde_calibrated_otr", "mmd_otr", "w2_otr", "svc_asr", "loss_attack"} <= {
        r["score"] for r in table
    }
    for r in table:
        if r["auc"] not in ("", "nan"):
            assert 0.0 <= float(r["auc"]) <= 1.0
    with open(out / "meta_eval_tiny_checkpoints.csv", newline="") as fh:
        checkpoints = list(csv.DictReader(fh))
    assert len(checkpoints) == 17 and "reference" not in {c["checkpoint"] for c in checkpoints}
    assert {c["truth"] for c in checkpoints} <= {"forgot", "remembers", "over-unlearned"}
    assert all(c["truth"] == "forgot" for c in checkpoints if c["kind"] == "retrained")
    summary = json.loads((out / "meta_eval_tiny.json").read_text())
    assert summary["null_power"]["subsets_for_80"]["gate"] == 289
    for column, withheld in (("verdict", "withheld"), ("verdict_defaults", "withheld_defaults")):
        inconclusive = sum(1 for c in checkpoints if c[column] == "inconclusive")
        assert sum(summary[withheld].values()) == inconclusive
        assert sum(sum(v.values()) for v in summary[f"confusion{withheld[8:]}"].values()) == 17
    design = summary["default_design"]
    assert design["checkpoints"] == 17 and 2 <= design["draws_min"] <= design["draws_max"] <= 4
    assert sum(design["precision_states"].values()) == 17
    assert summary["null_power"]["default_design"]["unseen_subsets_min"] >= 16
    assert summary["null_check_defaults"]["checkpoints"] == 17
    assert {c["verdict_defaults"] for c in checkpoints} <= set(VERDICT_SCORE)
    assert {"sde_verdict_defaults", "sde_calibrated_otr_defaults"} <= {r["score"] for r in table}
    layer = {"sde_verdict@penultimate", "sde_otr@penultimate", "sde_calibrated_otr@penultimate"}
    assert layer <= {r["score"] for r in table}
    assert next(r for r in table if r["score"] == "sde_verdict@penultimate")["right"] != ""
    methods = (out / "meta_eval_tiny_methods.md").read_text()
    assert "| verdicts (fixed design) | verdicts (default design) |" in methods
    assert (out / "meta_eval_tiny_roc.png").stat().st_size > 1000
    stamps = {p: p.stat().st_mtime_ns for p in (work / "zoo").rglob("record.json")}
    assert main(args) == 0  # a rerun reads every checkpoint and score from the caches
    assert {p: p.stat().st_mtime_ns for p in (work / "zoo").rglob("record.json")} == stamps
    scored = {p: p.stat().st_mtime_ns for p in (work / "scores").glob("*.json")}
    # a held-out evaluation seed: the same zoo, its own scores and files
    assert main([*args, "--eval-seed", "3"]) == 0
    assert {p: p.stat().st_mtime_ns for p in (work / "zoo").rglob("record.json")} == stamps
    assert {p: p.stat().st_mtime_ns for p in (work / "scores").glob("*.json")} == scored
    assert len(list((work / "scores-seed3").glob("*.json"))) == len(scored)
    with open(out / "meta_eval_tiny-seed3_checkpoints.csv", newline="") as fh:
        again = {c["checkpoint"]: c for c in csv.DictReader(fh)}
    assert {c["checkpoint"]: c["truth"] for c in checkpoints} == {
        k: c["truth"] for k, c in again.items()
    }  # the truth is the zoo's, not the evaluation's
    assert any(c["sde_dependence"] != again[c["checkpoint"]]["sde_dependence"] for c in checkpoints)
    assert json.loads((out / "meta_eval_tiny-seed3.json").read_text())["plan"] == "tiny-seed3"
    # a default-design pass judged by an earlier precision rule (method §15) is summarised
    # again, keeping the seconds of its first computation; the other records stay as they are
    old = sorted((work / "scores").glob("*.json"))[0]
    record = json.loads(old.read_text())
    assert record["defaults"].pop("precision_rule") == 2
    record["defaults"]["seconds"] = 123.0
    old.write_text(json.dumps(record))
    scored = {p: p.stat().st_mtime_ns for p in (work / "scores").glob("*.json") if p != old}
    assert main(args) == 0
    again = json.loads(old.read_text())["defaults"]
    assert again["precision_rule"] == 2 and again["seconds"] == 123.0
    assert again["summary_seconds"] >= 0
    assert {k: v for k, v in again["row"].items() if k != "eval_seconds"} == {
        k: v for k, v in record["defaults"]["row"].items() if k != "eval_seconds"
    }  # a tiny zoo's precision runs: the same rows under either rule, but for the time
    assert {p: p.stat().st_mtime_ns for p in scored} == scored
    assert main(["meta-eval", str(tmp_path / "missing.toml")]) == 1
    assert "no meta-evaluation plan" in capsys.readouterr().err


# ----------------------------------------------------------------------------- null sizing


def test_gate_power_with_the_draws_interval_is_below_the_binomial_power():
    """Korn–Graubard over B = 5 draws halves the effective trials: 145 pairs, which give the
    binomial gate 80% power against 2α, give it far less; at the level itself it rarely fires."""
    from sde_core.pipeline.meta_eval.null_sizing import gate_power
    from sde_core.stats.null_power import null_check_power

    binomial = null_check_power(290, 0.05, 0.10, 0.99).power
    five = gate_power(145, 5, reps=100, seed=1)
    assert binomial > 0.75 and five.gate < binomial - 0.3
    assert five.interval > five.gate  # the shown 95% interval is one-sided 97.5%, the gate 99%
    assert gate_power(145, 20, reps=100, seed=1).gate > five.gate  # more draws, more power
    assert gate_power(145, 5, true_rate=0.05, reps=100, seed=1).gate < 0.05
    assert gate_power(20, 5, reps=20, seed=1) == gate_power(20, 5, reps=20, seed=1)


# ----------------------------------------------------------------------------- the card


def test_the_card_reads_the_verdict_and_the_best_alternative(tmp_path):
    from sde_core.viz.report.meta_eval import card_sentences, markdown_table, read_card

    head = "score,label,n,spearman_runs,spearman_runs_lo,spearman_runs_hi,auc,right,wrong,abstained"
    lines = [
        head,
        "sde_verdict,SDE verdict,60,0.8,0.7,0.9,1.0,0.5,0.1,0.4",
        "sde_calibrated_otr,SDE calibrated OTR,60,0.5,0.3,0.6,1.0,,,",
        "mmd_otr,MMD,60,nan,,,0.5,,,",
        "forget_loss_gap,loss gap,60,0.95,0.9,1.0,1.0,,,",
        "retrain_avg_gap,retrain-based,60,0.99,0.98,1.0,1.0,,,",
    ]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    card = read_card(path)
    assert card is not None and card.checkpoints == 60 and card.best_label == "loss gap"
    text = " ".join(card_sentences(card))
    assert (
        "right on 50%" in text
        and "wrong on 10%" in text
        and "(loss gap) with 0.95 [0.90, 1.0]" in text
    )
    table = markdown_table([{"label": "x", "auc": 0.5, "auc_lo": 0.4, "auc_hi": float("nan")}])
    assert "| x | 0.50 | n/a |" in table  # no interval shown when a bound is missing


def test_the_method_page_shows_the_shipped_card():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "pages" / "method.py"))
    at.run(timeout=60)
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "How often is it right?" in text and "was right on" in text


def test_the_card_of_each_family(tmp_path):
    """The classifier card reads both shipped zoos' tables (mnist1d, then Fashion-MNIST); a
    family with no zoo is told its rates are not measured; a classifier installation without
    the tables says nothing, and one with a single table shows that zoo alone."""
    import shutil

    from sde_core.viz.report.meta_eval import (
        HELD_OUT_SEED,
        card_sentences,
        family_card,
        meta_eval_csvs,
        read_card,
    )

    classifier = family_card("classifier", "classifier")
    shipped = meta_eval_csvs("classifier")
    assert classifier is not None and classifier.measured
    assert [(p.name, data) for p, data, _ in shipped] == [
        ("meta_eval_mnist1d.csv", "mnist1d"),
        ("meta_eval_fashion-mnist.csv", "Fashion-MNIST"),
    ]
    expected = []
    for path, data, model in shipped:
        card = read_card(path)
        assert card is not None
        first, *rest = card_sentences(card)
        assert first.startswith("On ")
        expected += [f"The {data} zoo ({model}): o{first[1:]}", *rest]
        held = read_card(path.with_name(f"{path.stem}-seed{HELD_OUT_SEED}.csv"))
        assert held is not None  # each shipped zoo has its held-out evaluation seed
        right = f"{100 * held.verdict['right']:.0f}%"
        expected.append(
            f"Evaluated again at a held-out seed ({HELD_OUT_SEED}), the verdict on the same zoo "
            f"was right on {right}, wrong on 0% and abstained on "
            f"{100 * held.verdict['abstained']:.0f}%: how often it abstains moves with the "
            "evaluation's own randomness."
        )
    assert classifier.sentences == expected
    assert "mnist1d and Fashion-MNIST zoos" in classifier.title
    assert "REPRODUCTION.md" in classifier.caption
    only = tmp_path / "one" / "reproduction" / "results"
    only.mkdir(parents=True)
    shutil.copy(shipped[1][0], only)
    single = family_card("classifier", "classifier", root=tmp_path / "one")
    assert single is not None and "the Fashion-MNIST zoo (method §17)" in single.title
    assert len(single.sentences) == 2 and single.sentences[0].startswith("The Fashion-MNIST zoo")
    for name, label in (("causal_lm", "causal language model"), ("denoiser", "denoiser")):
        other = family_card(name, label)
        assert other is not None and not other.measured and other.caption == ""
        assert other.title == f"How often is it right? Not measured for a {label} (method §17)"
        assert "do not carry over" in other.sentences[0]
        assert "zoos of classifiers (mnist1d, Fashion-MNIST) only" in other.sentences[0]
    assert family_card("classifier", "classifier", root=tmp_path) is None


def test_the_method_page_shows_the_open_workspace_s_family(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from llm_artefacts import qa_workspace
    from streamlit.testing.v1 import AppTest

    ws = qa_workspace(tmp_path / "lm")
    monkeypatch.setenv("SDE_DATA_ROOTS", str(tmp_path))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "pages" / "method.py"))
    at.session_state["ws_path"] = str(ws.root)
    at.run(timeout=60)
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "Not measured for a causal language model" in text
    assert "was right on" not in text  # the classifier zoo's rates are not shown


_TOML_VALUES = st.one_of(
    st.integers(-5, 2000),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=8),
    st.booleans(),
    st.lists(st.text(max_size=6), max_size=3),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    layers=_TOML_VALUES,
    design=st.dictionaries(
        st.sampled_from(["precision", "pilot_draws", "max_draws", "null_size", "splits"]),
        _TOML_VALUES,
        max_size=3,
    ),
)
def test_any_eval_section_loads_or_names_its_field(tmp_path, layers, design):
    """Whatever ``[eval] layers`` and ``[eval.default_design]`` hold, the plan loads with a
    default design that has a precision target, or a PlanError names the field."""
    import tomli_w

    raw = {
        "demo": "mnist1d",
        "model": {"arch": "mlp"},
        "zoo": {"original_seeds": [0, 1], "retrained_seeds": [0, 1], "bases": [0]},
        "eval": {"layers": layers, "default_design": design},
    }
    path = tmp_path / "p.toml"
    path.write_bytes(tomli_w.dumps(raw).encode())
    try:
        plan = load_meta_plan(path)
    except PlanError as exc:
        assert "eval" in str(exc)
        return
    assert plan.default_settings.precision > 0 and plan.settings.precision == 0
    assert plan.settings.layer not in plan.layers


def test_an_image_zoo_reads_uint8_images_as_a_workspace_does(tmp_path):
    """A zoo of uint8 images (the Fashion-MNIST demo's format): inputs scaled to [0, 1] with a
    channel axis, every checkpoint's outputs are probabilities, and the penultimate layer is
    read from the weights — a quantised checkpoint's from its parent's, quantised again."""
    from sde_core.pipeline.meta_eval.zoo import build_zoo, zoo_layer, zoo_probs

    rng = np.random.default_rng(0)
    images = {
        f"x_{s}": rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        for s, n in (("train", 60), ("test", 40))
    }
    labels = {
        f"y_{s}": rng.integers(0, 10, n).astype(np.uint8) for s, n in (("train", 60), ("test", 40))
    }
    np.savez(tmp_path / "data.npz", **images, **labels)
    np.save(tmp_path / "forget.npy", np.arange(0, 60, 5))
    path = tmp_path / "images.toml"
    path.write_text(
        'name = "images"\ndata_folder = "."\n'
        '[model]\narch = "fmnist_cnn"\nkwargs = { hidden = 8 }\n'
        '[train]\noptimizer = "adam"\nlr = 1e-3\nepochs = 1\nbatch_size = 16\n'
        "[zoo]\noriginal_seeds = [0, 1]\nretrained_seeds = [0, 1]\nreference_seed = 9\n"
        'bases = [0]\n[zoo.methods]\neu_k = [{ k = 1 }]\n[zoo.returns]\nquantise = ["int8"]\n'
    )
    plan = load_meta_plan(path)
    data = plan.load_data()
    assert data.is_image and data.x_train.dtype == np.uint8
    x, _ = data.dataset("train").get_batch(np.arange(3))
    assert tuple(x.shape) == (3, 1, 28, 28) and float(x.max()) <= 1.0
    zoo = {u.name: u for u in build_zoo(plan, tmp_path / "work")}
    assert {"original-s0", "eu_k-s0-1", "int8-eu_k-s0", "relearn-eu_k-s0"} <= set(zoo)
    train, test = zoo_probs(tmp_path / "work", "int8-eu_k-s0")
    assert train.shape == (60, 10) and test.shape == (40, 10)
    assert np.allclose(train.sum(axis=1), 1.0, atol=1e-5)
    hidden, _ = zoo_layer(plan, tmp_path / "work", zoo["int8-eu_k-s0"], "penultimate", data)
    assert hidden.shape == (60, 8)
    again, _ = zoo_layer(plan, tmp_path / "work", zoo["int8-eu_k-s0"], "penultimate", data)
    assert np.array_equal(hidden, again)  # read back from its cache


def test_the_fashion_mnist_plan_is_a_full_zoo_of_the_demo_s_cnn():
    plan = load_meta_plan("fashion-mnist")
    units = zoo_units(plan)
    assert plan.arch == "fmnist_cnn" and plan.train["epochs"] == 30
    assert sum(u.kind != "reference" for u in units) >= 60
    assert {u.params["k"] for u in units if u.method == "eu_k" and u.kind == "unlearned"} == {
        1,
        2,
        4,
    }


def test_withheld_verdicts_are_counted_by_the_first_reason_they_name():
    from sde_core.pipeline.meta_eval.scores import NULL_GATE

    rows = [
        {"inconclusive_reason": "an outlying panel member: OOT panel member 12 of draw 5"},
        {
            "inconclusive_reason": "the calibrated reference panels do not separate training from "
            "unseen data; an outlying panel member: …"
        },
        {"inconclusive_reason": f"{NULL_GATE} 12% of unseen subsets in-training"},
        {"inconclusive_reason": "the paper's split-level reference test is not significant"},
        {"inconclusive_reason": None},
    ]
    assert withheld_counts(rows) == {
        "panel outlier": 1,
        "reference test": 1,
        "panels do not separate": 1,
        "null check": 1,
        "other": 1,
    }


def test_the_default_design_counts_each_way_the_precision_target_is_missed():
    """The zoo's precision states and, for "not reached", which of method §15's ways each
    checkpoint's note gives and the range of their half-widths (REPRODUCTION quotes them)."""
    base = {"precision_target": 0.1, "draws": 12, "draws_needed": 12, "notes": ""}
    lead = "precision ±0.1 not reached after the 12 draws the pilot fixed: otr ±{:.3f}: "
    default_rows = [
        {**base, "precision_half_width": 0.094},
        {**base, "precision_half_width": 0.104, "notes": lead.format(0.104) + "Stein's ±0.099 "
         "and the Korn–Graubard interval over all 12 draws (±0.095) each hold the target, but "
         "Korn–Graubard's is not symmetric about the rate, and the join … is wider"},
        {**base, "precision_half_width": 0.122, "notes": "x; " + lead.format(0.122) + "the "
         "pilot's per-draw SD 0.203 underestimated the full run's 0.264, so …"},
        {**base, "precision_half_width": 0.130, "draws_needed": 80, "draws": 12,
         "notes": "precision ±0.1 not reached: budget spent at half-width 0.130"},
        {**base, "precision_half_width": None, "notes": "no precision target applied: …"},
    ]  # fmt: skip
    rows = [{"verdict": "mixed", "verdict_defaults": "mixed"}] * len(default_rows)
    found = default_design(rows, default_rows)
    states = {"reached": 1, "not reached": 2, "not reached (budget spent)": 1, "not applied": 1}
    assert found["precision_states"] == states
    assert found["miss_reasons"] == {"Stein's and Korn–Graubard's centred apart": 1,
                                     "the pilot's SD below the full run's": 1}  # fmt: skip
    assert (found["missed_half_width_min"], found["missed_half_width_max"]) == (0.104, 0.122)
