"""CSV cells that a spreadsheet would run as formulas, neutralised.

A spreadsheet opening a CSV file treats a cell that starts with ``=``, ``+``, ``-`` or ``@``
(and, in some programs, a tab or carriage return) as a formula: ``=cmd|' /C calc'!A0`` in a
model's method name would run when someone opens the exported ``models.csv``. Every CSV the
library writes passes its cells and column names through :func:`neutralise_formula`, which
puts an apostrophe in front of such text (the spreadsheet then shows it as text, as typed).
Numbers are never changed, neither as numbers nor as text that reads as a number (``-0.5``).
"""

from __future__ import annotations

import math

__all__ = ["FORMULA_STARTS", "neutralise_formula"]

#: First characters that make a spreadsheet read a cell as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _is_number_text(text: str) -> bool:
    try:
        return math.isfinite(float(text)) or text.strip().lstrip("+-").lower() in ("inf", "nan")
    except ValueError:
        return False


def neutralise_formula(value: object) -> object:
    """``value`` with a leading apostrophe when it is text a spreadsheet would run as a
    formula; any other value (numbers, text that reads as a number, other text) unchanged.

    Examples:
        >>> neutralise_formula("=cmd|' /C calc'!A0")
        "'=cmd|' /C calc'!A0"
        >>> neutralise_formula("-0.25"), neutralise_formula(-0.25), neutralise_formula("salun")
        ('-0.25', -0.25, 'salun')
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _is_number_text(value):
        return "'" + value
    return value
