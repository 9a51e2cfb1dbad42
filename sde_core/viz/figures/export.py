"""Server-side PNG/SVG/PDF of a figure (:func:`figure_to_image`) or of many at once
(:func:`figures_to_images`, one Chromium for all) through kaleido and a system Chromium."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import plotly.graph_objects as go

from sde_core.errors import ExportError, SettingsError
from sde_core.viz.figures.style import _SERVER_FORMATS

__all__ = ["BROWSER_ARGS", "figure_to_image", "figures_to_images", "find_chromium"]

_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: The switches of the system Chromium driven by Playwright (the browser tests, the screenshots
#: and the browser benchmarks): headless, offline, no first-run or update traffic.
BROWSER_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip


def _kaleido_installed() -> bool:
    return importlib.util.find_spec("kaleido") is not None


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable (``$BROWSER_PATH`` first), or None."""
    configured = os.environ.get("BROWSER_PATH")
    if configured and os.path.isfile(configured):
        return configured
    for name in _CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


_HINT = "or use the chart's camera button, which downloads a PNG in the browser"


def _check_renderer(fmt: str) -> None:
    """Raise what is missing to render ``fmt`` on the server (a bad format, kaleido, Chromium)."""
    if fmt not in _SERVER_FORMATS:
        raise SettingsError(f"image format must be one of {_SERVER_FORMATS}; got {fmt!r}")
    if not _kaleido_installed():
        raise ExportError(
            f"{fmt.upper()} export on the server needs the kaleido package and Chromium "
            f"(pip install kaleido; apt-get install chromium); {_HINT}"
        )
    if find_chromium() is None:
        raise ExportError(
            f"{fmt.upper()} export on the server needs Chromium (apt-get install chromium, or "
            f"set BROWSER_PATH); {_HINT}"
        )


def figure_to_image(fig: go.Figure, fmt: str = "png", *, scale: float = 2.0) -> bytes:
    """Render ``fig`` to PNG, SVG or PDF bytes on the server, offline.

    Uses kaleido (≥ 1.0) with a system Chromium (Debian: ``apt-get install chromium``); nothing is
    downloaded. Without them, use the chart's camera button, which exports PNG in the browser.

    Args:
        fig: the figure.
        fmt: ``"png"``, ``"svg"`` or ``"pdf"``.
        scale: pixel-density factor of a PNG (2 = twice the layout size).

    Raises:
        ExportError: kaleido or Chromium is missing, or rendering failed.
    """
    _check_renderer(fmt)
    try:
        return fig.to_image(format=fmt, scale=scale)
    except Exception as exc:  # kaleido/Chromium failures come as many types
        raise ExportError(f"{fmt.upper()} export failed ({exc}); {_HINT}") from exc


def figures_to_images(
    figures: Mapping[str, go.Figure], formats: Sequence[str] = ("svg", "pdf")
) -> dict[tuple[str, str], bytes]:
    """Render every figure in every format with one Chromium (a figure costs ~0.5 s, against
    ~3 s for a Chromium started per figure).

    Args:
        figures: name -> figure.
        formats: some of ``"png"``, ``"svg"``, ``"pdf"``.

    Returns:
        ``{(name, format): bytes}`` in the order of ``figures`` then ``formats``.

    Raises:
        ExportError: kaleido or Chromium is missing, or rendering failed.
    """
    for fmt in formats:
        _check_renderer(fmt)
    import plotly.io as pio

    keys = [(name, fmt) for name in figures for fmt in formats]
    if not keys:
        return {}
    with tempfile.TemporaryDirectory(prefix="sde-figures-") as tmp:
        paths = [Path(tmp) / f"{i}.{fmt}" for i, (_, fmt) in enumerate(keys)]
        figs = [figures[name] for name, _ in keys]
        # The batch ignores a layout's size unless given: pass each figure's own.
        sizes = {
            "width": [fig.layout.width for fig in figs],
            "height": [fig.layout.height for fig in figs],
        }
        for attempt in (1, 2):  # Chromium's pipe to kaleido now and then drops a message
            try:
                pio.write_images(figs, paths, **sizes)
                break
            except Exception as exc:  # kaleido/Chromium failures come as many types
                if attempt == 2:
                    raise ExportError(f"figure export failed ({exc}); {_HINT}") from exc
        return {key: path.read_bytes() for key, path in zip(keys, paths, strict=True)}
