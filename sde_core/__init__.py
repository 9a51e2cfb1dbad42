"""SDE Explorer core library: Split-half Dependence Evaluation of machine unlearning.

The library is UI-free. Main modules:

- :mod:`sde_core.hsic` — Gaussian kernels, bandwidth rules and the split-half HSIC engine.
- :mod:`sde_core.decision` — JSD decision rule, reference check, OTR, F1 and calibrated evidence.
- :mod:`sde_core.baselines` — MMD² and Wasserstein-2 distribution baselines.
- :mod:`sde_core.errors` — the :class:`~sde_core.errors.SDEError` hierarchy.
"""

__version__ = "0.1.0"
