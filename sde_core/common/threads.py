"""Worker threads for CPU kernels that release the GIL (the thread policy of method §2).

The split-half HSIC engine runs its compiled kernels on plain Python threads that pull one task
(a subset, or a chunk of one subset's splits) at a time from a queue. Compared with a
fork-join parallel region (numba ``prange`` over OpenMP), this

* balances dynamically: when another process takes a core, the other thread keeps pulling
  tasks instead of waiting at a barrier for the descheduled one;
* never spins: idle workers sleep on the queue, so they neither steal cores from torch, BLAS or
  another engine nor get theirs stolen by spinning OpenMP/OpenBLAS workers;
* gives results that do not depend on the number of threads: each task is computed by one
  thread in a fixed order.

Only the standard library is used here; BLAS thread limits live with the kernels that need them.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sde_core.common.validation import check_int
from sde_core.errors import InputError

__all__ = ["resolve_threads", "run_tasks", "usable_cpus"]

T = TypeVar("T")
R = TypeVar("R")

_PREFIX = "sde-kernel"
#: Upper bound on worker threads (a sanity limit on the ``threads`` argument).
MAX_THREADS = 256


def usable_cpus() -> int:
    """CPUs this process may use: its affinity mask, capped by ``OMP_NUM_THREADS`` when set.

    ``OMP_NUM_THREADS`` is the variable schedulers (Ray, Slurm, job wrappers) use to tell a
    process how many cores it was given; honouring it keeps the engine from oversubscribing a
    shared node.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity masks
        cpus = os.cpu_count() or 1
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        cpus = min(cpus, int(env))
    return max(1, cpus)


def resolve_threads(threads: int | None) -> int:
    """The number of worker threads: ``threads``, or :func:`usable_cpus` when None."""
    if threads is None:
        return usable_cpus()
    threads = check_int(threads, "threads (None: all usable CPUs)", minimum=1)
    if threads > MAX_THREADS:
        raise InputError(f"threads={threads} is more than sensible (max {MAX_THREADS})")
    return threads


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    """One persistent pool per thread count (idle workers sleep; they cost no CPU)."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix=_PREFIX)


def _forget_pools() -> None:
    # A forked child inherits the cache but not the worker threads: start fresh there.
    _pool.cache_clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def run_tasks(fn: Callable[[T], R], items: Iterable[T], threads: int) -> list[R]:
    """``[fn(item) for item in items]`` on ``threads`` worker threads, in the items' order.

    Tasks are handed out one at a time as workers become free. With one thread, one item, or
    when called from one of the workers themselves (no nested waiting on the same pool), the
    calls run inline in the calling thread. An exception in any task is re-raised here.
    """
    todo = list(items)
    nested = threading.current_thread().name.startswith(_PREFIX)
    if threads <= 1 or len(todo) <= 1 or nested:
        return [fn(item) for item in todo]
    return list(_pool(threads).map(fn, todo))
