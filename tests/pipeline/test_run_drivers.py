"""Drivers' markers (sde_core.pipeline.run_drivers): which evaluations are adding models to a
stored run now. A partial run is shown as arriving only with a marker; a killed driver's marker
makes the run stalled at once; a reused process id, another host, junk and links are read as
they should be; evaluate_workspace keeps its marker exactly while its engine runs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from helpers.designs import fixed_settings

from sde_core.pipeline.run_drivers import Drivers, driving, markers_folder, run_drivers
from sde_core.pipeline.run_progress import RunProgress

ROOT = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def progress(drivers: Drivers, stored: int = 2, seconds: float = 1.0) -> RunProgress:
    """A running run of 4 models with ``stored`` of them, the last ``seconds`` before now."""
    last = T0 + dt.timedelta(seconds=10)
    return RunProgress(run_id=1, status="running", stored=tuple("abcd"[:stored]), total=4,
                       first=T0 if stored else None, last=last if stored else None,
                       now=last + dt.timedelta(seconds=seconds), drivers=drivers)  # fmt: skip


def write_marker(store: Path, run_id: int, **record: object) -> Path:
    folder = markers_folder(store)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"run-{run_id}-x-{record.get('pid', 0)}.json"
    path.write_text(json.dumps({"run_id": run_id, **record}))
    return path


def test_a_marker_lives_while_its_driver_runs_and_goes_with_it(tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite"
    assert run_drivers(store, 1) == Drivers()  # no folder
    with driving(store, 1, ["a", "b"]) as marker:
        assert marker.parent == markers_folder(store) == tmp_path / "results.sqlite.drivers"
        record = json.loads(marker.read_text())
        assert record["pid"] == os.getpid() and record["models"] == ["a", "b"]
        assert run_drivers(store, 1) == Drivers(alive=1)
        assert run_drivers(store, 2) == Drivers()  # another run's markers are not this one's
    assert not marker.exists()
    assert run_drivers(store, 1) == Drivers()


def test_a_killed_driver_leaves_a_marker_read_as_gone(tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite"
    code = ("import os, signal, sys; from sde_core.pipeline.run_drivers import driving\n"
            "with driving(sys.argv[1], 3, ['a']):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)")  # fmt: skip
    child = subprocess.run([sys.executable, "-c", code, str(store)], check=False,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert child.returncode == -signal.SIGKILL
    assert len(list(markers_folder(store).iterdir())) == 1  # left behind
    assert run_drivers(store, 3) == Drivers(gone=1)
    with driving(store, 3, ["a"]):  # the command run again: its driver resumes the run
        assert run_drivers(store, 3) == Drivers(alive=1)  # the killed driver's marker removed
    assert run_drivers(store, 3) == Drivers()


def test_a_reused_pid_another_host_junk_and_links(tmp_path: Path) -> None:
    store = tmp_path / "results.sqlite"
    here = socket.gethostname()
    # this process's id, but another process's start time: the driver that wrote it is gone
    write_marker(store, 1, host=here, pid=os.getpid(), start="1")
    assert run_drivers(store, 1) == Drivers(gone=1)
    # another host: cannot be checked, counts as alive (the stall rule judges it)
    write_marker(store, 2, host=f"{here}-elsewhere", pid=1)
    assert run_drivers(store, 2) == Drivers(alive=1)
    folder = markers_folder(store)
    (folder / "run-4-x-1.json").write_text("{not json")
    (folder / "run-4-x-2.json").write_text(json.dumps({"host": here}))  # no pid
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"host": here, "pid": os.getpid()}))
    (folder / "run-4-x-3.json").symlink_to(outside)
    assert run_drivers(store, 4) == Drivers()


def test_only_a_driven_partial_run_is_arriving_and_a_gone_driver_stalls_it() -> None:
    quiet = progress(Drivers())
    assert quiet.partial and not quiet.arriving and not quiet.stalled
    alive = progress(Drivers(alive=1))
    assert alive.arriving and not alive.stalled and alive.stall_reason() == ""
    gone = progress(Drivers(gone=1))
    assert gone.arriving and gone.stalled  # at once, not after the stall rule's minutes
    assert "no longer runs" in gone.stall_reason() and "no longer runs" in gone.sentence()
    assert not progress(Drivers(alive=1, gone=1)).stalled  # one of its drivers still runs
    late = progress(Drivers(alive=1), seconds=3600)
    assert late.stalled and "none for more than" in late.stall_reason()
    assert not progress(Drivers(alive=1), stored=0).arriving  # nothing stored yet
    done = dataclasses.replace(alive, status="complete")
    assert not done.arriving and not done.stalled


def test_evaluate_workspace_keeps_its_marker_while_its_engine_runs(
    tiny_workspace: Path, tmp_path: Path
) -> None:
    from sde_core.pipeline.engine import LocalEngine
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore

    path = tmp_path / "results.sqlite"
    seen: list[tuple[int, Drivers, list[str]]] = []

    class Watched(LocalEngine):
        def run(self, jobs, **kwargs):  # type: ignore[no-untyped-def]
            (marker,) = markers_folder(path).iterdir()
            record = json.loads(marker.read_text())
            seen.append((record["run_id"], run_drivers(path, record["run_id"]), record["models"]))
            return super().run(jobs, **kwargs)

    settings = fixed_settings(subset_size=16, targets=4, splits=10, panel_size=20, null_pairs=2,
                              baseline_targets=2)  # fmt: skip
    with ResultsStore(path) as store:
        result = evaluate_workspace(tiny_workspace, settings, store=store, engine=Watched(),
                                    models=["original"])  # fmt: skip
    assert seen == [(result.run_id, Drivers(alive=1), ["original"])]
    assert not list(markers_folder(path).iterdir())  # removed when the run ended
