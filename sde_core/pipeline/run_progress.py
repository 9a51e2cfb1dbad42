"""How far a stored evaluation run has got: models stored of the total, pace, time left, stall.

An evaluation (``python -m sde_core evaluate``, on any engine, or a plan) writes each finished
model into the workspace's results store as one unit with its ``finished`` time
(:meth:`~sde_core.pipeline.store.ResultsStore.put_unit`). :class:`RunProgress` reads those
times back for one run — the run of a workspace at given settings — so that a page opened
elsewhere can show the models arriving, with the run's progress and an estimate of the time
left.

It reads cheaply, to be polled every few seconds: the run record (verified) and its units' keys
and times only (:meth:`~sde_core.pipeline.store.ResultsStore.unit_times`), without verifying
each unit's rows; those are verified when they are served
(:func:`~sde_core.pipeline.evaluation.workspace_run.stored_result`), so a damaged unit is never
shown, only counted here.

The numbers, for ``n`` of the workspace's models stored (units that are not a model of the
workspace, e.g. ``behaviour:<model>`` rows, are not counted):

- **pace**: the mean interval between stored models, ``(last − first) / (n − 1)`` over their
  ``finished`` times (None below two models). Several models finishing together (a parallel
  engine) make it the run's overall rate; a run resumed after a pause counts the pause in it.
- **time left**: ``missing × pace − (now − last)``, at least 0 (None without a pace).
- **stalled** (a display rule, not a definition): a running run with models missing whose last
  model is older than ``max(STALL_SECONDS, STALL_PACES × pace)`` — no model for much longer
  than the run's pace — or, without a pace yet, older than ``STALL_PACES × STALL_SECONDS``;
  or one whose only drivers were on this host and no longer run
  (:mod:`~sde_core.pipeline.run_drivers`). The evaluation has then probably stopped (a killed
  job, a failed model: a run whose model failed stays running); rerunning the command resumes
  it, skipping the stored models.
- **arriving**: a partial run that an evaluation's driver is adding models to, or was until it
  stopped (its marker, :mod:`~sde_core.pipeline.run_drivers`): what a page shows as
  provisional. A partial run without a marker (a page that evaluated one model) is nobody's
  work in progress: a page evaluates its missing models as for any incomplete run.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sde_core.pipeline.run_drivers import Drivers
from sde_core.pipeline.store_verify import Run, RunStatus

__all__ = [
    "STALL_PACES",
    "STALL_SECONDS",
    "RunProgress",
    "duration_text",
    "read_progress",
]

#: A running run with no new model for longer than this (s) and the pace's multiple below
#: looks stalled.
STALL_SECONDS = 60.0
#: ... and than this many times its pace (seconds a model).
STALL_PACES = 5.0


@dataclass(frozen=True)
class RunProgress:
    """One stored run's progress over a workspace's models, seen at ``now``.

    Attributes:
        run_id: the run's id in the store. status: its status (``"running"``/``"complete"``).
        stored: the workspace's models the run has stored, in the order they were stored.
        total: how many models the workspace has.
        first, last: the ``finished`` times of the first and the last stored model (UTC;
            None when none is stored).
        now: the time the progress is seen at (UTC): :meth:`at` moves it.
        drivers: the run's drivers' markers (:func:`~sde_core.pipeline.run_drivers.run_drivers`;
            none read: no driver known).
    """

    run_id: int
    status: RunStatus
    stored: tuple[str, ...]
    total: int
    first: _dt.datetime | None
    last: _dt.datetime | None
    now: _dt.datetime
    drivers: Drivers = dataclasses.field(default_factory=Drivers)

    def at(self, now: _dt.datetime | None = None) -> RunProgress:
        """The same stored state seen at ``now`` (default: the current time)."""
        return dataclasses.replace(self, now=now or utc_now())

    @property
    def count(self) -> int:
        """Models stored."""
        return len(self.stored)

    @property
    def missing(self) -> int:
        """Models not stored yet."""
        return max(0, self.total - self.count)

    @property
    def running(self) -> bool:
        """Whether the run is marked running and some models are still missing."""
        return self.status == "running" and self.missing > 0

    @property
    def partial(self) -> bool:
        """Whether a running run has stored some, not all, of the models (what a page shows as
        provisional while the rest arrive)."""
        return self.running and self.count > 0

    @property
    def arriving(self) -> bool:
        """Whether a partial run is an evaluation's work in progress: a driver's marker says an
        evaluation is adding its models, or was until it stopped (module docstring)."""
        return self.partial and self.drivers.any

    @property
    def pace(self) -> float | None:
        """Seconds a model: the mean interval between the stored models' ``finished`` times
        (None below two models)."""
        if self.count < 2 or self.first is None or self.last is None:
            return None
        return (self.last - self.first).total_seconds() / (self.count - 1)

    @property
    def since_last(self) -> float | None:
        """Seconds from the last stored model to ``now`` (None when none is stored)."""
        if self.last is None:
            return None
        return max(0.0, (self.now - self.last).total_seconds())

    @property
    def seconds_left(self) -> float | None:
        """Estimated seconds until every model is stored: ``missing × pace − since_last``, at
        least 0; 0 when none is missing; None without a pace."""
        if self.missing == 0:
            return 0.0
        pace, since = self.pace, self.since_last
        if pace is None or since is None:
            return None
        return max(0.0, self.missing * pace - since)

    @property
    def stall_after(self) -> float:
        """Seconds without a new model after which a running run looks stalled (module
        docstring)."""
        pace = self.pace
        if pace is None:
            return STALL_PACES * STALL_SECONDS
        return max(STALL_SECONDS, STALL_PACES * pace)

    @property
    def stalled(self) -> bool:
        """Whether a running run with models missing has stored none for longer than
        :attr:`stall_after`, or its drivers all ran on this host and none runs now (it has
        probably stopped)."""
        if not self.running:
            return False
        if self.drivers.gone and not self.drivers.alive:
            return True
        since = self.since_last
        return since is not None and since > self.stall_after

    def stall_reason(self) -> str:
        """Why a stalled run looks stopped, in words (empty when it is not stalled)."""
        if not self.stalled:
            return ""
        if self.drivers.gone and not self.drivers.alive:
            return "the evaluation that was adding the models no longer runs"
        return (f"none for more than {duration_text(self.stall_after)}: the evaluation may have "
                "stopped")  # fmt: skip

    def sentence(self) -> str:
        """The progress in words, e.g. ``"12 of 40 models stored by a running evaluation; the
        last 8 s ago; about 5 min left at 10 s a model"``."""
        by = "a running" if self.status == "running" else "a finished"
        text = f"{self.count} of {self.total} models stored by {by} evaluation"
        since = self.since_last
        if since is not None:
            text += f"; the last {duration_text(since)} ago"
        if not self.running:
            return text
        if self.stalled:
            return f"{text}; {self.stall_reason()} (rerunning its command resumes it)"
        left, pace = self.seconds_left, self.pace
        if left is None or pace is None:
            return f"{text}; the time left is estimated once two models are stored"
        return f"{text}; about {duration_text(left)} left at {duration_text(pace)} a model"


