"""The one syntax of the kernel bandwidth σ (method §2), shared by every entry point.

A σ is written as one of

- ``sqrt_dim`` — σ = √d, d the dimension of the layer's activations (the paper's rule);
- ``<f>*sqrt_dim`` — σ = f·√d for a positive factor f (``0.5*sqrt_dim``; the σ sweeps of
  Fig. 3 and Fig. 6);
- ``median`` — the median pairwise distance of the pooled reference activations;
- a positive number — σ itself, in activation units, in [``SIGMA_MIN``, ``SIGMA_MAX``] of
  :mod:`sde_core.common.validation` (where Gaussian kernels stay finite in float64).

:func:`parse_sigma` reads any of these (text from a flag, a URL, a TOML file or a widget, or a
Python number) into a :class:`Sigma`; :meth:`Sigma.setting` gives the value an
:class:`~sde_core.pipeline.settings.EvalSettings` holds and :meth:`Sigma.text` its canonical
text (``parse_sigma(s.text()) == s``). The numeric resolution (√d, the median of a sample) is
:func:`sde_core.stats.hsic.resolve_sigma`; this module holds the syntax only, so the
settings table, the CLI, the dashboard, links and plans all accept and refuse the same
values. It sits in the lowest layer so that the statistics can read it too.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sde_core.common.validation import SIGMA_MAX, SIGMA_MIN
from sde_core.errors import InputError, SDEError

__all__ = ["MAX_SIGMA_CHARS", "MEDIAN", "SIGMA_SYNTAX", "SQRT_DIM", "Sigma", "parse_sigma"]

#: The √d rule's name.
SQRT_DIM = "sqrt_dim"
#: The median rule's name.
MEDIAN = "median"
#: What a σ may be, for messages and help texts.
SIGMA_SYNTAX = (
    f"'{SQRT_DIM}', '<factor>*{SQRT_DIM}' (e.g. '0.5*{SQRT_DIM}'), '{MEDIAN}' or a positive number"
)
#: Longest σ text read (the longest canonical text of a float factor is ~33 characters);
#: longer text is refused before it is parsed.
MAX_SIGMA_CHARS = 48
#: A plain decimal number in ASCII digits (no sign, no ``nan``/``inf``, no underscores).
_NUMBER = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_FACTOR_RULE = re.compile(rf"\s*({_NUMBER})\s*\*\s*{SQRT_DIM}\s*")
_PLAIN_NUMBER = re.compile(rf"\s*({_NUMBER})\s*")

SigmaKind = Literal["sqrt_dim", "median", "value"]


def _number_text(value: float) -> str:
    """The shortest text that reads back as the same float (``0.5``, ``12``, ``1e-05``)."""
    return repr(float(value)).removesuffix(".0")


@dataclass(frozen=True)
class Sigma:
    """A parsed σ.

    Attributes:
        kind: ``"sqrt_dim"`` (σ = factor·√d), ``"median"`` (median pairwise distance of the
            pooled references) or ``"value"`` (σ = ``number``, activation units).
        number: the factor of the √d rule (1.0 for plain ``sqrt_dim``), σ itself for a value,
            1.0 for the median rule (unused).
    """

    kind: SigmaKind
    number: float = 1.0

    def text(self) -> str:
        """The canonical text: ``sqrt_dim``, ``0.5*sqrt_dim``, ``median`` or ``0.3``."""
        if self.kind == "median":
            return MEDIAN
        if self.kind == "sqrt_dim":
            return SQRT_DIM if self.number == 1.0 else f"{_number_text(self.number)}*{SQRT_DIM}"
        return _number_text(self.number)

    def setting(self) -> str | float:
        """The value an evaluation setting holds: the canonical text of a rule, a float σ."""
        return self.number if self.kind == "value" else self.text()

    @classmethod
    def times_sqrt_d(cls, factor: float = 1.0) -> Sigma:
        """σ = ``factor``·√d (no check: parse text with :func:`parse_sigma`)."""
        return cls("sqrt_dim", float(factor))

    def sqrt_d_factor(self) -> float | None:
        """f of σ = f·√d (1.0 for ``sqrt_dim``), None for the median rule and a value."""
        return self.number if self.kind == "sqrt_dim" else None


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _value(number: float, name: str, error: type[SDEError]) -> Sigma:
    """σ = ``number``, refused outside [SIGMA_MIN, SIGMA_MAX] with the reason."""
    if not _positive(number):
        raise error(f"{name} must be a positive finite number (> 0); got {number!r}")
    if not SIGMA_MIN <= number <= SIGMA_MAX:
        raise error(
            f"{name} = {number:.3g} is outside [{SIGMA_MIN:g}, {SIGMA_MAX:g}], where Gaussian "
            f"kernel values stay finite in float64: rescale the activations and σ together "
            f"(or use '{SQRT_DIM}')"
        )
    return Sigma("value", number)


def parse_sigma(value: object, name: str = "sigma", error: type[SDEError] = InputError) -> Sigma:
    """Read a σ written in the one syntax (module docstring).

    Args:
        value: text (surrounding blanks ignored) or a real number (``bool`` refused).
        name: what to call the value in the message.
        error: the :class:`SDEError` subclass raised.

    Raises:
        error: anything else, with the accepted forms in the message; text longer than
            :data:`MAX_SIGMA_CHARS` is refused unread.

    Examples:
        >>> parse_sigma("0.50*sqrt_dim").text(), parse_sigma("median").setting()
        ('0.5*sqrt_dim', 'median')
        >>> parse_sigma(" 2 ").setting(), parse_sigma(1).setting()
        (2.0, 1.0)
    """
    if isinstance(value, str):
        if len(value) > MAX_SIGMA_CHARS:
            raise error(f"{name} has {len(value)} characters: it must be {SIGMA_SYNTAX}")
        text = value.strip()
        if text == SQRT_DIM:
            return Sigma("sqrt_dim")
        if text == MEDIAN:
            return Sigma("median")
        factor = _FACTOR_RULE.fullmatch(text)
        if factor and _positive(float(factor.group(1))):
            return Sigma("sqrt_dim", float(factor.group(1)))
        plain = _PLAIN_NUMBER.fullmatch(text)
        if plain and float(plain.group(1)) > 0:
            return _value(float(plain.group(1)), name, error)
        raise error(f"{name} must be {SIGMA_SYNTAX}; got {value!r}")
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return _value(float(value), name, error)
    raise error(f"{name} must be {SIGMA_SYNTAX}; got {type(value).__name__} {str(value)[:40]!r}")
