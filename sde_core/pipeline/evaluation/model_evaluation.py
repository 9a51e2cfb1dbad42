"""What one model's evaluation holds (:class:`ModelEvaluation`) and how its per-subset rows and
raw H arrays are built from its draws' states (:func:`subset_rows`, :func:`stacked_arrays`).

:class:`~.run.ModelRun` computes the draws; its :meth:`~.run.ModelRun.evaluation` builds a
:class:`ModelEvaluation` from them at any step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sde_core.pipeline.evaluation.draw_statistics import DrawState
from sde_core.pipeline.evaluation.plan import SubsetPlan
from sde_core.pipeline.evaluation.summary import DrawSummary, ModelSummary
from sde_core.pipeline.settings import EvalSettings

__all__ = [
    "CONTROL_KIND",
    "ModelEvaluation",
    "stacked_arrays",
    "subset_rows",
]

_NAN = float("nan")
#: The ``subsets`` kind of the controlled F1's controls (the rows of the ``f1_h`` array): a
#: subset kind, spelled like the F1 metric's key but not that metric (stored in every results
#: store, so it keeps its spelling).
CONTROL_KIND = "f1"


@dataclass
class ModelEvaluation:
    """Everything computed for one model.

    Attributes:
        model: the headline result (:class:`ModelSummary`); ``summary`` is its table row.
        draws: each draw's own statistics (:class:`DrawSummary`).
        subsets: one row per scored subset: ``model, kind, draw, index, score, h_median,
            spread`` and, for targets and controls (``kind`` ``"target"`` /
            :data:`CONTROL_KIND`), ``d_it, d_oot, decision, in_training_raw, p_in, p_out,
            p_over, verdict, label_in_training``; kinds ``it_ref``, ``oot_ref``, ``it_panel``,
            ``oot_panel``, ``null`` (the null check's subsets, A then B of each pair; a sized
            check's pairs after the draw's own) and ``null_train`` (a sized null check's
            training subsets beyond the controls, method §9).
        arrays: raw H arrays: ``it_h``/``oot_h`` ``(K,)`` (draw 0's references), ``it_h_draws``
            / ``oot_h_draws`` ``(B, K)``, ``targets_h`` ``(T, K)`` (draw by draw; the draw of
            each row is ``target_draw`` ``(T,)``), ``f1_h`` ``(T, K)`` (positives of every draw,
            then negatives), ``panel_it_h``/``panel_oot_h`` ``(B·R, K)``, ``null_h``
            ``(2P, K)``, ``null_train_h`` ``(X, K)`` (a sized null check's own training
            subsets).
        complete: whether every requested stage finished.
        tables: further per-model tables for the store, e.g. ``class_wise`` (method §16).
    """

    model: ModelSummary
    draws: list[DrawSummary]
    subsets: list[dict[str, Any]]
    arrays: dict[str, np.ndarray]
    complete: bool = True
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, Any]:
        """The ``models`` table row (:meth:`ModelSummary.to_row`)."""
        return self.model.to_row()


def subset_rows(
    name: str,
    plan: SubsetPlan,
    settings: EvalSettings,
    states: tuple[DrawState, ...],
    summary: ModelSummary,
) -> list[dict[str, Any]]:
    """The :attr:`ModelEvaluation.subsets` rows of model ``name`` from its draws' ``states``
    (the decisions and verdicts read ``"inconclusive"`` where ``summary``'s gates withhold
    them)."""
    paper_ok = summary.references_valid and summary.panel_valid
    cal_ok = bool(np.isfinite(summary.calibrated_otr.value))  # not withheld by a gate
    rows: list[dict[str, Any]] = []

    def block(kind: str, draw: int, indices: Any, h: np.ndarray, spreads: Any) -> None:
        """One row per subset of ``h`` (its H, one subset a row): score and median H taken
        over the whole block at once (the same numbers as row by row, bit for bit)."""
        scores, medians = h.mean(axis=1), np.median(h, axis=1)
        for index, score, median, spread in zip(indices, scores, medians, spreads, strict=True):
            rows.append(
                {"model": name, "kind": kind, "draw": draw, "index": int(index),
                 "score": float(score), "h_median": float(median), "spread": float(spread)}
            )  # fmt: skip

    def judged(kind, draw, indices, h, spreads, decisions, verdicts, label) -> None:  # type: ignore[no-untyped-def]
        start = len(rows)
        block(kind, draw, indices, h, spreads)
        for row, decision, verdict in zip(rows[start:], decisions, verdicts, strict=True):
            judged_ok = verdict is not None and cal_ok
            row.update(
                {
                    "d_it": decision.d_it,
                    "d_oot": decision.d_oot,
                    "decision": decision.label if paper_ok else "inconclusive",
                    "in_training_raw": decision.in_training,
                    "p_in": _NAN if verdict is None else verdict.p_in,
                    "p_out": _NAN if verdict is None else verdict.p_out,
                    "p_over": _NAN if verdict is None else verdict.p_over,
                    "verdict": verdict.verdict if judged_ok else "inconclusive",
                    "label_in_training": label,
                }
            )

    for st, d in zip(states, plan.draws, strict=True):
        if st.core is None:
            continue
        block("it_ref", d.index, [d.index], st.arrays["it_h"][None], st.spreads["it_ref"][:1])
        block("oot_ref", d.index, [d.index], st.arrays["oot_h"][None], st.spreads["oot_ref"][:1])
        targets = st.arrays["targets_h"]
        verdicts = st.panel.verdicts if st.panel is not None else [None] * len(d.targets)
        judged("target", d.index, d.target_index, targets,
               st.spreads["targets"], st.core.decisions, verdicts, None)  # fmt: skip
        if st.panel is not None:
            for kind, key in (("it_panel", "panel_it"), ("oot_panel", "panel_oot")):
                h = st.arrays[f"{key}_h"]
                first = d.index * settings.panel_size
                block(kind, d.index, range(first, first + len(h)), h, st.spreads[key])
        for kind in ("null", "null_train"):
            if f"{kind}_h" in st.arrays:
                h = st.arrays[f"{kind}_h"]
                block(kind, d.index, range(len(h)), h, st.spreads[kind])
    index = 0
    for sign, key in ((True, "pos"), (False, "neg")):
        for st in states:
            if st.controls is None:
                continue
            offset = 0 if sign else len(st.arrays["pos_h"])
            h = st.arrays[f"{key}_h"]
            span = slice(offset, offset + len(h))
            judged_by = st.controls.verdicts
            judged(CONTROL_KIND, st.index, range(index, index + len(h)), h, st.spreads[key],
                   st.controls.decisions[span],
                   [None] * len(h) if judged_by is None else judged_by[span], sign)  # fmt: skip
            index += len(h)
    return rows


def stacked_arrays(states: tuple[DrawState, ...]) -> dict[str, np.ndarray]:
    """The :attr:`ModelEvaluation.arrays` of the draws' ``states`` ({} before any draw's
    core statistics)."""
    done = [st for st in states if st.core is not None]
    if not done:
        return {}
    out: dict[str, np.ndarray] = {
        "it_h": done[0].arrays["it_h"],
        "oot_h": done[0].arrays["oot_h"],
        "it_h_draws": np.stack([st.arrays["it_h"] for st in done]),
        "oot_h_draws": np.stack([st.arrays["oot_h"] for st in done]),
        "targets_h": np.vstack([st.arrays["targets_h"] for st in done]),
        "target_draw": np.concatenate(
            [np.full(len(st.arrays["targets_h"]), st.index, dtype=np.int64) for st in done]
        ),
    }
    for key in ("panel_it_h", "panel_oot_h", "null_h", "null_train_h"):
        parts = [st.arrays[key] for st in done if key in st.arrays]
        if parts:
            out[key] = np.vstack(parts)
    pos = [st.arrays["pos_h"] for st in done if "pos_h" in st.arrays]
    if pos:
        out["f1_h"] = np.vstack(pos + [st.arrays["neg_h"] for st in done if "neg_h" in st.arrays])
    return out
