"""Real-browser checks of the dashboard and the report files, with the system Chromium.

- every page opens on a deep link as the first request of a fresh server (no "Page not found"
  dialog, no exception, the page's own URL kept);
- a link with query parameters reproduces a non-default view (its numbers equal the
  library's), the view's link is shown, and the pages walk through to the report downloads;
- the HTML report opens from a file with no network request, and its PDF has every section.
- the Compare page shows the models an evaluation elsewhere stores while it is open (its polling
  fragment, no reload).

Servers are ``streamlit run app.py`` on a free localhost port with ``SDE_WORKSPACE`` pointing at
the tiny test workspace (its activations cached once, before they start): one per page, started
together once per module; the first test sends each its first request, later tests share the
Explore server. Playwright drives the system Chromium (never a downloaded browser).
Screenshots go to ``tests/artifacts/`` (git-ignored). Outside CI the tests skip with the reason
when Chromium is missing; under ``CI=true`` they must run.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import unicodedata
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.viz.figures.export import BROWSER_ARGS
from sde_core.viz.formatting import format_estimate, format_number, format_percent
from sde_core.viz.report.html_page import REPORT_SECTIONS

pytestmark = pytest.mark.slow  # a real Chromium against real servers

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
LOAD_TIMEOUT_MS = 90_000
#: pages/explore.py's QUIET_SECONDS: an evaluation shows a progress box only after this long.
QUIET_SECONDS = 0.5
#: Page URL path -> the title it shows.
TITLES = {
    "answer": "The answer",
    "workspace": "Workspace",
    "explore": "Explore one model",
    "compare": "Compare models",
    "sweeps": "Sweeps",
    "report": "Report",
    "method": "The method, exactly",
}


def chromium_path() -> str:
    """The system Chromium; skip (or fail under CI) when it is missing."""
    found = os.environ.get("BROWSER_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).is_file():
        reason = "Chromium is not installed: run `make browser-setup` (as root) or apt-get it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        print(f"skipping the browser test: {reason}")
        pytest.skip(reason)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                if reply.read() == b"ok":
                    return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.3)


def _start(ws: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """A new ``streamlit run app.py`` process on the workspace (output to ``log``), its URL."""
    env = {**os.environ, "SDE_WORKSPACE": str(ws), "SDE_DATA_ROOTS": str(ws.parent)}
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port",
           str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
           "--client.toolbarMode", "minimal"]  # fmt: skip
    with log.open("wb") as out:  # a file, not a pipe: a long-lived server never blocks on it
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def ws(tiny_workspace: Path) -> Path:
    """The tiny workspace, its activations and stages cached once here (one extraction, not one
    per server; the servers still compute every statistic they show)."""
    chromium_path()
    expected_models(tiny_workspace)
    return tiny_workspace


@dataclasses.dataclass
class Servers:
    """One server per page, started together, each not yet asked for anything.

    The first test opens each page as its server's first request; later tests share the Explore
    server (warm: its imports and caches are loaded), so the module starts each server once.
    """

    urls: dict[str, str]
    used: set[str] = dataclasses.field(default_factory=set)

    def fresh(self, page: str) -> str:
        """The URL of ``page``'s server, which must not have served a request yet."""
        if page in self.used:
            pytest.fail(f"the {page} server has served a request already: run the module in order")
        self.used.add(page)
        return self.urls[page]

    def warm(self) -> str:
        """The URL of a server any test may use."""
        self.used.add("explore")
        return self.urls["explore"]


