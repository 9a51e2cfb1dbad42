"""The meta-evaluation's table (method §17): for every score, how well it agrees with the truth
over the zoo, with 95% bootstrap intervals over the checkpoints.

Per score (higher: more forgotten), over the zoo's checkpoints (the reference row's own
retrained model left out):

- ``auc``: faithfulness AUC, truth ``forgot`` against ``remembers`` (``over-unlearned``
  checkpoints left out); ``auc_runs`` the same over the unlearning runs only (graded, weak and
  knowledge-returns checkpoints: no original or retrained model);
- ``spearman``: rank correlation with the negated graded truth (all checkpoints), and
  ``spearman_runs`` over the unlearning runs;
- ``relearn``, ``int8``, ``int4``: robustness, the share of (unlearned, returned) pairs whose
  score moves the way the truth moves (down when knowledge returns; a tie counts ½);
- for the verdict: ``right``, ``wrong`` and ``abstained``, the shares of the checkpoints
  labelled forgot or remembers whose verdict matches, contradicts or decides neither.

Bootstrap: the checkpoints are resampled (within the two classes for the AUC), the pairs for
robustness; :func:`~sde_core.stats.rank_agreement.bootstrap_interval`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sde_core.pipeline.meta_eval.scores import SCORES
from sde_core.pipeline.meta_eval.truth import LABELS, Truth
from sde_core.pipeline.meta_eval.zoo import ZooCheckpoint
from sde_core.stats.rank_agreement import bootstrap_interval, concordance, rank_auc, spearman

__all__ = [
    "RETURNS",
    "RUN_KINDS",
    "MetaTable",
    "checkpoint_table",
    "meta_table",
    "null_check_share",
    "reference_gap",
]

#: The kinds that are unlearning runs (the "runs only" columns).
RUN_KINDS = ("unlearned", "weak", "relearned", "quantised")
#: The knowledge-returns columns: (column, kind, method).
RETURNS = (
    ("relearn", "relearned", "ft"),
    ("int8", "quantised", "int8"),
    ("int4", "quantised", "int4"),
)


@dataclass(frozen=True)
class MetaTable:
    """The table: one row per score (``rows``: dicts with the module docstring's columns and
    their ``_lo``/``_hi``), the checkpoints it used and each return kind's mean truth change."""

    rows: list[dict[str, Any]]
    checkpoints: int
    truth_moves: dict[str, float]


def reference_gap(
    record: Mapping[str, Any], reference: Mapping[str, Any], keys: Sequence[str], asr_key: str
) -> float:
    """The retrain-based reference score: minus the "average gap" to one retrained model, the
    mean of |ΔAcc| over ``keys`` (D_f, D_r, D_te, in %) and 100·|ΔASR|."""
    row, ref = record["row"], reference["row"]
    gaps = [abs(float(row[k]) - float(ref[k])) for k in keys]
    gaps.append(100.0 * abs(float(row[asr_key]) - float(ref[asr_key])))
    return -float(np.mean(gaps))


def checkpoint_table(
    zoo: Sequence[ZooCheckpoint],
    truths: Mapping[str, Truth],
    records: Mapping[str, Mapping[str, Any]],
    extra: Mapping[str, Mapping[str, float]],
) -> list[dict[str, Any]]:
    """One row per checkpoint (the reference model left out): its identity, truth, every
    score of :data:`SCORES` and the ``extra`` scores (name -> checkpoint -> value)."""
    rows = []
    for unit in zoo:
        if unit.kind == "reference":
            continue
        t = truths[unit.name]
        row: dict[str, Any] = {
            "checkpoint": unit.name,
            "kind": unit.kind,
            "method": unit.method,
            "strength": unit.strength,
            "base": unit.base,
            "parent": unit.parent,
            "truth": t.label,
            "graded_truth": t.graded,
            "truth_distance": t.distance,
        }
        row.update({f"truth_{k}": v for k, v in t.measures.items()})
        row.update({f"z_{k}": v for k, v in t.z.items()})
        for score in SCORES:
            row[score.name] = score.value(records[unit.name])
        for name, values in extra.items():
            row[name] = values.get(unit.name, float("nan"))
        defaults = records[unit.name].get("defaults")  # None: that pass has not run yet
        row["null_gated_defaults"] = None if defaults is None else bool(defaults["gated"])
        rows.append(row)
    return rows


def _agreement(
    rows: Sequence[Mapping[str, Any]], name: str, resamples: int, seed: int, runs_only: bool
) -> dict[str, float]:
    kept = [r for r in rows if np.isfinite(r[name]) and (not runs_only or r["kind"] in RUN_KINDS)]
    suffix = "_runs" if runs_only else ""
    out: dict[str, float] = {}
    v = np.array([r[name] for r in kept], dtype=float)
    lab = np.array([r["truth"] for r in kept], dtype=object)
    g = np.array([r["graded_truth"] for r in kept], dtype=float)
    two = np.flatnonzero(lab != LABELS[2])

    def auc(index: np.ndarray) -> float:
        sel = two[index]
        return rank_auc(v[sel][lab[sel] == LABELS[0]], v[sel][lab[sel] == LABELS[1]])

    out[f"auc{suffix}"] = auc(np.arange(two.size))
    out[f"auc{suffix}_lo"], out[f"auc{suffix}_hi"] = bootstrap_interval(
        auc, two.size, resamples, seed, strata=lab[two].tolist()
    )
    out[f"spearman{suffix}"] = spearman(v, -g)
    out[f"spearman{suffix}_lo"], out[f"spearman{suffix}_hi"] = bootstrap_interval(
        lambda i: spearman(v[i], -g[i]), v.size, resamples, seed
    )
    out[f"n{suffix}"] = float(v.size)
    return out


