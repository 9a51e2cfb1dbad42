"""What "reproduced" means (method §13): compare one model's result from two runs.

Two runs of the same evaluation on the same inputs agree bit for bit on one machine; on two
machines their float32 activations differ in the last bits, and every number downstream may
move by as much as its conditioning allows. :func:`compare_model` compares the fields of two
model results (the JSON entry of a report, or a ``models`` row) and classifies each
difference:

- **identical** — equal (numbers to within 1e-12 relative, which only absorbs the printing of a
  float);
- **equivalent** — different, by no more than the run's own near-ties allow (a rate over N
  decisions moves by the near-ties it contains divided by N; a gate's p-value within the range
  its near-tie pairs allow; a verdict that rests on a near-tie); the reason is given;
- **differs** — anything else: that is a different result. A non-finite reported number
  (``NaN``, ``±inf``: sde_core writes a withheld number as ``null``, so the report was edited)
  always differs, and NaN is never within a near-tie range.

File hashes are not compared here: they are the tamper check and must match exactly (see
:func:`sde_core.services.report_verify.verify_report`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sde_core.pipeline.evaluation.metric_table import (
    ACC_F,
    ACC_GAP,
    ACC_R,
    ACC_TE,
    ASR,
    DEPENDENCE_SCORE,
    LOSS_GAP,
    PANEL_P,
    REFERENCE_P,
)
from sde_core.pipeline.evaluation.near_ties import ModelNearTies
from sde_core.stats.near_ties import ACTIVATION_RTOL, H_RTOL

__all__ = [
    "EXACT_RTOL",
    "FieldDifference",
    "Outcome",
    "ResultDiff",
    "compare_model",
    "worst_outcome",
]

Outcome = Literal["identical", "equivalent", "differs"]
_RANK: dict[str, int] = {"identical": 0, "equivalent": 1, "differs": 2}

#: Two numbers closer than this (relative) are identical: a float printed and parsed back.
EXACT_RTOL = 1e-12
#: Fields not compared: wall-clock times, prose derived from compared numbers and the
#: near-tie records themselves (a value at the edge of its band may count on one machine only).
_SKIPPED = {"seconds", "eval_seconds", "explanation", "summary", "near_ties", "h_rtol"}
#: Fields that must match exactly whatever the near-ties (they describe what was evaluated).
_IDENTITY = {
    "name", "role", "method", "layer", "dim", "draws", "f1_negatives", "null_pairs",
    "baseline_controls", "notes", "model",
}  # fmt: skip
#: Relative tolerance of σ (a median of activation distances, or a fixed rule of d).
_SIGMA_RTOL = 4 * ACTIVATION_RTOL
#: A correlation between subset scores and spreads moves by at most this many times the H
#: values' relative tolerance: scores and spreads move by ``h_rtol`` relative and their
#: coefficient of variation is ≥ 1e-2 on every shipped model (method §13).
_CORR_FACTOR = 100.0
#: Absolute tolerance (nats) of a mean cross-entropy gap: each float32 probability carries a
#: relative error of at most ~3e-6 between two CPUs (measured), so each −log p moves by about
#: that; 16 activation tolerances (2.4e-4) leave a wide margin (method §13).
_LOSS_ATOL = 16 * ACTIVATION_RTOL
#: Fields decided by the targets' decisions and verdicts (method §4, §9, §12).
_TARGET_FIELDS = re.compile(
    r"^(otr|calibrated_otr|over_unlearned|over_unlearning|verdict_counts|n_in_training|"
    r"n_out_of_training|n_over_unlearned|n_inconclusive|verdict$)"
)
_CONTROL_FIELDS = re.compile(r"^(f1|calibrated_f1)")
_GATE_FIELDS = re.compile(r"^(references_valid|panel_valid|inconclusive_reason)")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class FieldDifference:
    """One field that is not identical.

    Attributes:
        field: the field. reported, recomputed: its two values.
        outcome: ``"equivalent"`` or ``"differs"``. reason: why (what the near-ties allow, or
            by how much it exceeds that).
    """

    field: str
    reported: Any
    recomputed: Any
    outcome: Outcome
    reason: str

    def line(self) -> str:
        """``field: reported X, recomputed Y — reason``."""
        return (
            f"{self.field}: reported {_show(self.reported)}, recomputed "
            f"{_show(self.recomputed)} — {self.reason}"
        )


@dataclass
class ResultDiff:
    """The comparison of one model's two results.

    Attributes:
        differences: every field that is not identical. largest_relative: the largest relative
            change ``|a − b| / max(|a|, |b|)`` among numeric fields (0 when all are equal).
    """

    differences: list[FieldDifference] = field(default_factory=list)
    largest_relative: float = 0.0

    @property
    def outcome(self) -> Outcome:
        """``"differs"`` if any field differs, ``"equivalent"`` if any field moved within
        tolerance, else ``"identical"``."""
        if any(d.outcome == "differs" for d in self.differences):
            return "differs"
        if self.differences or self.largest_relative > EXACT_RTOL:
            return "equivalent"
        return "identical"

    def lines(self) -> list[str]:
        """One line per difference, the differing ones first."""
        ordered = sorted(self.differences, key=lambda d: -_RANK[d.outcome])
        return [f"{'DIFFERS' if d.outcome == 'differs' else 'within tolerance'}: {d.line()}"
                for d in ordered]  # fmt: skip


def worst_outcome(outcomes: Iterable[Outcome]) -> Outcome:
    """The worst of several outcomes (``identical`` for none)."""
    worst: Outcome = "identical"
    for o in outcomes:
        if _RANK[o] > _RANK[worst]:
            worst = o
    return worst


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.10g}"
    return repr(value)


def _is_missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _no_text(x: Any) -> bool:
    """No text: ``None`` (a column a store written before it lacks) or ``""`` (nothing said)."""
    return x is None or x == ""


def _numbers(value: Any) -> list[float] | None:
    """The numbers of a scalar, list or dict value (None when it holds text or booleans)."""
    if isinstance(value, bool):
        return None
    if _is_missing(value):
        return [math.nan]
    if isinstance(value, (int, float)) or type(value).__module__ == "numpy":
        try:
            return [float(value)]
        except (TypeError, ValueError):
            return None
    if isinstance(value, Mapping):
        out: list[float] = []
        for k in sorted(value):
            part = _numbers(value[k])
            if part is None:
                return None
            out += part
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            part = _numbers(v)
            if part is None:
                return None
            out += part
        return out
    return None


def _non_finite(value: Any) -> float | None:
    """The first NaN or ±inf *number* in a value (a withheld value is ``None``, never NaN: a
    report is written as strict JSON), else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for v in value:
            found = _non_finite(v)
            if found is not None:
                return found
    return None


