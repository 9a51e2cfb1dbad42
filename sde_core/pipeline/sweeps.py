"""Parameter sweeps: a metric as a function of σ, the layer, the subset size or the checkpoint.

Every point of a sweep is one
:func:`sde_core.pipeline.evaluation.workspace_run.evaluate_workspace` call, so with a
:class:`~sde_core.pipeline.store.ResultsStore` each finished (point, model) is stored as it
completes:
repeating a sweep reads it back without recomputation, and an interrupted sweep resumes where it
stopped. Activations come from the on-disk activation cache, so a σ or subset-size sweep extracts
each layer once.

A checkpoint sweep evaluates a model's intermediate checkpoints (``checkpoints`` of its workspace
entry; 1.0 is the final checkpoint and 0.0 the initial weights when the entry has them) through
an in-memory copy of the workspace whose entry points at that checkpoint; the workspace hash
covers the checkpoint file's SHA-256, so each checkpoint's results are stored separately.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sde_core.common.sigma import MEDIAN, SQRT_DIM
from sde_core.errors import DataError, SettingsError
from sde_core.pipeline.evaluation.metric_table import (
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    F1,
    OTR,
    REFERENCE_P,
    interval_columns,
)
from sde_core.pipeline.evaluation.plan import draw_subsets
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.model_inputs import Progress
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import ModelEntry, Workspace, cache_path
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.stats.hsic import resolve_sigma

__all__ = [
    "PAIRED_METRICS",
    "PAIRED_PARAMS",
    "SWEEP_COLUMNS",
    "SWEEP_FACETS",
    "SWEEP_PARAMS",
    "SweepForecast",
    "SweepPoint",
    "available_fractions",
    "checkpoint_workspace",
    "default_paired_base",
    "interval_side",
    "paired_columns",
    "read_sweep",
    "run_sweep",
    "shipped_sweeps",
    "sigma_markers",
    "sweep_forecast",
    "sweep_points",
]

#: Parameters a sweep can vary.
SWEEP_PARAMS = ("sigma", "layer", "subset_size", "checkpoint")

#: Columns of :func:`run_sweep`'s table, in order.
SWEEP_COLUMNS = (
    "param",
    "value",
    "model",
    "role",
    F1.key,
    *interval_columns(OTR.key),
    *interval_columns(CALIBRATED_OTR.key),
    "references_valid",
    REFERENCE_P.key,
    "panel_valid",
    "sigma",
    DEPENDENCE_SCORE.key,
    "inconclusive_reason",
    "from_store",
)

#: Parameters whose points share their evaluation plan, so a point can be compared with
#: another on the same draws (:func:`run_sweep`'s ``paired_base``): σ, the layer and the
#: checkpoint leave :func:`~sde_core.pipeline.evaluation.plan.draw_subsets` unchanged (it depends
#: on the pools, the subset size, the counts and the seed), while a subset size draws other
#: subsets.
PAIRED_PARAMS = ("sigma", "layer", "checkpoint")
#: Rates a paired sweep compares with its base point (method §15's paired difference).
PAIRED_METRICS = (F1.key, OTR.key)


def paired_columns(metric: str) -> tuple[str, str, str, str, str]:
    """The columns of one rate's paired difference from the base point: ``(<metric>_vs_base,
    <metric>_vs_base_lo, <metric>_vs_base_hi)``, the 95% interval of this point alone, then
    ``(<metric>_vs_base_all_lo, <metric>_vs_base_all_hi)``, the interval that holds for all
    the sweep's k compared points at once (Bonferroni: each at ``1 − 0.05/k``) — what a claim
    that *some* point beats the base must clear."""
    stem = f"{metric}_vs_base"
    return stem, f"{stem}_lo", f"{stem}_hi", f"{stem}_all_lo", f"{stem}_all_hi"


_FRACTION_TOL = 1e-9


def interval_side(lo: float, hi: float) -> str | None:
    """Which side of 0 a difference's interval decides: ``"above"`` (``lo > 0``), ``"below"``
    (``hi < 0``), or None when it holds 0 (undecided) or is missing (NaN)."""
    if lo > 0:
        return "above"
    if hi < 0:
        return "below"
    return None


def default_paired_base(settings: EvalSettings, param: str, values: Sequence[Any]) -> Any:
    """The point a sweep is paired with by default: the current setting (σ or layer of
    ``settings``; the final checkpoint, 1.0) when it is one of ``values``, else None (no
    pairing, as for a subset-size sweep)."""
    if param not in PAIRED_PARAMS:
        return None
    base = 1.0 if param == "checkpoint" else getattr(settings, param)
    return base if any(type(v) is type(base) and v == base for v in values) else None


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: what :func:`evaluate_workspace` is called with.

    Attributes:
        param, value: the swept parameter and its value at this point.
        workspace: the workspace to evaluate (a derived copy for checkpoint sweeps).
        settings: the evaluation settings of this point.
        models: names of the models to evaluate (None: all).
    """

    param: str
    value: Any
    workspace: Workspace
    settings: EvalSettings
    models: tuple[str, ...] | None