def _robustness(
    rows: Sequence[Mapping[str, Any]], name: str, resamples: int, seed: int
) -> dict[str, float]:
    by = {r["checkpoint"]: r for r in rows}
    out: dict[str, float] = {}
    for column, kind, method in RETURNS:
        pairs = [
            (by[r["parent"]], r)
            for r in rows
            if r["kind"] == kind and r["method"] == method and r["parent"] in by
        ]
        pairs = [(p, c) for p, c in pairs if np.isfinite(p[name]) and np.isfinite(c[name])]
        ds = np.array([c[name] - p[name] for p, c in pairs], dtype=float)
        dg = np.array([-(c["graded_truth"] - p["graded_truth"]) for p, c in pairs], dtype=float)
        out[column] = concordance(ds, dg) if pairs else float("nan")

        def stat(i: np.ndarray, ds: np.ndarray = ds, dg: np.ndarray = dg) -> float:
            return concordance(ds[i], dg[i])

        out[f"{column}_lo"], out[f"{column}_hi"] = bootstrap_interval(
            stat, len(pairs), resamples, seed
        )
    return out


def _verdict_shares(rows: Sequence[Mapping[str, Any]], name: str) -> dict[str, float]:
    judged = [r for r in rows if r["truth"] != LABELS[2] and np.isfinite(r[name])]
    right = sum(
        (r[name] == 1.0 and r["truth"] == LABELS[0]) or (r[name] == 0.0 and r["truth"] == LABELS[1])
        for r in judged
    )
    wrong = sum(
        (r[name] >= 0.75 and r["truth"] == LABELS[1])
        or (r[name] == 0.0 and r["truth"] == LABELS[0])
        for r in judged
    )
    n = max(len(judged), 1)
    return {"right": right / n, "wrong": wrong / n, "abstained": 1.0 - (right + wrong) / n}


def meta_table(
    rows: Sequence[Mapping[str, Any]],
    labels: Mapping[str, str],
    resamples: int = 2000,
    seed: int = 0,
    verdicts: Sequence[str] = (),
) -> MetaTable:
    """The meta-evaluation table over the checkpoint rows (:func:`checkpoint_table`).

    Args:
        rows: the checkpoints. labels: score column -> label, in the table's order (the
            reference row last). resamples, seed: the bootstrap.
        verdicts: the columns holding a verdict's ordinal (1 consistent with forgetting, 0.75
            over-unlearned, 0.5 mixed or inconclusive, 0.25 conflicting evidence, 0 not
            forgotten); their rows also get the right/wrong/abstained shares.
    """
    table = []
    for name, label in labels.items():
        row: dict[str, Any] = {"score": name, "label": label}
        row.update(_agreement(rows, name, resamples, seed, runs_only=False))
        row.update(_agreement(rows, name, resamples, seed, runs_only=True))
        row.update(_robustness(rows, name, resamples, seed))
        row.update(
            _verdict_shares(rows, name)
            if name in verdicts
            else dict.fromkeys(("right", "wrong", "abstained"), float("nan"))
        )
        table.append(row)
    by = {r["checkpoint"]: r for r in rows}
    moves = {}
    for column, kind, method in RETURNS:
        d = [
            r["graded_truth"] - by[r["parent"]]["graded_truth"]
            for r in rows
            if r["kind"] == kind and r["method"] == method and r["parent"] in by
        ]
        moves[column] = float(np.mean(d)) if d else float("nan")
    return MetaTable(table, len(rows), moves)


def null_check_share(rows: Sequence[Mapping[str, Any]], verdict: str) -> dict[str, float]:
    """The default design's null check on the zoo: the share of checkpoints it gates, and the
    share of wrong verdicts (column ``verdict``) among gated and among the other checkpoints
    (truth forgot or remembers)."""
    rows = [r for r in rows if r["null_gated_defaults"] is not None]
    gated = [r for r in rows if r["null_gated_defaults"]]
    free = [r for r in rows if not r["null_gated_defaults"]]

    def wrong(group: Sequence[Mapping[str, Any]]) -> float:
        judged = [r for r in group if r["truth"] != LABELS[2]]
        if not judged:
            return float("nan")
        return _verdict_shares(judged, verdict)["wrong"]

    return {
        "checkpoints": float(len(rows)),
        "gated": len(gated) / max(len(rows), 1),
        "wrong_gated": wrong(gated),
        "wrong_free": wrong(free),
        "gated_count": float(len(gated)),
    }