def _largest_change(a: list[float], b: list[float]) -> tuple[float, float]:
    """``(largest absolute change, largest relative change)``; inf when only one side is a
    number (a value withheld on one side only) or the shapes differ; 0 when neither side holds
    a number at all, whatever the shapes (a withheld interval is ``null`` in a report read back
    from the results store and ``[null, null]`` in a fresh run: both say "no interval")."""
    if all(math.isnan(x) for x in a) and all(math.isnan(y) for y in b):
        return 0.0, 0.0
    if len(a) != len(b):
        return math.inf, math.inf
    absolute = relative = 0.0
    for x, y in zip(a, b, strict=True):
        if math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                return math.inf, math.inf
            continue
        if math.isinf(x) or math.isinf(y):
            if x != y:
                return math.inf, math.inf
            continue
        d = abs(x - y)
        absolute = max(absolute, d)
        scale = max(abs(x), abs(y))
        relative = max(relative, d / scale if scale > 0 else 0.0)
    return absolute, relative


def _same_text_but_numbers(a: Any, b: Any) -> bool:
    return isinstance(a, str) and isinstance(b, str) and _NUMBER.sub("#", a) == _NUMBER.sub("#", b)


def _within_range(values: list[float], ranges: Iterable[tuple[float, float]]) -> bool:
    """Whether every value lies within the union of the p-value ranges (with float slack)."""
    spans = [(lo, hi) for lo, hi in ranges if math.isfinite(lo) and math.isfinite(hi)]
    if not spans:
        return False
    lo = min(s[0] for s in spans) * (1 - 1e-9)
    hi = max(s[1] for s in spans) * (1 + 1e-9)
    return all(lo <= v <= hi for v in values)  # NaN compares False: never within a range


@dataclass(frozen=True)
class _Allowance:
    """What the near-ties of the two runs allow (method §13)."""

    ties: tuple[ModelNearTies, ...]
    rows: Mapping[str, int]
    per_draw: int

    @property
    def gates(self) -> list[str]:
        return sorted({g for t in self.ties for g in t.gates})

    def most(self, attr: str) -> int:
        return max((int(getattr(t, attr)) for t in self.ties), default=0)


def _limit(absolute: float, limit: float, why: str) -> tuple[Outcome, str]:
    if absolute <= limit:
        return "equivalent", f"{why} (moved {absolute:.2g}, allowed {limit:.2g})"
    return "differs", f"moved {absolute:.2g}, beyond the {limit:.2g} that {why}"


