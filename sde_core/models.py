"""Stable public import path; the code lives in :mod:`sde_core.inputs.models`."""

from sde_core.inputs.models import *  # noqa: F403
from sde_core.inputs.models import __all__ as __all__
