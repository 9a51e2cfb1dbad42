"""The workspace's answer (sde_core.viz.answer): each audited model judged by the criterion on
the paired difference to the retrained model (method §15), with one caveat of its own."""

from __future__ import annotations

import pandas as pd

from sde_core.pipeline.criterion import Criterion
from sde_core.viz.answer import answer_counts, workspace_answer


def model(name: str, role: str, cal: float, **extra) -> dict:
    return {
        "name": name, "role": role, "method": name, "references_valid": True,
        "reference_p": 1e-6, "otr": cal, "otr_lo": max(cal - 0.2, 0), "otr_hi": min(cal + 0.2, 1),
        "calibrated_otr": cal, "calibrated_otr_lo": max(cal - 0.2, 0),
        "calibrated_otr_hi": min(cal + 0.2, 1), "panel_valid": True, "panel_p": 1e-4,
        "n_in_training": 0 if cal != cal else round(100 * (1 - cal)),
        "n_out_of_training": 0 if cal != cal else round(100 * cal),
        "n_inconclusive": 0, "null_pairs": 20, "null_split_fpr": 0.25,
        "score_spread_corr": 0.99, "evidence_conflict": "", "inconclusive_reason": "",
    } | extra  # fmt: skip


def draws(per_model: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"model": m, "draw": b, "calibrated_otr": v, "otr": v, "targets": 100,
          "controls": 100} for m, values in per_model.items() for b, v in enumerate(values)]
    )  # fmt: skip


def test_each_audited_model_gets_the_criterions_word_from_the_paired_test():
    models = pd.DataFrame(
        [
            model("original", "original", 0.0),
            model("retrained", "retrained", 0.9),
            model("close", "unlearned", 0.88),
            model("far", "unlearned", 0.3),
            model("wide", "unlearned", 0.6),
            model("clash", "unlearned", 0.9, evidence_conflict="accuracy 78% on D_f vs 63%"),
            model("gated", "unlearned", float("nan"), inconclusive_reason="the panels overlap"),
        ]
    )
    table = draws({
        "original": [0.0] * 5,
        "retrained": [0.9, 0.92, 0.88, 0.91, 0.89],
        "close": [0.89, 0.91, 0.87, 0.9, 0.88],  # −1 point in every draw: inside ±10
        "far": [0.3, 0.32, 0.28, 0.31, 0.29],  # −60 points in every draw
        "wide": [0.2, 1.0, 0.5, 0.9, 0.4],  # noisy: the interval crosses −10
        "clash": [0.9, 0.92, 0.88, 0.91, 0.89],
        "gated": [float("nan")] * 5,
    })  # fmt: skip
    answer = workspace_answer(models, table, Criterion(), 100)
    by = {line.name: line for line in answer.lines}
    assert list(by) == ["close", "far", "wide", "clash", "gated"], "unlearned models only"
    assert by["close"].label == "forgotten" and by["close"].colour == "green"
    assert by["far"].within_retraining is False  # −60 points in every draw
    assert by["far"].label == "not forgotten"
    assert "60 points below the retrained model's" in by["far"].sentence
    assert by["far"].vs_retrained.startswith("−60 points [")
    assert by["far"].vs_original.startswith("+30 points [")
    assert by["wide"].label == "undecided" and "reaches across" in by["wide"].sentence
    assert by["clash"].label == "conflicting evidence" and by["clash"].colour == "orange"
    assert by["gated"].label == "undecided" and "the panels overlap" in by["gated"].sentence
    assert (
        answer_counts(answer.lines)
        == "1 conflicting evidence, 1 not forgotten, 2 undecided, 1 forgotten"
    )
    # the null-check caveat every decided model shares is stated once; the spread caveat
    # qualifies the verdicts that are not "no trace" (far, wide, clash): once, naming them
    shared, spread, *_ = answer.shared_caveats
    assert "fails its null check" in shared and "25% of no-difference checks" in shared
    assert (
        spread.startswith("For far, wide, clash: The score tracks the spread")
        and "r = 0.99" in spread
    )
    assert all("null check" not in line.caveat for line in answer.lines)
    assert by["far"].caveat == by["wide"].caveat == "" and "spread" not in by["close"].caveat
    assert by["gated"].caveat.startswith("Inconclusive is not evidence of forgetting")
    # the paper's test is named as the paper's, with its measured level beside it
    assert (
        "measured false-alarm rate on no-difference checks is 25% at nominal 1%"
        in (by["far"].evidence[0])
    )