@pytest.fixture(scope="module")
def servers(ws: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    logs = tmp_path_factory.mktemp("servers")
    procs = [_start(ws, logs / f"{page}.log") for page in TITLES]
    try:
        for (proc, url), page in zip(procs, TITLES, strict=True):
            _wait_healthy(proc, url, logs / f"{page}.log")
        yield Servers({page: url for page, (_, url) in zip(TITLES, procs, strict=True)})
    finally:  # the servers keep nothing worth a graceful shutdown (files are written atomically)
        for proc, _ in procs:
            proc.kill()
        for proc, _ in procs:
            proc.wait()


@pytest.fixture(scope="module")
def chromium() -> Iterator:
    """The system Chromium, launched once per module (each test opens its own context)."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=LOAD_TIMEOUT_MS)
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=list(BROWSER_ARGS))
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def browser_page(browser) -> Iterator:
    """A page in a new browser context (a new Streamlit session) with the test's timeouts; a
    screenshot is kept when the test fails."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(LOAD_TIMEOUT_MS)
    # The table's CSV button would open a save dialog; make it a plain download instead.
    page.add_init_script("delete window.showSaveFilePicker")
    try:
        yield page
    except BaseException:
        page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
        raise
    finally:
        context.close()


def shot(page, name: str) -> None:
    """A full-page screenshot once every chart on the page has drawn."""
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
                   .every(chart => chart.querySelector('.main-svg'))"""
    )
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def settle(page) -> None:
    """Wait until the script run is over: Streamlit marks the app's root with the state of the
    run (call it after waiting for something the run draws or writes, e.g. the URL)."""
    from playwright.sync_api import expect

    expect(page.get_by_test_id("stApp")).to_have_attribute("data-test-script-state", "notRunning")
    expect(page.get_by_test_id("stStatusWidget")).to_have_count(0)


@pytest.mark.timeout(600)  # seven fresh servers in turn, each answering its first request
def test_every_deep_link_is_the_first_request_of_a_fresh_server(servers: Servers, chromium) -> None:
    """One new server per page (started together), each opened first on that page's URL."""
    from playwright.sync_api import expect

    with browser_page(chromium) as page:
        for path, title in TITLES.items():
            url = servers.fresh(path)
            page.goto(f"{url}/{path}")
            expect(page.get_by_role("heading", name=title, level=1)).to_be_visible()
            settle(page)
            assert page.url.split("?")[0] == f"{url}/{path}"
            assert page.get_by_text("Page not found").count() == 0, path
            assert page.get_by_test_id("stException").count() == 0, path
            nav = page.get_by_test_id("stTopNavLinkContainer")
            expect(nav).to_have_count(len(TITLES))  # the app's navigation, not the file list
            shot(page, f"0-deep-link-{path}")


@functools.cache
def expected_models(ws: Path, **overrides: object) -> pd.DataFrame:
    """The library's models table at the workspace defaults (with ``overrides``)."""
    defaults = dataclasses.asdict(load_workspace(ws).defaults)
    settings = EvalSettings.from_mapping(defaults).with_overrides(**overrides)
    return evaluate_workspace(ws, settings).models


def metric_value(page, label: str) -> str:
    box = page.get_by_test_id("stMetric").filter(has_text=label).first
    return box.get_by_test_id("stMetricValue").inner_text().strip()


def test_a_shared_link_reproduces_the_view_and_the_pages_walk_through(
    ws: Path, servers: Servers, chromium
) -> None:
    from playwright.sync_api import expect

    lib = expected_models(ws, sigma=0.5).set_index("name")
    url = servers.warm()
    with browser_page(chromium) as page:
        page.goto(f"{url}/explore?model=FT&sigma=0.5&target=3")
        expect(page.get_by_text("OTR (out-of-training rate)")).to_be_visible()
        settle(page)
        assert metric_value(page, "σ used") == format_number(0.5, digits=4)
        assert metric_value(page, "OTR (out-of-training") == format_percent(lib.loc["FT", "otr"])
        assert metric_value(page, "Controlled F1") == format_number(lib.loc["FT", "f1"])
        thumbs = page.get_by_text("Target subset 3: first 16 inputs, FT's predictions")
        expect(thumbs).to_be_visible()
        link = page.get_by_test_id("stCode").filter(has_text="/explore?").inner_text()
        assert "model=FT" in link and "sigma=0.5" in link and "target=3" in link
        assert "model=FT" in page.url and "sigma=0.5" in page.url
        shot(page, "1-explore-link")

        page.goto(url)  # the bare address lands on the answer, at the workspace defaults
        expect(page.get_by_role("heading", name="The answer", level=1)).to_be_visible()
        expect(page.get_by_text("Criterion:")).to_be_visible()
        assert page.url.split("?")[0] == f"{url}/answer"

        nav = page.get_by_test_id("stTopNavLinkContainer")
        nav.get_by_role("link", name="Compare").click()
        expect(page.get_by_text("Reference: the retrained model 'retrained'")).to_be_visible()
        # the comparison table is the page's first only once the run is over: while it is
        # drawing (slow CI machines), the page may hold other tables ahead of it
        settle(page)
        table = page.locator("[data-testid='stDataFrame']").first
        table.hover()
        button = table.get_by_role("button", name="Download as CSV")
        expect(button).to_be_visible()
        with page.expect_download() as csv:  # the table as shown: estimates with intervals
            # the hover toolbar sits on the grid's edge: a pointer click can land on the grid's
            # canvas instead (CI of stop 55: 90 s of "intercepts pointer events"), so the
            # button's own click event is sent
            button.dispatch_event("click")
        shown = pd.read_csv(csv.value.path()).set_index("name")
        with page.expect_download() as numbers_csv:  # the same table's numbers
            page.get_by_role("button", name="Download the numbers (CSV)").click()
        numbers = pd.read_csv(numbers_csv.value.path()).set_index("name")
        assert shown.index[0] == numbers.index[0] == "retrained", "the Retrain row comes first"
        defaults = expected_models(ws).set_index("name")
        assert sorted(shown.index) == sorted(numbers.index) == sorted(defaults.index)
        for name in defaults.index:  # the numbers export keeps full precision
            row = defaults.loc[name]
            # a number the gate withholds (method §12) is NaN in the export and in the library
            assert numbers.loc[name, "OTR [output]"] == pytest.approx(row["otr"], nan_ok=True)
            assert numbers.loc[name, "F1 [output]"] == pytest.approx(row["f1"], nan_ok=True)
            reason = row["inconclusive_reason"]
            want = format_estimate(
                row["otr"], row["otr_lo"], row["otr_hi"], percent=True, reason=reason
            )
            assert shown.loc[name, "OTR [output]"] == want
        shot(page, "2-compare")

        nav.get_by_role("link", name="Report").click()
        button = page.get_by_role("button", name="Download the HTML report")
        expect(button).to_be_visible()
        with page.expect_download() as download:
            button.click()
        report = Path(download.value.path()).read_text(encoding="utf-8")
        assert download.value.suggested_filename == "sde-report-tiny.html"
        assert "SDE report: tiny" in report and "plotly" in report
        with page.expect_download() as download:
            page.get_by_role("button", name="Download the JSON report").click()
        document = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
        assert sorted(document["manifest"]["models"]) == sorted(defaults.index)
        shot(page, "3-report")


def test_html_report_opens_offline_and_its_pdf_has_every_section(
    ws: Path, tmp_path, chromium
) -> None:
    """No request leaves ``file://`` / ``data:``; the printed PDF holds every section."""
    from pypdf import PdfReader

    from sde_core.services.audit import create_report

    files = create_report(ws, out_dir=tmp_path, pdf=True)
    assert files.pdf is not None, files.pdf_error
    requests: list[str] = []
    with browser_page(chromium) as page:
        page.route("**/*", lambda route: (requests.append(route.request.url), route.continue_()))
        page.goto(files.html.as_uri())
        page.wait_for_selector(".js-plotly-plot .main-svg")
        assert page.locator(".js-plotly-plot").count() >= 4  # every chart drew offline
        assert page.get_by_role("heading", name="What was evaluated").is_visible()
        shot(page, "4-html-report")
    assert requests and all(r.startswith(("file://", "data:", "blob:")) for r in requests), [
        r for r in requests if not r.startswith(("file://", "data:", "blob:"))
    ]
    text = " ".join(p.extract_text() for p in PdfReader(files.pdf).pages)
    flat = " ".join(unicodedata.normalize("NFKC", text).split())  # "ﬁ" ligatures -> "fi"
    for title in REPORT_SECTIONS:
        assert title in flat, title
    for name in ("original", "retrained", "FT", "random"):
        assert name in flat
    assert files.manifest["models"]["FT"]["sha256"][:16] in flat.replace(" ", "")


def test_a_link_opens_its_own_workspace_and_the_page_settles_without_progress(
    ws: Path, servers: Servers, chromium
) -> None:
    """A link made on another workspace than the server's default opens that workspace; one
    whose content hash differs says so and offers the matching one; once the evaluation is done
    no progress box (or Stop button) is left, and a bins change shows a progress box only once
    it has run for QUIET_SECONDS (usually never: the stage cache answers it). Every wait is on a
    condition (the run's state, the URL, an element), never on a fixed delay."""
    from playwright.sync_api import expect

    from sde_core.inputs.data import load_dataset
    from sde_core.inputs.indices import save_index_file
    from sde_core.pipeline.workspace import workspace_hash

    other = ws.parent / "tiny-browser-other"
    if not other.exists():  # the tiny workspace with one forget row less: another content hash
        shutil.copytree(ws, other, ignore=shutil.ignore_patterns(".sde-cache", "*.sqlite*"))
        toml = other / "workspace.toml"
        toml.write_text(toml.read_text().replace('name = "tiny"', 'name = "tiny-other"', 1))
        save_index_file(other / "forget.npy", np.load(other / "forget.npy")[1:])

    def content_hash(folder: Path) -> str:
        loaded = load_workspace(folder)
        data = load_dataset(loaded.dataset_spec())
        return workspace_hash(loaded, data_fingerprint=data.fingerprint)[:16]

    url = servers.warm()
    with browser_page(chromium) as page:
        page.goto(f"{url}/explore?ws={other}&wsh={content_hash(other)}&model=FT")
        expect(page.get_by_text("OTR (out-of-training rate)")).to_be_visible()
        settle(page)
        expect(page.get_by_text("Workspace: tiny-other")).to_be_visible()
        assert page.get_by_text("NOT the ones the link's sender saw").count() == 0
        expect(page.get_by_test_id("stProgress")).to_have_count(0)  # the box goes when done
        expect(page.get_by_role("button", name="Stop")).to_have_count(0)
        settle(page)
        expect(page).to_have_url(re.compile(f"wsh={content_hash(other)}"))
        # Watch the bins change's run: when the script run starts, and whether (and when after
        # that) a progress box appears. Explore shows one only for an evaluation that has run
        # for QUIET_SECONDS; a bins change is answered from the stage cache (no HSIC is
        # recomputed: test_app.py::test_bins_change_recomputes_no_hsic), which is usually
        # quicker, but a busy machine may take longer — so what is checked is the rule itself.
        page.evaluate(
            """() => { window.runStart = null; window.boxAfter = null;
              const app = document.querySelector('[data-testid="stApp"]');
              new MutationObserver(() => {
                const now = performance.now();
                if (window.runStart === null
                    && app.getAttribute('data-test-script-state') === 'running') {
                  window.runStart = now;
                }
                if (window.boxAfter === null && window.runStart !== null
                    && document.querySelector('[data-testid="stProgress"]')) {
                  window.boxAfter = (now - window.runStart) / 1000;
                }
              }).observe(document.body, {subtree: true, childList: true, attributes: true}); }"""
        )
        page.get_by_text("More settings").click()
        bins = page.get_by_role("spinbutton", name="Histogram bins (JSD)")
        bins.fill("12")
        bins.press("Enter")
        expect(page).to_have_url(re.compile(r"bins=12"))  # the rerun with the new bins ran
        settle(page)
        expect(page.get_by_test_id("stProgress")).to_have_count(0)
        assert page.evaluate("window.runStart") is not None, "the bins change ran the page"
        box_after = page.evaluate("window.boxAfter")
        # QUIET_SECONDS (pages/explore.py), less what the browser's handling of two messages
        # of one connection can shift
        assert box_after is None or box_after >= QUIET_SECONDS / 2, box_after
        shot(page, "5-link-other-workspace")

        page.goto(f"{url}/explore?ws={other}&wsh={content_hash(ws)}")  # the wrong content
        expect(page.get_by_text("NOT the ones the link's sender saw")).to_be_visible()
        page.get_by_role("button", name="which matches the link").click()
        # "Workspace: tiny" also matches "tiny-other": wait for the switch itself (the warning
        # leaves the page), not for text that was already there before the click.
        expect(page.get_by_text("NOT the ones the link's sender saw")).to_have_count(0)
        expect(page.get_by_text("Workspace: tiny", exact=False)).to_be_visible()
        settle(page)
        assert page.get_by_text("NOT the ones the link's sender saw").count() == 0
        expect(page).to_have_url(re.compile(f"wsh={content_hash(ws)}"))
        shot(page, "6-link-matching-workspace")


def test_compare_shows_models_arriving_while_an_evaluation_runs_elsewhere(
    tmp_path: Path, chromium
) -> None:
    """A copy of the mnist1d demo with 8 models whose store holds 5 of them in a running run:
    Compare shows those 5 as provisional; when this process (standing in for an evaluation on
    the command line, Ray or Slurm) stores the other 3, the open page shows all 8 within a few
    polls of its fragment, without a reload, and the provisional banner goes."""
    from helpers.many_models import evaluation_running
    from helpers.many_models import store_copies as store_demo_results
    from playwright.sync_api import expect
    from ui_fixtures import demo_workspace

    first, rest = ["original", "retrained", "ft", "ga", "rl"], ["salun", "l1_sparse", "unroll"]
    live = demo_workspace(tmp_path / "live", 8)
    store_demo_results(live, {n: n for n in first}, complete=False)
    log = tmp_path / "live.log"
    proc, url = _start(live, log)

    def numbers(page) -> list[str]:
        with page.expect_download() as csv:
            page.get_by_role("button", name="Download the numbers (CSV)").click()
        return sorted(pd.read_csv(csv.value.path())["name"])

    try:
        _wait_healthy(proc, url, log)
        with evaluation_running(live), browser_page(chromium) as page:
            page.goto(f"{url}/compare")
            expect(page.get_by_text("Provisional: 5 of 8 models")).to_be_visible()
            settle(page)
            expect(page.get_by_test_id("stProgress")).to_have_count(0)  # no evaluation here
            assert numbers(page) == sorted(first)
            shot(page, "7-compare-live-provisional")
            page.evaluate("window.notReloaded = true")
            store_demo_results(live, {n: n for n in rest}, complete=True)
            expect(page.get_by_text("Provisional")).to_have_count(0, timeout=15_000)
            expect(page.get_by_role("button", name="Refresh")).to_have_count(0)
            settle(page)
            assert page.evaluate("window.notReloaded === true"), "the page was reloaded"
            # the fragment's rerun may still be replacing the table when the banner goes: read
            # the numbers again until they are the new ones (or 15 s have passed)
            deadline = time.monotonic() + 15
            shown = numbers(page)
            while shown != sorted(first + rest) and time.monotonic() < deadline:
                time.sleep(1)
                settle(page)
                shown = numbers(page)
            assert shown == sorted(first + rest), shown
            assert page.evaluate("window.notReloaded === true"), "the page was reloaded"
            shot(page, "8-compare-live-complete")
    finally:
        proc.kill()
        proc.wait()
