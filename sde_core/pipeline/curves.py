"""Checkpoint curves: OTR, calibrated OTR and the behaviour gap against the training epoch or
the unlearning step, read from the results stores, and the "best checkpoint" rule.

A model entry's intermediate checkpoints (``checkpoints`` in ``workspace.toml``: the original's
training checkpoints, or an unlearning run's, kept by ``unlearn --save-every N``) are evaluated
as in a checkpoint sweep (:func:`~sde_core.pipeline.sweeps.checkpoint_workspace`: an in-memory
copy of the workspace whose entry points at the checkpoint, so its content hash, and with it its
stored run, differ per checkpoint). Where the numbers live:

- an intermediate checkpoint's run is in the workspace's **checkpoint store**,
  ``.sde-cache/checkpoints.sqlite`` (:func:`checkpoint_store_path`; seeded from a shipped
  ``checkpoints.sqlite``, as the results store is from ``results.sqlite``, so a bundled demo's
  curve answers on a fresh clone);
- the run's end point (the entry itself) and its start (for an unlearning run: the model it
  unlearned from, normally the original) are the workspace's own models, in its results store.

:func:`curve_table` only reads (nothing is extracted or computed; a checkpoint not evaluated at
the settings is a row with ``stored`` false), :func:`evaluate_checkpoints` evaluates the missing
checkpoints into the checkpoint store (one unit per checkpoint, so an interrupted run resumes),
and :func:`forecast_seconds` predicts its time from the stored evaluation time of the final
checkpoint.

**The best-checkpoint rule** (:func:`best_checkpoint`): the first checkpoint of the run, in
step order and after its start, whose calibrated OTR is not withheld, lies within ``width`` of
the retrained model's calibrated OTR (|difference| ≤ W, point values, default W = 0.1), and
whose behaviour is consistent with its verdict (no ``evidence_conflict``). None when no
checkpoint qualifies — then no checkpoint is called best.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sde_core.common.fsio import atomic_write
from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.behaviour import stored_behaviour, with_behaviour
from sde_core.pipeline.evaluation.metric_table import (
    ACC_GAP,
    CALIBRATED_OTR,
    LOSS_GAP,
    OTR,
    interval_columns,
)
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.sweeps import checkpoint_workspace
from sde_core.pipeline.workspace import ModelEntry, Workspace, cache_path, workspace_hash

__all__ = [
    "BEST_RULE",
    "CHECKPOINT_STORE",
    "CURVE_COLUMNS",
    "BestCheckpoint",
    "CurveStep",
    "best_checkpoint",
    "checkpoint_store_path",
    "curve_models",
    "curve_steps",
    "curve_table",
    "evaluate_checkpoints",
    "forecast_seconds",
    "retrained_reference",
    "ship_checkpoint_store",
]

#: A workspace may ship its checkpoints' results here (the bundled mnist1d demo does).
CHECKPOINT_STORE = "checkpoints.sqlite"
#: The best-checkpoint rule in words (the page and the CLI print it).
BEST_RULE = (
    "the first checkpoint whose calibrated OTR is within ±{w:g} of the retrained model's "
    "({ref}) and whose behaviour is consistent with its verdict (no conflicting evidence)"
)
_METRICS = (OTR, CALIBRATED_OTR, ACC_GAP, LOSS_GAP)
#: Columns of :func:`curve_table`, in order.
CURVE_COLUMNS = (
    "model",
    "role",
    "step",
    "fraction",
    "point",
    "stored",
    *(c for m in _METRICS for c in interval_columns(m.key)),
    "evidence_conflict",
    "inconclusive_reason",
    "eval_seconds",
)


def checkpoint_store_path(workspace_root: str | Path) -> Path:
    """The checkpoint store of a workspace, ``<root>/.sde-cache/checkpoints.sqlite``; copied
    from a shipped ``<root>/checkpoints.sqlite`` when it does not exist yet (the shipped file
    itself is never written to)."""
    root = Path(workspace_root)
    path = cache_path(root, "checkpoints")
    shipped = root / CHECKPOINT_STORE
    if not path.exists() and shipped.is_file():
        atomic_write(path, lambda tmp: shutil.copyfile(shipped, tmp))
    return path


@dataclass(frozen=True)
class CurveStep:
    """One point of a model's curve.

    Attributes:
        model: the entry's name. step: the epoch (training epoch of an original, unlearning
            epoch of an unlearned model; the fraction × 100 when the entry records no epochs).
        fraction: the fraction of the run (0 its start, 1 the entry itself).
        point: ``"start"`` (the source model or the initial weights), ``"checkpoint"`` or
            ``"final"``.
        workspace: the workspace to look the point up in (a derived copy for a checkpoint).
        name: the model's name in that workspace (the source's name for an unlearning start).
        in_checkpoint_store: whether its run is in the checkpoint store (else the results
            store).
    """

    model: str
    step: float
    fraction: float
    point: str
    workspace: Workspace
    name: str
    in_checkpoint_store: bool


def curve_models(ws: Workspace) -> list[ModelEntry]:
    """The entries with intermediate checkpoints (those a curve can be drawn for)."""
    return [m for m in ws.models if m.checkpoints]


def _epochs(entry: ModelEntry) -> int | None:
    epochs = entry.hyperparameters.get("epochs")
    return int(epochs) if isinstance(epochs, int) and epochs > 0 else None


def curve_steps(ws: Workspace, model: str) -> list[CurveStep]:
    """The points of ``model``'s curve in step order: its start, its checkpoints, itself.

    Raises:
        WorkspaceError: unknown model. SettingsError: the model has no checkpoints.
    """
    entry = ws.model(model)
    if not entry.checkpoints:
        raise SettingsError(
            f"model {entry.name!r} has no intermediate checkpoints: unlearn it again with "
            "`--save-every N` (or train with --checkpoint-fractions) to draw its curve"
        )
    epochs = _epochs(entry)

    def at(fraction: float) -> float:
        return fraction * epochs if epochs else 100.0 * fraction

    steps: list[CurveStep] = []
    if entry.role == "original":
        if entry.init_checkpoint:
            derived = checkpoint_workspace(ws, 0.0, [entry.name])
            steps.append(CurveStep(entry.name, 0.0, 0.0, "start", derived, entry.name, True))
    else:
        source = ws.original()
        steps.append(CurveStep(entry.name, 0.0, 0.0, "start", ws, source.name, False))
    for ref in sorted(entry.checkpoints, key=lambda r: r.fraction):
        if ref.fraction >= 1.0:
            continue
        derived = checkpoint_workspace(ws, ref.fraction, [entry.name])
        steps.append(CurveStep(entry.name, at(ref.fraction), float(ref.fraction), "checkpoint",
                               derived, entry.name, True))  # fmt: skip
    steps.append(CurveStep(entry.name, at(1.0), 1.0, "final", ws, entry.name, False))
    return steps


def _stored_rows(
    store: Any, ws_hash: str, settings: EvalSettings, names: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The stored ``models`` rows (with their behaviour rows) of ``names``; only the finished
    ones, none when the run is missing. Reads the ``models`` table only (no subsets, no
    arrays)."""
    if store is None:
        return {}
    run = store.find_run(ws_hash, settings.result_key())
    if run is None:
        return {}
    run_id = run.id
    done = store.finished_units(run_id, arrays=False) & set(names)  # rows only are read
    if not done:
        return {}
    rows = store.rows(run_id, "models", done)  # their units' rows only (SQL filters)
    rows = with_behaviour(rows[rows["name"].isin(done)], stored_behaviour(store, run_id))
    return {str(r["name"]): {str(k): v for k, v in r.items()} for r in rows.to_dict("records")}


