"""Which of one model's decisions are near-ties (method §13), from its H arrays and subset rows.

A near-tie is a decision that another machine's last-bit differences in the activations could
flip: a target's JSD decision or calibrated verdict, a control's, a reference or panel gate of
one draw, a classic metric's top-1 or attack decision. :func:`model_near_ties` finds them in an
:class:`~sde_core.pipeline.evaluation.workspace_run.EvaluationResult`'s arrays (so a result read
back from a results store gets them too) and states how far each continuous number may move.
The comparison of two runs (:mod:`sde_core.pipeline.reproduce`) allows exactly those movements.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sde_core.pipeline.evaluation.metric_table import CLASSIC_METRICS
from sde_core.pipeline.evaluation.model_evaluation import CONTROL_KIND
from sde_core.pipeline.settings import EvalSettings
from sde_core.stats.calibrated import calibrated_verdict
from sde_core.stats.near_ties import (
    H_RTOL,
    jsd_decision_is_near_tie,
    rank_verdict_is_near_tie,
    u_test_range,
)

__all__ = ["ModelNearTies", "model_near_ties"]

#: The decisions whose near-ties a row counts (``<name>_ties``): the classic metrics' and the
#: behaviour check's attack's.
_CLASSIC = (*(m.key for m in CLASSIC_METRICS), "mia")


@dataclass(frozen=True)
class ModelNearTies:
    """One model's near-ties and the movements they allow (method §13).

    Attributes:
        targets, targets_total: target subsets whose JSD decision or calibrated verdict is a
            near-tie, of how many. controls, controls_total: the same for the F1 controls.
        gates: gate decisions that are near-ties, e.g. ``"draw 2: reference test p = 0.0098
            (α = 0.01) may be 0.0094–0.0103"``.
        reference_p_range, panel_p_range: the smallest and largest median-over-draws p-value
            of the two gates that movements within tolerance give ``(lo, hi)``.
        reference_p_draws, panel_p_draws: the same ``(lo, hi)`` for each draw's own p-value.
        dependence_tolerance: how far the dependence score may move (absolute; NaN when its
            denominator is within tolerance of zero: then only its numerator and denominator
            are compared).
        classic: ``{"acc_r": n, "acc_f": n, "acc_te": n, "asr": n, "mia": n}`` near-tie
            counts of the classic metrics and of the behaviour check's attack (NaN when not
            recorded).
        h_rtol: the relative movement of an H value the near-ties were found with.
    """

    targets: int
    targets_total: int
    controls: int
    controls_total: int
    gates: tuple[str, ...]
    reference_p_range: tuple[float, float]
    panel_p_range: tuple[float, float]
    dependence_tolerance: float
    classic: dict[str, float] = field(default_factory=dict)
    h_rtol: float = H_RTOL
    reference_p_draws: tuple[tuple[float, float], ...] = ()
    panel_p_draws: tuple[tuple[float, float], ...] = ()

    def p_ranges(self, which: str, per_draw: bool) -> list[tuple[float, float]]:
        """The p-value ranges of the ``"reference"`` or ``"panel"`` test: one per draw, or the
        median over draws' alone."""
        if per_draw:
            return list(getattr(self, f"{which}_p_draws"))
        return [getattr(self, f"{which}_p_range")]

    @property
    def total(self) -> int:
        """Every near-tie decision of the model (classic ones included where recorded)."""
        classic = sum(int(v) for v in self.classic.values() if math.isfinite(v))
        return self.targets + self.controls + len(self.gates) + classic

    def to_json(self) -> dict[str, Any]:
        """The ``near_ties`` entry of a model in the JSON document (method §10, §13)."""
        out = asdict(self)
        out["gates"] = list(self.gates)
        out["reference_p_range"] = [_finite(x) for x in self.reference_p_range]
        out["panel_p_range"] = [_finite(x) for x in self.panel_p_range]
        out["dependence_tolerance"] = _finite(self.dependence_tolerance)
        out["h_rtol"] = _finite(self.h_rtol)
        for key in ("reference_p_draws", "panel_p_draws"):
            out[key] = [[_finite(lo), _finite(hi)] for lo, hi in getattr(self, key)]
        out["classic"] = {
            k: (int(v) if math.isfinite(v) else None) for k, v in self.classic.items()
        }
        out["total"] = self.total
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ModelNearTies:
        """The inverse of :meth:`to_json` (missing values become NaN)."""

        def num(x: Any) -> float:
            return math.nan if x is None else float(x)

        def pair(x: Any) -> tuple[float, float]:
            return (
                (num(x[0]), num(x[1]))
                if isinstance(x, (list, tuple)) and len(x) == 2
                else (
                    math.nan,
                    math.nan,
                )
            )

        return cls(
            targets=int(doc.get("targets", 0)),
            targets_total=int(doc.get("targets_total", 0)),
            controls=int(doc.get("controls", 0)),
            controls_total=int(doc.get("controls_total", 0)),
            gates=tuple(str(g) for g in doc.get("gates", ())),
            reference_p_range=pair(doc.get("reference_p_range")),
            panel_p_range=pair(doc.get("panel_p_range")),
            dependence_tolerance=num(doc.get("dependence_tolerance")),
            classic={k: num(v) for k, v in dict(doc.get("classic") or {}).items()},
            h_rtol=num(doc.get("h_rtol", H_RTOL)),
            reference_p_draws=tuple(pair(x) for x in doc.get("reference_p_draws") or ()),
            panel_p_draws=tuple(pair(x) for x in doc.get("panel_p_draws") or ()),
        )


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _verdict(alpha: float):  # type: ignore[no-untyped-def]
    def label(score: float, it: np.ndarray, oot: np.ndarray) -> str:
        return calibrated_verdict(score, it, oot, alpha).verdict

    return label


