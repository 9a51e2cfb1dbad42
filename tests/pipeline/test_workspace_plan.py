"""The ``workspace`` experiment of a plan (``catalog/lm_representations.toml``): a workspace's
models evaluated at each layer × pooling, each row beside the model's behaviour."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sde_core.errors import PlanError
from sde_core.pipeline.plans.driver import run_plan
from sde_core.pipeline.plans.spec import load_plan
from sde_core.pipeline.store import ResultsStore

pytest.importorskip("transformers")  # the optional [llm] extra

FACTS = Path(__file__).resolve().parents[2] / "assets" / "demo-facts"
TINY = ["eval.targets=4", "eval.splits=4", "eval.draws=2", "eval.panel_size=20",
        "eval.null_pairs=2", "eval.baseline_targets=0"]  # fmt: skip


@pytest.mark.slow  # six language models extracted at two windows: ~100 s at load 15
def test_a_workspace_plan_evaluates_each_layer_and_pooling_beside_behaviour(
    tmp_path: Path,
) -> None:
    ws = shutil.copytree(
        FACTS, tmp_path / "facts", ignore=shutil.ignore_patterns(".sde-cache", "*.sqlite*")
    )
    overrides = [f'params.workspace="{ws}"', 'params.layers=["answer_logprob"]',
                 'params.poolings=["mean", "last"]', *TINY]  # fmt: skip
    variant = load_plan("lm_representations").variant("default", overrides)
    with ResultsStore(tmp_path / "r.sqlite") as store:
        report = run_plan(variant, tmp_path / "work", store, progress=False)
        points = store.rows(report.run_id, "points")
    assert report.ran == [
        "workspace/seed=0/layer=answer_logprob/pool=mean",
        "workspace/seed=0/layer=answer_logprob/pool=last",
    ]
    metrics = json.loads((ws / "metrics.json").read_text())
    assert len(points) == 2 * len(metrics)
    for row in points.to_dict("records"):
        assert row["layer"] == "answer_logprob" and row["dim"] == 16
        for key, value in metrics[row["model"]].items():
            assert row[f"behaviour_{key}"] == pytest.approx(value)
        # the gate withholds the OTR exactly when it gives a reason
        assert np.isnan(row["otr"]) == bool(row["inconclusive_reason"])
    assert set(points["pooling"]) == {"mean", "last"}


def test_a_workspace_plan_takes_no_data_or_model_tables(tmp_path: Path) -> None:
    plan = tmp_path / "p.toml"
    text = (Path(load_plan("lm_representations").path)).read_text(encoding="utf-8")
    plan.write_text(text.replace('seeds = [0]\n', 'seeds = [0]\npoolings = ["first"]\n', 1)
                    .replace('poolings = ["mean", "last"]\n', "", 1))  # fmt: skip
    with pytest.raises(PlanError, match=r"params\.poolings: 'first' is not 'mean' or 'last'"):
        load_plan(plan)
