"""Real-browser walk through the dashboard: Workspace → Explore → Compare → Report.

Starts ``streamlit run app.py`` on a free localhost port with ``SDE_WORKSPACE`` pointing at the
tiny test workspace and drives the system Chromium with Playwright (never a downloaded
browser). Screenshots go to ``tests/artifacts/`` (git-ignored). Outside CI the test skips with
the reason when Chromium is missing; under ``CI=true`` it must run.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from ui_fixtures import shared_tiny_workspace

from sde_core.pipeline.evaluate import EvalSettings, evaluate_workspace
from sde_core.pipeline.workspace import load_workspace

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOAD_TIMEOUT_MS = 90_000


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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A running dashboard on the tiny workspace; yields its URL and the workspace."""
    chromium_path()
    ws = shared_tiny_workspace(tmp_path_factory.getbasetemp())
    port = free_port()
    env = {**os.environ, "SDE_WORKSPACE": str(ws), "SDE_DATA_ROOTS": str(ws.parent)}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true",
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
           "--client.toolbarMode", "minimal"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                    if reply.read() == b"ok":
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = proc.stdout.read().decode() if proc.stdout else ""
                    pytest.fail(f"streamlit did not start:\n{output}")
                time.sleep(0.3)
        yield url, ws
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def expected_models(ws: Path) -> pd.DataFrame:
    """The library's models table at the workspace defaults."""
    defaults = dataclasses.asdict(load_workspace(ws).defaults)
    return evaluate_workspace(ws, EvalSettings.from_mapping(defaults)).models


def test_walk_through_pages(server: tuple[str, Path]) -> None:
    from playwright.sync_api import expect, sync_playwright

    url, ws = server
    expect.set_options(timeout=LOAD_TIMEOUT_MS)
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(LOAD_TIMEOUT_MS)
        # The table's CSV button would open a save dialog; make it a plain download instead.
        page.add_init_script("delete window.showSaveFilePicker")

        def shot(name: str) -> None:
            page.wait_for_timeout(800)  # let charts finish drawing
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

        try:
            page.goto(f"{url}/workspace")  # a deep link as the server's first request
            nav = page.get_by_test_id("stSidebarNavItems")
            expect(page.get_by_text("The workspace is valid: 4 models.")).to_be_visible()
            expect(nav.get_by_role("link")).to_have_count(5)
            shot("1-workspace")

            nav.get_by_role("link", name="Explore").click()
            expect(page.get_by_text("OTR (out-of-training rate)")).to_be_visible()
            expect(page.get_by_text("references valid").first).to_be_visible()
            expect(page.locator(".js-plotly-plot").first).to_be_visible()
            shot("2-explore")

            nav.get_by_role("link", name="Compare").click()
            expect(page.get_by_text("Reference: the retrained model 'retrained'")).to_be_visible()
            table = page.locator("[data-testid='stDataFrame']").first
            table.hover()
            with page.expect_download() as csv:
                table.get_by_role("button", name="Download as CSV").click()
            shown = pd.read_csv(csv.value.path()).set_index("name")
            assert shown.index[0] == "retrained", "the Retrain reference row comes first"
            lib = expected_models(ws).set_index("name")
            assert sorted(shown.index) == sorted(lib.index)
            for name in lib.index:
                # a number the gate withholds (method §12) is NaN on the page and in the library
                otr, f1 = lib.loc[name, "otr"], lib.loc[name, "f1"]
                assert shown.loc[name, "OTR [output]"] == pytest.approx(otr, nan_ok=True)
                assert shown.loc[name, "F1 [output]"] == pytest.approx(f1, nan_ok=True)
            shot("3-compare")

            nav.get_by_role("link", name="Report").click()
            button = page.get_by_role("button", name="Download the HTML report")
            expect(button).to_be_visible()
            with page.expect_download() as download:
                button.click()
            report = Path(download.value.path()).read_text(encoding="utf-8")
            assert download.value.suggested_filename == "sde-report-tiny.html"
            assert "SDE report: tiny" in report and "plotly" in report
            shot("4-report")
        except BaseException:
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()
