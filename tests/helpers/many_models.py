"""Workspaces of many models answered from their results store (issue 39), for the Compare and
Report many-models tests and the scale bench: each entry is a copy of one of the mnist1d demo's
models, and its results — the demo's shipped rows and arrays for the model it copies, renamed —
are written into the workspace's store **through the store API** (:meth:`ResultsStore.put_unit`),
so a page answers from the store and nothing is computed."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.inputs.data import load_dataset
from sde_core.pipeline.run_drivers import driving
from sde_core.pipeline.store import ResultsStore, workspace_store_path
from sde_core.pipeline.workspace import Workspace, workspace_hash
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace

__all__ = [
    "DEMO",
    "SWEEP_METHODS",
    "SWEEP_STRENGTHS",
    "copy_demo_data",
    "evaluation_running",
    "evaluation_stopped",
    "many_model_workspace",
    "store_copies",
    "sweep_grid",
]

ROOT = Path(__file__).resolve().parents[2]
#: The workspace whose models and stored run are copied.
DEMO = ROOT / "assets" / "demo-mnist1d"


#: The methods and strengths (an entry's ``lr``) of a synthetic study (:func:`sweep_grid`).
SWEEP_METHODS = ("ft", "ga", "rl", "salun", "l1_sparse", "neggrad_plus")
SWEEP_STRENGTHS = (0.001, 0.01, 0.1)


def sweep_grid(count: int) -> list[tuple[str, float, int, str]]:
    """``(method, strength, seed, name)`` of the first ``count`` entries of a study's grid,
    methods × strengths × seeds in that order (``ft-lr0.001-s0``, ``ga-lr0.001-s0``, …)."""
    out = []
    for i in range(count):
        method = SWEEP_METHODS[i % len(SWEEP_METHODS)]
        strength = SWEEP_STRENGTHS[(i // len(SWEEP_METHODS)) % len(SWEEP_STRENGTHS)]
        seed = i // (len(SWEEP_METHODS) * len(SWEEP_STRENGTHS))
        out.append((method, strength, seed, f"{method}-lr{strength:g}-s{seed}"))
    return out


def copy_demo_data(folder: Path) -> None:
    """The demo's data, forget set and data licence in ``folder``."""
    for name in ("data.npz", "forget.npy", "LICENSE-data.txt"):
        shutil.copy(DEMO / name, folder / name)


@functools.cache
def _demo_results() -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, np.ndarray]]]:
    """The demo's stored run: every table's rows, and each model's arrays by their own name."""
    with ResultsStore(DEMO / "results.sqlite", read_only=True) as src:
        run_id = int(src.list_runs()["id"].iloc[0])
        tables = {t: src.records(run_id, t) for t in src.tables(run_id)}
        arrays = {m.name: {k[len(m.name) + 1:]: src.array(run_id, k)
                           for k in src.array_names(run_id, f"{m.name}/")}
                  for m in load_workspace(DEMO).models}  # fmt: skip
    return tables, arrays


def store_copies(
    folder: Path,
    copies: Mapping[str, str],
    *,
    complete: bool = True,
    label: str = "",
    models_extra: Mapping[str, Any] | None = None,
    models_without: Collection[str] = (),
) -> None:
    """Write into the results store of the workspace in ``folder``, in its run at its
    defaults, for each ``name -> template`` of ``copies`` the demo's stored rows and arrays of
    ``template`` renamed ``name``, one unit each, through the store API as an evaluation writes
    them; ``complete``: then mark the run complete (otherwise it stays running, as while an
    evaluation is adding models); ``models_extra``: columns added to each ``models`` row (a
    unit written by other code, with columns the demo's units lack); ``models_without``:
    columns removed from each ``models`` row (a unit written by an older release)."""
    ws = load_workspace(folder)
    ws_hash = workspace_hash(ws, data_fingerprint=load_dataset(ws.dataset_spec()).fingerprint)
    tables, arrays = _demo_results()
    with ResultsStore(workspace_store_path(folder)) as store:
        run = store.open_run(ws_hash, ws.defaults.result_key(), label=label)
        for name, template in copies.items():
            rows = {}
            for table, records in tables.items():
                column = "name" if table == "models" else "model"
                extra = (models_extra or {}) if table == "models" else {}
                mine = [dict(r, **{column: name}, **extra) for r in records
                        if r.get(column) == template]  # fmt: skip
                if table == "models":
                    mine = [{k: v for k, v in r.items() if k not in models_without}
                            for r in mine]  # fmt: skip
                if mine:
                    rows[table] = mine
            store.put_unit(run.id, name, rows,
                           {f"{name}/{k}": v for k, v in arrays[template].items()})  # fmt: skip
        if complete:
            store.mark_complete(run.id)


