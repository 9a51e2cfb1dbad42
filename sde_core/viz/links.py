"""Shareable views: evaluation settings and a page's selection as URL query parameters.

A dashboard view is its page plus a flat mapping of short parameter names to text, e.g.
``/explore?model=ft&layer=output&sigma=0.5&n=400&T=100&K=200&seed=0&bins=30&R=20``. This
module turns settings into parameters and back (with a readable problem for every value it
cannot use) and builds the link; it knows nothing about Streamlit.
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "HASH_PARAM",
    "LINK_HASH_CHARS",
    "MAX_NUMBER_CHARS",
    "PUBLIC_URL_ENV",
    "SETTING_PARAMS",
    "WORKSPACE_PARAM",
    "decode_bool",
    "decode_int",
    "decode_list",
    "decode_settings",
    "encode_list",
    "encode_settings",
    "hash_matches",
    "link_hash",
    "public_base_url",
    "view_link",
]

#: URL parameter of the workspace folder (as the server resolves it inside its allowed folders).
WORKSPACE_PARAM = "ws"
#: URL parameter of the workspace's content hash (the first :data:`LINK_HASH_CHARS` hex digits).
HASH_PARAM = "wsh"
#: Hex digits of the content hash a link carries (64 bits: enough to tell workspaces apart).
LINK_HASH_CHARS = 16
#: Environment variable of the address people reach the dashboard at (``https://sde.example.org``);
#: links shown for copying start with it instead of the address the browser used.
PUBLIC_URL_ENV = "SDE_PUBLIC_URL"

#: URL parameter -> evaluation setting.
SETTING_PARAMS: dict[str, str] = {
    "layer": "layer",
    "sigma": "sigma",
    "n": "subset_size",
    "T": "targets",
    "K": "splits",
    "seed": "seed",
    "B": "draws",
    "bins": "bins",
    "R": "panel_size",
    "W": "precision",
}
_INT_SETTINGS = ("subset_size", "targets", "splits", "seed", "draws", "bins", "panel_size")
#: Most characters a numeric link parameter may have (an int64 has 19 digits): longer values
#: are refused before they are converted.
MAX_NUMBER_CHARS = 32
_ASCII_DIGITS = frozenset("0123456789")
_SIGMA_RULES = ("sqrt_dim", "median")


def _number_text(value: float) -> str:
    """The shortest text that reads back as the same float (``0.5``, ``12``)."""
    return repr(float(value)).removesuffix(".0")


def encode_settings(settings: Mapping[str, Any]) -> dict[str, str]:
    """URL parameters of the settings in :data:`SETTING_PARAMS` that ``settings`` has."""
    out: dict[str, str] = {}
    for name, key in SETTING_PARAMS.items():
        if key not in settings or settings[key] is None:
            continue
        value = settings[key]
        if key == "precision" and not value:
            continue  # the fixed design: the link stays as it was
        if key in ("sigma", "precision") and not isinstance(value, str):
            out[name] = _number_text(float(value))
        else:
            out[name] = str(value)
    return out


def decode_int(text: str, name: str, minimum: int = 0) -> tuple[int | None, str | None]:
    """``(value, None)`` for a whole number ≥ ``minimum`` written in ASCII digits (at most
    19 of them, below 2**63), else ``(None, problem)``."""
    stripped = text.strip()
    if len(stripped) > MAX_NUMBER_CHARS:
        return None, f"{name} has {len(stripped)} characters: not a whole number ≥ {minimum}"
    if stripped and set(stripped) <= _ASCII_DIGITS and minimum <= int(stripped) < 2**63:
        return int(stripped), None
    return None, f"{name}={text!r} is not a whole number ≥ {minimum}"


def decode_bool(text: str) -> bool:
    """``1``/``true``/``yes``/``on`` (any case) are true; anything else is false."""
    return text.strip().lower() in ("1", "true", "yes", "on")


def decode_list(text: str) -> list[str]:
    """Comma-separated names (blank entries dropped, order kept, duplicates removed)."""
    return list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def encode_list(values: Iterable[Any]) -> str:
    """Names joined by commas (the inverse of :func:`decode_list`)."""
    return ",".join(str(v) for v in values)


def decode_settings(params: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The settings a link carries, and one problem per parameter that cannot be used.

    Returns:
        ``({setting: value}, problems)``: integers as ``int``, σ as ``"sqrt_dim"``,
        ``"median"`` or a positive ``float``, the layer as text. Unusable values are left out
        (the view keeps its current value) and named in ``problems``.
    """
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, key in SETTING_PARAMS.items():
        if name not in params:
            continue
        text = str(params[name])
        if key == "layer":
            if text.strip():
                values[key] = text.strip()
            else:
                problems.append("layer is empty")
        elif key == "sigma":
            if text in _SIGMA_RULES:
                values[key] = text
                continue
            try:
                sigma = (
                    float(text) if len(text) <= MAX_NUMBER_CHARS and text.isascii() else math.nan
                )
            except ValueError:
                sigma = math.nan
            if math.isfinite(sigma) and sigma > 0:
                values[key] = sigma
            else:
                shown = repr(text) if len(text) <= MAX_NUMBER_CHARS else f"({len(text)} characters)"
                problems.append(f"sigma={shown} is neither sqrt_dim, median nor a positive number")
        elif key == "precision":
            try:
                width = float(text) if len(text) <= MAX_NUMBER_CHARS and text.isascii() else -1.0
            except ValueError:
                width = -1.0
            if 0.0 <= width < 0.5:
                values[key] = width
            else:
                problems.append(f"W={text[:MAX_NUMBER_CHARS]!r} is not a precision in [0, 0.5)")
        else:
            number, problem = decode_int(text, name, minimum=0 if key == "seed" else 1)
            if problem is None:
                values[key] = number
            else:
                problems.append(problem)
    return values, problems


