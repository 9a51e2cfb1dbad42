"""Job functions for tests/pipeline/test_engine.py (importable by Ray workers via PYTHONPATH)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def square(x: int) -> int:
    """x²."""
    return x * x


def total(deps: dict[str, Any], offset: int = 0) -> int:
    """Sum of the dependency results plus an offset."""
    return offset + sum(deps.values())


def dies_once(marker: str, value: int) -> int:
    """Kill the worker process the first time (marker absent), return 2·value afterwards."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died once\n")
        os._exit(1)
    return 2 * value


def fails(message: str, deps: dict[str, Any] | None = None) -> None:
    """Always raise ValueError(message)."""
    raise ValueError(message)


def kill_once_then(inner: Any, marker: str, **kwargs: Any) -> Any:
    """Fault injection: kill the worker the first time (marker absent), then run ``inner``."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died once\n")
        os._exit(1)
    return inner(**kwargs)


def counted(counter_dir: str, name: str, seconds: float, value: int) -> int:
    """Record one execution in ``counter_dir/name`` (a line per run), wait, return 10·value."""
    import time

    with (Path(counter_dir) / name).open("a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return 10 * value


def timed(log_dir: str, name: str, seconds: float) -> str:
    """Write this run's start and end (``time.time()``) to ``log_dir/name`` after sleeping."""
    import time

    start = time.time()
    time.sleep(seconds)
    (Path(log_dir) / name).write_text(f"{start} {time.time()}\n", encoding="utf-8")
    return name
