"""The one number format (scientific notation outside [10⁻³, 10⁵), never an SI prefix; distinct
column values; whole counts; unbounded intervals in words) and the one glossary (every metric
defined once, with its method section)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from sde_core.errors import SettingsError
from sde_core.viz.formatting import (
    column_formatter,
    format_interval,
    format_number,
    format_percent,
    style_table,
)
from sde_core.viz.glossary import (
    GLOSSARY,
    METHOD_SECTIONS,
    glossary_table,
    help_text,
    method_anchor,
    method_reference,
    term,
)

METHOD_DOC = Path(__file__).resolve().parents[2] / "docs" / "method.md"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (3.52e-5, "3.52e-5"),
        (3.5249e-5, "3.52e-5"),
        (3.614935e-5, "3.61e-5"),  # an HSIC value: never "36.1 µ"
        (1.7e-6, "1.70e-6"),
        (-2.5e-7, "-2.50e-7"),
        (1.5e-14, "1.50e-14"),  # a p-value: never "15.0 f"
        (0.000999996, "0.00100"),  # rounding carries into the plain range
        (0.0123, "0.0123"),
        (0.951, "0.951"),
        (12.345, "12.3"),
        (1057.6, "1060"),  # 3 significant digits
        (123456.0, "1.23e5"),
        (0, "0"),
        (np.float32(0.5), "0.500"),
        (1e-30, "1.00e-30"),
        (float("nan"), "n/a"),
        (None, "n/a"),
        (float("inf"), "∞"),
        ("text", "n/a"),
    ],
)
def test_format_number(value, shown):
    assert format_number(value) == shown


def test_format_number_round_trips_to_its_digits_and_never_uses_a_prefix():
    rng = np.random.default_rng(0)
    for x in 10.0 ** rng.uniform(-18, 8, 300) * rng.choice([-1, 1], 300):
        text = format_number(x)
        assert " " not in text and not any(c in text for c in "µnpfakMG"), text
        assert float(text) == pytest.approx(x, rel=5e-3), text


def test_counts_are_whole():
    from sde_core.viz.formatting import format_count

    assert format_count(5.0) == "5" and format_count(np.int64(20)) == "20"
    assert format_count(float("nan")) == "n/a" and format_count(None) == "n/a"
    assert format_count(2.5) == "2.50"


def test_percent_interval_and_bools():
    assert format_percent(0.034) == "3%" and format_percent(float("nan")) == "n/a"
    assert format_interval(0.012, 0.083) == "1–8%"
    assert format_interval(None, 0.5) == "n/a"
    assert format_interval(3.1e-5, 3.6e-5, percent=False) == "3.10e-5–3.60e-5"
    assert format_number(True) == "yes" and format_number(np.bool_(False)) == "no"


def test_column_formatter_keeps_distinct_values_distinct():
    values = [3.5123e-5, 3.5124e-5, 3.6e-5, float("nan")]
    fmt = column_formatter(values)
    shown = [fmt(v) for v in values]
    assert shown == ["3.5123e-5", "3.5124e-5", "3.6000e-5", "n/a"]
    equal = column_formatter([0.25, 0.25, 0.5])
    assert [equal(v) for v in (0.25, 0.5)] == ["0.250", "0.500"]  # equal values may repeat


def _digits_by_brute_force(values: list[float]) -> int:
    """The rule as the docstring states it: the fewest digits (3..8) at which the set of texts
    is as large as the set of distinct finite values, every value formatted at every level."""
    finite = {v for v in values if np.isfinite(v)}
    for digits in range(3, 9):
        if len({format_number(v, digits=digits) for v in finite}) == len(finite):
            return digits
    return 8


@settings(max_examples=300, deadline=None)
@given(
    hs.lists(
        hs.one_of(
            hs.floats(allow_nan=True, allow_infinity=True),
            # clusters of close values: the case that needs more digits
            hs.builds(
                lambda base, k: base * (1 + k * 1e-7), hs.floats(1e-9, 1e9), hs.integers(0, 50)
            ),
            hs.sampled_from([0.0, -0.0, 0.9995, 0.99951, 9.9995e-4, 1e-3, 1e4, 9999.5]),
        ),
        max_size=40,
    )
)
def test_column_formatter_picks_the_digits_the_brute_force_rule_picks(values):
    fmt = column_formatter(values)
    digits = _digits_by_brute_force(values)
    assert [fmt(v) for v in values] == [format_number(v, digits=digits) for v in values]


def test_style_table_formats_float_columns_only():
    df = pd.DataFrame(
        {"h": [3.51e-5, 3.52e-5], "p": [1e-6, 0.5], "draws": [5.0, 5.0], "s": ["a", "b"]}
    )
    styled = style_table(df)
    html = styled.to_html()
    assert "3.51e-5" in html and "3.52e-5" in html and "1.00e-6" in html
    assert ">5<" in html and "5.00" not in html  # a whole count stays whole
    assert styled.data is df  # the numbers are untouched


def test_glossary_entries_are_complete_and_link_to_real_sections():
    anchors = set()
    text = METHOD_DOC.read_text(encoding="utf-8")
    for heading in re.findall(r"^## (.+)$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug)
    numbered = {int(h.split(".")[0]) for h in re.findall(r"^## (\d+)\.", text, re.MULTILINE)}
    assert numbered <= set(METHOD_SECTIONS), "every numbered section is in METHOD_SECTIONS"
    for number, (_, anchor) in METHOD_SECTIONS.items():
        assert anchor in anchors, (number, anchor)
    for key, entry in GLOSSARY.items():
        assert entry.label and entry.definition.endswith((".", ")")), key
        assert entry.section in METHOD_SECTIONS, key
        anchor = method_anchor(entry.section)
        if entry.section != 12:  # §12 is written by the replication work
            assert anchor in anchors, (key, anchor)
    assert method_reference("otr") == "method §5"
    assert help_text("reference_p").endswith("[method §3](method#3-reference-validity)")
    assert "(method §9)" in help_text("spread", link=None)
    with pytest.raises(SettingsError, match="no glossary entry"):
        term("nope")


def test_glossary_table():
    table = glossary_table(["otr", "spread", "unknown"])
    assert list(table["term"]) == ["OTR", "spread"]
    assert list(table["defined in"]) == ["method §5", "method §9"]


def test_estimates_keep_the_unit_scale_of_rates():
    """OTR/F1/dependence estimates use two decimals: a bound next to zero never reads as a
    micro-value, a tiny negative is not '-0.00', an unbounded side is the word 'unbounded' and a
    withheld value is a word, not a number."""
    from sde_core.viz.formatting import format_estimate

    assert format_estimate(0.1, 0.00028, 0.58) == "0.10 [0.00, 0.58]"
    assert format_estimate(-0.0004, -0.5, float("inf")) == "0.00 [−0.50, unbounded]"
    assert format_estimate(0.3, float("-inf"), float("inf")) == "0.30 [unbounded]"
    assert format_estimate(0.62, 0.48, 0.77, percent=True) == "62% [48%, 77%]"
    assert format_estimate(float("nan"), reason="panels do not separate") == "withheld"
    assert format_estimate(None) == "n/a"


def test_problem_fields_read_as_their_labels():
    """The Workspace page names a problem's field as a person does, not by its key."""
    from sde_core.viz.ui_support import field_label

    assert field_label("dataset.root") == "Dataset folder or file"
    assert field_label("models[2].arch") == "Model 3: architecture"
    assert field_label("models[0]") == "Model 1"
    assert field_label("defaults.subset_size") == "Evaluation default: Subset size n"
    assert field_label("defaults.nope") == "Evaluation default: nope"
    assert field_label("forget_indices") == "Forget set"