def _workspace(workspace: Workspace | str | Path) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else load_workspace(workspace)


def available_fractions(entry: ModelEntry) -> list[float]:
    """The checkpoint fractions of a model entry, sorted: its ``checkpoints``, 1.0 (the final
    checkpoint) and 0.0 when it records its initial weights."""
    fractions = {float(ref.fraction) for ref in entry.checkpoints} | {1.0}
    if entry.init_checkpoint:
        fractions.add(0.0)
    return sorted(fractions)


def _checkpoint_path(entry: ModelEntry, fraction: float) -> str:
    if math.isclose(fraction, 1.0, abs_tol=_FRACTION_TOL):
        return entry.checkpoint
    if entry.init_checkpoint and math.isclose(fraction, 0.0, abs_tol=_FRACTION_TOL):
        return entry.init_checkpoint
    for ref in entry.checkpoints:
        if math.isclose(ref.fraction, fraction, abs_tol=_FRACTION_TOL):
            return ref.path
    raise SettingsError(
        f"model {entry.name!r} has no checkpoint at fraction {fraction:g} of training; "
        f"available fractions: {', '.join(f'{f:g}' for f in available_fractions(entry))}"
    )


def checkpoint_workspace(ws: Workspace, fraction: float, models: Sequence[str]) -> Workspace:
    """An in-memory copy of ``ws`` whose ``models`` entries point at their checkpoint at
    ``fraction`` of training (the other entries are unchanged).

    Raises:
        SettingsError: a named model has no checkpoint at ``fraction`` (the message lists the
            available fractions).
        WorkspaceError: a named model does not exist.
    """
    wanted = {ws.model(name).name for name in models}
    entries = [
        dataclasses.replace(e, checkpoint=_checkpoint_path(e, fraction), sha256=None)
        if e.name in wanted
        else e
        for e in ws.models
    ]
    return dataclasses.replace(ws, models=entries)


def sweep_points(
    workspace: Workspace | str | Path,
    base_settings: EvalSettings,
    param: str,
    values: Sequence[Any],
    models: Sequence[str] | None = None,
) -> list[SweepPoint]:
    """Validate a sweep and list its points (nothing is evaluated).

    Args:
        workspace: a workspace or its folder.
        base_settings: settings shared by every point.
        param: one of :data:`SWEEP_PARAMS`.
        values: σ values (``"sqrt_dim"``, ``"median"`` or positive numbers), layer names, subset
            sizes, or checkpoint fractions in [0, 1].
        models: models to evaluate (default all; for checkpoint sweeps the original model).

    Raises:
        SettingsError: unknown parameter, no or repeated values, an invalid value, or a missing
            checkpoint.
    """
    if param not in SWEEP_PARAMS:
        raise SettingsError(f"cannot sweep {param!r}; choose one of {list(SWEEP_PARAMS)}")
    vals = list(values)
    if not vals:
        raise SettingsError(f"give at least one value of {param} to sweep")
    if len({repr(v) for v in vals}) != len(vals):
        raise SettingsError(f"the {param} values {vals} repeat a value")
    ws = _workspace(workspace)
    names = tuple(models) if models is not None else None
    points = []
    for value in vals:
        if param == "checkpoint":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SettingsError(f"checkpoint values are fractions of training; got {value!r}")
            chosen = names if names is not None else (ws.original().name,)
            points.append(
                SweepPoint(
                    param,
                    float(value),
                    checkpoint_workspace(ws, float(value), chosen),
                    base_settings,
                    chosen,
                )
            )
        else:
            settings = dataclasses.replace(base_settings, **{param: value})
            points.append(SweepPoint(param, value, ws, settings, names))
    return points


