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

``--breakdown`` also says where the browser spends the time between the frame and the first
chart (:data:`PAGE_PROBE`, read in the page itself, from the browser's own clock): when the
title entered the page, when Streamlit's chart bundle (``PlotlyChart*.js``, plotly.js) had
arrived, when the first chart entered the page, and how long the main thread was busy in long
tasks (≥ 50 ms without a break: parsing and running the bundles, React drawing the page, plotly
drawing the charts) between the title and that chart. Busy time the browser's main thread
spends there is a floor no server-side change lowers. Playwright's
checks above poll the page, so they read a little later than these in-page times.

Usage: ``python bench/cold_open_bench.py [--demo demo demo-mnist1d ...] [--page explore]
[--runs 3] [--breakdown]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from interactive_bench import _copy, _uptime  # noqa: E402  (bench/, beside this script)
from served import served  # noqa: E402

from sde_core.viz.figures.export import BROWSER_ARGS, find_chromium  # noqa: E402

DEMOS = ("demo", "demo-mnist1d", "demo-facts", "demo-fashion-edm", "demo-fashion-edm-mem")
#: Seconds after the frame (issue 33).
FIRST_CHART_TARGET, COMPLETE_TARGET = 1.0, 2.0

#: Installed in the page before Streamlit's own scripts: records the browser's long tasks and
#: when the title and the first chart entered the page (milliseconds since navigation).
PAGE_PROBE = r"""
window.__sdeProbe = {long: [], marks: {}};
try {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__sdeProbe.long.push([e.startTime, e.duration]);
  }).observe({type: "longtask", buffered: true});
} catch (e) {}
const __sdeMark = () => {
  const marks = window.__sdeProbe.marks;
  const main = document.querySelector('[data-testid="stMain"]');
  if (!main) return;
  if (marks.title === undefined && main.querySelector("h1")) marks.title = performance.now();
  if (marks.chart === undefined && main.querySelector(".js-plotly-plot .main-svg"))
    marks.chart = performance.now();
};
document.addEventListener("DOMContentLoaded", () => new MutationObserver(__sdeMark)
  .observe(document.body, {subtree: true, childList: true}));
"""


@dataclass(frozen=True)
class Breakdown:
    """Where the browser spent a cold open, in seconds since navigation, by its own clock."""

    title: float
    plotly_loaded: float
    chart: float
    busy: float

    @classmethod
    def read(cls, page: object) -> Breakdown:
        """Read :data:`PAGE_PROBE`'s record and the resource timing of the chart bundle."""
        probe = page.evaluate("window.__sdeProbe")  # type: ignore[attr-defined]
        loaded = page.evaluate(  # type: ignore[attr-defined]
            "Math.min(...performance.getEntriesByType('resource')"
            ".filter(r => r.name.includes('/PlotlyChart')).map(r => r.responseEnd))"
        )
        marks, tasks = probe["marks"], sorted(probe["long"])
        title, chart = marks.get("title", math.nan), marks.get("chart", math.nan)
        busy = sum(max(0.0, min(start + d, chart) - max(start, title)) for start, d in tasks)
        return cls(title / 1e3, loaded / 1e3, chart / 1e3, busy / 1e3)


@dataclass(frozen=True)
class Open:
    """One cold open: the warm-up (NaN: the server did not say it had warmed up), then frame,
    first chart and complete in seconds from navigation; the in-page breakdown when asked."""

    warm: float
    frame: float
    first: float
    complete: float
    breakdown: Breakdown | None = None


def cold_open(browser: object, demo: str, page_path: str, breakdown: bool = False) -> Open:
    """One cold open of ``page_path`` on a fresh server of ``demo`` (a step not reached in
    300 s raises)."""
    from playwright.sync_api import expect

    with tempfile.TemporaryDirectory() as tmp:
        folder = _copy(str(ROOT / "assets" / demo), Path(tmp))
        with served(folder, Path(tmp), Path(tmp) / "server.log") as server:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
            page = context.new_page()
            if breakdown:
                page.add_init_script(PAGE_PROBE)
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
            found = Breakdown.read(page) if breakdown else None
            context.close()
            return Open(server.warmed or math.nan, frame, first, complete, found)


def _breakdown_lines(found: dict[str, list[Open]]) -> list[str]:
    """The in-page breakdown of every run (``--breakdown``), and what it implies for the
    first-chart target."""
    lines = [
        "",
        "Where the browser spent it (in-page clock, s since navigation; median of the runs): the "
        "title in the page, plotly.js (Streamlit's chart bundle) arrived, the first chart in the "
        "page, and the main thread's busy time in long tasks (≥ 50 ms: parsing and running the "
        "bundles, drawing the page and its charts) between the title and that chart.",
        "",
        "| demo | title | plotly.js arrived | first chart | chart − title | busy between |",
        "|---|---|---|---|---|---|",
    ]
    for demo, opens in found.items():
        rows = [o.breakdown for o in opens if o.breakdown is not None]
        if not rows:
            continue

        def med(get: Callable[[Breakdown], float], rows: list[Breakdown] = rows) -> float:
            return statistics.median(get(b) for b in rows)

        lines.append(
            f"| {demo} | {med(lambda b: b.title):.2f} | {med(lambda b: b.plotly_loaded):.2f} | "
            f"{med(lambda b: b.chart):.2f} | {med(lambda b: b.chart - b.title):.2f} | "
            f"{med(lambda b: b.busy):.2f} |"
        )
    return lines


def section(demos: list[str], page_path: str, runs: int, breakdown: bool = False) -> str:
    """The benchmark's Markdown section."""
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("needs Chromium (apt-get install chromium)")
    before = _uptime()
    found: dict[str, list[Open]] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=list(BROWSER_ARGS))
        for demo in demos:
            found[demo] = [cold_open(browser, demo, page_path, breakdown) for _ in range(runs)]
        browser.close()
    after = _uptime()
    flag = " --breakdown" if breakdown else ""
    lines = [
        f"## Cold opens of /{page_path} in Chromium (issue 33) — "
        f"{dt.datetime.now():%Y-%m-%d %H:%M}",
        "",
        f"`python bench/cold_open_bench.py --page {page_path} --runs {runs}{flag} --demo "
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
    for demo, opens in found.items():
        each = "; ".join(f"{o.frame:.2f} / {o.first:.2f} / {o.complete:.2f}" for o in opens)
        chart = statistics.median(o.first - o.frame for o in opens)
        done = statistics.median(o.complete - o.frame for o in opens)
        met = chart <= FIRST_CHART_TARGET and done <= COMPLETE_TARGET
        lines.append(f"| {demo} | {each} | {chart:.2f} | {done:.2f} | {'yes' if met else 'no'} |")
    if breakdown:
        lines += _breakdown_lines(found)
    return "\n".join([*lines, ""])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--demo", nargs="+", default=list(DEMOS), choices=DEMOS)
    p.add_argument("--page", default="explore", help="the page path (explore, answer, compare)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--breakdown", action="store_true",
                   help="also where the browser spends the time (PAGE_PROBE)")  # fmt: skip
    args = p.parse_args()
    print(section(args.demo, args.page, args.runs, args.breakdown))


if __name__ == "__main__":
    main()
