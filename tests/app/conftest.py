"""Fixtures of the dashboard tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def ws(tiny_workspace: Path) -> Iterator[Path]:
    """The tiny workspace, opened by the app through SDE_WORKSPACE (and inside SDE_DATA_ROOTS)
    for the module's tests; both variables are restored afterwards."""
    saved = {k: os.environ.get(k) for k in ("SDE_WORKSPACE", "SDE_DATA_ROOTS")}
    os.environ["SDE_WORKSPACE"] = str(tiny_workspace)
    os.environ["SDE_DATA_ROOTS"] = str(tiny_workspace.parent)
    yield tiny_workspace
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
