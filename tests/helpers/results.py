"""A synthetic evaluation with known answers: four models on shared subsets (``original``
remembers D_f, ``retrain`` and ``ga`` forget it, ``rand`` carries no signal), for the figure and
report tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.designs import fixed_settings
from sde_core.pipeline.evaluation.plan import draw_subsets
from sde_core.pipeline.evaluation.run_driver import evaluate_arrays
from sde_core.pipeline.evaluation.workspace_run import EvaluationResult
from sde_core.pipeline.model_inputs import ModelInputs

__all__ = ["N_F", "N_TE", "N_TR", "D", "synthetic_result"]

N_TR, N_TE, N_F, D = 1200, 800, 300, 6


def synthetic_result() -> EvaluationResult:
    """Four models on shared subsets: training rows are more spread out than unseen rows."""
    settings = fixed_settings(
        subset_size=60, targets=20, splits=40, panel_size=20, null_pairs=6, baseline_targets=0
    )
    forget = np.random.default_rng(0).choice(N_TR, N_F, replace=False)
    plan = draw_subsets(N_TR, N_TE, forget, settings)
    rng = np.random.default_rng(1)
    y_tr, y_te = rng.integers(0, 3, N_TR), rng.integers(0, 3, N_TE)
    summaries, subsets, draws, arrays = [], [], [], {}
    for name, role, spread_train, spread_forget in (
        ("original", "original", 1.8, 1.8),
        ("retrain", "retrained", 1.8, 1.0),
        ("ga", "unlearned", 1.8, 1.0),
        ("rand", "random", 1.0, 1.0),
    ):
        tr = spread_train * rng.normal(size=(N_TR, D))
        tr[forget] *= spread_forget / spread_train
        probs_tr = np.full((N_TR, 3), 0.1)
        probs_tr[np.arange(N_TR), y_tr] = 0.8
        if spread_forget != spread_train:  # forgotten: D_f answered like unseen data
            probs_tr[forget] = 1 / 3
        inputs = ModelInputs(
            name,
            role,
            tr,
            rng.normal(size=(N_TE, D)),
            method={"ga": "GA"}.get(name, ""),
            seconds=1.5,
            train_probs=probs_tr,
            test_probs=np.full((N_TE, 3), 1 / 3),
            train_labels=y_tr,
            test_labels=y_te,
        )
        ev = evaluate_arrays(inputs, plan, settings)
        summaries.append(ev.summary)
        subsets.extend(ev.subsets)
        draws.extend(d.to_row() for d in ev.draws)
        arrays.update({f"{name}/{k}": v for k, v in ev.arrays.items()})
    return EvaluationResult(
        settings=settings,
        workspace_hash="synthetic",
        models=pd.DataFrame(summaries),
        subsets=pd.DataFrame(subsets),
        arrays=arrays,
        draws=pd.DataFrame(draws),
    )
