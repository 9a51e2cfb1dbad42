"""The planner (method §15): from a short pilot, the draws, targets and seconds a precision
target needs, before the user commits to the run.

:func:`forecast` runs a model's pilot (the first ``pilot_draws`` draws: references, targets and
panels — exactly the draws the run itself starts with, so with a stage cache the run reuses
them), fixes the design as the run would (:meth:`~.run.ModelRun.decide`) and times it: the
pilot's seconds per H subset computed, times the subsets of every stage the run will compute on
its B draws. :func:`forecast_models` does it for the models of an evaluation session (the
dashboard's), :func:`forecast_workspace` for a workspace folder (the CLI's ``--plan-only``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.plan import null_top_up_counts
from sde_core.pipeline.evaluation.run import ModelRun
from sde_core.pipeline.evaluation.session import EvaluationSession
from sde_core.pipeline.settings import EvalSettings

__all__ = ["Forecast", "forecast", "forecast_models", "forecast_sentence", "forecast_workspace"]

#: The H batches of one draw computed by each stage (:meth:`~.plan.DrawPlan.groups`).
_STAGE_GROUPS = {
    "references": ("core_train", "core_test"),
    "panels": ("panel_train", "panel_test"),
    "controls": ("controls_pos", "controls_neg"),
    "null": ("null",),
}


@dataclass(frozen=True)
class Forecast:
    """What a precision target costs for one model.

    Attributes:
        model: its name. target: W. pilot_draws: n0.
        draws: the draws the run will use (``min(needed, max_draws)``). needed: the draws W
            needs. targets: targets judged over those draws (``draws`` × per draw).
        half_widths: each driving rate's predicted half-width at ``draws`` (rate units).
        seconds: predicted seconds of the run's H work on this machine (NaN when the pilot was
            read from the stage cache and could not be timed). pilot_seconds: the pilot's.
    """

    model: str
    target: float
    pilot_draws: int
    draws: int
    needed: int
    targets: int
    half_widths: dict[str, float]
    seconds: float
    pilot_seconds: float

    @property
    def budget_spent(self) -> bool:
        """Whether the budget (``max_draws``) stops the run before W."""
        return self.draws < self.needed

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {
            "model": self.model,
            "precision": self.target,
            "pilot_draws": self.pilot_draws,
            "draws": self.draws,
            "draws_needed": self.needed,
            "targets": self.targets,
            "half_widths": dict(self.half_widths),
            "seconds": None if math.isnan(self.seconds) else round(self.seconds, 1),
            "pilot_seconds": round(self.pilot_seconds, 2),
            "budget_spent": self.budget_spent,
        }


def forecast_sentence(forecasts: Sequence[Forecast]) -> str:
    """One line for a page or the CLI: ``"≈ 28 draws (560 targets), ≈ 40 s on this machine"``
    (summed over models; the budget named when it stops a model early)."""
    if not forecasts:
        return "nothing to plan"
    draws = max(f.draws for f in forecasts)
    targets = sum(f.targets for f in forecasts)
    seconds = sum(f.seconds for f in forecasts)
    who = "" if len(forecasts) == 1 else f" for {len(forecasts)} models (the most for one)"
    text = f"≈ {draws} draws{who}, {targets} targets"
    text += (
        ", time not predicted (the pilot came from the cache)"
        if math.isnan(seconds)
        else f", ≈ {seconds:.0f} s on this machine"
    )
    short = [f.model for f in forecasts if f.budget_spent]
    if short:
        text += (
            f"; the budget of {forecasts[0].draws if len(forecasts) == 1 else 'max_draws'} "
            f"draws stops {', '.join(short)} before ±{forecasts[0].target:g}"
        )
    return text


def forecast(run: ModelRun) -> Forecast:
    """Run the pilot of ``run`` (if not run yet) and predict the whole run (module docstring).

    Raises:
        SettingsError: the settings have no precision target.
    """
    settings = run.settings
    if not settings.precision > 0:
        raise SettingsError("a forecast needs a precision target: set precision W > 0 (e.g. 0.1)")
    hits = run.cache.hits["h"]
    t0 = time.perf_counter()
    design = run.decide()
    pilot_seconds = time.perf_counter() - t0
    pilot_groups = [
        g
        for d in run.plan.draws[: design.n0]
        for name, g in d.groups(settings.seed, run.f1_negatives).items()
        if name in _STAGE_GROUPS["references"] + _STAGE_GROUPS["panels"]
        and ("panels" in run.stages or name.startswith("core"))
    ]
    computed = len(pilot_groups) - (run.cache.hits["h"] - hits)
    subsets = sum(len(g.rows) for g in pilot_groups) * computed / max(len(pilot_groups), 1)
    per_subset = pilot_seconds / subsets if computed > 0 and subsets > 0 else math.nan
    run_names = {n for stage in run.stages if stage in _STAGE_GROUPS for n in _STAGE_GROUPS[stage]}
    run_subsets = sum(
        len(g.rows)
        for d in run.plan.draws[: design.draws]
        for name, g in d.groups(settings.seed, run.f1_negatives).items()
        if name in run_names
    )
    if "null" in run.stages:  # the subsets that size the null check (method §9)
        for d in run.plan.draws[: design.draws]:
            pairs, train = null_top_up_counts(d, design.draws, settings)
            run_subsets += 2 * pairs + train
    halves = {
        metric: plan.t * plan.sd / math.sqrt(design.draws) for metric, plan in design.plans.items()
    }
    per_draw = len(run.plan.draws[0].targets)
    return Forecast(
        model=run.inputs.name,
        target=settings.precision,
        pilot_draws=design.n0,
        draws=design.draws,
        needed=design.needed,
        targets=per_draw * design.draws,
        half_widths=halves,
        seconds=per_subset * run_subsets,
        pilot_seconds=pilot_seconds,
    )


def forecast_models(
    session: EvaluationSession, settings: EvalSettings, models: Sequence[str] | None = None
) -> list[Forecast]:
    """:func:`forecast` for every (or the named) model of a session's workspace; the pilots go
    into the session's stage cache, so the run that follows reuses them.

    Raises:
        SettingsError: no precision target, or unknown models.
    """
    if not settings.precision > 0:
        raise SettingsError("a plan needs a precision target: set precision W > 0 (e.g. 0.1)")
    known = [m.name for m in session.workspace.models]
    names = list(models) if models is not None else known
    missing = sorted(set(names) - set(known))
    if missing:
        raise SettingsError(f"unknown models {missing}; the workspace has {sorted(known)}")
    return [forecast(session.model_run(name, settings)) for name in names]


def forecast_workspace(
    workspace: Any, settings: EvalSettings, *, models: Sequence[str] | None = None
) -> list[Forecast]:
    """:func:`forecast_models` on a new session of ``workspace`` (a folder or a
    :class:`~sde_core.pipeline.workspace.Workspace`), with its stage cache on disk."""
    if not settings.precision > 0:
        raise SettingsError("--plan-only needs a precision target: add --precision W (e.g. 0.1)")
    return forecast_models(EvaluationSession(workspace), settings, models)
