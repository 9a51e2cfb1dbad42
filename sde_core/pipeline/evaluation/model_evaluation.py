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

    def plain(kind: str, draw: int, index: int, h: np.ndarray, spread: float) -> None:
        rows.append(
            {"model": name, "kind": kind, "draw": draw, "index": index,
             "score": float(h.mean()), "h_median": float(np.median(h)), "spread": float(spread)}
        )  # fmt: skip

    def judged(kind, draw, index, h, spread, decision, verdict, label) -> None:  # type: ignore[no-untyped-def]
        plain(kind, draw, index, h, spread)
        rows[-1].update(
            {
                "d_it": decision.d_it,
                "d_oot": decision.d_oot,
                "decision": decision.label if paper_ok else "inconclusive",
                "in_training_raw": decision.in_training,
                "p_in": _NAN if verdict is None else verdict.p_in,
                "p_out": _NAN if verdict is None else verdict.p_out,
                "p_over": _NAN if verdict is None else verdict.p_over,
                "verdict": verdict.verdict if verdict is not None and cal_ok else "inconclusive",
                "label_in_training": label,
            }
        )

    for st, d in zip(states, plan.draws, strict=True):
        if st.core is None:
            continue
        plain("it_ref", d.index, d.index, st.arrays["it_h"], st.spreads["it_ref"][0])
        plain("oot_ref", d.index, d.index, st.arrays["oot_h"], st.spreads["oot_ref"][0])
        verdicts = st.panel.verdicts if st.panel is not None else [None] * len(d.targets)
        for j, (h, sp, dec, ver) in enumerate(
            zip(
                st.arrays["targets_h"],
                st.spreads["targets"],
                st.core.decisions,
                verdicts,
                strict=True,
            )
        ):
            judged("target", d.index, int(d.target_index[j]), h, sp, dec, ver, None)
        if st.panel is not None:
            for kind, key in (("it_panel", "panel_it"), ("oot_panel", "panel_oot")):
                for j, (h, sp) in enumerate(
                    zip(st.arrays[f"{key}_h"], st.spreads[key], strict=True)
                ):
                    plain(kind, d.index, d.index * settings.panel_size + j, h, sp)
        if "null_h" in st.arrays:
            for j, (h, sp) in enumerate(zip(st.arrays["null_h"], st.spreads["null"], strict=True)):
                plain("null", d.index, j, h, sp)
        if "null_train_h" in st.arrays:
            pairs = zip(st.arrays["null_train_h"], st.spreads["null_train"], strict=True)
            for j, (h, sp) in enumerate(pairs):
                plain("null_train", d.index, j, h, sp)
    index = 0
    for sign, key in ((True, "pos"), (False, "neg")):
        for st in states:
            if st.controls is None:
                continue
            offset = 0 if sign else len(st.arrays["pos_h"])
            control_verdicts = st.controls.verdicts
            for j, (h, sp) in enumerate(zip(st.arrays[f"{key}_h"], st.spreads[key], strict=True)):
                ver = None if control_verdicts is None else control_verdicts[offset + j]
                decision = st.controls.decisions[offset + j]
                judged(CONTROL_KIND, st.index, index, h, sp, decision, ver, sign)
                index += 1
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
