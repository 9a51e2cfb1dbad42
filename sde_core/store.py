"""Stable public import path; the code lives in :mod:`sde_core.pipeline.store`."""

from sde_core.pipeline.store import *  # noqa: F403
from sde_core.pipeline.store import __all__ as __all__