@dataclass(frozen=True)
class SweepForecast:
    """What a sweep will cost, before it runs (:func:`sweep_forecast`).

    Attributes:
        points: its (value, model) pairs. stored: how many of them the store already holds
            (read back, no computation).
        seconds: the predicted seconds of the others: each costs its model's evaluation time
            stored at the base settings (a σ or layer point costs about as much; a larger
            subset size or a first extraction more; the ETA while it runs is measured). None
            when a model to evaluate has no stored time.
    """

    points: int
    stored: int
    seconds: float | None

    def sentence(self) -> str:
        """The forecast in words, for a button or the CLI."""
        if self.stored == self.points:
            return f"all {self.points} points stored: read back"
        left = f"{self.points - self.stored} of {self.points} points to evaluate"
        if self.seconds is None:
            return f"{left}, time unknown (no stored evaluation at these settings)"
        return f"{left}, forecast ≈ {self.seconds:.0f} s"


def sweep_forecast(
    workspace: Workspace | str | Path,
    base_settings: EvalSettings,
    param: str,
    values: Sequence[Any],
    models: Sequence[str] | None,
    store: Any,
    *,
    data_fingerprint: str | None,
) -> SweepForecast:
    """The forecast of :func:`run_sweep` with these arguments, read from ``store`` (a
    :class:`~sde_core.pipeline.store.ResultsStore`, or None: nothing stored) — nothing is
    evaluated.

    Args:
        data_fingerprint: the dataset bundle's fingerprint (the workspace hash of each point).

    Raises:
        SettingsError: as :func:`sweep_points`.
    """
    from sde_core.pipeline.workspace import workspace_hash

    points = sweep_points(workspace, base_settings, param, values, models)
    ws = _workspace(workspace)

    def run_of(w: Workspace, settings: EvalSettings) -> int | None:
        if store is None:
            return None
        ws_hash = workspace_hash(w, data_fingerprint=data_fingerprint)
        run = store.find_run(ws_hash, settings.result_key())
        return None if run is None else run.id

    cost: dict[str, float] = {}
    base = run_of(ws, base_settings)
    for row in store.records(base, "models") if base is not None else []:
        value = row.get("eval_seconds")
        if isinstance(value, int | float) and math.isfinite(value):
            cost[str(row["name"])] = float(value)
    total = stored = 0
    seconds: float | None = 0.0
    for point in points:
        names = point.models or tuple(m.name for m in point.workspace.models)
        run = run_of(point.workspace, point.settings)
        have = set() if run is None else store.finished_units(run, arrays=False)
        for name in names:
            total += 1
            if name in have:
                stored += 1
            elif seconds is not None:
                seconds = seconds + cost[name] if name in cost else None
    return SweepForecast(total, stored, seconds)


