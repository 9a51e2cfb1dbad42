"""Deep links: each dashboard page's view as a typed dataclass, to and from URL parameters.

A link is a page plus a flat mapping of short parameter names to text, e.g.
``/explore?ws=assets/demo&wsh=0123456789abcdef&model=ft&sigma=0.5&n=400&B=5&target=3``.
:func:`decode` turns the parameters into the page's view (:data:`VIEWS`) and one readable
problem per value it cannot use — never an exception, whatever the text; each value of the
link in a problem is literal markdown (:func:`~sde_core.common.markdown_text.md_literal`), so
a page shows it as text, never as a link or an image — and :func:`encode`
turns a view back into parameters (``decode(page, encode(view))`` gives ``view`` back).

Every view carries the workspace folder (``ws``), the first :data:`LINK_HASH_CHARS` hex digits
of its content hash (``wsh``) and the evaluation settings that have a URL key in
:data:`~sde_core.pipeline.settings.SETTINGS` (written and read by that table's rules, σ in the
one σ syntax); each page's own fields are declared on its view class. A field that is None is
not in the link (the page keeps its current value). Nothing here imports Streamlit.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import urllib.parse
from collections.abc import Collection, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from sde_core.common.markdown_text import md_literal, md_plain
from sde_core.common.sigma import SIGMA_SYNTAX, parse_sigma
from sde_core.errors import SDEError
from sde_core.pipeline.settings import SETTINGS, Setting, setting, with_stated_design
from sde_core.pipeline.sweeps import SWEEP_PARAMS

__all__ = [
    "HASH_PARAM",
    "LINK_HASH_CHARS",
    "MAX_NUMBER_CHARS",
    "PUBLIC_URL_ENV",
    "SETTING_PARAMS",
    "SIDEBAR_WIDGETS",
    "SIGMA_WIDGET",
    "VIEWS",
    "WORKSPACE_PARAM",
    "AnswerView",
    "CompareView",
    "ExploreView",
    "PageView",
    "ReportView",
    "SweepsView",
    "decode",
    "decode_list",
    "encode",
    "encode_list",
    "hash_matches",
    "link_hash",
    "public_base_url",
    "restrict",
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
#: Most characters a numeric link parameter may have (an int64 has 19 digits): longer values
#: are refused before they are converted.
MAX_NUMBER_CHARS = 32
#: Most characters any link parameter may have; longer values are refused unread.
MAX_TEXT_CHARS = 4096
#: URL parameter -> the evaluation setting it carries (from the settings table).
SETTING_PARAMS: dict[str, Setting] = {s.url_key: s for s in SETTINGS if s.url_key}
#: The settings the dashboard's sidebar shows as a number input, a select box or a checkbox (table
#: order; those with a ``group`` under that heading in "More settings"), each kept in session key
#: ``s_<name>``.
SIDEBAR_WIDGETS: tuple[Setting, ...] = tuple(
    s for s in SETTINGS if s.widget in ("number", "choice", "toggle")
)
#: The σ setting (its widget is the σ rule radio and the rule's number).
SIGMA_WIDGET: Setting = setting("sigma")
_ASCII_DIGITS = frozenset("0123456789")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_KEPT = "kept the current value"
#: A name that renders as itself in markdown (no ``_``, ``*`` or other markup character).
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]{0,31}")


# ------------------------------------------------------------------------------- values


def _shown(text: str) -> str:
    """A link's value as literal markdown (never a link or an image), or its length."""
    return md_literal(text) if len(text) <= MAX_NUMBER_CHARS else f"({len(text)} characters)"


def _value(text: str) -> str:
    """A value from a link (a model's name) as literal markdown, cut at 60 characters."""
    return md_literal(text if len(text) <= 60 else text[:60] + "…")


def _named(text: str) -> str:
    """A parameter's name from a link: a plain ASCII word (``seed``, ``model``) as it is, any
    other as literal markdown (:func:`_value`)."""
    return text if _WORD.fullmatch(text) else _value(text)


def _decode_int(text: str, name: str, minimum: int = 0) -> tuple[int | None, str | None]:
    """``(value, None)`` for a whole number ≥ ``minimum`` written in ASCII digits (at most
    19 of them, below 2**63), else ``(None, problem)``."""
    stripped = text.strip()
    if len(stripped) > MAX_NUMBER_CHARS:
        return None, f"{name} has {len(stripped)} characters: not a whole number ≥ {minimum}"
    if stripped and set(stripped) <= _ASCII_DIGITS and minimum <= int(stripped) < 2**63:
        return int(stripped), None
    return None, f"{name}={_shown(text)} is not a whole number ≥ {minimum}"


def _decode_float(text: str) -> float:
    """A decimal number written in ASCII (at most :data:`MAX_NUMBER_CHARS` characters), else
    NaN (which no bound admits)."""
    stripped = text.strip()
    if len(stripped) > MAX_NUMBER_CHARS or not _DECIMAL.fullmatch(stripped):
        return math.nan
    return float(stripped)


