"""A page's cold open in Chromium (issue 33): frame, first chart and complete, per bundled demo.

Each run is a first visitor on a fresh server: a fresh copy of the demo (its shipped results
store, no ``.sde-cache``), ``python serve.py`` on it (:mod:`served`: what ``make run`` starts),
the page opened once the server's warm-up has finished, in a new context of a Chromium that was
launched before (its start is not timed). Times from navigation:

- **frame**: the page's title (its first-level heading) shown;
- **first chart**: the first chart drawn in view;
- **complete**: the page's run ended — the view's link written into the URL (``ws=``, by the
  run's last call) and no running indicator.

Issue 33's targets are relative to the frame: first chart ≤ 1 s after it, complete ≤ 2 s after
it. Prints a Markdown section (each run, the medians, ``uptime`` before and after); timing
belongs here, never in the tests.

Usage: ``python bench/cold_open_bench.py [--demo demo demo-mnist1d ...] [--page explore]
[--runs 3]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from interactive_bench import _copy, _uptime  # noqa: E402  (bench/, beside this script)
from served import served  # noqa: E402

from sde_core.viz.figures.export import BROWSER_ARGS, find_chromium  # noqa: E402

DEMOS = ("demo", "demo-mnist1d", "demo-facts", "demo-fashion-edm", "demo-fashion-edm-mem")
#: Seconds after the frame (issue 33).
FIRST_CHART_TARGET, COMPLETE_TARGET = 1.0, 2.0


def cold_open(browser: object, demo: str, page_path: str) -> tuple[float, float, float, float]:
    """One cold open of ``page_path`` on a fresh server of ``demo``: (warm-up, frame, first
    chart, complete) seconds, the last three from navigation (warm-up NaN: the server did not
    say it had warmed up; a step not reached in 300 s raises)."""
    from playwright.sync_api import expect

    with tempfile.TemporaryDirectory() as tmp:
        folder = _copy(str(ROOT / "assets" / demo), Path(tmp))
        with served(folder, Path(tmp), Path(tmp) / "server.log") as server:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
            page = context.new_page()
            page.set_default_timeout(300_000)
            main = page.get_by_test_id("stMain")
            t0 = time.perf_counter()
            page.goto(f"{server.url}/{page_path}", wait_until="commit")
            expect(main.locator("h1").first).to_be_visible(timeout=300_000)
            frame = time.perf_counter() - t0
            chart = main.locator(".js-plotly-plot >> visible=true").first
            expect(chart).to_be_visible(timeout=300_000)
            first = time.perf_counter() - t0
            expect(page).to_have_url(re.compile(r"[?&]ws="), timeout=300_000)
            expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=300_000)
            complete = time.perf_counter() - t0
            context.close()
            return (server.warmed or float("nan"), frame, first, complete)


def section(demos: list[str], page_path: str, runs: int) -> str:
    """The benchmark's Markdown section."""
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("needs Chromium (apt-get install chromium)")
    before = _uptime()
    found: dict[str, list[tuple[float, float, float, float]]] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=list(BROWSER_ARGS))
        for demo in demos:
            found[demo] = [cold_open(browser, demo, page_path) for _ in range(runs)]
        browser.close()
    after = _uptime()
    lines = [
        f"## Cold opens of /{page_path} in Chromium (issue 33) — "
        f"{dt.datetime.now():%Y-%m-%d %H:%M}",
        "",
        f"`python bench/cold_open_bench.py --page {page_path} --runs {runs} --demo "
        f"{' '.join(demos)}`: each run a fresh copy of the demo (shipped results store, no "
        "`.sde-cache`), `python serve.py` on it, the page opened once its warm-up had finished, "
        "in a new context of an already running Chromium. Seconds from navigation; the targets "
        f"are after the frame (first chart ≤ {FIRST_CHART_TARGET:g} s, complete ≤ "
        f"{COMPLETE_TARGET:g} s). {os.cpu_count()} cores; `uptime` before: `{before}`, after: "
        f"`{after}`.",
        "",
        "| demo | runs: frame / first chart / complete s | median first chart − frame s | "
        "median complete − frame s | met |",
        "|---|---|---|---|---|",
    ]
    for demo, rows in found.items():
        each = "; ".join(f"{f:.2f} / {c:.2f} / {d:.2f}" for _, f, c, d in rows)
        chart = statistics.median(c - f for _, f, c, _ in rows)
        done = statistics.median(d - f for _, f, _, d in rows)
        met = chart <= FIRST_CHART_TARGET and done <= COMPLETE_TARGET
        lines.append(f"| {demo} | {each} | {chart:.2f} | {done:.2f} | {'yes' if met else 'no'} |")
    return "\n".join([*lines, ""])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--demo", nargs="+", default=list(DEMOS), choices=DEMOS)
    p.add_argument("--page", default="explore", help="the page path (explore, answer, compare)")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    print(section(args.demo, args.page, args.runs))


if __name__ == "__main__":
    main()