def _classify(
    key: str,
    a: Any,
    b: Any,
    numbers: tuple[list[float], list[float]] | None,
    absolute: float,
    allow: _Allowance,
) -> tuple[Outcome, str]:
    """The outcome and reason of one field that is not identical."""
    gates = allow.gates
    if key in _IDENTITY:
        return "differs", "describes what was evaluated: must match exactly"
    if gates and (numbers is None or not math.isfinite(absolute)):
        # A gate that is a near-tie may withhold (or release) the gated numbers.
        return "equivalent", f"a gate is a near-tie ({gates[0]})"
    if _GATE_FIELDS.match(key):
        if gates:
            return "equivalent", f"a gate is a near-tie ({gates[0]})"
        if _same_text_but_numbers(a, b):
            return "equivalent", "the reason's text differs only in its printed numbers"
        return "differs", "a gate decision changed, and no gate is a near-tie"
    if key.startswith((REFERENCE_P.key, PANEL_P.key)):
        which = "reference" if key.startswith(REFERENCE_P.key) else "panel"
        if numbers is not None and _p_within(key, which, numbers, allow.ties):
            return "equivalent", f"within the {which} test's near-tie p range"
        return "differs", f"outside the {which} test's near-tie p range"
    if numbers is None:
        return _classify_decision(key, None, absolute, allow)
    if isinstance(a, str) and isinstance(b, str) and _same_text_but_numbers(a, b):
        return "equivalent", "the text differs only in its printed numbers"
    if key.startswith((ACC_GAP.key, "mia_forget", "mia_unseen", "mia_gap")):
        return _behaviour(key, absolute, allow)
    if key.startswith(LOSS_GAP.key):
        return _limit(absolute, _LOSS_ATOL, "float32 probabilities' relative precision allows")
    if key.startswith(DEPENDENCE_SCORE.key):
        tolerances = [
            t.dependence_tolerance for t in allow.ties if math.isfinite(t.dependence_tolerance)
        ]
        if not tolerances:
            return "differs", "no dependence-score tolerance is known for this run"
        scale = 1.0
        if key.endswith(("_ci", "_lo", "_hi")):
            # An interval's bounds scale with the point value's conditioning.
            finite = [abs(x) for x in numbers[0] if math.isfinite(x)]
            scale = max(1.0, max(finite, default=1.0))
        why = "the dependence score's conditioning allows"
        return _limit(absolute, max(tolerances) * scale, why)
    if key == "sigma":
        scale = max(abs(x) for x in numbers[0] + numbers[1])
        return _limit(absolute, _SIGMA_RTOL * scale, "the bandwidth's activations allow")
    if key.startswith("score_spread_corr"):
        rtol = max((t.h_rtol for t in allow.ties if math.isfinite(t.h_rtol)), default=H_RTOL)
        return _limit(absolute, _CORR_FACTOR * rtol, "a correlation of moved scores allows")
    if key in (ACC_R.key, ACC_F.key, ACC_TE.key, ASR.key):
        counts = [t.classic.get(key, math.nan) for t in allow.ties]
        k = max((c for c in counts if math.isfinite(c)), default=math.nan)
        n = allow.rows.get(key)
        if not (math.isfinite(k) and n):
            return "differs", "its near-ties were not recorded"
        unit = 100.0 if key.startswith("acc") else 1.0
        return _limit(absolute, unit * k / n, f"{int(k)} near-tie decisions of {n} allow")
    return _classify_decision(key, numbers, absolute, allow)


def _behaviour(key: str, absolute: float, allow: _Allowance) -> tuple[Outcome, str]:
    """The behaviour check (method §9): accuracy gaps move by their top-1 near-ties, the
    attack's shares by its near-tie decisions (interval bounds by up to twice that)."""

    def ties(name: str) -> float:
        counts = [t.classic.get(name, math.nan) for t in allow.ties]
        return max((c for c in counts if math.isfinite(c)), default=math.nan)

    n_f, n_te = allow.rows.get(ACC_F.key, 0), allow.rows.get(ACC_TE.key, 0)
    bound = 1.0 if key in (ACC_GAP.key, "mia_forget", "mia_unseen") else 2.0
    if key.startswith(ACC_GAP.key):
        k_f, k_te = ties(ACC_F.key), ties(ACC_TE.key)
        if not (math.isfinite(k_f) and math.isfinite(k_te) and n_f and n_te):
            return "differs", "its near-ties were not recorded"
        limit = bound * 100.0 * (k_f / n_f + k_te / n_te)
        return _limit(absolute, limit, f"{int(k_f + k_te)} near-tie top-1 decisions allow")
    k = ties("mia")
    held = n_te - n_te // 2
    if not (math.isfinite(k) and n_f and held):
        return "differs", "its near-ties were not recorded"
    share = {"mia_forget": k / n_f, "mia_unseen": k / held}.get(key, k / n_f + k / held)
    return _limit(absolute, bound * share, f"{int(k)} near-tie attack decisions allow")


