"""The Slurm engine: run a job graph through `submitit <https://github.com/facebookincubator/submitit>`_.

Each :class:`~sde_core.pipeline.engine.Job` whose dependencies are finished becomes one
submitit job (``sbatch`` on a Slurm cluster; a child process with the ``local`` executor that
submitit ships for testing). As with every engine, results travel back to the driver, which alone
writes the results store, so rows are identical whichever engine ran them.

**Resuming.** The engine keeps a manifest (``manifest.json`` in its folder) of every job it
submitted: the unit key, submitit's job id and a fingerprint of the job's function and
arguments. A driver that was stopped (Ctrl-C, a killed login node, a lost connection) is simply
started again with the same command:

* units already in the results store are skipped by the caller (``done``), as with every engine;
* a unit whose submitit job finished while no driver was watching is read from its result file
  and **not** recomputed;
* a unit whose job is still running is waited for again (Slurm: by its job id; local: by its
  process id);
* only units with no job, a failed job or a job that died are submitted again.

A changed job (other arguments under the same key) never reuses an old result: its fingerprint
differs, so it is submitted afresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sde_core.common.threads import usable_cpus
from sde_core.errors import EngineError
from sde_core.pipeline.engine import (
    Engine,
    Job,
    JobProgress,
    ResultCallback,
    dependencies,
    kept,
    topological_order,
)

__all__ = ["CLUSTERS", "SubmititEngine", "job_fingerprint"]

#: submitit executors this engine drives: ``slurm`` (sbatch) and ``local`` (child processes,
#: submitit's own test executor).
CLUSTERS = ("slurm", "local")
MANIFEST = "manifest.json"


def job_fingerprint(job: Job) -> str:
    """SHA-256 over the job's function and its pickled arguments (what makes a result reusable)."""
    digest = hashlib.sha256()
    digest.update(f"{job.fn.__module__}.{job.fn.__qualname__}\0{job.key}\0".encode())
    digest.update(pickle.dumps(sorted(job.kwargs.items()), protocol=4))
    digest.update(repr(job.deps).encode())
    return digest.hexdigest()


def _submitit_entry(job: Job, dep_results: Mapping[str, Any]) -> Any:
    """Executed in the submitit job (a Slurm task or a local child process)."""
    from sde_core.pipeline.engine import _call

    return _call(job, dep_results)


