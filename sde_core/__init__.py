"""SDE Explorer core library: Split-half Dependence Evaluation of machine unlearning.

The library is UI-free and layered; a layer imports only from the layers above it in this
list (``tests/test_architecture.py`` enforces it; ``docs/architecture.md`` explains it):

- :mod:`sde_core.errors`, :mod:`sde_core.common` — the error hierarchy, hashing, input checks,
  atomic file writes.
- :mod:`sde_core.stats` — the statistics (numpy/scipy/numba only): the split-half HSIC engine
  (:mod:`~sde_core.stats.hsic`), the decision rules and calibrated evidence
  (:mod:`~sde_core.stats.decision`), the MMD / Wasserstein baselines
  (:mod:`~sde_core.stats.baselines`).
- :mod:`sde_core.inputs` — datasets, architectures and safe checkpoints, cached activation
  extraction (torch).
- :mod:`sde_core.learning` — training, the seven unlearning methods, the classic metrics.
- :mod:`sde_core.pipeline` — workspaces, evaluation settings and orchestration, the results
  store, the job engines, sweeps, experiment plans and the demo builder.
- :mod:`sde_core.viz` — plotly figures, the plain-language report and UI-free helpers that the
  dashboard calls.
- :mod:`sde_core.cli` — ``python -m sde_core``: one module per command group.

The stable import paths of the public API are ``sde_core.hsic``, ``sde_core.decision``,
``sde_core.baselines``, ``sde_core.models``, ``sde_core.data``, ``sde_core.evaluate``,
``sde_core.workspace``, ``sde_core.store`` and ``sde_core.errors``; the most used names are
also available here (imported on first use, so ``import sde_core`` stays light).

References "method §N" in docstrings and messages point to section N of ``docs/method.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name -> module that defines it (resolved lazily by :func:`__getattr__`).
_EXPORTS = {
    "split_half_hsic": "sde_core.stats.hsic",
    "hsic": "sde_core.stats.hsic",
    "resolve_sigma": "sde_core.stats.hsic",
    "jsd": "sde_core.stats.decision",
    "decide": "sde_core.stats.decision",
    "reference_check": "sde_core.stats.decision",
    "calibrated_verdict": "sde_core.stats.decision",
    "load_checkpoint": "sde_core.inputs.models",
    "load_dataset": "sde_core.inputs.data",
    "load_workspace": "sde_core.pipeline.workspace",
    "EvalSettings": "sde_core.pipeline.evaluate",
    "evaluate_workspace": "sde_core.pipeline.evaluate",
    "ResultsStore": "sde_core.pipeline.store",
    "SDEError": "sde_core.errors",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sde_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
