"""From a fresh clone to the Curves view's first chart (issue 38's acceptance), in Chromium.

A fresh clone of this checkout's ``HEAD`` (``git clone``: what is committed, no ``.venv``, no
``.sde-cache``) runs ``make run`` as a newcomer would — the virtual environment set up with
pip, then ``python serve.py`` on ``$SDE_WORKSPACE`` (default: the bundled Fashion-MNIST demo) —
on a free localhost port. Once the server says it has warmed the workspace, the system Chromium
(Playwright, launched as ``tests/app/test_browser.py`` does) opens ``/sweeps`` and the times
are taken from the start of ``make run``:

- ``venv``: until ``serve.py`` first prints (pip's install of ``requirements.txt``);
- ``warm``: until the server's warm-up line (``serve.py: … warmed in``);
- ``frame``, ``first chart``, ``complete``: from opening ``/sweeps`` to its title, to the
  Curves section's first drawn chart (an SVG of plotly's inside the page), and to the end of
  the page's script run.

With ``--page explore?model=rl`` (or ``answer``, ``compare`` …) another page is opened instead
and its first chart (anywhere on the page) is timed: a newcomer's cold open (issue 33).

Usage: ``python bench/fresh_clone_bench.py [--workspace assets/demo-mnist1d] [--page PAGE]
[--venv PATH]`` (``--venv``: run ``serve.py`` of the clone with an installed environment
instead of ``make run``, to time the page alone; the clone's code is imported from the clone,
``serve.py`` puts it first on the path, and the environment is left as it was). The load
average is printed beside the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 1800


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(log: Path, text: str, proc: subprocess.Popen, deadline: float) -> float:
    """The monotonic time at which ``text`` appeared in ``log``."""
    while text not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"make run ended or timed out before {text!r}:\n{log.read_text()}")
        time.sleep(0.1)
    return time.monotonic()


def page_times(url: str, page_path: str = "sweeps") -> tuple[float, float, float]:
    """Seconds from opening ``url``/``page_path`` to its title, to its first drawn chart (the
    Curves section's, on Sweeps) and to the end of its script run."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright

    sys.path.insert(0, str(ROOT))
    from sde_core.viz.figures.export import BROWSER_ARGS, find_chromium

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("needs Chromium: `make browser-setup` (as root) or apt-get install it")
    expect.set_options(timeout=LIMIT_S * 1000)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=list(BROWSER_ARGS))
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(LIMIT_S * 1000)
        t0 = time.monotonic()
        page.goto(f"{url}/{page_path}")
        page.get_by_role("heading", level=1).first.wait_for()
        frame = time.monotonic() - t0
        charts = page.locator("[data-testid='stPlotlyChart'] svg.main-svg")
        app = page.get_by_test_id("stApp")
        done = app.and_(page.locator("[data-test-script-state='notRunning']"))
        charts.first.or_(done).first.wait_for()  # a chart, or the end of a run that drew none
        if not charts.count():  # a chart sent at the run's end is drawn just after it
            with contextlib.suppress(PlaywrightTimeout):
                charts.first.wait_for(timeout=5000)
        chart = time.monotonic() - t0 if charts.count() else math.nan
        expect(app).to_have_attribute("data-test-script-state", "notRunning")
        expect(page.get_by_test_id("stStatusWidget")).to_have_count(0)
        complete = time.monotonic() - t0
        sweeps = page_path.startswith("sweeps")
        if sweeps and not page.get_by_role("heading", name="Curves: checkpoints of a run").count():
            raise SystemExit("the page has no Curves section (no model with checkpoints)")
        if math.isnan(chart):
            print(f"/{page_path} drew no chart")
        browser.close()
    return frame, chart, complete


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workspace", default=None, help="SDE_WORKSPACE (default: make run's)")
    p.add_argument("--venv", type=Path, default=None, help="an installed .venv to link in")
    p.add_argument("--page", default="sweeps", help="the page and query to open (sweeps)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        t = time.monotonic()
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        cloned = time.monotonic() - t
        port = _port()
        env = {**os.environ, "STREAMLIT_SERVER_PORT": str(port),
               "STREAMLIT_SERVER_ADDRESS": "127.0.0.1", "STREAMLIT_SERVER_HEADLESS": "true",
               "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}  # fmt: skip
        if args.workspace:
            env["SDE_WORKSPACE"] = args.workspace
        log = Path(tmp) / "make-run.log"
        start = time.monotonic()
        # with --venv, make run's own last step (make would reinstall the clone into that
        # environment: the clone's requirement files are newer than its stamps)
        cmd = ["make", "run"] if args.venv is None else [
            str(args.venv.resolve() / "bin" / "python"), "serve.py"]  # fmt: skip
        with log.open("w") as out:
            print(" ".join(cmd), file=out, flush=True)
            proc = subprocess.Popen(cmd, cwd=clone, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            deadline = start + LIMIT_S
            venv = _wait(log, "serve.py", proc, deadline) - start
            warm = _wait(log, "warmed in", proc, deadline) - start
            frame, chart, complete = page_times(f"http://127.0.0.1:{port}", args.page)
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=60)
    load = os.getloadavg()
    print(f"workspace {args.workspace or 'assets/demo (make run default)'}; "
          f"venv {'installed (serve.py run directly)' if args.venv else 'installed by make run'}; "
          f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    print(f"clone {cloned:.1f} s; make run → venv ready {venv:.1f} s → server warmed "
          f"{warm:.1f} s; /{args.page}: frame {frame:.1f} s, first chart {chart:.1f} s, "
          f"complete {complete:.1f} s; fresh clone → its first chart "
          f"{cloned + warm + chart:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
