"""Stable public import path; the code lives in :mod:`sde_core.pipeline.workspace`."""

from sde_core.pipeline.workspace import *  # noqa: F403
from sde_core.pipeline.workspace import __all__ as __all__