def _decode_bool(text: str) -> bool:
    """``1``/``true``/``yes``/``on`` (any case) are true; anything else is false."""
    return text.strip().lower() in ("1", "true", "yes", "on")


def decode_list(text: str) -> list[str]:
    """Comma-separated names (blank entries dropped, order kept, duplicates removed)."""
    return list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def encode_list(values: Iterable[Any]) -> str:
    """Names joined by commas (the inverse of :func:`decode_list`)."""
    return ",".join(str(v) for v in values)


def _decode_setting(entry: Setting, key: str, text: str) -> tuple[Any, str | None]:
    """A setting's value from its link text (``(None, problem)`` when it cannot be used)."""
    if entry.kind == "sigma":
        try:
            return parse_sigma(text, key).setting(), None
        except SDEError:
            return None, f"{key}={_shown(text)} is not a σ ({md_plain(SIGMA_SYNTAX)})"
    if entry.kind == "int":
        lowest = int(entry.minimum or 0) + int(entry.exclusive)
        value, problem = _decode_int(text, key, minimum=lowest)
        if value is not None and entry.maximum is not None and value > entry.maximum:
            return None, f"{key}={_shown(text)} is more than {entry.number_text(entry.maximum)}"
        return value, problem
    if entry.kind == "float":
        number = _decode_float(text)
        try:
            return entry.check(number), None
        except SDEError:
            return None, f"{key}={_shown(text)} is not a number {entry.bounds_text()}"
    if entry.kind == "bool":
        return _decode_bool(text), None
    stripped = text.strip()
    if entry.kind == "name":
        return (stripped, None) if stripped else (None, f"{key} is empty")
    try:  # a choice or a device
        return entry.check(stripped), None
    except SDEError:
        return None, f"{key}={_shown(text)} is not {entry.bounds_text()}"


def _encode_setting(entry: Setting, value: Any) -> str:
    if entry.kind == "sigma":
        return parse_sigma(value, entry.name).text()
    if entry.kind == "float":
        return repr(float(value)).removesuffix(".0")  # the shortest text that reads back
    if entry.kind == "bool":
        return "1" if value else "0"
    return str(value)


# ------------------------------------------------------------------------------- views


def _field(codec: str, fallback: str = _KEPT) -> Any:
    """A page parameter: ``codec`` is ``text``, ``list`` (comma-separated names), ``int`` (a
    whole number ≥ 0) or ``flag`` (``1``/``true``/``yes``/``on`` are true, other text false);
    an empty text or list counts as not given. ``fallback`` says what the page shows when the
    link's value cannot be used."""
    return dataclasses.field(default=None, metadata={"codec": codec, "fallback": fallback})


@dataclasses.dataclass(frozen=True)
class PageView:
    """What every page's link carries (a page without parameters of its own uses this class).

    Attributes:
        workspace: the workspace folder (``ws``).
        workspace_hash: the hex digits of its content hash the link was made on (``wsh``).
        settings: evaluation setting name -> value, for the settings the link carries.
    """

    PAGE: ClassVar[str] = ""
    workspace: str | None = None
    workspace_hash: str | None = None
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ExploreView(PageView):
    """Explore: the model, the target subset shown (None: all pooled), the negative control."""

    PAGE: ClassVar[str] = "explore"
    model: str | None = _field("text")
    target: int | None = _field("int", "showing all targets pooled")
    control: bool | None = _field("flag")


@dataclasses.dataclass(frozen=True)
class CompareView(PageView):
    """Compare: the layers compared, the chart's metric and layer, the overlaid models, the two
    models of the paired differences (method §15)."""

    PAGE: ClassVar[str] = "compare"
    layers: tuple[str, ...] | None = _field("list")
    metric: str | None = _field("text")
    chart: str | None = _field("text")
    overlay: tuple[str, ...] | None = _field("list")
    pair: tuple[str, ...] | None = _field("list")


@dataclasses.dataclass(frozen=True)
class SweepsView(PageView):
    """Sweeps: the swept parameter, its values (as the page's widget writes them), the models."""

    PAGE: ClassVar[str] = "sweeps"
    sweep: str | None = _field("text")
    values: tuple[str, ...] | None = _field("list")
    models: tuple[str, ...] | None = _field("list")


@dataclasses.dataclass(frozen=True)
class AnswerView(PageView):
    """Answer (the landing page): the workspace and settings only."""

    PAGE: ClassVar[str] = "answer"


@dataclasses.dataclass(frozen=True)
class ReportView(PageView):
    """Report: the workspace and settings only."""

    PAGE: ClassVar[str] = "report"


#: Page path -> its view class; other pages (workspace, method) use :class:`PageView`.
VIEWS: dict[str, type[PageView]] = {
    cls.PAGE: cls for cls in (AnswerView, ExploreView, CompareView, SweepsView, ReportView)
}
#: Values a page field may take whatever the workspace (others are checked by :func:`restrict`).
_FIXED_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {("sweeps", "sweep"): SWEEP_PARAMS}