def curve_table(
    ws: Workspace,
    settings: EvalSettings,
    models: Sequence[str],
    *,
    results_store: Any,
    checkpoint_store: Any,
    data_fingerprint: str | None = None,
    file_hashes: MutableMapping[Path, str] | None = None,
) -> pd.DataFrame:
    """Every point of the named models' curves at ``settings``, read from the stores.

    Args:
        ws: the workspace. settings: the evaluation settings the points were stored under.
        models: entries with checkpoints (:func:`curve_models`).
        results_store, checkpoint_store: open :class:`~sde_core.pipeline.store.ResultsStore`
            objects (read-only is enough; None: nothing stored there).
        data_fingerprint: the dataset bundle's fingerprint (part of the workspace hash).
        file_hashes: the files' SHA-256 memo the workspace hashes share
            (:func:`~sde_core.pipeline.workspace.workspace_hash`; default: one for this call).

    Returns:
        One row per point with :data:`CURVE_COLUMNS`; a point not stored at these settings has
        ``stored`` false and NaN numbers (nothing is computed).
    """
    rows: list[dict[str, Any]] = []
    # the checkpoint workspaces differ from ws in one model's file: each file is read once
    hashes: MutableMapping[Path, str] = {} if file_hashes is None else file_hashes
    main_hash = workspace_hash(ws, data_fingerprint=data_fingerprint, file_hashes=hashes)
    steps = {model: curve_steps(ws, model) for model in models}
    # the results store's points: the models' own and their starts' (at hundreds of models,
    # not every model's row)
    outside = {step.name for found in steps.values() for step in found
               if not step.in_checkpoint_store}  # fmt: skip
    main = _stored_rows(results_store, main_hash, settings, sorted(outside))
    for model in models:
        role = ws.model(model).role
        for step in steps[model]:
            if step.in_checkpoint_store:
                h = workspace_hash(step.workspace, data_fingerprint=data_fingerprint,
                                   file_hashes=hashes)  # fmt: skip
                found = _stored_rows(checkpoint_store, h, settings, [step.name]).get(step.name)
            else:
                found = main.get(step.name)
            row: dict[str, Any] = {"model": model, "role": role, "step": step.step,
                                   "fraction": step.fraction, "point": step.point,
                                   "stored": found is not None}  # fmt: skip
            for column in CURVE_COLUMNS[6:]:
                value = (found or {}).get(column)
                text = column in ("evidence_conflict", "inconclusive_reason")
                row[column] = (str(value) if _present(value) else "") if text else _number(value)
            rows.append(row)
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _number(value: Any) -> float:
    try:
        return float(value) if _present(value) else math.nan
    except (TypeError, ValueError):
        return math.nan


