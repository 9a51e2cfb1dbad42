"""Execution engines: run a graph of jobs in-process or on a Ray cluster, with identical results.

A :class:`Job` is a self-contained description of one unit of work — an importable,
module-level function, its keyword arguments, the keys of the jobs it depends on and the
resources it asks for. Engines only *run* jobs; results always travel back to the driver,
which alone writes the results store (no concurrent writers), so rows are identical whichever
engine ran them.

* :class:`LocalEngine` (default; what ``make run`` and CI use) runs jobs in dependency order in
  this process.
* :class:`RayEngine` submits every job whose dependencies are finished as a Ray task with its
  CPU/GPU/memory request, retries tasks whose worker died (bounded), and hands each result to
  the driver as it arrives.

Both skip jobs listed in ``done`` (e.g. finished units read back from the store) and feed their
results to dependants, so re-running a half-finished plan only does the missing work.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sde_core.errors import EngineError

__all__ = [
    "RELEASED",
    "Engine",
    "Job",
    "LocalEngine",
    "RayEngine",
    "Resources",
    "ResultCallback",
    "dependencies",
    "kept",
    "make_engine",
    "topological_order",
]

#: ``on_result(job, result)``: called in the driver once per finished job.
ResultCallback = Callable[["Job", Any], None]
#: ``progress(done, total)`` over the jobs of one run.
JobProgress = Callable[[int, int], None]


@dataclass(frozen=True)
class Resources:
    """What one job asks the scheduler for.

    Attributes:
        cpus: CPU cores (fractions allowed). gpus: GPUs (fractions allowed).
        memory_mb: memory in MiB (0 = no request).
    """

    cpus: float = 1.0
    gpus: float = 0.0
    memory_mb: int = 0

    def __post_init__(self) -> None:
        if self.cpus < 0 or self.gpus < 0 or self.memory_mb < 0:
            raise EngineError(f"resource requests must be non-negative; got {self}")


@dataclass(frozen=True)
class Job:
    """One unit of work.

    Attributes:
        key: unique, stable name (also the results store's unit key).
        fn: importable module-level function; called as ``fn(**kwargs)``, plus
            ``deps={key: result}`` when ``deps`` is non-empty.
        kwargs: picklable keyword arguments (paths, settings dicts — not models or tensors).
        deps: keys of the jobs whose results this job needs.
        resources: the scheduler request.
        label: a short human-readable description for progress displays.
    """

    key: str
    fn: Callable[..., Any]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    deps: tuple[str, ...] = ()
    resources: Resources = field(default_factory=Resources)
    label: str = ""


def _call(job: Job, dep_results: Mapping[str, Any]) -> Any:
    kwargs = dict(job.kwargs)
    if job.deps:
        kwargs["deps"] = {k: dep_results[k] for k in job.deps}
    return job.fn(**kwargs)


def topological_order(jobs: Sequence[Job], done: Mapping[str, Any] | None = None) -> list[Job]:
    """The jobs in an order where every job comes after its dependencies.

    Args:
        jobs: the graph. done: keys already finished (may satisfy dependencies).

    Raises:
        EngineError: duplicate keys, a dependency that is neither a job nor done, or a cycle.
    """
    done = done or {}
    by_key: dict[str, Job] = {}
    for job in jobs:
        if not isinstance(job, Job):
            raise EngineError(f"expected Job objects, got {type(job).__name__}")
        if job.key in by_key:
            raise EngineError(f"duplicate job key {job.key!r}: every job needs a unique key")
        by_key[job.key] = job
    for job in jobs:
        missing = [d for d in job.deps if d not in by_key and d not in done]
        if missing:
            raise EngineError(f"job {job.key!r} depends on unknown jobs {missing}")
    order: list[Job] = []
    state: dict[str, int] = {}  # 1 = visiting, 2 = placed

    for root in jobs:
        stack: list[tuple[str, int]] = [(root.key, 0)]
        while stack:
            key, i = stack.pop()
            if i == 0:
                if state.get(key) == 2:
                    continue
                state[key] = 1
            deps = [d for d in by_key[key].deps if d in by_key]
            if i < len(deps):
                stack.append((key, i + 1))
                dep = deps[i]
                if state.get(dep) == 1:
                    raise EngineError(f"jobs form a cycle through {key!r} and {dep!r}")
                if state.get(dep) != 2:
                    stack.append((dep, 0))
            else:
                state[key] = 2
                order.append(by_key[key])
    return order


#: What :meth:`Engine.run` with ``keep=False`` returns for a job whose result it handed to
#: ``on_result`` and did not keep.
RELEASED = "<released: handed to on_result>"


def kept(value: Any, job: Job, keep: bool, needed: Collection[str]) -> Any:
    """What an engine keeps of ``job``'s result: the value itself, or — with ``keep=False`` and
    no job depending on it (``needed``: every job's dependencies) — :data:`RELEASED`."""
    return value if keep or job.key in needed else RELEASED


def dependencies(jobs: Sequence[Job]) -> set[str]:
    """The keys some job of ``jobs`` depends on (their results must be kept to run it)."""
    return {d for job in jobs for d in job.deps}


class Engine(ABC):
    """Runs a job graph; subclasses decide where the jobs execute."""

    name: str = "engine"

    @abstractmethod
    def run(
        self,
        jobs: Sequence[Job],
        *,
        done: Mapping[str, Any] | None = None,
        on_result: ResultCallback | None = None,
        progress: JobProgress | None = None,
        keep: bool = True,
    ) -> dict[str, Any]:
        """Run every job not in ``done``; return ``{key: result}`` for all jobs (done included).

        ``on_result`` is called in the driver exactly once per job that ran, as soon as its
        result is back, so a caller can persist it before the next one finishes. With
        ``keep=False`` a result no other job depends on is handed to ``on_result`` and not
        kept (the returned dict maps its key to :data:`RELEASED`): the driver's memory stays
        bounded however many jobs stream their results through it.
        """


class LocalEngine(Engine):
    """Run jobs in dependency order in this process (the default engine)."""

    name = "local"

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
        needed = dependencies(todo)
        for i, job in enumerate(todo):
            if progress:
                progress(i, len(todo))
            value = _call(job, results)
            if on_result:
                on_result(job, value)
            results[job.key] = kept(value, job, keep, needed)
        if progress:
            progress(len(todo), len(todo))
        return results


def _ray_entry(job: Job, dep_results: Mapping[str, Any]) -> Any:
    """Executed on a Ray worker."""
    return _call(job, dep_results)


class RayEngine(Engine):
    """Run jobs as Ray tasks with their resource requests.

    Args:
        address: ``None`` starts a local Ray instance (``num_cpus`` cores), ``"auto"`` joins
            the cluster started by ``ray start`` on this machine, ``"ray://HOST:PORT"`` connects
            through Ray Client (e.g. a KubeRay head service).
        num_cpus: CPUs of a local instance (only with ``address=None``).
        max_retries: how often a task whose worker process died is re-run (bounded).
        retry_exceptions: also retry tasks that raised an exception (default: fail fast).
        runtime_env: Ray runtime environment for the workers (e.g. ``{"working_dir": "."}``).
        max_in_flight: at most this many tasks submitted and unfinished at once (default:
            twice the cluster's CPUs, read when it connects). Every task's arguments (the
            workspace, the dataset, the subset plan) sit in Ray's object store until it ends:
            500 evaluations submitted at once held 7 GB there and spilled it to disk.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        max_retries: int = 3,
        retry_exceptions: bool = False,
        runtime_env: Mapping[str, Any] | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        if max_retries < 0:
            raise EngineError(f"max_retries must be ≥ 0; got {max_retries}")
        if max_in_flight is not None and max_in_flight < 1:
            raise EngineError(f"max_in_flight must be at least 1; got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.address = address
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self.retry_exceptions = retry_exceptions
        self.runtime_env = dict(runtime_env or {})

    def _connect(self) -> Any:
        try:
            import ray
        except ImportError:
            raise EngineError(
                "the Ray engine needs the 'ray' package: pip install 'sde-explorer[ray]'"
            ) from None
        if ray.is_initialized():
            return ray
        kwargs: dict[str, Any] = {
            "ignore_reinit_error": True,
            "include_dashboard": False,
            "log_to_driver": False,
        }
        if self.runtime_env:
            kwargs["runtime_env"] = self.runtime_env
        if self.address is None:
            kwargs["num_cpus"] = self.num_cpus
        else:
            kwargs["address"] = self.address
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = self.address or "a new local instance"
            raise EngineError(
                f"cannot reach the Ray cluster at {where} ({' '.join(str(exc).split())[:200]}): "
                "start one with `ray start --head`, pass --address auto on its head node, or "
                "ray://HOST:10001 for a remote (e.g. KubeRay) head"
            ) from None
        return ray

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
        ray = self._connect()
        limit = self.max_in_flight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        remote = ray.remote(_ray_entry)
        waiting = list(todo)
        running: dict[Any, Job] = {}
        finished = 0
        if progress:
            progress(0, len(todo))
        while waiting or running:
            ready = [j for j in waiting if all(d in results for d in j.deps)]
            for job in ready[: max(0, limit - len(running))]:
                waiting.remove(job)
                options: dict[str, Any] = {
                    "num_cpus": job.resources.cpus,
                    "num_gpus": job.resources.gpus,
                    "max_retries": self.max_retries,
                    "retry_exceptions": self.retry_exceptions,
                    "name": job.key[:100],
                }
                if job.resources.memory_mb:
                    options["memory"] = job.resources.memory_mb * 1024 * 1024
                deps = {k: results[k] for k in job.deps}
                running[remote.options(**options).remote(job, deps)] = job
            if not running:
                stuck = [j.key for j in waiting]
                raise EngineError(f"jobs {stuck} can never start: their dependencies failed")
            ref_done, _ = ray.wait(list(running), num_returns=1)
            job = running.pop(ref_done[0])
            try:
                value = ray.get(ref_done[0])
            except Exception as exc:  # a task error or a worker that died too often
                for ref in running:
                    ray.cancel(ref)
                cause = getattr(exc, "cause", None)
                what = (
                    f"raised {type(cause).__name__}: {' '.join(str(cause).split())[:300]}"
                    if isinstance(cause, Exception)
                    else f"failed after {self.max_retries} retries ({type(exc).__name__})"
                )
                raise EngineError(
                    f"job {job.key!r} {what}; finished jobs are kept — fix the cause and "
                    "re-run to continue"
                ) from None
            finished += 1
            if on_result:
                on_result(job, value)
            results[job.key] = kept(value, job, keep, needed)
            del value
            if progress:
                progress(finished, len(todo))
        return results

    @staticmethod
    def shutdown() -> None:
        """Disconnect from (or stop the local) Ray instance."""
        try:
            import ray
        except ImportError:
            return
        if ray.is_initialized():
            ray.shutdown()


def make_engine(name: str = "local", address: str | None = None, **kwargs: Any) -> Engine:
    """Build an engine from a CLI-style name: ``"local"`` or ``"ray"`` (with ``address``)."""
    if name == "local":
        if address is not None:
            raise EngineError("--address only applies to --engine ray")
        return LocalEngine()
    if name == "ray":
        return RayEngine(address, **kwargs)
    raise EngineError(f"unknown engine {name!r}: use 'local' or 'ray'")
