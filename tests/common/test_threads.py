"""Worker threads of the compiled kernels (sde_core.common.threads)."""

from __future__ import annotations

import threading

import pytest

from sde_core.common.threads import resolve_threads, run_tasks, usable_cpus
from sde_core.errors import InputError


def test_usable_cpus_honours_omp_num_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    all_cpus = usable_cpus()
    assert all_cpus >= 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert usable_cpus() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert usable_cpus() == all_cpus


def test_resolve_threads():
    assert resolve_threads(None) == usable_cpus()
    assert resolve_threads(3) == 3
    for bad in (0, -1, 2.5, True, "2", 10_000):
        with pytest.raises(InputError, match="threads"):
            resolve_threads(bad)  # type: ignore[arg-type]


def test_run_tasks_keeps_order_and_uses_workers():
    names: set[str] = set()

    def work(i: int) -> int:
        names.add(threading.current_thread().name)
        return i * i

    assert run_tasks(work, range(50), threads=3) == [i * i for i in range(50)]
    assert all(n.startswith("sde-kernel") for n in names)
    names.clear()
    assert run_tasks(work, range(5), threads=1) == [0, 1, 4, 9, 16]
    assert names == {threading.current_thread().name}


def test_run_tasks_reraises_and_runs_nested_calls_inline():
    def boom(i: int) -> int:
        if i == 3:
            raise RuntimeError("task 3 failed")
        return i

    with pytest.raises(RuntimeError, match="task 3"):
        run_tasks(boom, range(6), threads=2)

    def outer(i: int) -> list[int]:
        # a task that fans out again must not wait on the pool it is running on
        return run_tasks(lambda j: i + j, range(4), threads=2)

    assert run_tasks(outer, range(4), threads=2) == [[i + j for j in range(4)] for i in range(4)]
