"""The view-state service (sde_core/services/view_state.py): typed page views to and from
links; existing share links decode as before; hostile links give problems, never exceptions."""

from __future__ import annotations

import dataclasses
import math
import re
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from sde_core.common.sigma import Sigma
from sde_core.pipeline.settings import (
    DEFAULT_PRECISION,
    SETTINGS,
    EvalSettings,
    setting,
    with_stated_design,
)
from sde_core.pipeline.sweeps import SWEEP_PARAMS
from sde_core.services.view_state import (
    SETTING_PARAMS,
    VIEWS,
    CompareView,
    ExploreView,
    PageView,
    ReportView,
    SweepsView,
    decode,
    encode,
    restrict,
)

ROOT = Path(__file__).resolve().parents[2]
HYPOTHESIS = settings(
    derandomize=True, deadline=None, database=None, max_examples=120,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)  # fmt: skip

#: A link the dashboard wrote before the view-state service (Explore, every setting key).
OLD_LINK = (
    "ws=assets/demo&wsh=0123456789abcdef&layer=output&sigma=0.5&n=400&T=100&K=200&seed=0&B=5"
    "&bins=30&R=20&model=FT&target=3&control=1"
)


def test_existing_share_links_decode_the_same_and_encode_back_identically():
    query = dict(urllib.parse.parse_qsl(OLD_LINK))
    view, problems = decode("explore", query)
    assert not problems
    assert view == ExploreView(
        workspace="assets/demo",
        workspace_hash="0123456789abcdef",
        settings={"layer": "output", "sigma": 0.5, "subset_size": 400, "targets": 100,
                  "splits": 200, "seed": 0, "draws": 5, "bins": 30, "panel_size": 20,
                  "precision": 0.0},  # it states B and no W: the fixed design it showed
        model="FT", target=3, control=True,
    )  # fmt: skip
    assert list(encode(view).items()) == list(query.items())  # same keys, same order
    compare = "ws=a&sigma=median&layers=output,penultimate&metric=otr&chart=output&overlay=FT,GA"
    view, problems = decode("compare", dict(urllib.parse.parse_qsl(compare)))
    assert not problems and view == CompareView(
        workspace="a", settings={"sigma": "median"}, layers=("output", "penultimate"),
        metric="otr", chart="output", overlay=("FT", "GA"),
    )  # fmt: skip
    sweeps = {"sweep": "sigma", "values": "0.3, 1, sqrt_dim", "models": "original,retrained"}
    view, problems = decode("sweeps", sweeps)
    assert not problems and view == SweepsView(
        sweep="sigma", values=("0.3", "1", "sqrt_dim"), models=("original", "retrained")
    )
    assert decode("report", {"n": "40"}) == (ReportView(settings={"subset_size": 40}), [])
    # a page without a view of its own still reads the workspace and settings
    assert decode("method", {"ws": "x", "model": "FT"}) == (PageView(workspace="x"), [])


def test_settings_in_a_link_round_trip_through_evaluation_settings():
    full = EvalSettings(layer="penultimate", sigma="0.25*sqrt_dim", subset_size=300, draws=3)
    carried = {entry.name: getattr(full, entry.name) for entry in SETTING_PARAMS.values()}
    view, problems = decode("explore", encode(ExploreView(settings=carried)))
    assert not problems and EvalSettings().with_overrides(**view.settings) == full


def test_a_link_made_before_the_decisive_default_keeps_its_fixed_design():
    """Links made while the fixed design was the default carry B and no W (W = 0 was left
    out): they still mean B draws, now that W = 0.1 is the default; a link of the precision
    design carries its W; a link with neither keeps the page's (the workspace's) design."""
    old, problems = decode("explore", {"ws": "assets/demo", "n": "400", "B": "5"})
    assert not problems and old.settings == {"subset_size": 400, "draws": 5, "precision": 0.0}
    assert EvalSettings().with_overrides(**old.settings).precision == 0.0
    assert encode(old) == {"ws": "assets/demo", "n": "400", "B": "5"}  # the same link back
    new = ExploreView(settings={"draws": 5, "precision": DEFAULT_PRECISION})
    assert encode(new) == {"B": "5", "W": "0.1"}
    assert decode("explore", encode(new)) == (new, [])
    bare, _ = decode("explore", {"ws": "assets/demo", "n": "400"})
    assert bare.settings == {"subset_size": 400}
    assert EvalSettings().with_overrides(**bare.settings).precision == DEFAULT_PRECISION


