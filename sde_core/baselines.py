"""Stable public import path; the code lives in :mod:`sde_core.stats.baselines`."""

from sde_core.stats.baselines import *  # noqa: F403
from sde_core.stats.baselines import __all__ as __all__
