"""Running a :class:`~.run.ModelRun` to the end: :func:`run_model` (with updates after each
step, progress and cancellation: :class:`EvaluationCancelled`) and :func:`evaluate_arrays`, the
one-shot evaluation of one model from its activations.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from sde_core.pipeline.evaluation.model_evaluation import ModelEvaluation
from sde_core.pipeline.evaluation.plan import F1Negatives, SubsetPlan
from sde_core.pipeline.evaluation.run import STAGES, ModelRun, PartialEvaluation
from sde_core.pipeline.evaluation.stages import StageCache
from sde_core.pipeline.model_inputs import ModelInputs, Progress
from sde_core.pipeline.settings import EvalSettings

__all__ = [
    "EvaluationCancelled",
    "evaluate_arrays",
    "run_model",
]


class EvaluationCancelled(Exception):
    """Raised by :func:`run_model` when ``cancelled()`` returned True between two stages.

    Attributes:
        partial: the last :class:`PartialEvaluation` (its finished stages are cached).
    """

    def __init__(self, partial: PartialEvaluation | None) -> None:
        super().__init__("evaluation stopped; finished stages are kept and a rerun resumes")
        self.partial = partial


def run_model(
    run: ModelRun,
    *,
    on_update: Callable[[PartialEvaluation], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    progress: Progress | None = None,
) -> ModelEvaluation:
    """Run every step of ``run`` and return the final :class:`ModelEvaluation`.

    Args:
        run: the :class:`ModelRun`.
        on_update: called with each :class:`PartialEvaluation` (e.g. to redraw a page).
        cancelled: checked before every step; when it returns True,
            :class:`EvaluationCancelled` is raised (finished stages stay cached).
        progress: ``progress(stage, done, total)`` callback (labels prefixed by the model).

    Raises:
        EvaluationCancelled: ``cancelled()`` returned True.
    """
    last: PartialEvaluation | None = None
    steps = run.steps()
    while True:
        if cancelled is not None and cancelled():
            raise EvaluationCancelled(last)
        try:
            last = next(steps)
        except StopIteration:
            break
        if progress is not None:
            progress(f"{last.model}: {last.label}", last.done, last.total)
        if on_update is not None:
            on_update(last)
    return run.evaluation(complete=True)


def evaluate_arrays(
    inputs: ModelInputs,
    plan: SubsetPlan,
    settings: EvalSettings,
    progress: Progress | None = None,
    *,
    f1_negatives: F1Negatives | None = None,
    cache: StageCache | None = None,
    stages: Collection[str] = STAGES,
) -> ModelEvaluation:
    """Evaluate one model from its activations (a pure function of its arguments).

    Args:
        inputs: the model's activations, probabilities and labels.
        plan: the subsets from :func:`~.plan.draw_subsets` (shared by all models).
        settings: the evaluation settings.
        progress: optional ``progress(stage, done, total)`` callback.
        f1_negatives: the controlled F1's negative pool (default: method §5's choice for the
            role: D_f for ``"retrained"``, D_te otherwise).
        cache: a :class:`~.stages.StageCache` to read and fill (default: none).
        stages: the stages to run (default all).
    """
    run = ModelRun(inputs, plan, settings, f1_negatives=f1_negatives, cache=cache, stages=stages)
    return run_model(run, progress=progress)