def run_sweep(
    workspace: Workspace | str | Path,
    base_settings: EvalSettings,
    param: str,
    values: Sequence[Any],
    *,
    models: Sequence[str] | None = None,
    store: Any = None,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    extra_columns: Sequence[str] = (),
    paired_base: Any = None,
) -> pd.DataFrame:
    """Evaluate the workspace at every value of ``param`` and return tidy rows.

    Args:
        workspace: a :class:`~sde_core.pipeline.workspace.Workspace` or its folder.
        base_settings: the settings every point starts from.
        param: ``"sigma"``, ``"layer"``, ``"subset_size"`` or ``"checkpoint"``.
        values: the values, evaluated in the given order (see :func:`sweep_points`).
        models: models to evaluate (default all; a checkpoint sweep defaults to the original).
        store: a :class:`~sde_core.pipeline.store.ResultsStore`: stored (point, model) results are
        read
            back, new ones written as they finish (an interrupted sweep resumes).
        cache_dir: activation cache folder (default the workspace's).
        progress: ``progress(stage, done, total)``; stage ``"sweep"`` counts points, the
            evaluation's own stages are prefixed with ``"<param> = <value>: "``.
        extra_columns: further columns of the evaluation's ``models`` table to keep (e.g.
            ``"f1_raw"``, the paper's F1 before the gate), appended after ``from_store``.
        paired_base: one of ``values`` (a parameter of :data:`PAIRED_PARAMS`): every other
            point of a model is compared with the model at this point on the draws both ran —
            the same subsets and splits, only ``param`` differs — with the paired difference
            of :data:`PAIRED_METRICS`, its interval for this point alone and the one for all
            compared points at once (method §15; None where either rate is withheld or at the
            base point itself). Whether a point beats the base is read from these intervals,
            never from two intervals' overlap.

    Returns:
        One row per (value, model) with the columns :data:`SWEEP_COLUMNS`: the metrics of the
        ``models`` table, ``sigma`` the numeric σ used, and ``from_store`` whether the row was
        read back from the store; then ``extra_columns``; then, with ``paired_base``, a column
        ``paired_base`` (its value) and :func:`paired_columns` of each paired metric.

    Raises:
        SettingsError: as :func:`sweep_points`, or a ``paired_base`` that is not one of the
            values or of a parameter that changes the draws. WorkspaceError, DataError,
            CheckpointError, ActivationError.
    """
    points = sweep_points(workspace, base_settings, param, values, models)
    base = _base_index(points, param, paired_base)
    tables: list[tuple[pd.DataFrame, pd.DataFrame]] = []
    rows: list[dict[str, Any]] = []
    for i, point in enumerate(points):
        if progress:
            progress("sweep", i, len(points))

        def stage(name: str, done: int, total: int, point: SweepPoint = point) -> None:
            if progress:
                progress(f"{point.param} = {point.value}: {name}", done, total)

        result = evaluate_workspace(
            point.workspace,
            point.settings,
            models=point.models,
            store=store,
            cache_dir=cache_dir,
            progress=stage,
        )
        cached = set(result.cached_models)
        if base is not None:
            tables.append((result.models, result.draws))
        for row in result.models.to_dict("records"):
            rows.append(
                {
                    "param": param,
                    "value": point.value,
                    "model": row["name"],
                    **{c: row[c] for c in SWEEP_COLUMNS[3:-1]},
                    "from_store": row["name"] in cached,
                    **{c: row[c] for c in extra_columns},
                }
            )
    if progress:
        progress("sweep", len(points), len(points))
    table = pd.DataFrame(rows, columns=[*SWEEP_COLUMNS, *extra_columns])
    if base is None:
        return table
    family = max(1, len(points) - 1)  # the points compared with the base
    paired = [
        _paired_row(tables[i], tables[base], str(row["name"]), i == base, family)
        for i in range(len(points))
        for row in tables[i][0].to_dict("records")
    ]
    table.insert(len(table.columns), "paired_base", [paired_base] * len(table))
    return pd.concat([table, pd.DataFrame(paired, index=table.index)], axis=1)


def _base_index(points: Sequence[SweepPoint], param: str, base: Any) -> int | None:
    """The index of the point a paired sweep compares with (None: no pairing)."""
    if base is None:
        return None
    if param not in PAIRED_PARAMS:
        raise SettingsError(
            f"a {param} sweep cannot be paired: its points draw different subsets; pairing "
            f"needs one of {', '.join(PAIRED_PARAMS)}"
        )
    for i, point in enumerate(points):
        same = point.value == base
        if isinstance(base, float) and isinstance(point.value, float):
            same = math.isclose(point.value, base, rel_tol=1e-12, abs_tol=_FRACTION_TOL)
        if same:
            return i
    raise SettingsError(f"the paired base {base!r} is not one of the swept {param} values")


def _paired_row(
    point: tuple[pd.DataFrame, pd.DataFrame],
    base: tuple[pd.DataFrame, pd.DataFrame],
    model: str,
    is_base: bool,
    family: int,
) -> dict[str, float]:
    """One model's :func:`paired_columns` at a point: ``point − base`` of each paired metric
    over the draws both ran, alone and as one of ``family`` comparisons (NaN at the base
    itself, or where either rate is withheld)."""
    from sde_core.pipeline.evaluation.comparisons import compare_models

    out = {c: math.nan for metric in PAIRED_METRICS for c in paired_columns(metric)}
    if is_base:
        return out
    models, draws = [], []
    for label, (m, d) in (("point", point), ("base", base)):
        models.append(m[m["name"] == model].assign(name=label))
        draws.append(d[d["model"] == model].assign(model=label) if not d.empty else d)
    both_models, both_draws = pd.concat(models), pd.concat(draws)
    if both_draws.empty:
        return out
    for metric in PAIRED_METRICS:
        if metric not in both_models or metric not in both_draws:
            continue
        diff = compare_models(both_models, both_draws, "point", "base", metric).paired
        together = compare_models(
            both_models, both_draws, "point", "base", metric, 1 - 0.05 / family
        ).paired
        if diff is not None and together is not None:
            value, lo, hi, all_lo, all_hi = paired_columns(metric)
            out.update({value: diff.value, lo: diff.lo, hi: diff.hi})
            out.update({all_lo: together.lo, all_hi: together.hi})
    return out


