"""Many models on one page (sde_core.viz.model_groups): facets, filters, pages and grouped
summaries, against hand-counted expectations."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from sde_core.pipeline.evaluation.metric_table import CALIBRATED_OTR, OTR
from sde_core.viz.model_groups import (
    filter_models,
    group_summary,
    model_facets,
    page_count,
    page_of,
    verdict_counts,
)


def _entry(name: str, role: str, method: str, lr: float | None, seed: int | None):
    hyper = {} if lr is None else {"lr": lr, "epochs": 10}
    return SimpleNamespace(name=name, role=role, method=method, seed=seed, hyperparameters=hyper)


ENTRIES = [
    _entry("original", "original", "train", None, 0),
    _entry("retrained", "retrained", "retrain", None, 1),
    _entry("ft-a", "unlearned", "ft", 0.01, 0),
    _entry("ft-b", "unlearned", "ft", 0.01, 1),
    _entry("ft-c", "unlearned", "ft", 0.1, 0),
    _entry("ga-a", "unlearned", "ga", 0.001, 0),
]


def test_facets_and_filters():
    facets = model_facets(ENTRIES)
    assert facets.loc[2].to_dict() == {"name": "ft-a", "role": "unlearned", "method": "ft",
                                       "strength": "lr=0.01", "seed": "0"}  # fmt: skip
    assert facets.loc[0, "strength"] == ""  # no strength recorded
    assert filter_models(facets, methods=["ft"]) == ["ft-a", "ft-b", "ft-c"]
    assert filter_models(facets, roles=["retrained", "original"]) == ["original", "retrained"]
    assert filter_models(facets, methods=["ft"], text="B") == ["ft-b"]
    assert filter_models(facets) == [e.name for e in ENTRIES]


def test_pages_cover_every_name_once():
    names = [f"m{i}" for i in range(45)]
    assert page_count(45, 20) == 3 and page_count(0, 20) == 1
    pages = [page_of(names, p, 20) for p in range(1, 4)]
    assert [len(p) for p in pages] == [20, 20, 5]
    assert [n for p in pages for n in p] == names
    assert page_of(names, 99, 20) == names[40:]  # clipped to the last page


def test_group_summary_counts_withheld_and_conflicts_apart():
    facets = model_facets(ENTRIES)
    models = pd.DataFrame({
        "name": ["original", "retrained", "ft-a", "ft-b", "ft-c", "ga-a"],
        CALIBRATED_OTR.key: [0.0, 0.9, 0.2, 0.4, math.nan, 0.5],
        OTR.key: [0.0, 1.0, 0.5, 0.7, math.nan, 0.9],
        "evidence_conflict": ["", "", "", "acc gap", "", ""],
    })  # fmt: skip
    by_method = group_summary(models, facets, ["method"]).set_index("method")
    ft = by_method.loc["ft"]
    assert ft["models"] == 3 and ft["withheld"] == 1 and ft["conflicting"] == 1
    assert ft[f"{CALIBRATED_OTR.key} mean"] == pytest.approx(0.3)  # withheld left out
    assert (ft[f"{CALIBRATED_OTR.key} min"], ft[f"{CALIBRATED_OTR.key} max"]) == (0.2, 0.4)
    both = group_summary(models, facets, ["method", "strength"])
    assert len(both) == 5 and both["models"].sum() == 6
    with pytest.raises(ValueError, match="group by at least one"):
        group_summary(models, facets, [])


def test_verdict_counts_most_frequent_first():
    lo, hi = OTR.lo, OTR.hi
    assert lo and hi
    models = pd.DataFrame({
        "name": ["a", "b", "c", "d", "e"],
        "references_valid": [True, True, True, True, False],
        OTR.key: [0.9, 0.8, 0.1, 0.9, math.nan],
        lo: [0.7, 0.6, 0.0, 0.7, math.nan],
        hi: [1.0, 1.0, 0.3, 1.0, math.nan],
        "evidence_conflict": ["", "", "", "acc gap", ""],
    })  # fmt: skip
    counts = verdict_counts(models)
    assert counts == {"consistent with forgetting": 2, "conflicting evidence": 1,
                      "inconclusive": 1, "not forgotten": 1}  # fmt: skip
    ties_by_label = ["consistent with forgetting", "conflicting evidence", "inconclusive",
                     "not forgotten"]  # fmt: skip
    assert list(counts) == ties_by_label
    assert verdict_counts(models.iloc[:0]) == {}
