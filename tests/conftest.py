"""Fixtures shared by several test folders (keep small); each folder's own live in its
conftest.py. Helper modules (``artefacts``, ``ui_fixtures``, ``llm_artefacts``, ``idx_files``)
live beside this file; ``pythonpath`` in pyproject.toml makes them importable."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from ui_fixtures import build_tiny_workspace

from sde_core.pipeline.demo_recipes import default_demo_folder


@pytest.fixture(scope="session", autouse=True)
def private_trust_store(tmp_path_factory: pytest.TempPathFactory):
    """Every test trusts into a store of its session, never the user's
    ``~/.config/sde-explorer/trusted.json``; a test about trust itself sets its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SDE_TRUST_STORE", str(tmp_path_factory.mktemp("trust") / "trusted.json"))
        yield


@pytest.fixture
def ws_root(tmp_path: Path) -> Path:
    """A small valid workspace folder (``test_workspace.make_workspace``)."""
    from helpers.workspaces import make_workspace

    root = tmp_path / "ws"
    root.mkdir()
    make_workspace(root)
    return root


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module of tiny nets: a second thread only adds synchronisation
    (20× slower on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dashboard tests' tiny image workspace (``ui_fixtures``), built once per session in the
    session's base temporary folder: the modules that use it (app, browser, services) share its
    activation cache and results store."""
    return build_tiny_workspace(tmp_path_factory.getbasetemp() / "tiny-workspace")


@pytest.fixture(scope="session")
def mnist1d_copy(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Make a copy of the mnist1d demo without its results store and stage caches, so its
    evaluations really compute — but with every activation the session's earlier copies
    extracted (the cache is content-addressed and checked on read), so each model's activations
    are extracted once per session."""
    copies: list[Path] = []

    def make(name: str) -> Path:
        target = tmp_path_factory.mktemp(name) / "demo-mnist1d"
        ignore = shutil.ignore_patterns(".sde-cache", "results.sqlite*")
        shutil.copytree(default_demo_folder("mnist1d"), target, ignore=ignore)
        for earlier in copies:
            extracted = earlier / ".sde-cache" / "activations"
            if extracted.is_dir():
                shutil.copytree(
                    extracted, target / ".sde-cache" / "activations", dirs_exist_ok=True
                )
        copies.append(target)
        return target

    return make
