"""Many models on one page (issue 39): each model's method, strength and seed, filtering,
grouped summaries and pages, so the Compare page draws a bounded number of verdicts, bars and
leaderboard rows whatever the workspace holds.

- :func:`model_facets`: name, role, method, strength (the method's main hyper-parameter:
  :data:`STRENGTH_KEYS`, the first one the entry records) and seed of every entry;
- :func:`filter_models` and :func:`page_of`: the names shown;
- :func:`group_summary`: one row per group (method, strength, seed or any subset), with the
  count, the range and mean of the calibrated OTR and OTR, and how many are withheld or
  conflicting — the grouped summary a reader sees first at hundreds of models;
- :func:`verdict_counts`: how many models carry each verdict, the Report page's one-line answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from sde_core.pipeline.evaluation.metric_table import CALIBRATED_OTR, OTR
from sde_core.viz.verdicts.labels import verdict_label

__all__ = [
    "GROUP_KEYS",
    "STRENGTH_KEYS",
    "filter_models",
    "group_summary",
    "model_facets",
    "page_count",
    "page_of",
    "verdict_counts",
]

#: What a group is made of.
GROUP_KEYS = ("method", "strength", "seed")
#: The hyper-parameter that is a method's strength, in order of preference.
STRENGTH_KEYS = ("lr", "alpha", "mask_ratio", "beta", "epochs")


def model_facets(entries: Iterable[Any]) -> pd.DataFrame:
    """``name, role, method, strength, seed`` of workspace entries (``strength`` is
    ``"<key>=<value>"`` of the first of :data:`STRENGTH_KEYS` the entry records, else "")."""
    rows = []
    for entry in entries:
        hyper = dict(getattr(entry, "hyperparameters", {}) or {})
        key = next((k for k in STRENGTH_KEYS if hyper.get(k) is not None), None)
        seed = getattr(entry, "seed", None)
        rows.append({
            "name": str(entry.name), "role": str(entry.role),
            "method": str(getattr(entry, "method", "") or entry.role),
            "strength": f"{key}={hyper[key]:g}" if key and isinstance(hyper[key], (int, float))
            else (f"{key}={hyper[key]}" if key else ""),
            "seed": "" if seed is None else str(seed),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=["name", "role", *GROUP_KEYS])


def filter_models(
    facets: pd.DataFrame,
    *,
    methods: Sequence[str] = (),
    roles: Sequence[str] = (),
    text: str = "",
) -> list[str]:
    """The names whose method is in ``methods`` and role in ``roles`` (empty: any) and whose
    name contains ``text`` (case-insensitive), in workspace order."""
    keep = pd.Series(True, index=facets.index)
    if methods:
        keep &= facets["method"].isin(list(methods))
    if roles:
        keep &= facets["role"].isin(list(roles))
    if text.strip():
        keep &= facets["name"].str.lower().str.contains(text.strip().lower(), regex=False)
    return facets.loc[keep, "name"].tolist()


def page_count(total: int, size: int) -> int:
    """How many pages of ``size`` hold ``total`` names (at least 1)."""
    return max(1, math.ceil(total / max(1, size)))


def page_of(names: Sequence[str], page: int, size: int) -> list[str]:
    """Page ``page`` (1-based, clipped to the last) of ``names``, ``size`` names per page."""
    last = page_count(len(names), size)
    page = min(max(1, int(page)), last)
    return list(names[(page - 1) * size : page * size])


def group_summary(models: pd.DataFrame, facets: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """One row per group of ``by`` (a subset of :data:`GROUP_KEYS`) over the models of
    ``models`` (an evaluation's ``models`` table): ``models`` (count), the mean, min and max
    calibrated OTR and OTR over the models whose numbers are not withheld, ``withheld`` and
    ``conflicting`` (counts), sorted by the groups."""
    keys = [k for k in GROUP_KEYS if k in by]
    if not keys:
        raise ValueError(f"group by at least one of {', '.join(GROUP_KEYS)}")
    frame = facets.merge(models, on="name", how="inner", suffixes=("", "_result"))
    conflict = frame.get("evidence_conflict", pd.Series("", index=frame.index))
    frame = frame.assign(
        _withheld=frame[CALIBRATED_OTR.key].isna(),
        _conflict=conflict.fillna("").astype(str) != "",
    )
    cal, otr = CALIBRATED_OTR.key, OTR.key
    out = frame.groupby(keys, sort=True, dropna=False).agg(
        models=("name", "size"),
        **{f"{cal} mean": (cal, "mean"), f"{cal} min": (cal, "min"), f"{cal} max": (cal, "max"),
           f"{otr} mean": (otr, "mean")},
        withheld=("_withheld", "sum"),
        conflicting=("_conflict", "sum"),
    )  # fmt: skip
    return out.reset_index()


def verdict_counts(models: pd.DataFrame) -> dict[str, int]:
    """How many rows of an evaluation's ``models`` table carry each verdict
    (:func:`~sde_core.viz.verdicts.labels.verdict_label`, the label of the models table), most
    frequent first (ties in label order)."""
    rows = ({str(k): v for k, v in row.items()} for row in models.to_dict("records"))
    labels = pd.Series([verdict_label(row) for row in rows], dtype=object)
    counts = labels.value_counts()
    return {str(k): int(counts[k]) for k in sorted(counts.index, key=lambda k: (-counts[k], k))}
