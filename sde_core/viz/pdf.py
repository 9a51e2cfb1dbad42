"""Print an HTML report to PDF with the system Chromium (headless, offline).

The report's charts are drawn by plotly.js when the page loads, so Chromium is given a virtual
time budget to finish them before it prints. Nothing is downloaded: Chromium runs with a fresh
temporary profile and its background networking switched off, and the report itself makes no
network request (plotly.js is inlined).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from sde_core.common.fsio import atomic_write
from sde_core.errors import ExportError
from sde_core.viz.figures.export import find_chromium

__all__ = ["CHROMIUM_PRINT_FLAGS", "html_to_pdf"]

#: Flags of the headless print: offline, no first-run UI, charts drawn before printing.
CHROMIUM_PRINT_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-pdf-header-footer",
    "--run-all-compositor-stages-before-draw",
    # charts are drawn at the window's width before printing: the printable width of an A4
    # landscape page (273 mm at 96 dpi), so they print full width
    "--window-size=1032,1400",
    "--virtual-time-budget=20000",
)


def html_to_pdf(
    html_file: str | Path,
    pdf_file: str | Path,
    *,
    chromium: str | None = None,
    timeout: float = 180.0,
) -> Path:
    """Print ``html_file`` to ``pdf_file`` with headless Chromium (written atomically).

    Args:
        html_file: the HTML report on disk.
        pdf_file: where the PDF goes (its folder is created).
        chromium: the Chromium executable (default
            :func:`sde_core.viz.figures.export.find_chromium`: ``$BROWSER_PATH`` or ``chromium``
            on the PATH).
        timeout: seconds before the print is abandoned.

    Returns:
        ``pdf_file`` as a Path.

    Raises:
        ExportError: Chromium is missing, fails, times out or writes no PDF.
    """
    source = Path(html_file).resolve()
    if not source.is_file():
        raise ExportError(f"{source} does not exist: write the HTML report first")
    exe = chromium or find_chromium()
    if exe is None:
        raise ExportError(
            "PDF export needs Chromium (Debian: apt-get install chromium, or set BROWSER_PATH "
            "to a Chrome/Chromium executable); the HTML report opens in any browser, which can "
            "also print it to PDF"
        )
    target = Path(pdf_file)

    def write(tmp: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="sde-chromium-") as profile:
            cmd = [
                exe,
                *CHROMIUM_PRINT_FLAGS,
                f"--user-data-dir={profile}",
                f"--print-to-pdf={tmp.resolve()}",
                source.as_uri(),
            ]
            try:
                done = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired as exc:
                raise ExportError(
                    f"Chromium did not finish printing {source.name} within {timeout:g} s"
                ) from exc
            except OSError as exc:
                raise ExportError(f"cannot run Chromium ({exe}): {exc}") from exc
        if not tmp.is_file() or tmp.read_bytes()[:5] != b"%PDF-":
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise ExportError(
                f"Chromium wrote no PDF (exit status {done.returncode}): {' | '.join(tail)}"
            )

    try:
        return atomic_write(target, write)
    except OSError as exc:
        raise ExportError(f"cannot write {target} ({exc}): choose a writable folder") from exc
