"""What the null check's measured false-alarm rates say about each test
(:func:`null_check_readings`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sde_core.pipeline.evaluation.metric_table import NULL_CALIBRATED_FPR, NULL_OUT_OF_TRAINING_FPR
from sde_core.viz.formatting import format_percent
from sde_core.viz.verdicts.labels import _NAN, _count, _number, _p

__all__ = ["NullCheckReading", "null_check_power", "null_check_readings"]


@dataclass(frozen=True)
class NullCheckReading:
    """One test's false-positive rate on the null check's disjoint unseen subsets (method §12).

    Attributes:
        test: ``"paper's split-level U-test"`` or ``"calibrated test"``.
        rate: the measured false-positive rate. trials: pairs (split-level test) or subsets
            (calibrated test) it was measured on. alpha: the test's nominal level.
        p_value: one-sided exact binomial p of ``rate·trials`` false positives at level
            ``alpha`` (small: the rate is significantly above the nominal level).
        passed: False when ``p_value < 0.05`` (the test fails its null check), True otherwise;
            None when the check did not run.
        text: one plain sentence.
    """

    test: str
    rate: float
    trials: int
    alpha: float
    p_value: float
    passed: bool | None
    text: str


def _reading(test: str, rate: float, trials: int, alpha: float) -> NullCheckReading:
    from scipy.stats import binomtest

    if math.isnan(rate) or trials < 1:
        text = f"The {test} has no null check at these settings (too few unseen rows)."
        return NullCheckReading(test, rate, trials, alpha, _NAN, None, text)
    hits = round(rate * trials)
    p = float(binomtest(hits, trials, alpha, alternative="greater").pvalue)
    passed = p >= 0.05
    level = format_percent(alpha, decimals=0 if alpha >= 0.01 else 1)
    verdict = (
        "passes: its false alarms are consistent with its nominal level"
        if passed
        else "FAILS: its false alarms are significantly above its nominal level"
    )
    text = (
        f"The {test} declared a difference in {hits} of {trials} ({format_percent(rate)}) "
        f"where none exists, at α = {level} — it {verdict} (binomial p = {_p(p)})."
    )
    return NullCheckReading(test, rate, trials, alpha, p, passed, text)


def null_check_readings(
    row: Mapping[str, Any], alpha: float, alpha_calibrated: float
) -> list[NullCheckReading]:
    """Both tests' null-check rates of one ``models`` row, each with a pass/fail.

    Args:
        row: the model's row (``null_pairs``, ``null_split_fpr``, ``null_calibrated_fpr``).
        alpha: the split-level test's level (settings ``alpha``).
        alpha_calibrated: the calibrated test's level (settings ``alpha_calibrated``).

    Returns:
        ``[split-level reading, calibrated reading, training reading]``: the split-level test
        is measured on the ``null_pairs`` pairs, the calibrated one on both subsets of every
        pair, and — when the row has ``null_train_subsets`` — the calibrated test's false
        "out-of-training" calls on the controlled training subsets.
    """
    pairs = _count(row, "null_pairs") or 0
    readings = [
        _reading("paper's split-level U-test", _number(row, "null_split_fpr"), pairs, alpha),
        _reading(
            "calibrated test", _number(row, NULL_CALIBRATED_FPR.key), 2 * pairs, alpha_calibrated
        ),
    ]
    train = _count(row, "null_train_subsets")
    if train:
        readings.append(
            _reading(
                "calibrated test on training subsets (false out-of-training)",
                _number(row, NULL_OUT_OF_TRAINING_FPR.key),
                train,
                alpha_calibrated,
            )
        )
    return readings


@lru_cache(maxsize=256)
def _interval_power(pairs: int, draws: int, level: float) -> float:
    from sde_core.pipeline.meta_eval.null_sizing import SHIPPED_PANEL_ICC, gate_power

    found = gate_power(
        pairs, draws, level=level, true_rate=min(2 * level, 1.0), reps=2000, seed=0,
        icc=SHIPPED_PANEL_ICC,
    )  # fmt: skip
    return found.interval


def null_check_power(row: Mapping[str, Any], alpha_calibrated: float) -> tuple[float, str]:
    """``(power, sentence)``: how likely the calibrated null check of this ``models`` row was
    to catch a false-call rate of twice its level — the probability that its 95% interval
    excludes ``alpha_calibrated`` (method §9), simulated for its unseen subsets and draws with
    the panel effect of the shipped demos (``SHIPPED_PANEL_ICC``). NaN and "" when the check
    did not run."""
    from sde_core.pipeline.meta_eval.null_sizing import SHIPPED_PANEL_ICC

    pairs, draws = _count(row, "null_pairs") or 0, _count(row, "draws") or 0
    if pairs < 1 or draws < 1:
        return _NAN, ""
    power = _interval_power(int(pairs), int(draws), float(alpha_calibrated))
    level = format_percent(alpha_calibrated, decimals=0)
    twice = format_percent(min(2 * alpha_calibrated, 1.0), decimals=0)
    text = (
        f"Its power: with {2 * pairs} unseen subsets over B = {draws} draws, the calibrated "
        f"null check's 95% interval rules out its level {level} when the true false-call rate "
        f"is {twice} with probability {power:.0%} (a draw's shared panel counted as on the "
        f"shipped demos, ρ = {SHIPPED_PANEL_ICC:g}; method §9)"
        + (
            "; a pass here is weak evidence — more draws, not more subsets, raise it"
            if power < 0.8
            else ""
        )
        + "."
    )
    return power, text
