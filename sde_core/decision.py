"""Stable public import path; the code lives in :mod:`sde_core.stats.decision`."""

from sde_core.stats.decision import *  # noqa: F403
from sde_core.stats.decision import __all__ as __all__
