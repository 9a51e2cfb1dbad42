"""The behaviour check in words (``viz/behaviour_text.py``) and on the Compare table: every
family's numbers with their intervals, a measure a family lacks said in words — never a bare
``None`` or ``nan``."""

from __future__ import annotations

import pandas as pd

from sde_core.pipeline.evaluation.statistics import summarize
from sde_core.pipeline.settings import EvalSettings
from sde_core.viz.behaviour_text import NOT_MEASURED, behaviour_cells, behaviour_text
from sde_core.viz.ui_support import comparison_display


def _row(name: str, **values: object) -> dict[str, object]:
    identity = {"name": name, "role": "unlearned", "method": "llm_ga", "layer": "layer.1",
                "dim": 16, "sigma": 1.0, "f1_negatives": "test"}  # fmt: skip
    row = summarize(identity, [], EvalSettings(), {})[0].to_row()
    row.update(values)
    return row


LM = {
    "behaviour_measure": "mean next-token loss per text on its answer (nats per token)",
    "loss_forget": 0.35, "loss_test": 0.41, "loss_gap": -0.053, "loss_gap_lo": -0.071,
    "loss_gap_hi": -0.036, "attack_auc": 0.647, "attack_auc_lo": 0.598, "attack_auc_hi": 0.696,
    "attack_auc_vs_retrained": 0.127, "attack_auc_vs_retrained_lo": 0.08,
    "attack_auc_vs_retrained_hi": 0.175, "zlib_auc": 0.62, "zlib_auc_lo": 0.57,
    "zlib_auc_hi": 0.67, "mink_auc": 0.64, "mink_auc_lo": 0.59, "mink_auc_hi": 0.69,
}  # fmt: skip


def test_each_family_reads_with_its_intervals() -> None:
    lm = behaviour_text(_row("original", **LM))
    assert "gap -0.053 [-0.071, -0.036]" in lm and "loss attack AUC 0.65 [0.60, 0.70]" in lm
    assert "+0.13 [+0.08, +0.17] against the retrained" in lm and "whole text not measured" in lm
    cnn = behaviour_text(_row("cnn", acc_gap=12.5, acc_gap_lo=8.0, acc_gap_hi=17.0))
    assert cnn.startswith("accuracy gap D_f − D_te +12.5 [+8.0, +17.0] points")
    assert "not measured in these results" in behaviour_text(_row("toy"))
    cells = behaviour_cells(_row("toy"))
    assert set(cells.values()) == {NOT_MEASURED}


def test_compare_shows_a_language_models_own_columns_and_no_none() -> None:
    models = pd.DataFrame([_row("original", **LM), _row("random")])
    shown = comparison_display({"layer.1": models}, family="causal language model")
    assert list(shown["loss attack AUC"]) == ["0.65 [0.60, 0.70]", NOT_MEASURED]
    assert set(shown["Acc gap D_f−D_te (pts)"]) == {"n/a (causal language model)"}
    text = shown.astype(str).to_numpy().ravel()
    assert not any(v in ("None", "nan", "<NA>") for v in text)
