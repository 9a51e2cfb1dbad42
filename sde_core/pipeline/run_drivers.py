"""Which evaluations are adding models to a stored run now: each driver's marker file.

A run's units say what is stored, not whether anybody is still adding to it: a page that
evaluated one model (Explore) leaves a run of one stored model just as a command-line evaluation
halfway through does. So the driver of an evaluation with a results store
(:func:`~sde_core.pipeline.evaluation.workspace_run.evaluate_workspace`, whatever its engine)
keeps a **marker** for its run while it runs (:func:`driving`): a small JSON file in a folder
beside the store (``<store>.drivers/``) naming its host, its process id and that process's start
time, the models it evaluates and when it started. It removes the marker when it ends, by
returning or raising; a driver that was killed leaves it behind.

:func:`run_drivers` reads a run's markers:

- **alive**: on this host, the process exists and started when the marker says (a reused
  process id is not mistaken for the driver); on another host (a Slurm login node, the dashboard
  elsewhere) it cannot be checked and counts as alive — the stall rule of
  :mod:`~sde_core.pipeline.run_progress` then judges the run by its pace;
- **gone**: on this host, no such process — the evaluation stopped; rerunning its command
  resumes it.

A page shows a partial run as "arriving" only when a marker says an evaluation is (or was)
adding to it (:attr:`~sde_core.pipeline.run_progress.RunProgress.arriving`); a partial run
without one is evaluated by the page as any incomplete run is.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Drivers", "driving", "markers_folder", "run_drivers"]

#: Bytes read of a marker at most (a marker is a few hundred bytes; a larger file is not one).
_MAX_MARKER = 64 * 1024


@dataclass(frozen=True)
class Drivers:
    """How many drivers' markers a run has: ``alive`` (adding models now, as far as can be
    told) and ``gone`` (a driver on this host that no longer runs)."""

    alive: int = 0
    gone: int = 0

    @property
    def any(self) -> bool:
        """Whether some evaluation is, or was until it stopped, adding models to the run."""
        return self.alive + self.gone > 0


def markers_folder(store_path: str | Path) -> Path:
    """The folder of the drivers' markers of the results store at ``store_path``."""
    path = Path(store_path)
    return path.with_name(f"{path.name}.drivers")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), or
    None where it cannot be read (no such process, or no ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` of this host runs and, where both are known, started at
    ``start``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    now = _start_time(pid)
    return start is None or now is None or now == start


@contextlib.contextmanager
def driving(store_path: str | Path, run_id: int, models: Sequence[str]) -> Iterator[Path]:
    """Keep this process's marker for run ``run_id`` of the store at ``store_path`` while the
    block runs (module docstring); the marker's path. The markers of the run's killed drivers
    (this host, process gone) are removed first: this driver resumes their work. A folder that
    cannot be written only costs the pages the knowledge that models are arriving."""
    for stale, live in list(_markers(store_path, run_id)):
        if not live:  # a killed driver's marker: this driver resumes its run
            with contextlib.suppress(OSError):
                stale.unlink()
    folder = markers_folder(store_path)
    host, pid = socket.gethostname(), os.getpid()
    marker = folder / f"run-{int(run_id)}-{host}-{pid}.json"
    record = {"run_id": int(run_id), "host": host, "pid": pid, "start": _start_time(pid),
              "models": list(models), "started": time.time()}  # fmt: skip
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        temporary = marker.with_suffix(".tmp")
        temporary.write_text(json.dumps(record), encoding="utf-8")
        os.replace(temporary, marker)
    try:
        yield marker
    finally:
        with contextlib.suppress(OSError):
            marker.unlink()


def _markers(store_path: str | Path, run_id: int) -> Iterator[tuple[Path, bool]]:
    """Each readable marker of run ``run_id`` with whether its driver is alive (module
    docstring); unreadable or foreign files and links in the folder are passed over."""
    try:
        found = list(markers_folder(store_path).glob(f"run-{int(run_id)}-*.json"))
    except OSError:
        return
    host = socket.gethostname()
    for path in found:
        if path.is_symlink():
            continue  # a marker is a file the driver wrote, never a link to elsewhere
        try:
            with path.open("rb") as handle:
                record = json.loads(handle.read(_MAX_MARKER))
            pid, start = int(record["pid"]), record.get("start")
            elsewhere = str(record["host"]) != host
        except (OSError, ValueError, KeyError, TypeError):
            continue
        yield path, elsewhere or _alive(pid, None if start is None else str(start))


def run_drivers(store_path: str | Path, run_id: int) -> Drivers:
    """The drivers' markers of run ``run_id`` of the store at ``store_path``, alive and gone
    (module docstring)."""
    alive = [live for _, live in _markers(store_path, run_id)]
    return Drivers(alive=sum(alive), gone=len(alive) - sum(alive))
