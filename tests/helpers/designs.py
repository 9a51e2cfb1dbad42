"""The cheap evaluation design a test pins when it does not test the design (issue 33).

The library's default is the precision design (W = 0.1, a pilot of 10 draws, up to 60: method
§15), which costs 2–12 times the fixed design of B = 5 draws. A test that evaluates to check
something else (a page, a store, a file format, a CLI path) pins the fixed design with these,
so that it stays as fast as it was and says so; a test of the design itself states its own W.
"""

from __future__ import annotations

from typing import Any

from sde_core.pipeline.settings import EvalSettings

__all__ = ["FIXED", "FIXED_FLAGS", "REPORT_FLAGS", "fixed_settings"]

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
