"""Stable public import path; the code lives in :mod:`sde_core.inputs.data`."""

from sde_core.inputs.data import *  # noqa: F403
from sde_core.inputs.data import __all__ as __all__
