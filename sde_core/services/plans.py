"""Experiment-plan results for the dashboard: which runs of a results store are plans, and their
``points`` table (see :mod:`sde_core.pipeline.plans` for the table's columns)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sde_core.errors import StoreError
from sde_core.pipeline.plans.driver import is_plan_run
from sde_core.pipeline.store import ResultsStore

__all__ = ["plan_points", "plan_runs"]


def plan_runs(store_path: str | Path) -> pd.DataFrame:
    """The experiment-plan runs of a results store, oldest first.

    Returns:
        The store's :meth:`~sde_core.pipeline.store.ResultsStore.list_runs` rows whose run
        belongs to a plan (``id``, ``label``, ``status``, ``units`` …); empty when the file does
        not exist or holds no plan run.

    Raises:
        StoreError: the file is not a readable results store.
    """
    path = Path(store_path)
    if not path.is_file():
        return pd.DataFrame(columns=["id", "label", "status", "units"])
    with ResultsStore(path) as store:
        runs = store.list_runs()
    return runs[runs["workspace_hash"].map(is_plan_run)].reset_index(drop=True)


def plan_points(store_path: str | Path, run_id: int) -> pd.DataFrame:
    """The ``points`` table of a plan run (one row per evaluation); empty when it has none yet.

    Raises:
        StoreError: unknown run, or a run that is not an experiment plan's.
    """
    with ResultsStore(Path(store_path)) as store:
        run = store.get_run(run_id)
        if not is_plan_run(run.workspace_hash):
            raise StoreError(f"run {run_id} is not an experiment plan's run")
        if "points" not in store.tables(run_id):
            return pd.DataFrame()
        return store.rows(run_id, "points")