def sigma_markers(
    workspace: Workspace | str | Path,
    settings: EvalSettings,
    model: str,
    *,
    cache_dir: str | Path | None = None,
) -> dict[str, float]:
    """The numeric σ of the ``sqrt_dim`` and ``median`` rules for ``model`` at ``settings.layer``.

    Computed exactly as the evaluation does (on the pooled S_IT and S_OOT activations of every
    draw of the plan drawn with ``settings``), from the activation cache (extracting the layer
    once when it is not cached).

    Returns:
        ``{"sqrt_dim": √d, "median": median pairwise distance}`` in activation units.
    """
    from sde_core.inputs.activation_cache import ActivationCache
    from sde_core.inputs.data import load_dataset
    from sde_core.inputs.indices import load_index_file
    from sde_core.pipeline.model_inputs import load_model_inputs

    ws = _workspace(workspace)
    entry = ws.model(model)
    bundle = load_dataset(ws.dataset_spec())
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train))
    plan = draw_subsets(len(bundle.train), len(bundle.test), forget, settings)
    cache = ActivationCache(cache_dir or cache_path(ws.root, "activations"))
    inputs = load_model_inputs(entry, ws, bundle, settings, cache, None)
    it_rows, oot_rows = plan.reference_rows()
    pooled = np.concatenate([inputs.train_acts[it_rows], inputs.test_acts[oot_rows]])
    return {
        SQRT_DIM: resolve_sigma(SQRT_DIM, pooled),
        MEDIAN: resolve_sigma(MEDIAN, pooled, seed=settings.seed),
    }


#: A workspace ships a finished sweep as ``<root>/<name>_sweep.csv`` (:func:`run_sweep`'s
#: table written as CSV, e.g. the diffusion demo's ``fig6_sweep.csv``); the Sweeps page draws it.
SHIPPED_SWEEP_GLOB = "*_sweep.csv"
#: Columns besides the swept value that split a shipped sweep into separate curves (the
#: diffusion demo's noise level σ_t), when they take more than one value.
SWEEP_FACETS = ("noise_level", "layer")
_MAX_SWEEP_BYTES = 8 * 1024 * 1024
_REQUIRED = ("param", "value", "model")


def shipped_sweeps(root: str | Path) -> list[Path]:
    """The sweep files a workspace folder ships (:data:`SHIPPED_SWEEP_GLOB`), sorted."""
    folder = Path(root)
    return sorted(p for p in folder.glob(SHIPPED_SWEEP_GLOB) if p.is_file())


def read_sweep(path: str | Path) -> pd.DataFrame:
    """A shipped sweep file's rows, checked: the columns of :data:`SWEEP_COLUMNS` it needs
    (``param``, ``value``, ``model`` and F1 or OTR), one swept parameter of
    :data:`SWEEP_PARAMS`, at most 8 MiB. Columns it lacks (``from_store``, intervals) are
    added (``from_store`` true: the rows were read from a file, not computed).

    Raises:
        DataError: what is wrong with the file, and what a sweep file holds.
    """
    file = Path(path)
    hint = f"a sweep file is run_sweep's table as CSV (columns {', '.join(SWEEP_COLUMNS[:6])}, …)"
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise DataError(f"cannot read the sweep file {file.name}: {exc.strerror}") from exc
    if size > _MAX_SWEEP_BYTES:
        raise DataError(f"the sweep file {file.name} is {size / 2**20:.1f} MiB, over the "
                        f"{_MAX_SWEEP_BYTES // 2**20} MiB a shipped sweep may hold")  # fmt: skip
    try:
        table = pd.read_csv(file)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(
            f"the sweep file {file.name} is not a readable CSV ({exc}); {hint}"
        ) from exc
    missing = [c for c in _REQUIRED if c not in table]
    if missing or not ({F1.key, OTR.key} & set(table.columns)):
        lacks = missing or [f"{F1.key} or {OTR.key}"]
        raise DataError(
            f"the sweep file {file.name} lacks the column(s) {', '.join(lacks)}; {hint}"
        )
    params = sorted(map(str, table["param"].dropna().unique()))
    if len(params) != 1 or params[0] not in SWEEP_PARAMS:
        raise DataError(f"the sweep file {file.name} sweeps {params or 'nothing'}; it must sweep "
                        f"exactly one of {', '.join(SWEEP_PARAMS)}")  # fmt: skip
    for column in SWEEP_COLUMNS:
        if column not in table:
            table[column] = True if column == "from_store" else np.nan
    if "inconclusive_reason" in table:
        table["inconclusive_reason"] = table["inconclusive_reason"].fillna("").astype(str)
    return table
