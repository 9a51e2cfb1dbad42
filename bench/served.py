"""The dashboard served as ``make run`` serves it, for the browser benchmarks.

:func:`served` starts ``python serve.py`` (``streamlit run app.py`` plus the warm-up of the
default workspace) on a free local port with ``SDE_WORKSPACE`` set, waits until the server
answers its health check and its warm-up has finished (what a user waits for before opening
the page), yields the page's base URL and the warm-up's seconds from the server's start, and
stops the server afterwards (printing the end of its log when the body raised).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Server:
    """A running dashboard: its base URL and the seconds its warm-up took from its start
    (None when it did not say so within the wait)."""

    url: str
    warmed: float | None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(workspace: Path, data_roots: Path, log: Path) -> Iterator[Server]:
    """``python serve.py`` on ``workspace`` (files allowed under ``data_roots``), its output
    in ``log``; yields once it is healthy and warmed up (at most two minutes each)."""
    port = _free_port()
    env = {**os.environ, "SDE_WORKSPACE": str(workspace), "SDE_DATA_ROOTS": str(data_roots)}
    cmd = [sys.executable, "serve.py", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true",
           "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # fmt: skip
    started = time.perf_counter()
    with log.open("w") as out:
        server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    warmed: list[float] = []

    def watch_log() -> None:
        while server.poll() is None and not warmed:
            if "warmed in" in log.read_text(errors="replace"):
                warmed.append(time.perf_counter() - started)
            time.sleep(0.1)

    threading.Thread(target=watch_log, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        for _ in range(1200):  # a user opens the page once `make run` says it is ready
            if warmed or server.poll() is not None:
                break
            time.sleep(0.1)
        yield Server(url, warmed[0] if warmed else None)
    except Exception:
        print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
        raise
    finally:
        server.terminate()
        server.wait(timeout=30)