def test_bad_values_are_named_with_what_the_page_does_instead():
    view, problems = decode(
        "explore",
        {"n": "ten", "K": "-3", "B": "101", "sigma": "wide", "layer": " ", "target": "x",
         "control": "maybe", "seed": "0"},
    )  # fmt: skip
    assert view.settings == {"seed": 0} and view.target is None and view.control is False
    assert problems == [
        "The link's layer is empty: kept the current value.",
        "The link's sigma=`wide` is not a σ ('sqrt\\_dim', '\\<factor\\>\\*sqrt\\_dim' (e.g. "
        "'0.5\\*sqrt\\_dim'), 'median' or a positive number): kept the current value.",
        "The link's n=`ten` is not a whole number ≥ 4: kept the current value.",
        "The link's K=`-3` is not a whole number ≥ 2: kept the current value.",
        "The link's B=`101` is more than 100: kept the current value.",
        "The link's target=`x` is not a whole number ≥ 0: showing all targets pooled.",
    ]
    view, problems = decode("sweeps", {"sweep": "bins", "models": "a"})
    assert view == SweepsView(models=("a",)) and "sweep=`bins` is not one of" in problems[0]
    view, problems = decode("explore", {"model": "x" * 5000})
    assert view.model is None and problems == [
        "The link's model has 5000 characters: kept the current value."
    ]


def test_a_new_number_setting_needs_only_its_table_entry(monkeypatch):
    """What issue 23's ``precision`` (a float with a URL key) gets from its entry alone: here
    α, given a URL key for the test."""
    entry = dataclasses.replace(setting("alpha"), url_key="a")
    monkeypatch.delitem(SETTING_PARAMS, "alpha")  # its own key, as if it had none
    monkeypatch.setitem(SETTING_PARAMS, "a", entry)
    view, problems = decode("explore", {"a": "0.02", "n": "50"})
    assert not problems and view.settings == {"alpha": 0.02, "subset_size": 50}
    assert encode(view) == {"n": "50", "a": "0.02"}
    for bad in ("1", "0", "-0.5", "nan", "1e999", "0x1", "٠.١", "9" * 40):
        view, problems = decode("explore", {"a": bad})
        assert view.settings == {} and len(problems) == 1, bad
        assert problems[0].endswith(" is not a number 0 to 1 (exclusive): kept the current value.")


def test_every_kind_of_setting_has_a_link_codec(monkeypatch):
    """Whichever setting gets a URL key, its values round-trip and bad text is a problem."""
    for entry in SETTINGS:
        keyed = dataclasses.replace(entry, url_key=f"x_{entry.name}")
        monkeypatch.setitem(SETTING_PARAMS, keyed.url_key, keyed)
    chosen = EvalSettings(pool=False, device="cuda:1", precision=0.1)  # nothing at link_off
    view = ExploreView(settings=dataclasses.asdict(chosen))
    assert decode("explore", encode(view)) == (view, [])
    # a feature switched off stays out of the link (links made before it read the same)
    assert "x_precision" not in encode(ExploreView(settings={"precision": 0.0}))
    for entry in SETTINGS:
        if entry.kind != "bool":  # any text is a flag
            view, problems = decode("explore", {f"x_{entry.name}": " "})
            assert entry.name not in view.settings and len(problems) == 1, entry.name


def test_restrict_keeps_only_what_the_workspace_has():
    view, problems = restrict(ExploreView(model="nope"), {"model": ["FT", "GA"]})
    assert view.model is None and problems == [
        "The link's model `nope` is not in this workspace: kept the current value."
    ]
    view, problems = restrict(SweepsView(models=("FT", "ghost")), {"models": ["FT"]})
    assert view.models == ("FT",) and "models `ghost` are not" in problems[0]
    assert restrict(ExploreView(model="FT"), {"model": ["FT"]}) == (ExploreView(model="FT"), [])


