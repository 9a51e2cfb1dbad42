"""The PDF report of the bundled Fashion-MNIST demo as a case file receives it (issue 34): a few
MB (vector charts, no rasterised pattern fills), a bounded page count, page 1 holding the answer
per model with the scope-and-limitations box and numbered pages, and page 1 rendered to PNG by
poppler's ``pdftoppm`` (Debian ``poppler-utils``; skipped with the reason where it is missing).

The demo is copied without its ``.sde-cache`` (a fresh clone): the report reads the shipped
results store. The measured size, page count and the PNG's path are printed (``-s``).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_browser import ARTIFACTS, ROOT, chromium_path

pytestmark = pytest.mark.slow  # a whole report printed by Chromium

#: "A few MB" (issue 34: it was 85.6 MB for 19 pages when the pattern fills were rasterised).
MAX_MB = 8.0
MAX_PAGES = 30


@pytest.mark.timeout(900)
def test_the_demo_pdf_is_small_page_1_answers_and_renders(tmp_path: Path) -> None:
    from pypdf import PdfReader

    from sde_core.services.audit import create_report

    chromium_path()
    folder = tmp_path / "demo"
    skip = shutil.ignore_patterns(".sde-cache", "*.sqlite-wal", "*.sqlite-shm")
    shutil.copytree(ROOT / "assets" / "demo", folder, ignore=skip)
    t0 = time.perf_counter()
    files = create_report(folder, out_dir=tmp_path / "report", pdf=True)
    seconds = time.perf_counter() - t0
    assert files.pdf is not None, files.pdf_error
    size_mb = files.pdf.stat().st_size / 1e6
    reader = PdfReader(files.pdf)
    pages = len(reader.pages)
    print(f"\nFashion-MNIST demo PDF: {size_mb:.2f} MB, {pages} pages, made in {seconds:.0f} s")
    assert size_mb <= MAX_MB, f"{size_mb:.1f} MB: charts must print as vectors"
    assert 2 <= pages <= MAX_PAGES, pages

    def text(i: int) -> str:
        raw = unicodedata.normalize("NFKC", reader.pages[i].extract_text())
        return " ".join(raw.split())

    first = text(0)
    assert "The answer, per model" in first
    assert "Scope and limitations" in first
    for model in ("ft", "ga", "rl", "salun"):  # every audited model answers on page 1
        assert model in first, model
    assert "onflicting evidence" in first  # RL / SalUn: the behaviour contradicts SDE
    for i in range(pages):  # every page numbered "page i of N"
        assert f"page {i + 1} of {pages}" in text(i), i

    pdftoppm = shutil.which("pdftoppm")
    if pdftoppm is None:
        pytest.skip("pdftoppm is missing: apt-get install poppler-utils to render page 1")
    ARTIFACTS.mkdir(exist_ok=True)
    stem = ARTIFACTS / "report-page-1"
    subprocess.run(
        [pdftoppm, "-png", "-r", "60", "-f", "1", "-l", "1", "-singlefile", str(files.pdf),
         str(stem)],
        check=True, timeout=120,
    )  # fmt: skip
    png = stem.with_suffix(".png")
    with Image.open(png) as img:
        width, height = img.size
        grey = np.asarray(img.convert("L"), dtype=float)
    print(f"page 1 rendered: {png} ({width}×{height} px)")
    assert width > 400 and height > 300
    assert grey.std() > 10, "page 1 rendered blank"
    assert (grey < 128).mean() > 0.005, "page 1 has no text or lines"
