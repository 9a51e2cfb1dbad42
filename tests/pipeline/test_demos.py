"""The one table of bundled demos (sde_core/pipeline/demos.py) and the command built on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sde_core.cli import main
from sde_core.errors import SettingsError
from sde_core.pipeline.demos import DEMOS, build_named_demo, redo_demo_sweep

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def test_every_demo_has_its_shipped_folder():
    assert list(DEMOS)[:3] == ["fashion-mnist", "mnist1d", "fashion-mnist-edm"]
    assert "facts" in DEMOS
    for name, demo in DEMOS.items():
        assert demo.name == name
        assert (ASSETS / demo.folder / "workspace.toml").is_file(), demo.folder


def test_an_unknown_demo_is_refused_with_the_names(capsys):
    with pytest.raises(SettingsError, match="no demo 'cifar10'; choose one of fashion-mnist"):
        build_named_demo("cifar10")
    assert main(["demo", "build", "--dataset", "cifar10"]) == 2
    err = capsys.readouterr().err
    assert all(repr(name) in err or name in err for name in DEMOS), err  # the table's choices


def test_a_sweep_is_redone_only_for_a_demo_that_ships_one(capsys, tmp_path):
    """``demo build --sweep-only`` names the demos with a sweep, and refuses to be combined
    with the store's own flags — before anything is loaded or written."""
    with pytest.raises(
        SettingsError, match="ships no sweep; the demos with one: fashion-mnist-edm"
    ):
        redo_demo_sweep("mnist1d", tmp_path)
    out = ["--out", str(tmp_path)]
    assert main(["demo", "build", "--dataset", "mnist1d", "--sweep-only", *out]) == 1
    assert "error: demo 'mnist1d' ships no sweep" in capsys.readouterr().err
    args = ["demo", "build", "--dataset", "fashion-mnist-edm", "--sweep-only", "--store-only"]
    assert main([*args, *out]) == 2
    assert "leave out --store-only" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
