"""A bundled demo's shipped results store: every draw's numbers, the H arrays of the first draws.

At the default precision design (W = 0.1, method §15) a model runs 10 to 60 reference draws,
and each draw stores its H arrays (targets, controls, panels, null pairs: ~0.15 MB per draw
and model at n = 400, K = 200). Four demos of nine models would be ~100 MB, past the size of
``assets/``. :func:`ship_run` copies one complete run of a full results store into a new one
that keeps:

- every row of every table (the ``models`` summaries, every draw's ``draws`` row and every
  subset's ``subsets`` row: all numbers, verdicts and intervals, over all B draws);
- each model's near-ties (method §13) as computed from *all* its H arrays, in a ``near_ties``
  table (one row per model: the JSON record of
  :meth:`~sde_core.pipeline.evaluation.near_ties.ModelNearTies.to_json`), which the read-back
  uses instead of recomputing them from the arrays it keeps
  (:func:`~sde_core.pipeline.evaluation.workspace_run.stored_result`);
- the H arrays of the first ``keep_draws`` draws only (the draws a fixed design of that many
  draws stores: what Explore's histograms draw). A row of an array belongs to the draw its
  ``subsets`` row names (the arrays' rows and the subset rows are written in the same order);
  an array whose rows cannot be matched so is kept whole.

The null check's own subsets are the exception: their H arrays (:data:`UNSHIPPED_ARRAYS`) and
their ``subsets`` rows (kinds :data:`UNSHIPPED_KINDS`) are not kept. Its rates, counts and
intervals are in the ``models`` and ``draws`` rows, and no page or chart reads them; sized at
the default N (method §9) they would be several MB per demo, past the size of ``assets/``.

The shipped store is a results store like any other: ``verify`` and the tests recompute a
model from scratch and compare its numbers and decisions with the shipped rows, judging
near-ties with the stored record and the fresh run's own.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.errors import StoreError
from sde_core.pipeline.evaluation.model_evaluation import CONTROL_KIND
from sde_core.pipeline.evaluation.workspace_run import NEAR_TIES_TABLE, stored_result
from sde_core.pipeline.settings import settings_from_key
from sde_core.pipeline.store import ResultsStore

__all__ = [
    "ARRAY_KINDS",
    "UNSHIPPED_ARRAYS",
    "UNSHIPPED_KINDS",
    "ShippedRun",
    "kept_rows",
    "ship_run",
]
#: H array -> the ``subsets`` kind whose rows match its rows one to one.
ARRAY_KINDS: dict[str, str] = {
    "it_h_draws": "it_ref",
    "oot_h_draws": "oot_ref",
    "targets_h": "target",
    "target_draw": "target",
    "panel_it_h": "it_panel",
    "panel_oot_h": "oot_panel",
    "null_h": "null",
    "null_train_h": "null_train",
    "f1_h": CONTROL_KIND,
}
#: The ``subsets`` kinds a shipped store leaves out, and their arrays (the module docstring
#: says why).
UNSHIPPED_KINDS = frozenset({"null", "null_train"})
UNSHIPPED_ARRAYS = frozenset(a for a, kind in ARRAY_KINDS.items() if kind in UNSHIPPED_KINDS)


@dataclass(frozen=True)
class ShippedRun:
    """What :func:`ship_run` wrote: bytes of the full and shipped files, draws per model
    (``{model: (draws run, draws whose H arrays are kept)}``)."""

    source_bytes: int
    shipped_bytes: int
    draws: dict[str, tuple[int, int]]


def kept_rows(
    arrays: dict[str, np.ndarray], subsets: list[dict[str, Any]], keep: set[int]
) -> dict[str, np.ndarray]:
    """``arrays`` (one model's, unprefixed) with only the rows of the draws in ``keep``.

    Args:
        arrays: the model's H arrays. subsets: its ``subsets`` rows, in stored order.
        keep: the draw indices whose rows stay.
    """
    out: dict[str, np.ndarray] = {}
    for name, array in arrays.items():
        kind = ARRAY_KINDS.get(name)
        draws = [int(r["draw"]) for r in subsets if r.get("kind") == kind]
        if kind is None or len(draws) != len(array):
            out[name] = array  # draw 0's references (it_h, oot_h) or an unmatched array
            continue
        mask = np.isin(np.asarray(draws, dtype=np.int64), sorted(keep))
        out[name] = np.ascontiguousarray(array[mask])
    return out


def ship_run(
    source: str | Path, target: str | Path, workspace_hash: str, settings: dict[str, Any],
    keep_draws: int,
) -> ShippedRun:  # fmt: skip
    """Write the complete run of ``settings`` in the results store ``source`` to a new store
    ``target`` (replaced atomically), keeping the arrays of the first ``keep_draws`` draws.

    Args:
        source: a results store holding the run, complete, with every array.
        target: the shipped store's path (its previous file is replaced once the new one is
            written and compacted).
        workspace_hash: the workspace's content hash. settings: the run's
            :meth:`~sde_core.pipeline.settings.EvalSettings.result_key`.
        keep_draws: draws per model whose H arrays are kept (≥ 1).

    Raises:
        StoreError: the run is missing or incomplete in ``source``.
    """
    target = Path(target)
    scratch = target.with_name(f".{target.name}.shipping")
    for leftover in (scratch, Path(f"{scratch}-wal"), Path(f"{scratch}-shm")):
        leftover.unlink(missing_ok=True)
    drawn: dict[str, tuple[int, int]] = {}
    with ResultsStore(source, read_only=True) as full:
        run = full.open_run(workspace_hash, settings)
        if run.status != "complete":
            raise StoreError(f"{source}: the run is {run.status}, not complete: finish it first")
        units = sorted(full.finished_units(run.id))
        result = stored_result(full, workspace_hash, settings_from_key(settings), units)
        assert result is not None
        tables = {name: full.records(run.id, name) for name in full.tables(run.id)}
        with ResultsStore(scratch) as shipped:
            new = shipped.open_run(workspace_hash, settings, label=run.label)
            for unit in (str(row["name"]) for row in tables["models"]):  # in write order
                rows = _unit_rows(tables, unit)
                refs = sorted({int(r["draw"]) for r in rows["subsets"] if r["kind"] == "it_ref"})
                keep = set(refs[:keep_draws])
                drawn[unit] = (len(refs), len(keep))
                names = [name[len(unit) + 1 :] for name in full.array_names(run.id, f"{unit}/")]
                arrays = {  # the null check's arrays are not read: they are not shipped
                    name: full.array(run.id, f"{unit}/{name}")
                    for name in names
                    if name not in UNSHIPPED_ARRAYS
                }
                kept = kept_rows(arrays, rows["subsets"], keep)
                rows["subsets"] = [
                    r for r in rows["subsets"] if r.get("kind") not in UNSHIPPED_KINDS
                ]
                ties = json.dumps(result.near_ties(unit).to_json(), sort_keys=True)
                rows[NEAR_TIES_TABLE] = [{"model": unit, "record": ties}]
                shipped.put_unit(new.id, unit, rows, {f"{unit}/{k}": v for k, v in kept.items()})
            shipped.mark_complete(new.id)
    _compact(scratch)
    os.replace(scratch, target)
    return ShippedRun(Path(source).stat().st_size, target.stat().st_size, drawn)


def _compact(path: Path) -> None:
    """VACUUM the new store and fold its write-ahead log into the file (WAL mode kept, as
    :class:`~sde_core.pipeline.store.ResultsStore` sets it: no ``-wal``/``-shm`` files stay)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _unit_rows(tables: dict[str, list[dict[str, Any]]], unit: str) -> dict[str, list[Any]]:
    """One model's rows of every table (``models`` by ``name``, the others by ``model``)."""
    out: dict[str, list[Any]] = {}
    for name, records in tables.items():
        column = "name" if name == "models" else "model"
        out[name] = [r for r in records if r.get(column) == unit]
    return out
