"""A signed difference as the docs and the pages write it: ``+0.12``, ``−0.05`` (the typographic
minus), never ``−0.00``."""

from __future__ import annotations

__all__ = ["signed"]


def signed(value: float, decimals: int = 2) -> str:
    """``value`` with its sign, rounded to ``decimals`` (a value that rounds to zero is
    ``+0.00``; NaN is ``n/a``).

    Examples:
        >>> signed(0.1234), signed(-0.05), signed(-0.001)
        ('+0.12', '−0.05', '+0.00')
    """
    value = float(value)
    if value != value:  # NaN
        return "n/a"
    return f"{round(value, decimals) + 0.0:+.{decimals}f}".replace("-", "−")
