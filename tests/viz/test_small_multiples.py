"""Small multiples (:mod:`sde_core.viz.figures.small_multiples`): one panel per model on shared
axes, as histograms or ECDFs; the ECDF against scipy's."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.results import synthetic_result
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from sde_core.errors import SettingsError
from sde_core.viz.figures.small_multiples import MAX_SMALL_MULTIPLES, ecdf, small_multiples
from sde_core.viz.verdicts.labels import verdict_label


@pytest.fixture(scope="module")
def result():
    return synthetic_result()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-5, 5).map(float), min_size=1, max_size=40))
def test_ecdf_is_scipys_at_every_step(values):
    x, f = ecdf(np.array(values))
    reference = stats.ecdf(values).cdf
    assert np.array_equal(x, reference.quantiles)
    assert np.allclose(f, reference.probabilities, rtol=0, atol=1e-12)


@pytest.mark.parametrize("view", ["histogram", "ecdf"])
def test_one_panel_per_model_three_series_each_and_one_legend(result, view):
    names = list(result.models["name"])
    fig = small_multiples(result, names, view=view)
    assert len(fig.data) == 3 * len(names)
    assert sum(t.showlegend for t in fig.data) == 3  # the legend names each series once
    titles = [a.text for a in fig.layout.annotations]
    for name, row in zip(names, result.models.to_dict("records"), strict=True):
        assert f"{name} ({row['role']}): {verdict_label(row)}" in titles
    kind = "histogram" if view == "histogram" else "scatter"
    assert {t.type for t in fig.data} == {kind}


def test_shared_axes_use_common_bins_and_own_axes_their_panels_range(result):
    names = list(result.models["name"])[:2]
    shared = small_multiples(result, names)
    starts = {t.xbins.start for t in shared.data}
    assert len(starts) == 1  # one set of bins over every panel
    own = small_multiples(result, names, shared=False)
    assert len({t.xbins.start for t in own.data}) == 2
    for trace, name in zip(own.data[::3], names, strict=True):
        arrays = result.model_arrays(name)
        low = min(float(np.min(arrays[k])) for k in ("it_h", "oot_h", "targets_h"))
        assert trace.xbins.start == pytest.approx(low)


def test_the_histograms_plot_every_value_of_each_array(result):
    name = str(result.models["name"].iloc[0])
    fig = small_multiples(result, [name])
    arrays = result.model_arrays(name)
    for trace, key in zip(fig.data, ("it_h", "oot_h", "targets_h"), strict=True):
        assert np.array_equal(np.asarray(trace.x), np.asarray(arrays[key]).ravel())


def test_bad_choices_are_refused_by_name(result):
    name = str(result.models["name"].iloc[0])
    with pytest.raises(SettingsError, match="choose 1 to"):
        small_multiples(result, [])
    with pytest.raises(SettingsError, match="choose 1 to"):
        small_multiples(result, [name] * (MAX_SMALL_MULTIPLES + 1))
    with pytest.raises(SettingsError, match="view must be"):
        small_multiples(result, [name], view="violin")
    with pytest.raises(SettingsError, match="no model 'nope'"):
        small_multiples(result, ["nope"])