def _page_fields(cls: type[PageView]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if "codec" in f.metadata]


def _decode_field(f: dataclasses.Field[Any], text: str) -> tuple[Any, str | None]:
    codec = f.metadata["codec"]
    if codec == "int":
        return _decode_int(text, f.name)
    if codec == "flag":
        return _decode_bool(text), None
    if codec == "list":
        return tuple(decode_list(text)) or None, None
    return text or None, None


def decode(page: str, query: Mapping[str, str]) -> tuple[PageView, list[str]]:
    """The view of ``page`` a link's query parameters describe, and its problems.

    Args:
        page: the page's URL path (``"explore"``; an unknown page gets a :class:`PageView`).
        query: the link's parameters (unknown ones are ignored).

    Returns:
        ``(view, problems)``: a field the link does not set, or sets to an unusable value, is
        None (the page keeps its current value); each unusable value gives one sentence saying
        what is wrong and what the page does instead. Never raises for any text.
    """
    cls = VIEWS.get(page, PageView)
    params = {str(k): str(v) for k, v in query.items()}
    problems: list[str] = []
    values: dict[str, Any] = {}
    long = sorted(k for k, v in params.items() if len(v) > MAX_TEXT_CHARS)
    for key in long:
        problems.append(f"The link's {_named(key)} has {len(params.pop(key))} characters: {_KEPT}.")
    if WORKSPACE_PARAM in params:
        values["workspace"] = params[WORKSPACE_PARAM]
    if HASH_PARAM in params:
        values["workspace_hash"] = params[HASH_PARAM]
    settings: dict[str, Any] = {}
    for key, entry in SETTING_PARAMS.items():
        if key in params:
            value, problem = _decode_setting(entry, key, params[key])
            if problem is None:
                settings[entry.name] = value
            else:
                problems.append(f"The link's {problem}: {_KEPT}.")
    # B without W: the fixed design (every link made before W = 0.1 became the default)
    values["settings"] = with_stated_design(settings)
    for f in _page_fields(cls):
        if f.name not in params:
            continue
        value, problem = _decode_field(f, params[f.name])
        allowed = _FIXED_CHOICES.get((page, f.name))
        if problem is None and allowed is not None and value not in allowed:
            problem = f"{f.name}={_shown(params[f.name])} is not one of {list(allowed)}"
        if problem is None:
            values[f.name] = value
        else:
            problems.append(f"The link's {problem}: {f.metadata['fallback']}.")
    return cls(**values), problems


def encode(view: PageView) -> dict[str, str]:
    """The query parameters of ``view``: ``ws``, ``wsh``, the settings (table order), then the
    page's fields (a flag as ``1``/``0``); None fields, empty texts and lists, and a setting at
    its ``link_off`` value (a feature switched off: links stay as they were before it existed)
    are left out."""
    out: dict[str, str] = {}
    if view.workspace is not None:
        out[WORKSPACE_PARAM] = view.workspace
    if view.workspace_hash is not None:
        out[HASH_PARAM] = view.workspace_hash
    for key, entry in SETTING_PARAMS.items():
        value = view.settings.get(entry.name)
        if value is not None and not (entry.link_off is not None and value == entry.link_off):
            out[key] = _encode_setting(entry, value)
    for f in _page_fields(type(view)):
        text = _encode_field(f.metadata["codec"], getattr(view, f.name))
        if text:
            out[f.name] = text
    return out


def _encode_field(codec: str, value: Any) -> str:
    """A page field's link text ("" leaves it out of the link)."""
    if value is None:
        return ""
    if codec == "flag":
        return "1" if value else "0"
    return encode_list(value) if codec == "list" else str(value)


#: A page's view type (:func:`restrict` keeps it).
_View = TypeVar("_View", bound=PageView)


def restrict(view: _View, choices: Mapping[str, Collection[str]]) -> tuple[_View, list[str]]:
    """``view`` with the page fields named in ``choices`` limited to the names this workspace
    has (a text field outside them becomes None, a list keeps its known entries), and one
    problem per name left out."""
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for name, allowed in choices.items():
        value = getattr(view, name)
        if value is None:
            continue
        if isinstance(value, tuple):
            unknown = [v for v in value if v not in allowed]
            if unknown:
                changes[name] = tuple(v for v in value if v in allowed)
                shown = ", ".join(_value(str(v)) for v in unknown[:10])
                more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
                problems.append(
                    f"The link's {name} {shown}{more} are not in this workspace: left out."
                )
        elif value not in allowed:
            changes[name] = None
            problems.append(
                f"The link's {name} {_value(str(value))} is not in this workspace: {_KEPT}."
            )
    return dataclasses.replace(view, **changes), problems


# ------------------------------------------------------------------------------- links


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