def _median_range(lows: list[float], highs: list[float]) -> tuple[float, float]:
    if not lows:
        return (math.nan, math.nan)
    return (float(np.median(lows)), float(np.median(highs)))


def model_near_ties(
    settings: EvalSettings,
    row: Mapping[str, Any],
    subsets: pd.DataFrame,
    arrays: Mapping[str, np.ndarray],
    draws: pd.DataFrame | None = None,
) -> ModelNearTies:
    """The near-ties of one model's evaluation.

    Args:
        settings: the evaluation's settings (bins, α, calibrated α).
        row: the model's ``models`` row (for the classic metrics' recorded near-tie counts).
        subsets: the model's subset rows (kinds ``it_ref``, ``target``, ``f1``, ``it_panel``,
            ``oot_panel``; in evaluation order).
        arrays: the model's raw H arrays (``it_h_draws``, ``oot_h_draws``, ``targets_h``,
            ``f1_h``; see :class:`~sde_core.pipeline.evaluation.model_evaluation.ModelEvaluation`).
        draws: the model's ``draws`` rows (for the dependence score's numerator/denominator).
    """
    refs = subsets[subsets["kind"] == "it_ref"]
    order = [int(d) for d in refs["draw"]]
    pos = {d: i for i, d in enumerate(order)}
    it_draws = arrays.get("it_h_draws")
    oot_draws = arrays.get("oot_h_draws")
    verdict = _verdict(settings.alpha_calibrated)
    recorded = float(row.get("h_rtol", math.nan))
    rtol = recorded if math.isfinite(recorded) else H_RTOL
    panels: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for d in order:
        it_p = subsets[(subsets["kind"] == "it_panel") & (subsets["draw"] == d)]["score"]
        oot_p = subsets[(subsets["kind"] == "oot_panel") & (subsets["draw"] == d)]["score"]
        if len(it_p) and len(oot_p):
            panels[d] = (it_p.to_numpy(np.float64), oot_p.to_numpy(np.float64))

    def judged(kind: str, key: str) -> tuple[int, int]:
        rows = subsets[subsets["kind"] == kind]
        h = arrays.get(key)
        if h is None or it_draws is None or oot_draws is None or len(rows) != len(h):
            return 0, len(rows)
        ties = 0
        for (_, r), values in zip(rows.iterrows(), h, strict=True):
            d = int(r["draw"])
            b = pos.get(d)
            if b is None:
                continue
            tie = jsd_decision_is_near_tie(
                values, it_draws[b], oot_draws[b], settings.bins, rtol=rtol
            )
            if not tie and d in panels:
                tie = rank_verdict_is_near_tie(float(r["score"]), *panels[d], verdict, rtol=rtol)
            ties += bool(tie)
        return ties, len(rows)

    targets, targets_total = judged("target", "targets_h")
    controls, controls_total = judged(CONTROL_KIND, "f1_h")

    gates: list[str] = []
    ranges: dict[str, list[tuple[float, float]]] = {"reference": [], "panel": []}
    for d in order:
        b = pos[d]
        samples: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if it_draws is not None and oot_draws is not None and b < len(it_draws):
            samples["reference"] = (it_draws[b], oot_draws[b])
        if d in panels:
            samples["panel"] = panels[d]
        for test, (it, oot) in samples.items():
            r = u_test_range(it, oot, rtol=rtol)
            ranges[test].append((r.p_low, r.p_high))
            if r.is_near_tie(settings.alpha):
                gates.append(
                    f"draw {d}: {test} test p = {r.p_value:.3g} (α = {settings.alpha:g}) may be "
                    f"{r.p_low:.3g}–{r.p_high:.3g}"
                )
    ref_lo, ref_hi = [lo for lo, _ in ranges["reference"]], [hi for _, hi in ranges["reference"]]
    pan_lo, pan_hi = [lo for lo, _ in ranges["panel"]], [hi for _, hi in ranges["panel"]]
    reference_range = _median_range(ref_lo, ref_hi)
    panel_range = _median_range(pan_lo, pan_hi)
    for name, (lo, hi) in (("reference", reference_range), ("panel", panel_range)):
        if math.isfinite(lo) and (lo < settings.alpha) != (hi < settings.alpha):
            gates.append(
                f"{name} gate: median p over draws may be {lo:.3g}–{hi:.3g} (α = "
                f"{settings.alpha:g})"
            )

    return ModelNearTies(
        targets=targets,
        targets_total=targets_total,
        controls=controls,
        controls_total=controls_total,
        gates=tuple(gates),
        reference_p_range=reference_range,
        panel_p_range=panel_range,
        dependence_tolerance=_dependence_tolerance(draws, it_draws, oot_draws, order, rtol),
        classic={k: float(row.get(f"{k}_ties", math.nan)) for k in _CLASSIC},
        h_rtol=rtol,
        reference_p_draws=tuple(ranges["reference"]),
        panel_p_draws=tuple(ranges["panel"]),
    )


