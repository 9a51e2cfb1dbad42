"""Sweep worker for the results-store process tests (run as a script by
``tests/pipeline/test_store.py``).

``python tests/pipeline/_store_worker.py DB N [--hang-at K --marker FILE] [--delay S]`` opens the
run :data:`WORKSPACE` / :data:`SETTINGS` in the store ``DB`` and writes units ``unit-0`` ..
``unit-{N-1}``, skipping finished ones, then marks the run complete and prints
``written=W skipped=S``. With ``--hang-at K`` it stops *inside* the transaction of unit K, after
that unit's table rows were inserted and before its arrays and the commit, creates ``FILE`` and
sleeps until it is killed: the test's deterministic "killed mid-write" point.
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from pathlib import Path

import numpy as np

from sde_core.pipeline.store import ResultsStore

WORKSPACE = "ws-kill-test"
SETTINGS = {"layer": "penultimate", "sigma": "sqrt_dim", "targets": 3}
N_TARGETS = 3
K = 16


def unit_key(i: int) -> str:
    """Key of unit ``i``."""
    return f"unit-{i}"


def unit_tables(i: int) -> dict[str, list[dict[str, object]]]:
    """The table rows unit ``i`` writes: one ``models`` row and :data:`N_TARGETS` ``targets``."""
    model = {
        "unit": i,
        "name": f"model-{i}",
        "otr": i / 10,
        "valid": i % 2 == 0,
        "note": None,
    }
    targets = [{"unit": i, "target": j, "h_mean": i + j / 100} for j in range(N_TARGETS)]
    return {"models": [model], "targets": targets}


def unit_arrays(i: int) -> dict[str, np.ndarray]:
    """The arrays unit ``i`` writes: one H array of shape ``(K,)`` per target."""
    rng = np.random.default_rng(i)
    return {f"H/{unit_key(i)}/t{j}": rng.random(K) for j in range(N_TARGETS)}


def _hang_inside_array_insert(conn: sqlite3.Connection, marker: Path) -> None:
    """Make ``conn`` signal ``marker`` and sleep as soon as it starts inserting an array."""

    def trace(statement: str) -> None:
        if statement.lstrip().startswith("INSERT INTO arrays"):
            marker.touch()
            time.sleep(600)

    conn.set_trace_callback(trace)


def main() -> None:
    """Parse the arguments and run the sweep."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("db", type=Path)
    parser.add_argument("n", type=int)
    parser.add_argument("--hang-at", type=int, default=None)
    parser.add_argument("--marker", type=Path, default=None)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    written = skipped = 0
    with ResultsStore(args.db) as store:
        run = store.open_run(WORKSPACE, SETTINGS, label="kill test")
        finished = store.finished_units(run.id)  # what an evaluation resumes from
        for i in range(args.n):
            if unit_key(i) in finished:
                skipped += 1
                continue
            if i == args.hang_at:
                # Test-only hook on the store's private connection: the trace callback fires
                # inside put_unit's transaction, before the arrays are inserted.
                _hang_inside_array_insert(store._conn, args.marker)
            if store.put_unit(run.id, unit_key(i), unit_tables(i), unit_arrays(i)):
                written += 1
            else:  # another process wrote it after this one read the finished units
                skipped += 1
            time.sleep(args.delay)
        store.mark_complete(run.id)
    print(f"written={written} skipped={skipped}")


if __name__ == "__main__":
    main()