def retrained_reference(
    ws: Workspace,
    settings: EvalSettings,
    results_store: Any,
    data_fingerprint: str | None = None,
    file_hashes: MutableMapping[Path, str] | None = None,
) -> tuple[str, float] | None:
    """The retrained model's name and stored calibrated OTR at ``settings`` (None when the
    workspace has no retrained model, or its number is not stored or withheld);
    ``file_hashes`` as for :func:`curve_table`."""
    retrained = ws.named("retrained")
    if not retrained:
        return None
    h = workspace_hash(ws, data_fingerprint=data_fingerprint, file_hashes=file_hashes)
    row = _stored_rows(results_store, h, settings, retrained[:1]).get(retrained[0])
    value = _number((row or {}).get(CALIBRATED_OTR.key))
    return None if math.isnan(value) else (retrained[0], value)


@dataclass(frozen=True)
class BestCheckpoint:
    """The checkpoint :func:`best_checkpoint` chose: model, step, fraction, its calibrated OTR
    and the retrained model's it was compared with."""

    model: str
    step: float
    fraction: float
    calibrated_otr: float
    reference: float


def best_checkpoint(
    table: pd.DataFrame, model: str, reference: float, width: float = 0.1
) -> BestCheckpoint | None:
    """The first point of ``model``'s curve after its start that meets the rule of the module
    docstring (:data:`BEST_RULE`), or None.

    Args:
        table: :func:`curve_table`'s rows. reference: the retrained model's calibrated OTR.
        width: W, the largest |calibrated OTR − the retrained's| accepted (> 0).
    """
    if not (isinstance(width, (int, float)) and width > 0):
        raise SettingsError(f"the best-checkpoint width W={width!r} must be a positive number")
    part = table[(table["model"] == model) & (table["point"] != "start") & table["stored"]]
    for row in part.sort_values("step").itertuples():
        value = _number(getattr(row, CALIBRATED_OTR.key))
        if math.isnan(value) or row.evidence_conflict:
            continue
        if abs(value - reference) <= width + 1e-12:
            return BestCheckpoint(model, _number(row.step), _number(row.fraction), value, reference)
    return None


def forecast_seconds(table: pd.DataFrame) -> tuple[int, float | None]:
    """``(points to evaluate, predicted seconds)`` of the missing checkpoint points of a
    :func:`curve_table`: each costs its model's stored final-point evaluation time (None when
    that is not stored) — measured on the machine that stored it, with its activations
    extracted; a busy machine or a first extraction takes longer (the progress shows the ETA
    measured as the points finish)."""
    missing = table[~table["stored"] & (table["point"] != "final")]
    missing = missing[~((missing["point"] == "start") & (missing["role"] != "original"))]
    if missing.empty:
        return 0, 0.0
    finals = table[table["point"] == "final"].set_index("model")["eval_seconds"]
    per = missing["model"].map(finals).to_numpy(dtype=float)
    return len(missing), (None if np.isnan(per).any() else float(per.sum()))