def _dependence_tolerance(
    draws: pd.DataFrame | None,
    it_draws: np.ndarray | None,
    oot_draws: np.ndarray | None,
    order: list[int],
    rtol: float,
) -> float:
    """How far ``mean(num) / mean(den)`` may move when every median of H moves by ``rtol``.

    Per draw, ``num = median H(targets) − median H(S_OOT)`` and ``den = median H(S_IT) − median
    H(S_OOT)`` (method §5); each median moves by at most ``H_RTOL`` of itself, so ``|Δnum| ≤
    H_RTOL·(|num| + 2·|m_oot|)`` and ``|Δden| ≤ H_RTOL·(|m_it| + |m_oot|)``; the ratio moves by
    at most ``(|ΔN| + |N/D|·|ΔD|) / (|D| − |ΔD|)``. NaN when ``|D| ≤ |ΔD|`` (the ratio is then
    not defined to float precision; its parts are compared instead).
    """
    if draws is None or draws.empty or it_draws is None or oot_draws is None:
        return math.nan
    num = draws["dependence_num"].to_numpy(np.float64)
    den = draws["dependence_den"].to_numpy(np.float64)
    if num.size != len(order) or num.size > len(it_draws):
        return math.nan
    m_it = np.median(it_draws[: num.size], axis=1)
    m_oot = np.median(oot_draws[: num.size], axis=1)
    d_num = rtol * (np.abs(num) + 2 * np.abs(m_oot))
    d_den = rtol * (np.abs(m_it) + np.abs(m_oot))
    n, d = float(np.nanmean(num)), float(np.nanmean(den))
    dn, dd = float(np.nanmean(d_num)), float(np.nanmean(d_den))
    if not (math.isfinite(n) and math.isfinite(d)) or abs(d) <= dd:
        return math.nan
    return (dn + abs(n / d) * dd) / (abs(d) - dd)
