"""The settings table (sde_core/pipeline/settings.py): every evaluation setting declared once,
and every entry point built from it; the one σ syntax (sde_core/common/sigma.py) accepted and
refused identically by the library, the CLI, plans, the dashboard's parsers and links."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sde_core.cli._args import add_settings_arguments, settings_overrides
from sde_core.common.sigma import MAX_SIGMA_CHARS, Sigma, parse_sigma
from sde_core.errors import InputError, PlanError, SDEError, SettingsError
from sde_core.pipeline.plans.graph import build_jobs
from sde_core.pipeline.plans.params import _check_sigma
from sde_core.pipeline.plans.spec import list_plans, load_plan
from sde_core.pipeline.settings import (
    DEFAULT_PRECISION,
    SETTINGS,
    EvalSettings,
    setting,
    with_stated_design,
)
from sde_core.pipeline.workspace_load import defaults_from_table
from sde_core.services.view_state import decode
from sde_core.stats.hsic import resolve_sigma
from sde_core.viz.glossary import GLOSSARY, METHOD_SECTIONS
from sde_core.viz.ui_support import parse_sigma_values

ROOT = Path(__file__).resolve().parents[2]
HYPOTHESIS = settings(
    derandomize=True, deadline=None, database=None, max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
#: Section numbers and named sections that docs/method.md has as "## N. Title" headings.
METHOD_HEADINGS = re.findall(r"^##+ (\d+)\.? |^## (Deviations and choices)$", (
    ROOT / "docs" / "method.md").read_text(encoding="utf-8"), flags=re.M)  # fmt: skip


def _sections() -> set[int | str]:
    return {int(n) if n else "choices" for n, named in METHOD_HEADINGS if n or named}


def test_every_field_is_declared_once_with_everything_it_needs():
    names = [s.name for s in SETTINGS]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(EvalSettings))
    assert len(set(names)) == len(names)
    flags = [s.cli_flag for s in SETTINGS]
    keys = [s.url_key for s in SETTINGS if s.url_key]
    assert len(set(flags)) == len(flags) and len(set(keys)) == len(keys)
    sections = _sections()
    for s in SETTINGS:
        assert s.symbol and s.definition and re.fullmatch(r"--[a-z][a-z-]+", s.cli_flag), s
        assert s.widget in ("number", "choice", "toggle", "sigma", "layer", "none"), s
        assert s.widget == "none" or s.widget_label, s
        if s.kind in ("int", "float"):
            assert s.minimum is not None, f"{s.name} declares no lower bound"
        assert s.kind != "choice" or s.choices, s
        # the glossary's entry is the table's, and its method section exists
        entry = GLOSSARY[s.name]
        assert (entry.label, entry.definition, entry.section) == (
            s.short_label, s.definition, s.section
        )  # fmt: skip
        assert s.section in METHOD_SECTIONS and s.section in sections, s
        # the default is EvalSettings' own and passes the table's check
        assert s.default == getattr(EvalSettings(), s.name)
        assert s.check(s.default) == s.default
        # a link carries exactly what the dashboard lets the user change, so it reproduces it
        assert (s.url_key is not None) == (s.widget != "none"), s.name
    # every setting existing links carry keeps its key (share links keep decoding the same)
    linked = {s.url_key: s.name for s in SETTINGS if s.url_key}
    assert linked.items() >= {"layer": "layer", "sigma": "sigma", "n": "subset_size",
                              "T": "targets", "K": "splits", "seed": "seed", "B": "draws",
                              "bins": "bins", "R": "panel_size"}.items()  # fmt: skip


@pytest.mark.parametrize("entry", [s for s in SETTINGS if s.kind == "int"], ids=lambda s: s.name)
def test_evaluation_settings_enforce_the_tables_integer_bounds(entry):
    # R = 3 allows a calibrated verdict only at α ≥ 1/4; the fixed design: each bound alone,
    # without the precision design's pilot-within-budget rule
    wide = {"alpha_calibrated": 0.5, "precision": 0.0}
    lo = int(entry.minimum)
    assert getattr(EvalSettings(**wide, **{entry.name: lo}), entry.name) == lo
    with pytest.raises(SettingsError, match=entry.name):
        EvalSettings(**wide, **{entry.name: lo - 1})
    if entry.maximum is not None:
        hi = int(entry.maximum)
        assert getattr(EvalSettings(**wide, **{entry.name: hi}), entry.name) == hi
        with pytest.raises(SettingsError, match=entry.name):
            EvalSettings(**wide, **{entry.name: hi + 1})
    with pytest.raises(SettingsError, match=entry.name):
        EvalSettings(**{entry.name: float(lo + 1)})  # a float is not an integer setting


def test_other_kinds_are_checked_by_the_table():
    for bad in ({"alpha": 0.0}, {"alpha_calibrated": 1.0}, {"estimator": "exact"},
                {"pool": "yes"}, {"device": "tpu"}, {"layer": ""}, {"sigma": True}):  # fmt: skip
        with pytest.raises(SettingsError):
            EvalSettings(**bad)
    assert (
        not EvalSettings(pool=np.bool_(False)).pool and setting("pool").check(np.bool_(1)) is True
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser)
    return parser


def test_cli_flags_and_their_help_come_from_the_table():
    parser = _parser()
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings[1:] == []}
    for s in SETTINGS:
        action = actions[s.cli_flag]
        default = dict((v, w) for w, v in s.cli_words).get(s.default, s.default)
        assert action.help is not None and f"else {default}" in action.help, s.cli_flag
        assert s.bounds_text().replace("%", "%%") in action.help
    argv = ["--sigma", "0.5*sqrt_dim", "--draws", "3", "--token-pooling", "last",
            "--alpha", "0.02", "--estimator", "unbiased"]  # fmt: skip
    given_ = settings_overrides(parser.parse_args(argv))
    assert EvalSettings().with_overrides(**given_) == EvalSettings(  # B alone: the fixed design
        sigma="0.5*sqrt_dim", draws=3, pool=False, alpha=0.02, estimator="unbiased", precision=0
    )
    assert set(settings_overrides(parser.parse_args([])).values()) == {None}
    both = settings_overrides(parser.parse_args(["--draws", "4", "--precision", "0.05"]))
    assert EvalSettings().with_overrides(**both).precision == 0.05
    alone = settings_overrides(parser.parse_args(["--precision", "0"]))
    assert EvalSettings().with_overrides(**alone) == EvalSettings(precision=0)


def test_the_decisive_design_is_the_default_and_a_stated_b_keeps_its_meaning():
    """W = 0.1 by default; a workspace, report, plan or link written while the fixed design was
    the default states its B and no W, and keeps meaning the fixed design of B draws."""
    assert EvalSettings().precision == DEFAULT_PRECISION == 0.1
    assert EvalSettings.from_mapping({}).precision == 0.1
    assert EvalSettings.from_mapping({"draws": 5}).precision == 0.0
    assert EvalSettings.from_mapping({"draws": 5, "precision": 0.1}).precision == 0.1
    assert with_stated_design({"draws": None, "precision": None}) == {
        "draws": None,
        "precision": None,
    }
    old, problems = defaults_from_table({"subset_size": 400, "draws": 5, "max_draws": 5})
    assert problems == [] and (old.precision, old.draws, old.max_draws) == (0.0, 5, 5)
    new, problems = defaults_from_table({"subset_size": 400})
    assert problems == [] and new.precision == 0.1
    # the old key of a fixed-design run is unchanged (shipped and local stores stay valid)
    assert "precision" not in old.result_key() and new.result_key()["precision"] == 0.1


# ------------------------------------------------------------------ the one σ syntax

#: Accepted and refused σ texts, the edge cases first (then Hypothesis' own).
SIGMA_CASES = [
    "sqrt_dim", "median", " median ", "2*sqrt_dim", "0.5 * sqrt_dim", "1*sqrt_dim", "0*sqrt_dim",
    "-1*sqrt_dim", "sqrt_dim*2", "1e-3", ".5", "5.", "0", "-1", "nan", "inf", "1e400", "1e-200",
    "1_0", "١", "²", "", "Median", "2*median", "wide", "sqrt_dim ", "0x10", "+1",
]  # fmt: skip
SIGMA_TEXT = (
    st.sampled_from(SIGMA_CASES)
    | st.floats(1e-9, 1e9).map(lambda f: f"{f!r}*sqrt_dim")
    | st.text(alphabet="0123456789.*e-+ sqrtdim_", max_size=20)
    | st.text(max_size=12)
    | st.just("1" * (MAX_SIGMA_CHARS + 1))
)


def _accepts(check, value) -> object:
    try:
        return ("ok", check(value))
    except SDEError:
        return ("refused", None)


@HYPOTHESIS
@given(text=SIGMA_TEXT)
def test_every_entry_point_accepts_and_refuses_the_same_sigmas(text):
    expected = _accepts(lambda t: parse_sigma(t).setting(), text)
    parser = _parser()
    entry_points = {
        "EvalSettings": lambda t: EvalSettings(sigma=t).sigma,
        "CLI": lambda t: settings_overrides(parser.parse_args(["--sigma=" + t]))["sigma"],
        "plans": lambda t: _check_sigma("params.sigma", t, '"sqrt_dim"'),
        "dashboard": lambda t: parse_sigma_values(t)[0],
    }
    for name, check in entry_points.items():
        if name == "dashboard" and ("," in text or not text.strip()):
            continue  # a list's separator / an empty list
        assert _accepts(check, text) == expected, name
    view, problems = decode("explore", {"sigma": text})
    assert (("ok", view.settings["sigma"]) if not problems else ("refused", None)) == expected
    acts = np.arange(12.0).reshape(4, 3)
    resolved = _accepts(lambda t: resolve_sigma(t, acts), text)
    assert resolved[0] == expected[0]


@HYPOTHESIS
@given(factor=st.floats(1e-6, 1e6), dim=st.integers(1, 5000))
def test_a_multiple_of_sqrt_d_is_the_number_plans_always_computed(factor, dim):
    text = Sigma.times_sqrt_d(factor).text()
    assert parse_sigma(text) == Sigma.times_sqrt_d(factor)  # the canonical text round-trips
    acts = np.zeros((2, dim))
    written = float(text.split("*")[0]) if "*" in text else 1.0  # f = 1 is written "sqrt_dim"
    assert resolve_sigma(text, acts) == written * math.sqrt(dim)


def _old_plan_sigma(entry: object) -> object:
    """The plan schema's σ canonicalisation before the settings table (the job keys' text)."""
    if isinstance(entry, str) and entry not in ("sqrt_dim", "median"):
        factor, _, _ = entry.partition("*")
        return f"{float(factor):g}*sqrt_dim"
    return entry


def test_catalog_plans_load_and_keep_their_sigma_text_and_job_keys():
    entries: list[object] = []
    for path in list_plans():
        text = path.read_text(encoding="utf-8")
        for table in re.findall(r"^sigmas? = (.*)$", text, flags=re.M):
            value = tomllib.loads(f"x = {table}")["x"]
            entries.extend(value if isinstance(value, list) else [value])
        plan = load_plan(path)
        for variant in plan.variants:
            assert build_jobs(plan.variant(variant))
    assert len(entries) > 10 and "2*sqrt_dim" in entries
    for entry in entries:
        assert parse_sigma(entry).setting() == _old_plan_sigma(entry), entry


def test_sigma_messages_name_the_syntax_and_the_value():
    with pytest.raises(InputError, match=r"'<factor>\*sqrt_dim'.*got 'wide'"):
        parse_sigma("wide")
    with pytest.raises(PlanError, match=r"params.sigma: σ must be .* \(e.g. x\)"):
        _check_sigma("params.sigma", "wide", "x")
    with pytest.raises(SettingsError, match="--sigma must be"):
        settings_overrides(_parser().parse_args(["--sigma", "wide"]))
    assert setting("sigma").check(" 0.50*sqrt_dim") == "0.5*sqrt_dim"
    with pytest.raises(SettingsError, match="unknown setting 'colour'"):
        setting("colour")


def test_every_number_setting_has_a_maximum():
    """Issue 31 item 9: ``?n=1000000000`` was applied (n had no maximum while T and K had):
    every int and float setting is bounded above, and a link or a flag beyond it is refused."""
    unbounded = [s.name for s in SETTINGS if s.kind in ("int", "float") and s.maximum is None]
    assert unbounded == []
    view, problems = decode("explore", {"n": "1000000000", "seed": "99999999999"})
    assert view.settings == {}
    assert problems == [
        "The link's n=`1000000000` is more than 32768: kept the current value.",
        "The link's seed=`99999999999` is more than 4294967295: kept the current value.",
    ]
    with pytest.raises(SettingsError, match="subset_size"):
        EvalSettings(subset_size=1_000_000_000)
