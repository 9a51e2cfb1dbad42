"""A class-wise forget set withholds every verdict with the class-mix numbers (method §16)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from sde_core.pipeline.evaluation.workspace_run import _withhold_for_class_mix
from sde_core.viz.verdicts.labels import verdict_label


def _rows() -> pd.DataFrame:
    base = {"references_valid": True, "otr": 1.0, "otr_lo": 0.9, "otr_hi": 1.0,
            "over_unlearned": False, "inconclusive_reason": "",
            "evidence_conflict": ""}  # fmt: skip
    conflict = {**base, "name": "original", "otr": 0.0, "otr_lo": 0.0, "otr_hi": 0.1,
                "over_unlearned": True, "evidence_conflict": "fits D_f better"}  # fmt: skip
    return pd.DataFrame([{**base, "name": "retrained"}, conflict])


def test_a_one_class_forget_set_withholds_every_verdict_and_a_random_one_none():
    rng = np.random.default_rng(1)
    train, test = rng.integers(0, 10, 3000), rng.integers(0, 10, 1000)
    bundle = SimpleNamespace(train_labels=train, test_labels=test, num_classes=10,
                             class_names=[str(i) for i in range(10)])  # fmt: skip
    rows = _rows()
    assert [verdict_label(r) for r in rows.to_dict("records")] == [
        "consistent with forgetting",
        "conflicting evidence",
    ]
    same = _withhold_for_class_mix(rows, bundle, rng.choice(3000, 300, replace=False))
    assert same is rows  # a random forget set: nothing changes
    withheld = _withhold_for_class_mix(rows, bundle, np.flatnonzero(train == 3))
    assert [verdict_label(r) for r in withheld.to_dict("records")] == ["inconclusive"] * 2
    assert all(r.startswith("D_f's classes are not those") for r in withheld.inconclusive_reason)
    assert (withheld["otr"] == rows["otr"]).all()  # the numbers stay
    assert rows["evidence_conflict"].iloc[1] == "fits D_f better"  # the input is not changed
