"""How numbers look, everywhere: tables, chart hover text, the dashboard and the report.

One rule (:func:`format_number`) turns a value into text:

- ``|x|`` in [10⁻³, 10⁵): plain decimals with ``digits`` significant digits (``0.00312``,
  ``0.951``, ``12.3``, ``1058``);
- smaller or larger values: scientific notation (``3.61e-5``, ``1.70e-6``, ``1.20e6``) — never an
  SI prefix (``36.1 µ`` reads as a unit; p-values and HSIC values are plain numbers);
- NaN and ``None`` as ``"n/a"``, infinities as ``"∞"`` / ``"−∞"``.

:func:`column_formatter` applies the rule to a whole table column with as many significant digits
(3 to 8) as it takes for values that differ to *display* differently, so a column never shows a
run of identical rounded numbers that are not equal. :func:`style_table` formats every float
column of a table that way (a :class:`pandas.io.formats.style.Styler`: the values stay numbers,
so sorting and exports keep full precision); whole numbers (``draws 5``) stay whole.
:data:`AXIS_NUMBERS` is the same rule for plotly axes (ticks as 2×10⁻⁵, hover as 2.13e-5).
:func:`format_estimate` writes an unbounded side of an interval as the word ``unbounded``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pandas.io.formats.style import Styler

__all__ = [
    "AXIS_NUMBERS",
    "UNBOUNDED",
    "column_formatter",
    "format_count",
    "format_estimate",
    "format_interval",
    "format_number",
    "format_percent",
    "records",
    "style_table",
]

#: Plotly axis settings of the one number rule: ticks in powers of ten (``2×10⁻⁵``, never
#: ``20µ``) and hover text with 3 significant digits (``2.13e-5``).
AXIS_NUMBERS: dict[str, Any] = {
    "exponentformat": "power",
    "showexponent": "all",
    "hoverformat": ".3~g",
}

_PLAIN_LOW, _PLAIN_HIGH = 1e-3, 1e5
_MAX_DIGITS = 8
#: An unbounded side of an interval, in words (method §12: Fieller intervals can be unbounded).
UNBOUNDED = "unbounded"


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a result table as dicts keyed by column name (result tables have string
    column names; pandas types the keys as ``Hashable``)."""
    return [{str(k): v for k, v in row.items()} for row in df.to_dict("records")]


def _as_float(value: Any) -> float | None:
    """``value`` as a float, or None when it is missing or not a number."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number


def _decimals(magnitude: float, digits: int) -> int:
    """Decimal places that show ``digits`` significant digits of a number of this magnitude."""
    return max(0, digits - 1 - math.floor(math.log10(magnitude)))


def _fixed(x: float, digits: int) -> str:
    text = f"{x:.{_decimals(abs(x), digits)}f}"
    return "0" if float(text) == 0 else text


def format_number(value: Any, *, digits: int = 3) -> str:
    """A number as text for people (see the module docstring for the rule).

    Args:
        value: a number (Python, NumPy) or None.
        digits: significant digits (1–17).

    Returns:
        The text; ``"n/a"`` for NaN/None/non-numbers, ``"∞"``/``"−∞"`` for infinities, ``"0"``
        for zero, ``"yes"``/``"no"`` for booleans.
    """
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    x = _as_float(value)
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    text = f"{x:.{digits - 1}e}"
    rounded = float(text)  # rounded first, so a carry (0.000999996) leaves the range
    if _PLAIN_LOW <= abs(rounded) < _PLAIN_HIGH:
        return _fixed(rounded, digits)
    if not math.isinf(rounded):  # (1.795e308 rounds past the largest float: keep its text)
        text = f"{rounded:.{digits - 1}e}"
    mantissa, _, power = text.partition("e")
    return f"{mantissa}e{int(power)}"


def format_count(value: Any) -> str:
    """A whole number as an integer (``draws 5``, never ``5.00``); ``"n/a"`` when missing, and
    :func:`format_number`'s text for a value that is not whole."""
    x = _as_float(value)
    if x is None or not math.isfinite(x) or x != round(x):
        return "n/a" if x is None or not math.isfinite(x) else format_number(x)
    return str(int(x))


def format_percent(value: Any, *, decimals: int = 0) -> str:
    """A rate in [0, 1] as a percentage (``0.034`` → ``"3%"``); ``"n/a"`` when missing."""
    x = _as_float(value)
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{100 * x:.{decimals}f}%"


