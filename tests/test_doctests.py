"""The examples in the docstrings of the public statistics run and print what they show.

``make test`` runs them through this file (pytest collects only ``tests/``); each module must
keep at least the examples it has today, so a deleted example fails here too.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

#: Module -> the least number of examples (``>>>`` lines) it holds.
MODULES = {
    "sde_core.stats.hsic": 10,
    "sde_core.stats.hsic_splits": 1,
    "sde_core.stats.jsd": 5,
    "sde_core.stats.headline": 1,
    "sde_core.stats.proportions": 2,
    "sde_core.stats.calibrated": 1,
    "sde_core.stats.outliers": 2,
    "sde_core.stats.sampling": 5,
    "sde_core.stats.baselines": 3,
    "sde_core.stats.replication": 6,
    "sde_core.common.validation": 7,
    "sde_core.common.csv_cells": 2,
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (see above)"
    assert result.attempted >= MODULES[name], (
        f"{name} has {result.attempted} docstring examples; expected at least {MODULES[name]}"
    )