@dataclass
class _Tracked:
    job: Job
    handle: Any  # a submitit Job
    fingerprint: str
    resumed: bool = False  # submitted by an earlier driver


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SubmititEngine(Engine):
    """Run jobs as submitit jobs (Slurm, or submitit's local executor).

    Args:
        folder: where submitit keeps its pickles and logs, and this engine its manifest; on a
            cluster it must be on a filesystem the nodes share.
        cluster: ``"slurm"`` or ``"local"``.
        partition: the Slurm partition (``--partition``).
        time_min: the wall-clock limit of each job in minutes (``--time``).
        gpus: GPUs per job (``--gpus-per-node``); default: what each job asks for.
        cpus: CPUs per job (``--cpus-per-task``); default: what each job asks for.
        mem_gb: memory per job in GB; default: what each job asks for.
        extra: further submitit parameters for the cluster, e.g. ``{"slurm_account": "lab"}``
            (keys as submitit's AutoExecutor names them).
        poll_s: how often the driver looks for finished jobs.
        max_running: at most this many jobs submitted and not yet finished at once (default:
            the usable CPUs for the local executor, whose jobs all run on this machine at
            once — hundreds of child processes would exhaust its memory —, unbounded for
            Slurm, whose scheduler queues them). Jobs re-attached from an earlier driver count.
    """

    name = "slurm"

    def __init__(
        self,
        folder: str | Path,
        *,
        cluster: str = "slurm",
        partition: str | None = None,
        time_min: int = 60,
        gpus: int | None = None,
        cpus: int | None = None,
        mem_gb: float | None = None,
        extra: Mapping[str, Any] | None = None,
        poll_s: float = 0.5,
        max_running: int | None = None,
    ) -> None:
        if cluster not in CLUSTERS:
            raise EngineError(f"unknown submitit cluster {cluster!r}: use one of {CLUSTERS}")
        if time_min <= 0:
            raise EngineError(f"the time limit must be positive minutes; got {time_min}")
        for label, value in (("gpus", gpus), ("cpus", cpus), ("mem_gb", mem_gb)):
            if value is not None and value < 0:
                raise EngineError(f"{label} must be non-negative; got {value}")
        if poll_s <= 0:
            raise EngineError(f"poll_s must be positive; got {poll_s}")
        if max_running is not None and max_running < 1:
            raise EngineError(f"max_running must be at least 1; got {max_running}")
        if max_running is None and cluster == "local":
            max_running = usable_cpus()
        self.folder = Path(folder)
        self.cluster = cluster
        self.partition = partition
        self.time_min = int(time_min)
        self.gpus = gpus
        self.cpus = cpus
        self.mem_gb = mem_gb
        self.extra = dict(extra or {})
        self.poll_s = poll_s
        self.max_running = max_running
        self.name = "slurm" if cluster == "slurm" else "submitit-local"

    # -- submitit plumbing -------------------------------------------------------------------
    def _submitit(self) -> Any:
        try:
            import submitit
        except ImportError:
            raise EngineError(
                "the Slurm engine needs the 'submitit' package: pip install 'sde-explorer[slurm]'"
            ) from None
        return submitit

    def _executor(self, job: Job) -> Any:
        submitit = self._submitit()
        try:
            executor = submitit.AutoExecutor(folder=self.folder / "%j", cluster=self.cluster)
        except (RuntimeError, ValueError) as exc:
            raise EngineError(
                f"submitit cannot use the {self.cluster!r} cluster here ({exc}): run on a Slurm "
                "login node, or use --engine submitit-local to test on this machine"
            ) from None
        cpus = self.cpus if self.cpus is not None else max(1, round(job.resources.cpus))
        gpus = self.gpus if self.gpus is not None else round(job.resources.gpus)
        params: dict[str, Any] = {
            "name": f"sde-{job.key}"[:100],
            "timeout_min": self.time_min,
            "cpus_per_task": cpus,
            "gpus_per_node": gpus,
        }
        mem_gb = self.mem_gb
        if mem_gb is None and job.resources.memory_mb:
            mem_gb = job.resources.memory_mb / 1024
        if mem_gb:
            params["mem_gb"] = mem_gb
        if self.partition:
            params["slurm_partition"] = self.partition
        params.update(self.extra)
        try:
            executor.update_parameters(**params)
        except (ValueError, TypeError, AssertionError) as exc:
            raise EngineError(f"submitit refused the job parameters {params}: {exc}") from None
        return executor

    def _attach(self, job_id: str) -> Any:
        """A handle on a job submitted by an earlier driver, or ``None`` when it is gone."""
        submitit = self._submitit()
        folder = self.folder / "%j"
        if self.cluster == "slurm":
            return submitit.SlurmJob(folder=folder, job_id=job_id)
        handle = submitit.LocalJob(folder=folder, job_id=job_id)
        if handle.paths.result_pickle.exists():
            return handle
        if job_id.isdigit() and _pid_alive(int(job_id)):
            return _OrphanLocalJob(handle, int(job_id))
        return None

    # -- the manifest ------------------------------------------------------------------------
    def _manifest_path(self) -> Path:
        return self.folder / MANIFEST

    def _load_manifest(self) -> dict[str, dict[str, str]]:
        path = self._manifest_path()
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # an unreadable manifest only costs recomputation
        if not isinstance(data, dict):
            return {}
        return {
            str(k): v
            for k, v in data.items()
            if isinstance(v, dict) and isinstance(v.get("job_id"), str)
        }

    def _save_manifest(self, manifest: Mapping[str, Mapping[str, str]]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._manifest_path()
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)

    # -- running -----------------------------------------------------------------------------
    def run(
        self,
        jobs: Sequence[Job],
        *,
        done: Mapping[str, Any] | None = None,
        on_result: ResultCallback | None = None,
        progress: JobProgress | None = None,
        keep: bool = True,
    ) -> dict[str, Any]:
        results: dict[str, Any] = dict(done or {})
        todo = [j for j in topological_order(jobs, results) if j.key not in results]
        if not todo:
            return results
        needed = dependencies(todo)
        manifest = self._load_manifest()
        waiting = list(todo)
        running: dict[str, _Tracked] = {}
        finished = 0
        if progress:
            progress(0, len(todo))
        # re-attach to jobs an earlier driver submitted, before submitting anything new
        for job in list(waiting):
            entry = manifest.get(job.key)
            fingerprint = job_fingerprint(job)
            if entry is None or entry.get("fingerprint") != fingerprint:
                continue
            handle = self._attach(entry["job_id"])
            if handle is not None:
                waiting.remove(job)
                running[job.key] = _Tracked(job, handle, fingerprint, resumed=True)
        while waiting or running:
            for job in [j for j in waiting if all(d in results for d in j.deps)]:
                if self.max_running is not None and len(running) >= self.max_running:
                    break
                waiting.remove(job)
                deps = {k: results[k] for k in job.deps}
                handle = self._executor(job).submit(_submitit_entry, job, deps)
                fingerprint = job_fingerprint(job)
                running[job.key] = _Tracked(job, handle, fingerprint)
                manifest[job.key] = {"job_id": str(handle.job_id), "fingerprint": fingerprint}
                self._save_manifest(manifest)
            if not running:
                stuck = [j.key for j in waiting]
                raise EngineError(f"jobs {stuck} can never start: their dependencies failed")
            ready = [key for key, t in running.items() if t.handle.done()]
            if not ready:
                time.sleep(self.poll_s)
                continue
            for key in ready:
                tracked = running.pop(key)
                if tracked.resumed:
                    try:
                        value = tracked.handle.result()
                    except Exception:  # died or failed while no driver watched:
                        waiting.append(tracked.job)  # submitted again
                        continue
                else:
                    value = self._result(tracked, running)
                finished += 1
                if on_result:
                    on_result(tracked.job, value)
                results[key] = kept(value, tracked.job, keep, needed)
                del value
                if progress:
                    progress(finished, len(todo))
        return results

    def _result(self, tracked: _Tracked, running: Mapping[str, _Tracked]) -> Any:
        try:
            return tracked.handle.result()
        except Exception as exc:  # the job raised, or died without a result
            for other in running.values():
                with contextlib.suppress(Exception):  # cancelling is best effort
                    other.handle.cancel(check=False)
            text = " ".join(str(exc).split())
            raise EngineError(
                f"job {tracked.job.key!r} failed on {self.cluster} ({type(exc).__name__}: "
                f"{text[-400:]}); its log is under {self.folder}; finished jobs are kept — fix "
                "the cause and re-run the same command to continue"
            ) from None


class _OrphanLocalJob:
    """A local submitit job whose driver is gone: wait on its process id and result file."""

    def __init__(self, handle: Any, pid: int) -> None:
        self._handle = handle
        self._pid = pid
        self.job_id = str(pid)

    def done(self) -> bool:
        return self._handle.paths.result_pickle.exists() or not _pid_alive(self._pid)

    def result(self) -> Any:
        if not self._handle.paths.result_pickle.exists():
            raise EngineError(f"local job {self._pid} ended without a result")
        return self._handle.result()

    def cancel(self, check: bool = False) -> None:  # submitit's signature
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGINT)
