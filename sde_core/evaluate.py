"""Stable public import path; the code lives in :mod:`sde_core.pipeline.evaluate`."""

from sde_core.pipeline.evaluate import *  # noqa: F403
from sde_core.pipeline.evaluate import __all__ as __all__
