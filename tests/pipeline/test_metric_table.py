"""The one metric vocabulary (``pipeline/evaluation/metric_table.py``): every metric is
complete (label, glossary term, a method section that exists), matches ``ModelSummary``, and
its flat store columns round-trip to the same :class:`Estimate`."""

from __future__ import annotations

import math
import re
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sde_core.pipeline.evaluation.metric_table import (
    BAR_METRICS,
    INTERVAL_METHODS,
    METRICS,
    Estimate,
    Metric,
)
from sde_core.pipeline.evaluation.statistics import summarize
from sde_core.pipeline.evaluation.summary import ModelSummary, model_json
from sde_core.pipeline.settings import EvalSettings
from sde_core.stats.replication import replicate_proportion
from sde_core.viz.glossary import GLOSSARY, METHOD_SECTIONS

METHOD_DOC = (Path(__file__).resolve().parents[2] / "docs" / "method.md").read_text()
_NAN = float("nan")


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _equal(a: Estimate, b: Estimate) -> bool:
    parts = zip((a.value, a.lo, a.hi, a.raw), (b.value, b.lo, b.hi, b.raw), strict=True)
    return all(_same(x, y) for x, y in parts) and a.withheld_reason == b.withheld_reason


@pytest.mark.parametrize("key", list(METRICS))
def test_every_metric_is_complete(key):
    m = METRICS[key]
    assert m.key == key and m.label.strip() and m.axis.strip() and m.short_label.strip()
    assert m.glossary_key in GLOSSARY, f"{key}: no glossary term {m.glossary_key!r}"
    title, _ = METHOD_SECTIONS[m.section]
    heading = f"## {m.section}. {title}" if isinstance(m.section, int) else f"## {title}"
    assert re.search(rf"^{re.escape(heading)}$", METHOD_DOC, re.M), f"{key}: no {heading!r}"
    assert m.interval in INTERVAL_METHODS
    assert (m.lo is None) == (m.hi is None) == (m.interval == "none")
    assert not m.raw or m.gate is not None, f"{key}: a *_raw column only means something gated"
    assert m.unit in ("%", "") and m.scale in (1, 100)


def test_the_table_is_model_summary_schema():
    """Every metric is an Estimate field of ModelSummary and the other way round; the flat
    columns are the store's, each once."""
    estimate_fields = {f.name for f in fields(ModelSummary) if f.type == "Estimate"}
    assert estimate_fields == set(METRICS)
    columns = ModelSummary.columns()
    assert len(columns) == len(set(columns))
    for m in METRICS.values():
        assert set(m.columns) <= set(columns), m.key
    assert BAR_METRICS and all(METRICS[k].bar for k in BAR_METRICS)


_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64), st.just(_NAN), st.just(math.inf)
)


@given(
    key=st.sampled_from(list(METRICS)),
    value=_values,
    lo=_values,
    hi=_values,
    raw=_values,
    reason=st.sampled_from(["", "the reference panels do not separate"]),
)
def test_flat_columns_round_trip(key, value, lo, hi, raw, reason):
    """Estimate -> columns -> Estimate gives the estimate back (the parts the metric stores;
    its withheld reason is the row's ``inconclusive_reason``)."""
    m: Metric = METRICS[key]
    stored = Estimate(
        _NAN if reason else value,
        lo if m.lo else _NAN,
        hi if m.hi else _NAN,
        raw if m.raw else _NAN,
        reason if m.gate is not None else "",
    )
    row = m.to_columns(stored)
    assert list(row) == list(m.columns)
    back = m.from_columns(row, reason=reason)
    assert _equal(back, stored), (stored, back)


def test_gate_keeps_the_raw_value_and_says_why():
    combined = replicate_proportion([0.6, 0.7, 0.8], [10, 10, 10])
    passed = Estimate.over_draws(combined)
    assert (passed.value, passed.lo, passed.hi, passed.raw) == (
        combined.value, combined.lo, combined.hi, combined.value,
    )  # fmt: skip
    assert not passed.withheld
    held = Estimate.over_draws(combined, "panels do not separate")
    assert math.isnan(held.value) and math.isnan(held.lo) and math.isnan(held.hi)
    assert held.raw == combined.value and held.withheld
    assert math.isnan(Estimate.over_draws(None).value)


def test_a_summary_before_any_draw_is_a_complete_row():
    """With no finished draw every metric is NaN, the gated ones withheld with a reason, and
    the row and JSON document carry every column and interval of the table."""
    identity = {"name": "m", "role": "unlearned", "method": "ga", "layer": "output",
                "dim": 3, "sigma": 1.0, "f1_negatives": "test"}  # fmt: skip
    summary, draws = summarize(identity, [], EvalSettings(), {"acc_r": 90.0})
    row = summary.to_row()
    assert list(row) == ModelSummary.columns() and draws == []
    assert row["acc_r"] == 90.0 and "panels are not computed yet" in row["inconclusive_reason"]
    for m in METRICS.values():
        e = m.from_columns(row, row["inconclusive_reason"])
        assert (m.key == "acc_r") or math.isnan(e.value), m.key
        assert e.withheld == (m.gate is not None), m.key
    doc = model_json(row)
    for m in METRICS.values():
        if m.confidence_interval:
            assert doc[f"{m.json_key}_ci"] == [None, None], m.key
        if m.draws_in_json:
            assert doc[f"{m.json_key}_draws"] is None, m.key  # withheld or none finished
