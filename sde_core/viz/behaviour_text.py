"""The behaviour cross-check of one model in words and table cells, for every family (method §9).

A classifier's check is its accuracy, loss and membership gaps; a language model's and a
denoiser's come from the behaviour stage (``behaviour_measure`` names the measure and its unit).
Every number is shown with its 95% interval; a number the family does not measure is said in
words (:data:`NOT_MEASURED`), never as a bare ``None`` or ``nan``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sde_core.pipeline.evaluation.metric_table import (
    ACC_GAP,
    ATTACK_AUC,
    ATTACK_AUC_VS_RETRAINED,
    LOSS_GAP,
    LOSS_GAP_VS_RETRAINED,
    MINK_AUC,
    TEXT_AUC,
    ZLIB_AUC,
    Metric,
    interval_columns,
)

__all__ = ["NOT_MEASURED", "behaviour_cells", "behaviour_text"]

#: What a cell says when the model's family has no such measure (or it was not computed).
NOT_MEASURED = "not measured"
_NO_CHECK = (
    "not measured in these results — a classifier's check comes with its class scores; a "
    "language model's or a denoiser's is added to a stored evaluation by `python -m sde_core "
    "evaluate WORKSPACE --behaviour-only`; a family without a behaviour measure has none"
)


def _num(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    try:
        out = float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan
    return out


def _interval(row: Mapping[str, Any], metric: Metric, fmt: str) -> str:
    """``"0.65 [0.60, 0.70]"`` of ``metric`` and its interval; :data:`NOT_MEASURED` when the
    value is missing."""
    value, lo, hi = (_num(row, column) for column in interval_columns(metric.key))
    if not math.isfinite(value):
        return NOT_MEASURED
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{value:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"
    return f"{value:{fmt}}"


def behaviour_cells(row: Mapping[str, Any]) -> dict[str, str]:
    """The behaviour check's table cells of one model (label → text with its interval), the
    same labels for every family; a measure the family lacks says :data:`NOT_MEASURED`."""
    measured = bool(row.get("behaviour_measure"))
    digits = "+.4f" if "denoising" in str(row.get("behaviour_measure", "")) else "+.3f"
    loss = _interval(row, LOSS_GAP, digits if measured else "+.2f")
    return {
        "accuracy gap D_f−D_te (pts)": _interval(row, ACC_GAP, "+.1f"),
        "loss gap D_f−D_te": loss,
        LOSS_GAP_VS_RETRAINED.label: _interval(row, LOSS_GAP_VS_RETRAINED, digits),
        ATTACK_AUC.label: _interval(row, ATTACK_AUC, ".2f"),
        ATTACK_AUC_VS_RETRAINED.label: _interval(row, ATTACK_AUC_VS_RETRAINED, "+.2f"),
        "behaviour measured": str(row.get("behaviour_measure") or "")
        or ("accuracy, cross-entropy (nats) and membership attack" if _has_classic(row) else
            NOT_MEASURED),
    }  # fmt: skip


def _has_classic(row: Mapping[str, Any]) -> bool:
    return math.isfinite(_num(row, ACC_GAP.key))


def behaviour_text(row: Mapping[str, Any]) -> str:
    """One sentence of what the model still does on D_f against unseen data, with intervals."""
    measure = str(row.get("behaviour_measure") or "")
    if not measure:
        if not _has_classic(row):
            return _NO_CHECK
        text = f"accuracy gap D_f − D_te {_interval(row, ACC_GAP, '+.1f')} points"
        if math.isfinite(_num(row, LOSS_GAP.key)):
            text += f", loss gap {_interval(row, LOSS_GAP, '+.2f')} nats"
        return text + " (95% intervals)"
    denoiser = "denoising" in measure
    digits = "+.4f" if denoiser else "+.3f"
    text = (
        f"{measure}: D_f {_num(row, 'loss_forget'):.4g} vs D_te {_num(row, 'loss_test'):.4g}, "
        f"gap {_interval(row, LOSS_GAP, digits)}"
    )
    if math.isfinite(_num(row, LOSS_GAP_VS_RETRAINED.key)):
        text += f", minus the retrained model's {_interval(row, LOSS_GAP_VS_RETRAINED, digits)}"
    if not denoiser:
        text += f"; loss attack AUC {_interval(row, ATTACK_AUC, '.2f')}"
        if math.isfinite(_num(row, ATTACK_AUC_VS_RETRAINED.key)):
            text += f" ({_interval(row, ATTACK_AUC_VS_RETRAINED, '+.2f')} against the retrained)"
        text += (
            f", zlib {_interval(row, ZLIB_AUC, '.2f')}, Min-K% "
            f"{_interval(row, MINK_AUC, '.2f')}, whole text {_interval(row, TEXT_AUC, '.2f')}"
        )
    return text + " (95% intervals)"