Progress = Callable[[str, int, int], None]


def evaluate_checkpoints(
    ws: Workspace,
    settings: EvalSettings,
    models: Sequence[str],
    store: Any,
    *,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> list[str]:
    """Evaluate every intermediate checkpoint of ``models`` (and an original's initial
    weights) into the checkpoint ``store``; points already stored are skipped, so a stopped
    run resumes. The runs' end points are the workspace's own models: evaluate them with
    ``evaluate`` (the results store).

    Args:
        progress: ``progress(stage, done, total)``; stage ``"checkpoints"`` counts the points,
            an evaluation's own stages come as ``"<model> @ <step>: <stage>"``.

    Returns:
        ``"<model>@<fraction>"`` of every point evaluated now (not those read back).
    """
    from sde_core.inputs.data import load_dataset
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace

    fingerprint = load_dataset(ws.dataset_spec()).fingerprint
    points = [s for m in models for s in curve_steps(ws, m) if s.in_checkpoint_store]
    done: list[str] = []
    for i, point in enumerate(points):
        if progress:
            progress("checkpoints", i, len(points))
        h = workspace_hash(point.workspace, data_fingerprint=fingerprint)
        if _stored_rows(store, h, settings, [point.name]):
            continue  # stored (a shipped store keeps only the rows a curve reads)

        def stage(name: str, k: int, n: int, p: CurveStep = point) -> None:
            if progress:
                progress(f"{p.model} @ {p.step:g}: {name}", k, n)

        result = evaluate_workspace(point.workspace, settings, models=[point.name], store=store,
                                    cache_dir=cache_dir, progress=stage)  # fmt: skip
        if point.name not in result.cached_models:
            done.append(f"{point.model}@{point.fraction:g}")
    if progress:
        progress("checkpoints", len(points), len(points))
    return done


def ship_checkpoint_store(
    source: str | Path, target: str | Path, settings: EvalSettings | None = None
) -> int:
    """Copy the runs of the checkpoint store ``source`` to a new store ``target`` (replaced
    atomically) with only what a curve reads: each unit's ``models`` row and its behaviour
    rows, no subsets and no H arrays (a checkpoint's histograms are not drawn). With
    ``settings``, only the runs at those settings' store key (a full store also holds runs of
    other settings, or of an earlier precision rule, that no page would read). Returns the
    number of units copied."""
    import os
    import sqlite3

    from sde_core.pipeline.evaluation.behaviour import TABLE as BEHAVIOUR_TABLE
    from sde_core.pipeline.evaluation.behaviour import behaviour_unit
    from sde_core.pipeline.store import ResultsStore

    target = Path(target)
    scratch = target.with_name(f".{target.name}.shipping")
    for leftover in (scratch, Path(f"{scratch}-wal"), Path(f"{scratch}-shm")):
        leftover.unlink(missing_ok=True)
    copied = 0
    wanted = None if settings is None else ResultsStore.settings_key(settings.result_key())[1]
    with ResultsStore(source, read_only=True) as full, ResultsStore(scratch) as shipped:
        runs = full.list_runs()
        if wanted is not None:
            runs = runs[runs["settings_hash"] == wanted]
        for run_id in runs["id"].tolist():
            old = full.get_run(int(run_id))
            new = shipped.open_run(old.workspace_hash, old.settings, label=old.label)
            models = full.records(old.id, "models")
            behaviour = (full.records(old.id, BEHAVIOUR_TABLE)
                         if BEHAVIOUR_TABLE in full.tables(old.id) else [])  # fmt: skip
            for unit in sorted(full.finished_units(old.id)):
                rows = [r for r in models if r.get("name") == unit]
                if rows:
                    shipped.put_unit(new.id, unit, {"models": rows}, {})
                    copied += 1
            for row in behaviour:  # a family that checks behaviour apart: its own units
                shipped.put_unit(new.id, behaviour_unit(str(row["model"])),
                                 {BEHAVIOUR_TABLE: [row]}, {})  # fmt: skip
    conn = sqlite3.connect(scratch, isolation_level=None)
    try:  # compact, and fold the write-ahead log into the file (no -wal/-shm files stay)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    os.replace(scratch, target)
    return copied