# ------------------------------------------------------------------ properties

NAMES = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=","),
    min_size=1,
    max_size=12,
).filter(lambda t: t.strip() == t and t != "")
SIGMAS = (
    st.sampled_from(["sqrt_dim", "median"])
    | st.floats(1e-6, 1e6).map(float)
    | st.floats(1e-3, 1e3).map(lambda f: Sigma.times_sqrt_d(f).setting())
)


@st.composite
def setting_values(draw: st.DrawFn) -> dict[str, object]:
    out: dict[str, object] = {}
    for entry in SETTING_PARAMS.values():
        if not draw(st.booleans()):
            continue
        if entry.kind == "int":
            hi = int(entry.maximum) if entry.maximum is not None else 2**40
            out[entry.name] = draw(st.integers(int(entry.minimum or 0), hi))
        elif entry.kind == "sigma":
            out[entry.name] = draw(SIGMAS)
        elif entry.kind == "float":
            lo, hi = entry.minimum, entry.maximum
            out[entry.name] = draw(
                st.floats(lo, hi, exclude_min=entry.exclusive, exclude_max=entry.exclusive)
                # a value at link_off is left out of links by design (tested apart)
                .filter(lambda v, off=entry.link_off: v != off)
            )
        elif entry.kind == "choice":
            out[entry.name] = draw(st.sampled_from(entry.choices))
        elif entry.kind == "bool":
            out[entry.name] = draw(st.booleans())
        else:
            assert entry.kind == "name", entry
            out[entry.name] = draw(NAMES)
    return out


def _field_values(f: dataclasses.Field) -> st.SearchStrategy:
    codec = f.metadata["codec"]
    if codec == "int":
        return st.none() | st.integers(0, 2**62)
    if codec == "flag":
        return st.none() | st.booleans()
    if codec == "list":
        return st.none() | st.lists(NAMES, min_size=1, max_size=4, unique=True).map(tuple)
    return st.none() | NAMES


@st.composite
def views(draw: st.DrawFn) -> PageView:
    cls = draw(st.sampled_from([PageView, *VIEWS.values()]))
    page = {f.name: draw(_field_values(f)) for f in dataclasses.fields(cls) if f.metadata}
    if cls is SweepsView and page["sweep"] is not None:
        page["sweep"] = draw(st.sampled_from(SWEEP_PARAMS))
    return cls(
        workspace=draw(st.none() | NAMES),
        workspace_hash=draw(st.none() | st.text("0123456789abcdef", min_size=8, max_size=16)),
        settings=draw(setting_values()),
        **page,
    )


@HYPOTHESIS
@given(view=views())
def test_decode_inverts_encode(view):
    """Up to the one rule of links: B without W is the fixed design (``with_stated_design``)."""
    page = view.PAGE or "workspace"
    stated = dataclasses.replace(view, settings=with_stated_design(view.settings))
    assert decode(page, encode(view)) == (stated, [])


_MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])
#: What GFM autolinks and Streamlit's emoji, icons and directives rewrite in plain text.
_REWRITTEN = re.compile(r"://|@|www\.|:\S", re.IGNORECASE)


def _live(problem: str) -> list[str]:
    """What in a problem renders as more than text: a link, an image, HTML, emphasis, a block,
    or plain text that GFM or Streamlit would rewrite (values belong in code spans)."""
    found = []
    for block in _MARKDOWN.parse(problem):
        if block.type not in ("paragraph_open", "inline", "paragraph_close"):
            found.append(block.type)
        for child in block.children or []:
            if child.type not in ("text", "code_inline", "softbreak"):
                found.append(child.type)
            elif child.type == "text" and _REWRITTEN.search(child.content):
                found.append(f"rewritable {child.content!r}")
    return found