def format_interval(lo: Any, hi: Any, *, percent: bool = True) -> str:
    """An interval as ``"1–8%"`` (rates) or ``"0.12–0.34"``; ``"n/a"`` when a bound is missing."""
    a, b = _as_float(lo), _as_float(hi)
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return "n/a"
    if percent:
        return f"{100 * a:.0f}–{100 * b:.0f}%"
    return f"{format_number(a)}–{format_number(b)}"


def _unit_scale(x: float, percent: bool) -> str:
    """An estimate or bound on the unit scale of OTR, F1 and the dependence score: two
    decimals (``0.62``, ``0.00``; never ``280 µ`` for a bound next to zero), or whole percent."""
    if math.isinf(x):
        return UNBOUNDED
    if percent:
        return f"{round(100 * x) + 0:.0f}%"
    return f"{round(x, 2) + 0.0:.2f}".replace("-", "−")


def format_estimate(
    value: Any, lo: Any = None, hi: Any = None, *, percent: bool = False, reason: Any = None
) -> str:
    """A point value with its 95% interval, as the tables show it (method §12).

    ``"0.62 [0.48, 0.77]"`` (``percent``: ``"62% [48%, 77%]"``); an unbounded side is the word
    ``unbounded`` (``"0.62 [0.48, unbounded]"``), an interval unbounded on both sides is
    ``"0.62 [unbounded]"``; without bounds only the value. A missing value is ``"withheld"`` when
    ``reason`` (the row's ``inconclusive_reason``) says why, ``"n/a"`` otherwise — never a
    number.
    """
    x = _as_float(value)
    if x is None or not math.isfinite(x):
        withheld = isinstance(reason, str) and reason.strip()
        return "withheld" if withheld else "n/a"
    point = _unit_scale(x, percent)
    a, b = _as_float(lo), _as_float(hi)
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return point
    if math.isinf(a) and math.isinf(b):
        return f"{point} [{UNBOUNDED}]"
    return f"{point} [{_unit_scale(a, percent)}, {_unit_scale(b, percent)}]"


def column_formatter(values: Iterable[Any], *, min_digits: int = 3) -> Callable[[Any], str]:
    """A formatter for one table column: enough digits to tell its values apart.

    The number of significant digits is the smallest in ``min_digits``..8 at which every pair of
    distinct values displays differently (8 when none suffices).

    Args:
        values: the column's values (non-numbers are ignored when choosing).
        min_digits: the fewest significant digits shown.

    Returns:
        ``f(value) -> str``, e.g. for ``Styler.format``.
    """
    finite = sorted(
        {x for x in (_as_float(v) for v in values) if x is not None and math.isfinite(x)}
    )
    digits = min_digits
    for digits in range(min_digits, _MAX_DIGITS + 1):
        if _tells_apart(finite, digits):
            break

    def fmt(value: Any) -> str:
        return format_number(value, digits=digits)

    return fmt


def _tells_apart(ordered: Sequence[float], digits: int) -> bool:
    """Whether ``format_number(·, digits)`` shows each of the sorted distinct ``ordered`` values
    differently. Its text is a one-to-one function of the value rounded to ``digits``
    significant digits, and that rounding never decreases, so equal texts are neighbours in
    sorted order: comparing neighbours is the whole check, and it stops at the first clash (a
    table column of 700 close scores used to be formatted in full once per digit tried)."""
    previous = None
    for x in ordered:
        text = format_number(x, digits=digits)
        if text == previous:
            return False
        previous = text
    return True


def style_table(df: pd.DataFrame) -> Styler:
    """``df`` with every float column formatted by :func:`column_formatter` (values unchanged);
    a float column holding only whole numbers (``draws``) is shown without decimals.

    Returns:
        A Styler (``st.dataframe`` shows its text; sorting and exports use the numbers).
    """
    formats: dict[Any, Callable[[Any], str]] = {}
    for column in df.columns:
        if not pd.api.types.is_float_dtype(df[column]):
            continue
        finite = df[column][np.isfinite(df[column].astype(float))]
        whole = not finite.empty and bool((finite == finite.round()).all())
        formats[column] = (
            format_count
            if whole and finite.abs().max() < _PLAIN_HIGH
            else (column_formatter(df[column]))
        )
    # pandas-stubs declare the formatter dict's values as Callable[[object], str]; ours take Any
    return df.style.format(formats, na_rep="n/a")  # type: ignore[arg-type]
