"""Texts that differ by model family, keyed by the family's label from the family seam
(:func:`sde_core.services.answer.model_family`, :mod:`sde_core.families`)."""

from __future__ import annotations

__all__ = ["behaviour_missing"]


def behaviour_missing(family: str) -> str:
    """The cell shown where a classifier's accuracy or attack column has no value for a model
    of ``family`` (``"n/a (causal language model)"``)."""
    return "n/a" if family == "classifier" else f"n/a ({family})"