def test_link_values_in_problems_are_literal_markdown():
    """Issue 31 item 5: the link's values (and a parameter's name) in a problem render as
    exactly themselves, in code font: no link, no image."""
    attack = "[Re-login here](http://evil.example/x) ![t](http://127.0.0.1:9/track.png)"
    query = {"n": attack[:30], "sigma": "`x` [a](b)", "target": "![t](http://e.x/t.png)",
             attack: "y" * 5000, "sweep": "[s](http://e.x)"}  # fmt: skip
    for page in ("explore", "sweeps"):
        _, problems = decode(page, query)
        assert len(problems) >= 3 and [p for p in problems if _live(p)] == []
    assert any(attack[:60] in p for p in decode("explore", query)[1])
    _, problems = restrict(ExploreView(model=attack), {"model": ["FT"]})
    assert _live(problems[0]) == [] and "`" in problems[0]
    _, problems = restrict(SweepsView(models=(attack, "www.evil.example")), {"models": ["FT"]})
    assert _live(problems[0]) == [] and "www.evil.example" in problems[0]


HOSTILE = (
    st.text(max_size=40)
    | st.integers(-(10**40), 10**60).map(str)
    | st.sampled_from(["²", "١٢", "nan", "inf", "-0", "1e999", " ", ",,,", "%00", "9" * 5000])
)


@HYPOTHESIS
@given(
    page=st.sampled_from([*VIEWS, "method", "nowhere"]),
    query=st.dictionaries(
        st.sampled_from(
            [
                *SETTING_PARAMS,
                "ws",
                "wsh",
                "model",
                "target",
                "control",
                "layers",
                "metric",
                "chart",
                "overlay",
                "sweep",
                "values",
                "models",
                "junk",
            ]
        ),
        HOSTILE,
        max_size=8,
    ),
)
def test_hostile_links_give_problems_not_exceptions(page, query):
    view, problems = decode(page, query)
    assert isinstance(view, VIEWS.get(page, PageView))
    assert all(isinstance(p, str) and len(p) < 300 for p in problems)
    assert [p for p in problems if _live(p)] == []  # every value of the link is literal text
    settings_ = EvalSettings().with_overrides(**view.settings)  # every decoded setting is valid
    assert settings_.layer
    if isinstance(view, ExploreView):
        assert view.target is None or 0 <= view.target < 2**63
    # what it kept, it writes back (a setting at its link_off value is left out by design)
    kept = {k: v for k, v in view.settings.items() if v != setting(k).link_off}
    stated = with_stated_design(kept)  # B without W is the fixed design again
    assert decode(page, encode(view))[0] == dataclasses.replace(view, settings=stated)


# ------------------------------------------------------------------ the dashboard


def test_a_link_with_a_multiple_of_sqrt_d_sets_the_sidebar_and_the_evaluation(
    tiny_workspace, monkeypatch
):
    """The dashboard takes σ = f·√d from a link (it used to refuse it) and writes it back."""
    from streamlit.testing.v1 import AppTest

    from sde_core.viz.formatting import format_number

    folder = tiny_workspace
    monkeypatch.setenv("SDE_WORKSPACE", str(folder))
    monkeypatch.setenv("SDE_DATA_ROOTS", str(folder.parent))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.switch_page("pages/explore.py")
    at.query_params.update({"sigma": "2*sqrt_dim", "model": "FT", "B": "2"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["s_sigma_rule"] == "multiple of √d"
    assert at.session_state["s_sigma_factor"] == 2.0
    shown = {m.label: m.value for m in at.metric}
    assert shown["σ used"] == format_number(2 * math.sqrt(10), digits=4)  # d = 10 outputs
    assert dict(at.query_params)["sigma"] == "2*sqrt_dim"


def test_a_workspace_path_too_long_to_open_is_a_clean_refusal(tmp_path):
    """Issue 31 item 8: ``?ws=`` with 4,096 characters raised "File name too long" (OSError)
    when the page opened it; the path check the page makes now refuses it first."""
    from sde_core.common.paths import resolve_in_roots
    from sde_core.errors import PathError

    view, problems = decode("explore", {"ws": "a/" * 2048})
    assert not problems and len(view.workspace) == 4096
    with pytest.raises(PathError, match="give a shorter path"):
        resolve_in_roots(view.workspace, [tmp_path], what="workspace folder")
