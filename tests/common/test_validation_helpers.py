"""The shared checks of :mod:`sde_core.common.validation` accept exactly the documented values,
return them unchanged (as Python/NumPy types named in their docstrings) and name the parameter
in every refusal. Seeded Hypothesis tests (``derandomize=True``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sde_core.common.validation import as_index_vector, check_int, check_number
from sde_core.errors import InputError, SettingsError

FAST = settings(derandomize=True, max_examples=150, deadline=None)

values = st.one_of(
    st.integers(-10, 10),
    st.integers(-10, 10).map(np.int64),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.text(max_size=3),
    st.none(),
)


@FAST
@given(value=values, low=st.integers(-5, 5), span=st.integers(0, 6))
def test_check_int_accepts_exactly_bounded_integers(value, low, span):
    high = low + span
    wanted = (
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and low <= value <= high
    )
    if wanted:
        got = check_int(value, "epochs", minimum=low, maximum=high)
        assert type(got) is int and got == value
    else:
        with pytest.raises(SettingsError, match=r"^epochs must be an integer between"):
            check_int(value, "epochs", minimum=low, maximum=high, error=SettingsError)


@FAST
@given(value=values, low=st.integers(-5, 5))
def test_check_number_accepts_exactly_finite_reals_above_the_bound(value, low):
    real = isinstance(value, (int, float, np.integer)) and not isinstance(value, bool)
    wanted = real and math.isfinite(float(value)) and float(value) > low
    if wanted:
        got = check_number(value, "lr", gt=low)
        assert type(got) is float and got == float(value)
    else:
        with pytest.raises(InputError, match=rf"^lr must be a finite real number > {low}"):
            check_number(value, "lr", gt=low)


@FAST
@given(idx=st.lists(st.integers(-3, 12), max_size=8), n=st.integers(0, 10), unique=st.booleans())
def test_as_index_vector_keeps_valid_indices_in_order_and_names_the_problem(idx, n, unique):
    valid = bool(idx) and all(0 <= i < n for i in idx) and (not unique or len(set(idx)) == len(idx))
    if valid:
        got = as_index_vector(idx, n, "forget_idx", unique=unique)
        assert got.dtype == np.int64 and got.tolist() == idx
        return
    with pytest.raises(InputError) as info:
        as_index_vector(idx, n, "forget_idx", unique=unique)
    message = str(info.value)
    assert message.startswith("forget_idx ")
    if not idx:
        assert "empty" in message
    elif any(not 0 <= i < n for i in idx):
        assert f"outside [0, {n})" in message
    else:
        assert "duplicate row indices" in message and "each row may appear once" in message


def test_as_index_vector_refuses_floats_booleans_and_text_with_the_fix():
    with pytest.raises(InputError, match=r"must hold integers .*np\.flatnonzero"):
        as_index_vector(np.array([0.0, 1.0]), 3, "idx")
    with pytest.raises(InputError, match="must hold integers"):
        as_index_vector(np.array([True, False]), 3, "idx")
    with pytest.raises(InputError, match="text values: parse them"):
        as_index_vector(np.array(["1"]), 3, "idx")
