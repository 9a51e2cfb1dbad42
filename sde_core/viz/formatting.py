"""How numbers look, everywhere: tables, chart hover text, the dashboard and the report.

One rule (:func:`format_number`) turns a value into text:

- ``|x|`` in [10⁻³, 10⁵): plain decimals with ``digits`` significant digits (``0.00312``,
  ``0.951``, ``12.3``, ``1058``);
- smaller or larger values: an SI prefix (``notation="si"``, the default: ``35.2 µ`` for
  3.52·10⁻⁵, ``1.20 M``) or scientific notation (``notation="scientific"``: ``1.70e-6``, used for
  p-values, where ``µ`` would read oddly);
- NaN and ``None`` as ``"n/a"``, infinities as ``"∞"`` / ``"−∞"``.

:func:`column_formatter` applies the rule to a whole table column: one SI prefix for the column
(chosen from its largest magnitude) and as many significant digits (3 to 8) as it takes for
values that differ to *display* differently, so a column never shows a run of identical rounded
numbers that are not equal. :func:`style_table` formats every numeric column of a table that way
(a :class:`pandas.io.formats.style.Styler`: the values stay numbers, so sorting and exports keep
full precision). :data:`D3_SI` is the same rule for plotly axes (d3-format).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd
from pandas.io.formats.style import Styler

__all__ = [
    "D3_SI",
    "Notation",
    "column_formatter",
    "format_estimate",
    "format_interval",
    "format_number",
    "format_percent",
    "records",
    "style_table",
]

Notation = Literal["si", "scientific"]

#: The chart-side equivalent of :func:`format_number` (d3-format: 3 significant digits, SI
#: prefix, trailing zeros trimmed), for plotly ``tickformat`` / ``hoverformat``.
D3_SI = ".3~s"

_PREFIXES = {
    -24: "y",
    -21: "z",
    -18: "a",
    -15: "f",
    -12: "p",
    -9: "n",
    -6: "µ",
    -3: "m",
    0: "",
    3: "k",
    6: "M",
    9: "G",
    12: "T",
    15: "P",
    18: "E",
}
_PLAIN_LOW, _PLAIN_HIGH = 1e-3, 1e5
_MAX_DIGITS = 8


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


def _engineering_exponent(magnitude: float) -> int:
    return 3 * math.floor(math.log10(magnitude) / 3)


def format_number(
    value: Any, *, digits: int = 3, notation: Notation = "si", exponent: int | None = None
) -> str:
    """A number as text for people (see the module docstring for the rule).

    Args:
        value: a number (Python, NumPy) or None.
        digits: significant digits (1–17).
        notation: ``"si"`` (``35.2 µ``) or ``"scientific"`` (``3.52e-5``) for values outside
            [10⁻³, 10⁵).
        exponent: force this engineering exponent (a multiple of 3 with an SI prefix, e.g.
            ``-6`` for µ) instead of choosing one from the value; used to give a table column
            one prefix. Ignored for ``notation="scientific"``.

    Returns:
        The text; ``"n/a"`` for NaN/None/non-numbers, ``"∞"``/``"−∞"`` for infinities, ``"0"``
        for zero.
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
    x = float(f"{x:.{digits - 1}e}")  # rounded first, so a carry (999.96 µ) moves the prefix
    magnitude = abs(x)
    if notation == "scientific":
        if _PLAIN_LOW <= magnitude < _PLAIN_HIGH:
            return _fixed(x, digits)
        digits_text, _, power = f"{x:.{digits - 1}e}".partition("e")
        return f"{digits_text}e{int(power)}"
    if exponent is None:
        if _PLAIN_LOW <= magnitude < _PLAIN_HIGH:
            return _fixed(x, digits)
        exponent = _engineering_exponent(magnitude)
    if exponent not in _PREFIXES:
        return format_number(x, digits=digits, notation="scientific")
    scaled = x / 10.0**exponent
    text = _fixed(scaled, digits) if scaled != 0 else "0"
    prefix = _PREFIXES[exponent]
    return f"{text} {prefix}" if prefix else text


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
        return "∞" if x > 0 else "−∞"
    if percent:
        return f"{round(100 * x) + 0:.0f}%"
    return f"{round(x, 2) + 0.0:.2f}".replace("-", "−")


def format_estimate(
    value: Any, lo: Any = None, hi: Any = None, *, percent: bool = False, reason: Any = None
) -> str:
    """A point value with its 95% interval, as the tables show it (method §12).

    ``"0.62 [0.48, 0.77]"`` (``percent``: ``"62% [48%, 77%]"``); an unbounded interval shows
    ``∞``; without finite bounds only the value. A missing value is ``"withheld"`` when
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
    return f"{point} [{_unit_scale(a, percent)}, {_unit_scale(b, percent)}]"


def column_formatter(
    values: Iterable[Any], *, notation: Notation = "si", min_digits: int = 3
) -> Callable[[Any], str]:
    """A formatter for one table column: one SI prefix, enough digits to tell values apart.

    The prefix comes from the column's largest finite magnitude (none when that lies in
    [10⁻³, 10⁵)); the number of significant digits is the smallest in ``min_digits``..8 at which
    every pair of distinct values displays differently (8 when none suffices).

    Args:
        values: the column's values (non-numbers are ignored when choosing).
        notation: as in :func:`format_number`.
        min_digits: the fewest significant digits shown.

    Returns:
        ``f(value) -> str``, e.g. for ``Styler.format``.
    """
    finite = sorted(
        {x for x in (_as_float(v) for v in values) if x is not None and math.isfinite(x)}
    )
    exponent: int | None = None
    if notation == "si" and finite:
        largest = max(abs(x) for x in finite)
        if largest > 0 and not (_PLAIN_LOW <= largest < _PLAIN_HIGH):
            exponent = _engineering_exponent(largest)
            if exponent not in _PREFIXES:
                exponent = None
    digits = min_digits
    for digits in range(min_digits, _MAX_DIGITS + 1):
        shown = {format_number(x, digits=digits, notation=notation, exponent=exponent)
                 for x in finite}  # fmt: skip
        if len(shown) == len(finite):
            break

    def fmt(value: Any) -> str:
        return format_number(value, digits=digits, notation=notation, exponent=exponent)

    return fmt


def style_table(df: pd.DataFrame, notations: Mapping[str, Notation] | None = None) -> Styler:
    """``df`` with every float column formatted by :func:`column_formatter` (values unchanged).

    Args:
        df: the table.
        notations: per-column notation (default ``"si"``; e.g. ``{"reference p":
            "scientific"}``).

    Returns:
        A Styler (``st.dataframe`` shows its text; sorting and exports use the numbers).
    """
    notations = dict(notations or {})
    formats = {
        column: column_formatter(df[column], notation=notations.get(str(column), "si"))
        for column in df.columns
        if pd.api.types.is_float_dtype(df[column])
    }
    # pandas-stubs declare the formatter dict's values as Callable[[object], str]; ours take Any
    return df.style.format(formats, na_rep="n/a")  # type: ignore[arg-type]
