"""The evaluation of a workspace's models, split along its seams (method §3–6, §9, §12).

- :mod:`~.plan` — subset planning: the B independent draws, pools split into reference and
  control halves (:func:`draw_subsets`);
- :mod:`~.stages` — stage caches keyed by exactly what each stage depends on;
- :mod:`~.statistics` — per-draw statistics and their combination over draws (the gate);
- :mod:`~.summary` — :class:`ModelSummary` / :class:`DrawSummary` and the JSON document;
- :mod:`~.run` — one model, stage by stage, with partial results (:class:`ModelRun`);
- :mod:`~.workspace_run` — whole workspaces with the results store (:func:`evaluate_workspace`);
- :mod:`~.session` — interactive use by the dashboard (:class:`EvaluationSession`);
- :mod:`~.caveats` — the measured caveats of an evaluation (:func:`caveat_numbers`).

The stable import path is :mod:`sde_core.evaluate` (via :mod:`sde_core.pipeline.evaluate`).
"""

from sde_core.pipeline.evaluation.caveats import Caveats, caveat_numbers
from sde_core.pipeline.evaluation.plan import (
    F1_NEGATIVE_POOLS,
    ROLES_WITH_FORGET_NEGATIVES,
    DrawPlan,
    F1Negatives,
    SubsetPlan,
    default_f1_negatives,
    draw_subsets,
)
from sde_core.pipeline.evaluation.run import (
    STAGES,
    EvaluationCancelled,
    ModelEvaluation,
    ModelRun,
    PartialEvaluation,
    evaluate_arrays,
    run_model,
)
from sde_core.pipeline.evaluation.session import COMPARE_STAGES, EXPLORE_STAGES, EvaluationSession
from sde_core.pipeline.evaluation.stages import StageCache
from sde_core.pipeline.evaluation.summary import CLI_COLUMNS, DrawSummary, ModelSummary
from sde_core.pipeline.evaluation.workspace_run import (
    INTERVAL_METHODS,
    EvaluationResult,
    evaluate_model_job,
    evaluate_workspace,
    stage_cache_dir,
)

__all__ = [
    "CLI_COLUMNS",
    "COMPARE_STAGES",
    "EXPLORE_STAGES",
    "F1_NEGATIVE_POOLS",
    "INTERVAL_METHODS",
    "ROLES_WITH_FORGET_NEGATIVES",
    "STAGES",
    "Caveats",
    "DrawPlan",
    "DrawSummary",
    "EvaluationCancelled",
    "EvaluationResult",
    "EvaluationSession",
    "F1Negatives",
    "ModelEvaluation",
    "ModelRun",
    "ModelSummary",
    "PartialEvaluation",
    "StageCache",
    "SubsetPlan",
    "caveat_numbers",
    "default_f1_negatives",
    "draw_subsets",
    "evaluate_arrays",
    "evaluate_model_job",
    "evaluate_workspace",
    "run_model",
    "stage_cache_dir",
]
