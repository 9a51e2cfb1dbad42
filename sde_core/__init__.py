"""SDE Explorer core library: Split-half Dependence Evaluation of machine unlearning.

The library is UI-free. Modules:

- :mod:`sde_core.hsic` — Gaussian kernels, bandwidth rules and the split-half HSIC engine.
- :mod:`sde_core.decision` — JSD decision rule, reference check, OTR, F1 and calibrated evidence.
- :mod:`sde_core.baselines` — MMD² and Wasserstein-2 distribution baselines.
- :mod:`sde_core.models`, :mod:`sde_core.data`, :mod:`sde_core.activations` — architectures,
  safe checkpoints, datasets and cached activation extraction.
- :mod:`sde_core.training`, :mod:`sde_core.unlearning`, :mod:`sde_core.metrics` — training,
  the seven unlearning methods and the classic metrics (accuracies, MIA ASR).
- :mod:`sde_core.workspace`, :mod:`sde_core.evaluate`, :mod:`sde_core.store` — workspaces, the
  evaluation engine and the SQLite results store.
- :mod:`sde_core.engine`, :mod:`sde_core.jobs` — local and Ray execution of job graphs.
- :mod:`sde_core.figures`, :mod:`sde_core.report`, :mod:`sde_core.sweeps` — the dashboard's
  library layer (plotly figures, plain-language report, sweeps).
- :mod:`sde_core.errors` — the :class:`~sde_core.errors.SDEError` hierarchy.
"""

__version__ = "0.1.0"
