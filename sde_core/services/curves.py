"""What the Sweeps page's read-only views need: a workspace's shipped sweep files and its
checkpoint curves, answered from files and stores without computing anything.

- :func:`shipped_sweep_files` / :func:`load_shipped_sweep`: the ``*_sweep.csv`` files a
  workspace ships (:mod:`sde_core.pipeline.sweeps`; the diffusion demo's Figure 6 sweep);
- :func:`checkpoint_curves`: the curves of the models with intermediate checkpoints, the
  retrained model's reference, each model's best checkpoint and the forecast of what is
  missing (:mod:`sde_core.pipeline.curves`), read from the results store and the checkpoint
  store (read-only);
- :func:`evaluate_missing_checkpoints`: evaluates what :func:`checkpoint_curves` found missing
  (the page's button), resumable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sde_core.common.stamps import RecordedHashes, StampRecords
from sde_core.pipeline.curves import (
    BEST_RULE,
    BestCheckpoint,
    best_checkpoint,
    checkpoint_store_path,
    curve_models,
    curve_table,
    evaluate_checkpoints,
    forecast_seconds,
    retrained_reference,
)
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.sweeps import SWEEP_FACETS, read_sweep, shipped_sweeps
from sde_core.pipeline.workspace import Workspace
from sde_core.services.workspace_info import check_records

__all__ = [
    "CheckpointCurves",
    "checkpoint_curves",
    "curve_model_names",
    "evaluate_missing_checkpoints",
    "load_shipped_sweep",
    "shipped_sweep_files",
    "sweep_facets",
]


def shipped_sweep_files(ws: Workspace) -> list[Path]:
    """The sweep files the workspace ships (``<root>/*_sweep.csv``), sorted by name."""
    return shipped_sweeps(ws.root)


def load_shipped_sweep(path: str | Path) -> pd.DataFrame:
    """One shipped sweep's rows (:func:`~sde_core.pipeline.sweeps.read_sweep`).

    Raises:
        DataError: the file is too large, not a CSV or lacks a sweep's columns.
    """
    return read_sweep(path)


def sweep_facets(sweep: pd.DataFrame) -> list[str]:
    """The columns that split a shipped sweep into separate charts (e.g. ``noise_level``)."""
    return [c for c in SWEEP_FACETS if c in sweep and sweep[c].nunique() > 1]


def curve_model_names(ws: Workspace) -> list[str]:
    """The models whose curve can be drawn (those with intermediate checkpoints)."""
    return [m.name for m in curve_models(ws)]


@dataclass(frozen=True)
class CheckpointCurves:
    """The curves of some models, as stored.

    Attributes:
        table: :func:`~sde_core.pipeline.curves.curve_table`'s rows.
        reference: ``(retrained model, its calibrated OTR)``, or None when not stored.
        best: each model's best checkpoint (None: none meets the rule, or no reference).
        rule: the best-checkpoint rule in words, with W and the reference filled in.
        missing: checkpoint points not stored at these settings. seconds: their forecast
            (None when no model's final evaluation time is stored).
    """

    table: pd.DataFrame
    reference: tuple[str, float] | None
    best: dict[str, BestCheckpoint | None] = field(default_factory=dict)
    rule: str = ""
    missing: int = 0
    seconds: float | None = None


def checkpoint_curves(
    ws: Workspace,
    settings: EvalSettings,
    models: Sequence[str],
    *,
    fingerprint: str | None,
    width: float = 0.1,
) -> CheckpointCurves:
    """The stored curves of ``models`` at ``settings`` (nothing is computed).

    Args:
        fingerprint: the dataset bundle's fingerprint (the page's cached bundle has it).
        width: W of the best-checkpoint rule.
    """
    results = workspace_store_path(ws.root)
    checkpoints = checkpoint_store_path(ws.root)
    records = check_records(ws)  # unchanged files are not read again in a new process
    hashes = RecordedHashes(records)
    with _open(results, records) as rs, _open(checkpoints, records) as cs:
        table = curve_table(ws, settings, models, results_store=rs, checkpoint_store=cs,
                            data_fingerprint=fingerprint, file_hashes=hashes)  # fmt: skip
        reference = retrained_reference(ws, settings, rs, fingerprint, hashes)
    hashes.flush()
    best = {m: best_checkpoint(table, m, reference[1], width) if reference else None
            for m in models}  # fmt: skip
    ref_text = f"{reference[0]}: {reference[1]:.2f}" if reference else "not stored"
    missing, seconds = forecast_seconds(table)
    return CheckpointCurves(table, reference, best, BEST_RULE.format(w=width, ref=ref_text),
                            missing, seconds)  # fmt: skip


class _NoStore:
    """Stands in for a store file that does not exist (nothing stored)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _open(path: Path, checks: StampRecords) -> ResultsStore | _NoStore:
    if not path.is_file():
        return _NoStore()
    return ResultsStore(path, read_only=True, checks=checks)


def evaluate_missing_checkpoints(
    ws: Workspace,
    settings: EvalSettings,
    models: Sequence[str],
    progress: Callable[[str, int, int], None] | None = None,
) -> list[str]:
    """Evaluate the checkpoints of ``models`` missing at ``settings`` into the workspace's
    checkpoint store (stored ones are skipped; a stopped run resumes)."""
    with ResultsStore(checkpoint_store_path(ws.root)) as store:
        return evaluate_checkpoints(ws, settings, models, store, progress=progress)
