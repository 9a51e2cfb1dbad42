"""Chromium screenshots of the landing answer (``/``, the Answer page) of every bundled demo,
for the README (issue 34): ``docs/screenshots/answer-<demo>.png``.

Each demo is served as a fresh clone has it (no ``.sde-cache``: the page answers from the
shipped results store) by ``python serve.py`` (what ``make run`` starts) with
``SDE_WORKSPACE=assets/<demo>`` on a free localhost port — in place, the cache it creates
removed afterwards, or, where the checkout already has a cache, from a copy without it. The
system Chromium (Playwright, never a downloaded browser) opens ``/`` at a 1280×800 viewport,
waits until the script run is over, grows the window to the page's content (at most 3200 px
tall) and takes it. The PNG is reduced to a 256-colour palette (the page is flat colours and
text), so the four stay well under 1.5 MB together. The text of each audited model's answer
line is printed, for the "ten-second test" of issue 34 (the sentence each model gets).

With ``--views``, the researcher's views of issue 38 instead, one image of each section a demo
has (:data:`VIEWS`), ``docs/screenshots/<view>-<demo>.png``: the method leaderboard and the
small multiples (Compare), the shipped sweep and the checkpoint curves (Sweeps), the drill-down
of target subset 0, the most remembered forget samples and a language model's completions
(Explore, on the first audited model; an expander is opened, a toggle switched on). Each is
the 1280-pixel-wide window scrolled to the section's heading, 1000 pixels tall; a section the
demo lacks is skipped and said. The seconds from opening the page to its last script run are
printed beside each.

Usage: ``python reproduction/screenshots.py [--views] [--demo assets/demo ...]
[--out docs/screenshots]`` (default: every demo of :data:`sde_core.pipeline.demos.DEMOS`)
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def _demo_table() -> dict:
    from sde_core.pipeline.demos import DEMOS as TABLE

    return TABLE


#: Every bundled demo's folder, from the one demo table.
DEMOS = tuple(f"assets/{demo.folder}" for demo in _demo_table().values())
VIEWPORT = {"width": 1280, "height": 800}
#: The tallest image taken (pixels): the window grows to the page's content up to this.
MAX_HEIGHT = 3200
TIMEOUT_MS = 600_000
#: ``--views``: name → (page, how its section is found: "heading", "label" (a widget's),
#: "expander" (opened) or "toggle" (switched on), the section's text).
VIEWS = {
    "leaderboard": ("compare", "heading", "Method leaderboard"),
    "multiples": ("compare", "label", "Side by side"),
    "shipped-sweep": ("sweeps", "heading", "Shipped sweeps"),
    "curves": ("sweeps", "heading", "Curves: checkpoints of a run"),
    "drilldown": ("explore", "expander", "Target subset 0: its"),
    "samples": ("explore", "expander", "Which forget samples still look remembered"),
    "completions": ("explore", "toggle", "Completions: what"),
}
#: The height of a view's image (pixels).
VIEW_HEIGHT = 1000
#: Scroll a section's first element to the top of its scrolling container, below the page's
#: sticky header (90 px).
SCROLL_TO = """e => { e.scrollIntoView({block: 'start'});
  for (let p = e.parentElement; p; p = p.parentElement) {
    const o = getComputedStyle(p).overflowY;
    if ((o === 'auto' || o === 'scroll') && p.scrollHeight > p.clientHeight) {
      p.scrollBy(0, -90); return; } }
  window.scrollBy(0, -90); }"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(workspace: str, roots: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """``python serve.py`` on ``workspace`` (as ``$SDE_WORKSPACE``: the link names it so);
    returns the process and its URL once it has warmed the workspace."""
    port = _free_port()
    env = {**os.environ, "SDE_WORKSPACE": workspace, "SDE_DATA_ROOTS": str(roots)}
    cmd = [sys.executable, "serve.py", "--server.port", str(port), "--server.address",
           "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                break
        except OSError as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                text = log.read_text(errors="replace")
                raise SystemExit(f"the server did not start:\n{text}") from exc
            time.sleep(0.3)
    while "warmed in" not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.2)  # a user opens the page once the server says it is ready
    return proc, url


def optimise(path: Path) -> int:
    """Reduce the PNG at ``path`` to a 256-colour palette in place; its size in bytes."""
    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
    return path.stat().st_size


def answer_lines(page, names: list[str]) -> list[str]:
    """The text of each audited model's answer line (the bordered box with its name and its
    evidence expander) on the Answer page, the expander's text left out."""
    import re

    lines = []
    for name in names:
        caption = page.get_by_text(re.compile(rf"^{re.escape(name)}( ·|$)"))
        line = (
            page.locator("[data-testid='stVerticalBlock']")
            .filter(has=caption)
            .filter(has=page.get_by_test_id("stExpander"))
            .last
        )
        text = " ".join(line.inner_text().split()) if line.count() else "(no line found)"
        lines.append(f"{name}: {text.split(' Evidence')[0]}")
    return lines


def _take(browser, url: str, folder: Path, path: Path) -> tuple[list[str], Path]:
    """Open ``url`` (the Answer page), wait for its run to end, read the lines, take the PNG."""
    from playwright.sync_api import expect

    from sde_core.pipeline.workspace_load import load_workspace

    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    expect(page.get_by_role("heading", name="The answer", level=1)).to_be_visible()
    expect(page.get_by_text("Scope and limitations")).to_be_visible()
    expect(page.get_by_test_id("stApp")).to_have_attribute("data-test-script-state", "notRunning")
    expect(page.get_by_test_id("stStatusWidget")).to_have_count(0)
    if page.get_by_test_id("stException").count():
        raise SystemExit(f"{folder}: the page shows an exception")
    audited = [m.name for m in load_workspace(folder).models if m.role == "unlearned"]
    lines = answer_lines(page, audited)
    # the main area scrolls inside the page: grow the window to its content (capped), so the
    # image holds every model's line and the scope box
    height = page.evaluate(
        """() => { const m = document.querySelector('[data-testid="stMain"]');
                   return m ? m.scrollHeight : document.body.scrollHeight; }"""
    )
    tall = min(MAX_HEIGHT, max(VIEWPORT["height"], int(height)))
    page.set_viewport_size({"width": VIEWPORT["width"], "height": tall})
    page.wait_for_timeout(500)  # the re-layout (no script run)
    page.screenshot(path=str(path))
    context.close()
    return lines, path


