"""Stable public import path; the code lives in :mod:`sde_core.stats.hsic`."""

from sde_core.stats.hsic import *  # noqa: F403
from sde_core.stats.hsic import __all__ as __all__
