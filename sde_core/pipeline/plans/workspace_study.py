"""The ``workspace`` experiment of a plan: an existing workspace's models evaluated at every
layer × pooling × seed (issue 35: which representation of a language model, if any, makes SDE
agree with its behaviour; ``catalog/lm_representations.toml``).

One job per (seed, layer, pooling) (:func:`~sde_core.pipeline.plans.graph.build_jobs`) runs
:func:`~sde_core.pipeline.evaluation.workspace_run.evaluate_workspace` on the workspace at its
``[defaults]`` with the plan's ``eval`` table, the layer, the pooling and the seed, and returns
one ``points`` row per model: its ``models`` row (every column) and, where the workspace holds a
``metrics.json`` (the facts demo's: mean per-token loss, loss gap D_te − D_f and the
loss-threshold attack AUC per model), that model's behaviour beside them, each field prefixed
``behaviour_`` (``behaviour_loss_gap``, ``behaviour_mia_auc``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sde_core.pipeline.plans.graph import JobContext, JobResult, PlanJob
from sde_core.pipeline.plans.params import WorkspaceParams

__all__ = ["BEHAVIOUR_PREFIX", "run_workspace_job", "workspace_fingerprint"]

#: Prefix of the behaviour columns, one per field of the model's entry in ``metrics.json``
#: (``behaviour_loss_gap``, ``behaviour_mia_auc`` …), kept apart from the evaluation's own.
BEHAVIOUR_PREFIX = "behaviour_"


def workspace_fingerprint(p: WorkspaceParams) -> str:
    """The content hash of the plan's workspace (its models, data and defaults)."""
    from sde_core.pipeline.workspace import workspace_hash
    from sde_core.pipeline.workspace_load import load_workspace

    return workspace_hash(load_workspace(Path(p.workspace).resolve()))


def _number(value: Any) -> Any:
    """A store cell: text, None and truth values as they are, numbers as float (NaN for a
    non-finite one), anything else as text."""
    if value is None or isinstance(value, str | bool):
        return value
    if type(value).__name__ == "bool_":  # numpy's truth value
        return bool(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else math.nan


def run_workspace_job(job: PlanJob, ctx: JobContext) -> JobResult:
    """Evaluate the workspace at the job's layer, pooling and seed (no results store: the plan
    run's own store keeps the rows)."""
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.workspace_load import load_workspace

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
        entry: dict[str, Any] = {**job.labels, "model": name}
        entry.update({str(k): _number(v) for k, v in row.items() if k != "name"})  # the models row
        entry.update({BEHAVIOUR_PREFIX + str(k): _number(v) for k, v in seen.items()})
        rows.append(entry)
    return JobResult(tables={"points": rows})