def many_model_workspace(folder: Path, n_copies: int, stored: int | None = None) -> Path:
    """A workspace in ``folder`` (created) of the demo's original and retrained model and
    ``n_copies`` copies of its ft, ga and rl models in turn (``ft-s0``, ``ga-s1``, ``rl-s2``, …,
    seed ``i``), with its results stored (:func:`store_copies`): every model's in a complete
    run, or the first ``stored`` models' in a running run (as while an evaluation is adding
    the rest); the folder."""
    folder.mkdir(parents=True)
    copy_demo_data(folder)
    demo = load_workspace(DEMO)
    (folder / "models").mkdir()
    entries, copies = [], {}
    for entry in (demo.original(), demo.model("retrained")):
        shutil.copy(demo.path(entry.checkpoint), folder / "models" / f"{entry.name}.safetensors")
        entries.append(dataclasses.replace(entry, checkpoint=f"models/{entry.name}.safetensors",
                                           checkpoints=[], init_checkpoint=None))  # fmt: skip
        copies[entry.name] = entry.name
    for i in range(n_copies):
        template = demo.model(("ft", "ga", "rl")[i % 3])
        name = f"{template.name}-s{i}"
        shutil.copy(demo.path(template.checkpoint), folder / "models" / f"{name}.safetensors")
        entries.append(dataclasses.replace(template, name=name, seed=i, sha256=None,
                                           checkpoint=f"models/{name}.safetensors",
                                           checkpoints=[]))  # fmt: skip
        copies[name] = template.name
    ws: Workspace = dataclasses.replace(demo, root=folder.resolve(), models=entries)
    write_workspace(ws)
    if stored is None:
        store_copies(folder, copies)
    else:
        store_copies(folder, dict(list(copies.items())[:stored]), complete=False)
    return folder


def _defaults_run(folder: Path) -> tuple[Path, int]:
    """The results store of the workspace in ``folder`` and the id of its run at its defaults."""
    ws = load_workspace(folder)
    ws_hash = workspace_hash(ws, data_fingerprint=load_dataset(ws.dataset_spec()).fingerprint)
    path = workspace_store_path(folder)
    with ResultsStore(path, read_only=True) as store:
        run = store.find_run(ws_hash, ws.defaults.result_key())
    assert run is not None, f"no run at the defaults in {path}"
    return path, run.id


@contextlib.contextmanager
def evaluation_running(folder: Path) -> Iterator[None]:
    """This process standing in for the driver of an evaluation that is adding models to the
    run at the defaults of the workspace in ``folder``: its marker
    (:func:`sde_core.pipeline.run_drivers.driving`) while the block runs."""
    path, run_id = _defaults_run(folder)
    with driving(path, run_id, []):
        yield


def evaluation_stopped(folder: Path) -> None:
    """The marker a killed driver leaves for the run at the defaults of the workspace in
    ``folder``: a child process that takes the marker and kills itself (SIGKILL)."""
    path, run_id = _defaults_run(folder)
    code = ("import os, signal, sys; from sde_core.pipeline.run_drivers import driving\n"
            "with driving(sys.argv[1], int(sys.argv[2]), []):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)")  # fmt: skip
    subprocess.run([sys.executable, "-c", code, str(path), str(run_id)], check=False,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
