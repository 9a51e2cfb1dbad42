"""The cheap evaluation design a test pins when it does not test the design (issue 33).

The library's default is the precision design (W = 0.1, a pilot of 10 draws, up to 60: method
§15), which costs 2–12 times the fixed design of B = 5 draws. A test that evaluates to check
something else (a page, a store, a file format, a CLI path) pins the fixed design with these,
so that it stays as fast as it was and says so; a test of the design itself states its own W.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sde_core.pipeline.model_inputs import ModelInputs
from sde_core.pipeline.settings import EvalSettings

__all__ = [
    "FIXED",
    "FIXED_FLAGS",
    "REPORT_FLAGS",
    "fixed_settings",
    "half_remembered",
    "small_precision_settings",
]

#: The fixed design (B draws, no precision target), as settings values.
FIXED: dict[str, Any] = {"precision": 0.0}
#: The same on the command line.
FIXED_FLAGS: tuple[str, ...] = ("--precision", "0")
#: Reduced settings of a report or an evaluation of a bundled demo that is verified or
#: reproduced (n = 100, T = 20, K = 50, no baselines) at the fixed design: two models in seconds.
REPORT_FLAGS: tuple[str, ...] = (
    "--subset-size", "100", "--targets", "20", "--splits", "50", "--baseline-targets", "0",
    *FIXED_FLAGS,
)  # fmt: skip


def fixed_settings(**values: Any) -> EvalSettings:
    """:class:`EvalSettings` of ``values`` at the fixed design (``precision = 0``)."""
    return EvalSettings(**{**FIXED, **values})


def small_precision_settings(**values: Any) -> EvalSettings:
    """A small precision design for tests of the design itself (n = 40, T = 20, K = 20, a pilot
    of 4 draws, a budget of 10, W = 0.3, 5 null pairs, no baselines), with ``values`` over it."""
    base: dict[str, Any] = dict(
        subset_size=40, targets=20, splits=20, panel_size=20, null_pairs=5, baseline_targets=0,
        precision=0.3, pilot_draws=4, max_draws=10,
    )  # fmt: skip
    return EvalSettings(**{**base, **values})


def half_remembered(
    seed: int, n_train: int = 1200, n_test: int = 800, n_forget: int = 300, dim: int = 6
) -> tuple[np.ndarray, ModelInputs]:
    """``(forget indices, inputs)`` of a synthetic model that still remembers half of D_f:
    training rows spread 1.8× wider than unseen ones, the other half of D_f like unseen rows,
    so per-draw rates vary."""
    rng = np.random.default_rng(seed)
    forget = rng.choice(n_train, n_forget, replace=False)
    tr = 1.8 * rng.normal(size=(n_train, dim))
    tr[forget[: n_forget // 2]] = rng.normal(size=(n_forget // 2, dim))
    return forget, ModelInputs("half", "unlearned", tr, rng.normal(size=(n_test, dim)))
