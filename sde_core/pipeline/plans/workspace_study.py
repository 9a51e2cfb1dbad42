"""The ``workspace`` experiment of a plan: an existing workspace's models evaluated at every
layer × pooling × seed (issue 35: which representation of a language model, if any, makes SDE
agree with its behaviour; ``catalog/lm_representations.toml``).

One job per (seed, layer, pooling) (:func:`~sde_core.pipeline.plans.graph.build_jobs`) runs
:func:`~sde_core.pipeline.evaluation.workspace_run.evaluate_workspace` on the workspace at its
``[defaults]`` with the plan's ``eval`` table, the layer, the pooling and the seed, and returns
one ``points`` row per model: the evaluation's numbers and, where the workspace holds a
``metrics.json`` (the facts demo's: mean per-token loss, loss gap D_te − D_f and the
loss-threshold attack AUC per model), that model's behaviour beside them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sde_core.pipeline.plans.graph import JobContext, JobResult, PlanJob
from sde_core.pipeline.plans.params import WorkspaceParams

__all__ = ["BEHAVIOUR_FIELDS", "POINT_FIELDS", "run_workspace_job", "workspace_fingerprint"]

#: The evaluation's columns each ``points`` row carries (beside the labels).
POINT_FIELDS = (
    "layer", "dim", "sigma", "otr", "otr_lo", "otr_hi", "calibrated_otr", "calibrated_otr_lo",
    "calibrated_otr_hi", "f1", "dependence_score", "references_valid", "reference_p",
    "panel_valid", "panel_p", "n_in_training", "n_out_of_training", "n_over_unlearned",
    "n_inconclusive", "null_split_fpr", "null_calibrated_fpr", "score_spread_corr",
    "inconclusive_reason", "evidence_conflict",
)  # fmt: skip
#: The behaviour columns read from the workspace's ``metrics.json``.
BEHAVIOUR_FIELDS = ("loss_forget", "loss_retain", "loss_test", "loss_gap", "mia_auc")


def workspace_fingerprint(p: WorkspaceParams) -> str:
    """The content hash of the plan's workspace (its models, data and defaults)."""
    from sde_core.pipeline.workspace import load_workspace, workspace_hash

    return workspace_hash(load_workspace(Path(p.workspace).resolve()))


def _number(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    return float(value) if math.isfinite(float(value)) else math.nan


def run_workspace_job(job: PlanJob, ctx: JobContext) -> JobResult:
    """Evaluate the workspace at the job's layer, pooling and seed (no results store: the plan
    run's own store keeps the rows)."""
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.workspace import load_workspace

    sp = job.spec
    ws = load_workspace(sp["workspace"])
    settings = ws.defaults.with_overrides(
        **sp["eval"], layer=sp["layer"], pool=sp["pool"], seed=sp["seed"], device=ctx.device
    )
    result = evaluate_workspace(ws, settings)
    metrics_file = Path(sp["workspace"]) / "metrics.json"
    behaviour = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    rows = []
    for row in result.models.to_dict("records"):
        name = str(row["name"])
        seen = behaviour.get(name, {})
        rows.append({
            **job.labels, "model": name, "role": row["role"], "method": row["method"],
            **{k: _number(row.get(k)) for k in POINT_FIELDS},
            **{k: _number(seen.get(k, math.nan)) for k in BEHAVIOUR_FIELDS},
        })  # fmt: skip
    return JobResult(tables={"points": rows})
