"""SDE Explorer core library: Split-half Dependence Evaluation of machine unlearning.

The library is UI-free and layered; a layer imports only from the layers above it in this
list (``tests/test_architecture.py`` enforces it; ``docs/architecture.md`` explains it):

- :mod:`sde_core.errors`, :mod:`sde_core.common` — the error hierarchy, hashing, input checks,
  atomic file writes.
- :mod:`sde_core.stats` — the statistics (numpy/scipy/numba only): the split-half HSIC engine
  (:mod:`~sde_core.stats.hsic`), one module per test — the JSD decision
  (:mod:`~sde_core.stats.jsd`), the reference U-tests (:mod:`~sde_core.stats.utest`), the
  headline metrics (:mod:`~sde_core.stats.headline`), the calibrated verdicts
  (:mod:`~sde_core.stats.calibrated`), panel outliers, the null check, the over-unlearning
  test — the subset sampling (:mod:`~sde_core.stats.sampling`), the intervals over draws
  (:mod:`~sde_core.stats.replication`) and the MMD / Wasserstein baselines
  (:mod:`~sde_core.stats.baselines`).
- :mod:`sde_core.inputs` — datasets, architectures and safe checkpoints, cached activation
  extraction (torch); :mod:`sde_core.families` beside it — what differs between a classifier,
  a denoiser and a causal language model (one module per family, one registry table).
- :mod:`sde_core.learning` — training, the unlearning methods (every one registered in
  :data:`sde_core.learning.unlearning.METHODS`), the classic metrics.
- :mod:`sde_core.pipeline` — workspaces, evaluation settings and orchestration, the results
  store, the job engines, sweeps, experiment plans and the demos.
- :mod:`sde_core.viz`, :mod:`sde_core.services` — plotly figures, the plain-language report
  and UI-free helpers / the application logic the dashboard's pages call.
- :mod:`sde_core.cli` — ``python -m sde_core``: one module per command group.

Every public name has one import path: the module that defines it, e.g.
``from sde_core.stats.hsic import split_half_hsic`` or
``from sde_core.pipeline.settings import EvalSettings``; no package re-exports a name
(``docs/architecture.md``, "One import path per name"). ``import sde_core`` imports nothing
else, so it stays light.

References "method §N" in docstrings and messages point to section N of ``docs/method.md``.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