def screenshot(demo: str, out: Path, browser) -> tuple[Path, int, list[str]]:
    """The landing answer of ``demo`` as ``out/answer-<name>.png``: (path, bytes, lines)."""
    name = Path(demo).name
    source = ROOT / demo
    cache = source / ".sde-cache"
    fresh = not cache.exists()  # a fresh clone: served in place, under the name `make run` uses
    with tempfile.TemporaryDirectory() as tmp:
        folder = source
        if not fresh:  # a used checkout: a copy without the cache (the link then names the copy)
            folder = Path(tmp) / name
            skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
            shutil.copytree(source, folder, ignore=skip)
        shown = demo if fresh else str(folder)
        proc, url = _serve(shown, folder.parent, Path(tmp) / "server.log")
        try:
            lines, path = _take(browser, url, folder, out / f"answer-{name}.png")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            if fresh and cache.exists():  # leave the checkout as fresh as it was
                shutil.rmtree(cache)
    return path, optimise(path), lines


def _settled(page) -> None:
    """Wait until the script run is over and no status widget shows."""
    from playwright.sync_api import expect

    expect(page.get_by_test_id("stApp")).to_have_attribute("data-test-script-state", "notRunning")
    expect(page.get_by_test_id("stStatusWidget")).to_have_count(0)


def _section(page, how: str, text: str):
    """The element that starts a view's section (see :data:`VIEWS`), or None when absent."""
    if how == "heading":
        found = page.get_by_role("heading", name=text)
    elif how == "label":
        found = page.get_by_text(text, exact=False).first
    elif how == "expander":
        found = page.get_by_test_id("stExpander").filter(has_text=text).first
    else:
        found = page.get_by_test_id("stCheckbox").filter(has_text=text).first
    return found if found.count() else None


def view_shots(demo: str, out: Path, browser, names: list[str]) -> list[tuple[Path, int, float]]:
    """The views ``names`` of ``demo`` (:data:`VIEWS`) as ``out/<view>-<demo>.png``, served as
    :func:`screenshot` serves it: (path, bytes, seconds to the page's last run) each."""
    from sde_core.pipeline.workspace_load import load_workspace

    name = Path(demo).name
    source = ROOT / demo
    audited = [m.name for m in load_workspace(source).models if m.role == "unlearned"]
    taken = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / name  # always a copy without the cache: a fresh clone's store
        skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
        shutil.copytree(source, folder, ignore=skip)
        proc, url = _serve(str(folder), folder.parent, Path(tmp) / "server.log")
        try:
            context = browser.new_context(viewport={"width": VIEWPORT["width"],
                                                    "height": VIEW_HEIGHT})  # fmt: skip
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            for view in names:
                where, how, text = VIEWS[view]
                query = f"?model={audited[0]}" if where == "explore" and audited else ""
                t0 = time.perf_counter()
                page.goto(f"{url}/{where}{query}")
                page.get_by_role("heading", level=1).first.wait_for()
                _settled(page)
                seconds = time.perf_counter() - t0
                section = _section(page, how, text)
                if section is None:
                    print(f"  {view}: {name} has no such section (skipped)")
                    continue
                if how == "expander":  # a lazy expander runs its content once it is open
                    section.locator("summary").first.click()
                    section.get_by_test_id("stDataFrame").first.wait_for()
                    _settled(page)
                elif how == "toggle":
                    section.locator("label").first.click()
                    _settled(page)
                if page.get_by_test_id("stException").count():
                    raise SystemExit(f"{name} {view}: the page shows an exception")
                for pause in (800, 300):  # again once the charts above have their height
                    section.evaluate(SCROLL_TO)
                    page.wait_for_timeout(pause)
                path = out / f"{view}-{name}.png"
                page.screenshot(path=str(path))
                taken.append((path, optimise(path), seconds))
            context.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return taken


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--demo", action="append", help="a demo folder (default: every bundled demo)")
    p.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    p.add_argument(
        "--views",
        nargs="*",
        choices=sorted(VIEWS),
        default=None,
        help="the researcher's views instead of the answer (no name: every view)",
    )
    args = p.parse_args()
    from playwright.sync_api import expect, sync_playwright

    sys.path.insert(0, str(ROOT))
    from sde_core.viz.figures.export import BROWSER_ARGS, find_chromium

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("needs Chromium: `make browser-setup` (as root) or apt-get install it")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=TIMEOUT_MS)
    total = 0
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=list(BROWSER_ARGS))
        for demo in args.demo or DEMOS:
            if args.views is not None:
                for path, size, seconds in view_shots(demo, out, browser,
                                                      args.views or list(VIEWS)):  # fmt: skip
                    total += size
                    print(f"{path.name}: {size / 1024:.0f} KiB (page settled in {seconds:.1f} s)")
                continue
            t0 = time.perf_counter()
            path, size, lines = screenshot(demo, out, browser)
            total += size
            print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
                  f"{size / 1024:.0f} KiB ({time.perf_counter() - t0:.0f} s)")  # fmt: skip
            for line in lines:
                print(f"  - {line}")
        browser.close()
    print(f"total {total / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