def link_hash(workspace_hash: str) -> str:
    """The part of a workspace's content hash (64 hex digits) that a link carries."""
    return workspace_hash[:LINK_HASH_CHARS].lower()


def hash_matches(linked: str, workspace_hash: str) -> bool:
    """Whether a link's ``wsh`` value names the workspace with content hash ``workspace_hash``.

    The link's value must be a prefix of at least 8 hex digits (case-insensitive); anything
    else (empty, too short, not hex) matches nothing.
    """
    text = linked.strip().lower()
    if len(text) < 8 or any(c not in "0123456789abcdef" for c in text):
        return False
    return workspace_hash.lower().startswith(text)


def public_base_url(browser_url: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The address a shared link starts with: ``$SDE_PUBLIC_URL`` when it is an ``http(s)``
    address, else ``browser_url`` (the address this browser used; None for a relative link).

    A server bound to localhost shows ``http://127.0.0.1:8501`` to its own browser, which
    nobody else can open; set :data:`PUBLIC_URL_ENV` to the address others reach it at.
    """
    configured = (os.environ if env is None else env).get(PUBLIC_URL_ENV, "").strip()
    if configured:
        parts = urllib.parse.urlsplit(configured)
        if parts.scheme in ("http", "https") and parts.netloc:
            return configured
    return browser_url


def view_link(
    base_url: str | None, page: str, params: Mapping[str, str], pages: Iterable[str] = ()
) -> str:
    """The link to ``page`` with ``params``.

    Args:
        base_url: the app's URL as the browser shows it (with or without a page path; query
            and fragment are dropped), or None for a relative link (``./explore?…``).
        page: the page's URL path.
        params: the query parameters.
        pages: the app's page paths; a trailing one in ``base_url`` is removed.
    """
    query = urllib.parse.urlencode(dict(params), quote_via=urllib.parse.quote, safe=",")
    root = (base_url or ".").split("?", 1)[0].split("#", 1)[0].rstrip("/")
    head, _, last = root.rpartition("/")
    if head and last in set(pages) | {page}:
        root = head
    return f"{root}/{page}" + (f"?{query}" if query else "")