def test_without_a_retrained_model_every_answer_is_undecided():
    models = pd.DataFrame([model("original", "original", 0.0), model("rl", "unlearned", 0.9)])
    answer = workspace_answer(models, draws({"original": [0.0] * 3, "rl": [0.9] * 3}),
                              Criterion(), 100)  # fmt: skip
    (line,) = answer.lines
    assert line.label == "undecided" and "has none" in line.sentence
    assert line.vs_retrained == "no retrained model"


def test_the_scope_says_the_draws_the_models_ran_not_the_fixed_designs_b():
    """Under the precision design each model runs its own number of draws: the scope box says
    those (a range), never the unused fixed-design B."""
    from sde_core.pipeline.settings import EvalSettings
    from sde_core.viz.answer import draws_text, make_scope

    precise = EvalSettings(draws=5, precision=0.1, pilot_draws=10, max_draws=60)
    scope = make_scope(precise, "data", 10, 3, [10, 51, 24])
    assert dict(scope.rows())["Reference draws B"] == "10–51 per model"
    assert draws_text(precise, [12, 12]) == "12 per model"
    assert draws_text(precise) == "10 to 60 per model (the design decides)"
    assert draws_text(EvalSettings(draws=5, precision=0.0)) == "5"


def test_closeness_to_retraining_is_not_forgotten_where_the_references_read_alike():
    """On a workspace where the retrained and the original model read alike (the memorising
    denoiser: both near 0), being within the margin of the retrained model says nothing: the
    model is undecided, and the behaviour that still remembers is said. Where the references
    differ, a close model whose behaviour still fits D_f better than unseen data is
    conflicting evidence, never forgotten."""
    flat = [0.03, 0.02, 0.04, 0.03, 0.03]
    models = pd.DataFrame([
        model("original", "original", 0.03), model("retrained", "retrained", 0.05),
        model("ft", "unlearned", 0.03, behaviour_measure="denoising loss per image",
              loss_gap=-0.01, loss_gap_lo=-0.012, loss_gap_hi=-0.008,
              loss_gap_vs_retrained=-0.011, loss_gap_vs_retrained_lo=-0.013,
              loss_gap_vs_retrained_hi=-0.009),
        model("quiet", "unlearned", 0.04),
    ])  # fmt: skip
    table = draws({"original": flat, "retrained": [0.05, 0.04, 0.06, 0.05, 0.05],
                   "ft": flat, "quiet": [0.04, 0.03, 0.05, 0.04, 0.04]})  # fmt: skip
    lines = {a.name: a for a in workspace_answer(models, table, Criterion(), 100).lines}
    assert lines["ft"].label == "undecided" and "read alike" in lines["ft"].sentence
    assert "still remembers: denoising-loss gap" in lines["ft"].sentence
    assert lines["quiet"].label == "undecided" and "still remembers" not in lines["quiet"].sentence

    apart = pd.DataFrame([
        model("original", "original", 0.0), model("retrained", "retrained", 0.9),
        model("close", "unlearned", 0.9, acc_f=90.0, acc_te=70.0, acc_gap=20.0, acc_gap_lo=15.0,
              acc_gap_hi=25.0),
        model("clean", "unlearned", 0.9, acc_gap=0.5, acc_gap_lo=-2.0, acc_gap_hi=3.0),
    ])  # fmt: skip
    same = [0.9, 0.88, 0.92, 0.9, 0.9]
    table = draws({"original": [0.0] * 5, "retrained": same, "close": same, "clean": same})
    lines = {a.name: a for a in workspace_answer(apart, table, Criterion(), 100).lines}
    assert lines["close"].label == "conflicting evidence"
    sentence = lines["close"].sentence
    assert "still fits D_f better than unseen data (accuracy 90.0% on D_f" in sentence
    assert lines["clean"].label == "forgotten"