def read_progress(
    store: Any, run: Run, models: Sequence[str], now: _dt.datetime | None = None
) -> RunProgress:
    """The progress of ``run`` over ``models`` (the workspace's model names) in ``store``:
    its verified record and its units' keys and times only (module docstring).

    Args:
        store: a :class:`~sde_core.pipeline.store.ResultsStore` (read-only is enough).
        run: the run (e.g. :meth:`~sde_core.pipeline.store.ResultsStore.find_run`).
        models: the workspace's model names. now: the time seen at (default: now, UTC).

    Raises:
        StoreError: No such run. DamagedUnitError: its record is damaged.
    """
    wanted = set(models)
    times = {k: t for k, t in store.unit_times(run.id).items() if k in wanted}
    finished = sorted(_parse_time(t) for t in times.values())
    return RunProgress(
        run_id=run.id,
        status=run.status,
        stored=tuple(times),
        total=len(wanted),
        first=finished[0] if finished else None,
        last=finished[-1] if finished else None,
        now=now or utc_now(),
    )


def utc_now() -> _dt.datetime:
    """The current time, UTC."""
    return _dt.datetime.now(_dt.UTC)


def _parse_time(text: str) -> _dt.datetime:
    """A stored ISO 8601 time (UTC when it names no zone)."""
    found = _dt.datetime.fromisoformat(text)
    return found if found.tzinfo is not None else found.replace(tzinfo=_dt.UTC)


def duration_text(seconds: float) -> str:
    """A duration in words: ``"8 s"`` (at least 1 s), ``"5 min"``, ``"1.5 h"``."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