def _classify_decision(
    key: str, numbers: tuple[list[float], list[float]] | None, absolute: float, allow: _Allowance
) -> tuple[Outcome, str]:
    """Fields decided by target or control decisions: they move by their near-ties."""
    if _TARGET_FIELDS.match(key):
        k, n, what, factor = allow.most("targets"), allow.most("targets_total"), "targets", 1
    elif _CONTROL_FIELDS.match(key):
        k, n, what, factor = allow.most("controls"), allow.most("controls_total"), "controls", 2
    else:
        return "differs", "no near-tie accounts for it"
    if k == 0:
        return "differs", f"none of the {what}' decisions is a near-tie"
    if numbers is None or not math.isfinite(absolute):
        return "equivalent", f"{k} {what}' decisions are near-ties"
    if key == "verdict_counts" or key.startswith("n_"):
        return _limit(absolute, float(k), f"{k} near-tie {what}")
    # A rate over one draw's n / B decisions moves by k / (n / B); F1 by up to twice that.
    limit = min(1.0, factor * k * allow.per_draw / max(n, 1))
    return _limit(absolute, limit, f"{k} near-tie {what} of {n}")


def _p_within(
    key: str,
    which: str,
    numbers: tuple[list[float], list[float]],
    ties: Iterable[ModelNearTies],
) -> bool:
    """Whether a gate's p-values lie in what their near-tie pairs allow: the median p in the
    median's range, each draw's p in its own draw's range, a range of draws in their union."""
    ties = list(ties)
    if key.endswith("_draws"):
        per = [t.p_ranges(which, per_draw=True) for t in ties]
        for i, (x, y) in enumerate(zip(*numbers, strict=True)):
            spans = [r[i] for r in per if i < len(r)]
            if not _within_range([x, y], spans):
                return False
        return True
    per_draw = key.endswith(("_range", "_lo", "_hi"))
    spans = [span for t in ties for span in t.p_ranges(which, per_draw=per_draw)]
    return _within_range(numbers[0] + numbers[1], spans)


def compare_model(
    reported: Mapping[str, Any],
    recomputed: Mapping[str, Any],
    ties: Iterable[ModelNearTies] = (),
    rows: Mapping[str, int] | None = None,
    *,
    report: bool = False,
) -> ResultDiff:
    """Compare two results of one model field by field (method §13).

    Args:
        reported, recomputed: the model's JSON entry (or ``models`` row) from the two runs.
        ties: the near-ties of either run (:func:`~sde_core.pipeline.evaluation.near_ties.
            model_near_ties`); a decision that is a near-tie in either may differ.
        rows: the rows behind each classic metric (``acc_r``, ``acc_f``, ``acc_te``, ``asr``),
            for the movement their near-ties allow.
        report: ``reported`` is a report's JSON entry, where sde_core writes a withheld or
            unbounded number as ``null``: any non-finite number in it was put there by hand and
            differs. Rows of a ``models`` table (False) hold NaN for withheld and ±inf for an
            unbounded Fieller side; a NaN compared with a number still differs.

    Returns:
        The :class:`ResultDiff`: every field that is not identical, with its outcome and reason.
    """
    draws = reported.get("draws") or recomputed.get("draws") or 1
    finite_draws = isinstance(draws, (int, float)) and math.isfinite(draws)
    allow = _Allowance(
        ties=tuple(ties),
        rows=dict(rows or {}),
        per_draw=max(1, min(int(draws), 10**6) if finite_draws else 1),
    )
    out = ResultDiff()
    for key in sorted(set(reported) | set(recomputed)):
        if key in _SKIPPED or key.endswith("_ties"):
            continue
        a, b = reported.get(key), recomputed.get(key)
        odd = _non_finite(a) if report else None
        if odd is not None:  # sde_core never writes one: the report was edited
            why = "a non-finite number is never a result (sde_core writes a withheld one as null)"
            out.differences.append(FieldDifference(key, a, b, "differs", f"{odd} reported: {why}"))
            continue
        na, nb = _numbers(a), _numbers(b)
        numbers = (na, nb) if na is not None and nb is not None else None
        if numbers is not None:
            absolute, relative = _largest_change(*numbers)
            if absolute == 0.0 or relative <= EXACT_RTOL:
                out.largest_relative = max(out.largest_relative, relative)
                continue
            if math.isfinite(relative):
                out.largest_relative = max(out.largest_relative, relative)
        elif a == b or (_no_text(a) and _no_text(b)):
            continue
        else:
            absolute = math.inf
        outcome, reason = _classify(key, a, b, numbers, absolute, allow)
        out.differences.append(FieldDifference(key, a, b, outcome, reason))
    return out
