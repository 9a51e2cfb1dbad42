"""Property-based tests of the numeric API: any input gives a finite, well-formed result or a
clean :class:`~sde_core.errors.SDEError` — never another exception, never a silent NaN.

Inputs mix valid activations with the cases a fuzzer found: magnitudes near float64's limits,
bandwidths of 1e-160, complex, datetime64 and timedelta64 arrays, text, ``None``, negative and
huge integers, booleans. Seeded (``derandomize=True``) and sized to run in seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sde_core.common.validation import (
    SIGMA_MAX,
    SIGMA_MIN,
    as_index_vector,
    check_int,
    check_number,
)
from sde_core.errors import SDEError
from sde_core.stats.baselines import mmd2, nearest_reference, wasserstein2
from sde_core.stats.calibrated import calibrated_verdict
from sde_core.stats.headline import dependence_score
from sde_core.stats.hsic import hsic, resolve_sigma, split_half_hsic, split_half_hsic_batch
from sde_core.stats.jsd import decide, jsd
from sde_core.stats.proportions import wilson_interval
from sde_core.stats.utest import reference_check

FAST = settings(
    derandomize=True,
    deadline=None,
    max_examples=120,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
anything_float = st.floats(width=64)  # NaN, ±inf, subnormals, ±1.8e308 included
extreme = st.sampled_from([0.0, 1e-320, 1e-160, 1e-12, 1.0, 1e12, 1e152, 1e154, 1e300, 1.7e308])


def _matrix(elements: st.SearchStrategy[float], rows: tuple[int, int] = (1, 24)):
    return hnp.arrays(
        np.float64,
        st.tuples(st.integers(*rows), st.integers(1, 5)),
        elements=elements,
    )


def _odd_arrays() -> st.SearchStrategy[Any]:
    """Arrays and values that are not real activations."""
    shape = st.tuples(st.integers(4, 12), st.integers(1, 3))
    return st.one_of(
        hnp.arrays(np.complex128, shape, elements=st.complex_numbers(max_magnitude=10)),
        shape.map(lambda s: np.arange(s[0] * s[1]).reshape(s).astype("M8[s]")),
        shape.map(lambda s: np.arange(s[0] * s[1]).reshape(s).astype("m8[ms]")),
        shape.map(lambda s: np.full(s, "1.5")),
        shape.map(lambda s: np.full(s, None, dtype=object)),
        hnp.arrays(np.bool_, shape),
        hnp.arrays(np.int64, shape, elements=st.integers(-(2**62), 2**62)),
        st.none(),
        st.text(max_size=5),
        st.lists(st.floats(width=64), max_size=8),
        st.integers(),
    )


acts_strategy = st.one_of(
    _matrix(st.floats(-1e6, 1e6), (4, 24)),
    _matrix(extreme.flatmap(lambda s: st.floats(-1, 1).map(lambda v: v * s)), (4, 24)),
    _matrix(anything_float, (1, 12)),
    _odd_arrays(),
)
sigma_strategy = st.one_of(
    st.sampled_from(["sqrt_dim", "median", "silverman", ""]),
    anything_float,
    extreme,
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.complex_numbers(max_magnitude=2),
)
int_like = st.one_of(
    st.integers(-5, 40),
    st.integers(),
    st.floats(width=64),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.sampled_from([np.int64(7), np.uint8(3), np.float32(2.0), np.bool_(True), 2**70]),
)


def _clean(call: Callable[[], Any]) -> Any | None:
    """The result, or ``None`` when the call raised an SDEError (anything else fails)."""
    try:
        return call()
    except SDEError as exc:
        assert str(exc) and "\x1b" not in str(exc)
        return None


@FAST
@given(acts=acts_strategy, sigma=sigma_strategy, n_splits=int_like, seed=int_like)
def test_split_half_hsic_is_finite_or_refused(acts, sigma, n_splits, seed):
    h = _clean(lambda: split_half_hsic(acts, n_splits=n_splits, sigma=sigma, seed=seed))
    if h is not None:
        assert h.dtype == np.float64 and h.shape == (int(n_splits),)
        assert np.all(np.isfinite(h)) and np.all(h >= -1e-12)  # biased HSIC is non-negative
        again = split_half_hsic(acts, n_splits=n_splits, sigma=sigma, seed=seed)
        np.testing.assert_array_equal(h, again)


@FAST
@given(
    x=acts_strategy,
    y=acts_strategy,
    sigma=sigma_strategy,
    estimator=st.sampled_from(["biased", "unbiased", "other"]),
)
def test_hsic_is_finite_or_refused(x, y, sigma, estimator):
    value = _clean(lambda: hsic(x, y, sigma, estimator=estimator))
    if value is not None:
        assert isinstance(value, float) and np.isfinite(value)


@FAST
@given(acts=acts_strategy, rule=sigma_strategy, seed=int_like)
def test_resolve_sigma_stays_in_the_safe_range(acts, rule, seed):
    value = _clean(lambda: resolve_sigma(rule, acts, seed=seed))
    if value is not None:
        assert SIGMA_MIN <= value <= SIGMA_MAX


@FAST
@given(
    acts=_matrix(st.floats(-100, 100), (8, 30)),
    subsets=st.one_of(
        hnp.arrays(
            np.int64, st.tuples(st.integers(1, 3), st.integers(4, 8)), elements=st.integers(-2, 40)
        ),
        _odd_arrays(),
    ),
    sigma=sigma_strategy,
)
def test_split_half_hsic_batch_is_finite_or_refused(acts, subsets, sigma):
    h = _clean(lambda: split_half_hsic_batch(acts, subsets, n_splits=5, sigma=sigma))
    if h is not None:
        assert h.shape == (np.asarray(subsets).shape[0], 5) and np.all(np.isfinite(h))


samples = st.one_of(
    hnp.arrays(np.float64, st.integers(0, 30), elements=anything_float),
    hnp.arrays(np.float64, st.integers(1, 30), elements=extreme),
    _odd_arrays(),
)


@FAST
@given(a=samples, b=samples, bins=int_like)
def test_jsd_is_a_bounded_symmetric_divergence_or_refused(a, b, bins):
    value = _clean(lambda: jsd(a, b, bins))
    if value is not None:
        assert 0.0 <= value <= 1.0
        assert jsd(b, a, bins) == value


@FAST
@given(t=samples, it=samples, oot=samples, bins=int_like)
def test_decide_reports_consistent_divergences_or_refuses(t, it, oot, bins):
    decision = _clean(lambda: decide(t, it, oot, bins=bins))
    if decision is not None:
        assert 0.0 <= decision.d_it <= 1.0 and 0.0 <= decision.d_oot <= 1.0
        assert decision.in_training == (decision.d_it <= decision.d_oot)


@FAST
@given(it=samples, oot=samples, alpha=st.one_of(anything_float, st.none(), st.text(max_size=2)))
def test_reference_check_p_value_is_a_probability_or_refused(it, oot, alpha):
    check = _clean(lambda: reference_check(it, oot, alpha=alpha))
    if check is not None:
        assert 0.0 <= check.p_value <= 1.0 and check.valid == (check.p_value < check.alpha)
        assert 0.0 <= check.effect <= 1.0


@FAST
@given(
    score=st.one_of(anything_float, st.text(max_size=2), st.none(), st.complex_numbers()),
    it=samples,
    oot=samples,
    alpha=st.one_of(anything_float, st.integers()),
)
def test_calibrated_verdict_p_values_are_rank_p_values_or_refused(score, it, oot, alpha):
    verdict = _clean(lambda: calibrated_verdict(score, it, oot, alpha=alpha))
    if verdict is not None:
        r_it, r_oot = np.asarray(it).size, np.asarray(oot).size
        assert 1 / (r_oot + 1) <= verdict.p_in <= 1.0 and 1 / (r_it + 1) <= verdict.p_out <= 1.0
        if verdict.verdict == "in-training":
            assert verdict.p_in < alpha
        elif verdict.verdict == "out-of-training":
            assert verdict.p_out < alpha <= verdict.p_in


@FAST
@given(t=samples, it=samples, oot=samples)
def test_dependence_score_is_finite_nan_only_on_a_zero_scale_or_refused(t, it, oot):
    value = _clean(lambda: dependence_score(t, it, oot))
    if value is not None:
        scale = np.median(np.asarray(it, float)) - np.median(np.asarray(oot, float))
        assert np.isnan(value) == (scale == 0.0)


@FAST
@given(x=acts_strategy, y=acts_strategy, sigma=sigma_strategy)
def test_baselines_are_finite_or_refused(x, y, sigma):
    value = _clean(lambda: mmd2(x, y, sigma))
    if value is not None:
        assert np.isfinite(value)
    w = _clean(lambda: wasserstein2(x, y))
    if w is not None:
        assert np.isfinite(w) and w >= 0.0
    decision = _clean(lambda: nearest_reference(x, y, x, distance="mmd", sigma=sigma))
    if decision is not None:
        assert decision.in_training == (decision.d_it <= decision.d_oot)


@FAST
@given(k=int_like, n=int_like, confidence=st.one_of(anything_float, st.none()))
def test_intervals_are_probabilities_or_refused(k, n, confidence):
    interval = _clean(lambda: wilson_interval(k, n, confidence))
    if interval is not None:
        assert 0.0 <= interval[0] <= interval[1] <= 1.0


index_arrays = st.one_of(
    hnp.arrays(np.int64, st.integers(0, 6), elements=st.integers(-3, 12)), _odd_arrays()
)


@FAST
@given(value=int_like, low=st.integers(-5, 5), n=int_like, idx=index_arrays)
def test_shared_checks_accept_exactly_what_they_document(value, low, n, idx):
    got = _clean(lambda: check_int(value, "v", minimum=low))
    if got is not None:
        assert type(got) is int and got >= low and not isinstance(value, (bool, np.bool_, float))
    number = _clean(lambda: check_number(value, "v", ge=low))
    if number is not None:
        assert np.isfinite(number) and number >= low
    rows = _clean(lambda: as_index_vector(idx, n, "idx"))
    if rows is not None:
        assert rows.dtype == np.int64 and rows.size and rows.min() >= 0 and rows.max() < n
