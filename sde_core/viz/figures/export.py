"""Server-side PNG/SVG of a figure (:func:`figure_to_image`) through kaleido and a system
Chromium."""

from __future__ import annotations

import importlib.util
import os
import shutil

import plotly.graph_objects as go

from sde_core.errors import ExportError, SettingsError
from sde_core.viz.figures.style import _IMAGE_FORMATS

__all__ = ["figure_to_image", "find_chromium"]

_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


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


def figure_to_image(fig: go.Figure, fmt: str = "png", *, scale: float = 2.0) -> bytes:
    """Render ``fig`` to PNG or SVG bytes on the server, offline.

    Uses kaleido (≥ 1.0) with a system Chromium (Debian: ``apt-get install chromium``); nothing is
    downloaded. Without them, use the chart's camera button, which exports PNG in the browser.

    Args:
        fig: the figure.
        fmt: ``"png"`` or ``"svg"``.
        scale: pixel-density factor of a PNG (2 = twice the layout size).

    Raises:
        ExportError: kaleido or Chromium is missing, or rendering failed.
    """
    if fmt not in _IMAGE_FORMATS:
        raise SettingsError(f"image format must be one of {_IMAGE_FORMATS}; got {fmt!r}")
    hint = "or use the chart's camera button, which downloads a PNG in the browser"
    if not _kaleido_installed():
        raise ExportError(
            f"{fmt.upper()} export on the server needs the kaleido package and Chromium "
            f"(pip install kaleido; apt-get install chromium); {hint}"
        )
    if find_chromium() is None:
        raise ExportError(
            f"{fmt.upper()} export on the server needs Chromium (apt-get install chromium, or "
            f"set BROWSER_PATH); {hint}"
        )
    try:
        return fig.to_image(format=fmt, scale=scale)
    except Exception as exc:  # kaleido/Chromium failures come as many types
        raise ExportError(f"{fmt.upper()} export failed ({exc}); {hint}") from exc
