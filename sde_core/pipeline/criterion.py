"""The workspace's criterion of forgetting: what an audited model must show to count as
forgotten (the answer page and the report's first page judge every unlearned model by it).

A workspace may state it in ``workspace.toml``::

    [criterion]
    metric = "calibrated_otr"   # the rate compared with the retrained model's (method §15)
    margin = 0.1                # the paired difference's 95% interval must lie within ±margin
    behaviour = true            # and the behaviour cross-check must not contradict it (§9)

Without the table the default below applies, and the pages say so. The criterion is judged
on the paired difference ``model − retrained`` of the evaluation's paired comparisons
(:mod:`sde_core.pipeline.evaluation.comparisons`), never on overlapping intervals: an
interval inside ``±margin`` is *forgotten*, one wholly below ``−margin`` *not forgotten*, one
wholly above ``+margin`` *over-unlearned* and one that crosses a bound *undecided*.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sde_core.errors import WorkspaceError
from sde_core.pipeline.evaluation.comparisons import COMPARED_METRICS
from sde_core.pipeline.evaluation.metric_table import METRICS

__all__ = ["CRITERION_METRICS", "DEFAULT_METRIC", "Criterion", "criterion_from_table"]

#: The rates a criterion may compare, key -> display name from the metric table: the first two
#: paired rates of method §15, the paper's OTR and the calibrated OTR (the over-unlearned share
#: and F1, paired too, answer other questions than "forgotten like retraining?").
CRITERION_METRICS: dict[str, str] = {k: METRICS[k].label for k in tuple(COMPARED_METRICS)[:2]}
#: The default criterion's rate: the calibrated OTR (it holds its level, method §9).
DEFAULT_METRIC = tuple(CRITERION_METRICS)[1]


@dataclass(frozen=True)
class Criterion:
    """When an audited model counts as forgotten.

    Attributes:
        metric: the rate compared with the retrained model's (a key of
            :data:`CRITERION_METRICS`).
        margin: the equivalence margin on that rate (a share in (0, 1)).
        behaviour: also require the behaviour cross-check (accuracy, loss and attack on the
            forget set against unseen data) not to contradict the verdict.
        stated: whether the workspace states it (False: the default).
    """

    metric: str = DEFAULT_METRIC
    margin: float = 0.1
    behaviour: bool = True
    stated: bool = False

    def __post_init__(self) -> None:
        if self.metric not in CRITERION_METRICS:
            raise WorkspaceError(
                f"criterion.metric {self.metric!r} is not one of {sorted(CRITERION_METRICS)}: "
                "choose the rate compared with the retrained model"
            )
        margin = self.margin
        if isinstance(margin, bool) or not isinstance(margin, (int, float)):
            raise WorkspaceError(f"criterion.margin must be a number; got {margin!r}")
        if not (math.isfinite(margin) and 0 < margin < 1):
            raise WorkspaceError(
                f"criterion.margin must lie strictly between 0 and 1 (a share); got {margin!r}"
            )
        if not isinstance(self.behaviour, bool):
            raise WorkspaceError(
                f"criterion.behaviour must be true or false; got {self.behaviour!r}"
            )

    @property
    def label(self) -> str:
        """The compared rate's display name (``"calibrated OTR"``)."""
        return CRITERION_METRICS[self.metric]

    def describe(self) -> str:
        """The criterion in one sentence, as the answer page and the report state it."""
        text = (
            f"{self.label} within {self.margin:g} of the retrained model's (the 95% interval of "
            f"the paired difference inside ±{self.margin:g})"
        )
        if self.behaviour:
            text += ", behaviour consistent (no conflicting evidence)"
        return text + ("" if self.stated else " — the default; state your own in workspace.toml")

    def to_table(self) -> dict[str, Any]:
        """The ``[criterion]`` table of ``workspace.toml``."""
        return {"metric": self.metric, "margin": self.margin, "behaviour": self.behaviour}


def criterion_from_table(table: Any, file: str = "workspace.toml") -> Criterion:
    """The ``[criterion]`` table of ``workspace.toml`` (None or absent: the default).

    Raises:
        WorkspaceError: not a table, an unknown key or a value out of range.
    """
    if table is None:
        return Criterion()
    if not isinstance(table, Mapping):
        raise WorkspaceError(f"{file}: [criterion] must be a table (metric, margin, behaviour)")
    unknown = sorted(set(table) - {"metric", "margin", "behaviour"})
    if unknown:
        raise WorkspaceError(
            f"{file}: unknown key(s) {unknown} in [criterion]; allowed: behaviour, margin, metric"
        )
    default = Criterion()
    try:
        return Criterion(
            metric=table.get("metric", default.metric),
            margin=table.get("margin", default.margin),
            behaviour=table.get("behaviour", default.behaviour),
            stated=True,
        )
    except WorkspaceError as exc:
        raise WorkspaceError(f"{file}: {exc}") from None
