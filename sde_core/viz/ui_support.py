"""Small UI-free helpers of the dashboard: tables and parsers.

Nothing here imports Streamlit, so the checks are testable on their own and reusable by any
front end. Every rejection raises :class:`~sde_core.errors.InputError` (an
:class:`~sde_core.errors.SDEError`) whose message names the fix. The path policy
(``allowed_roots``, ``resolve_in_roots``) lives in :mod:`sde_core.common.paths` and the upload
checks (``check_upload``, ``safe_name``) in :mod:`sde_core.services.uploads`;
they are re-exported here for the pages that import them from this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from sde_core.common.sigma import SQRT_DIM, parse_sigma
from sde_core.errors import InputError, SettingsError
from sde_core.pipeline.evaluation.metric_table import (
    ACC_F,
    ACC_GAP,
    ACC_R,
    ACC_TE,
    ASR,
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    F1,
    METRICS,
    MMD_F1,
    OTR,
    OVER_UNLEARNED_RATE,
    OVER_UNLEARNING_P,
    W2_F1,
    hi_column,
    lo_column,
)
from sde_core.pipeline.settings import setting
from sde_core.pipeline.workspace import Problem
from sde_core.viz.behaviour_text import behaviour_cells
from sde_core.viz.family_texts import behaviour_missing
from sde_core.viz.formatting import format_estimate, records
from sde_core.viz.verdicts.labels import estimate_text, over_unlearning_text, verdict_label

__all__ = [
    "Eta",
    "comparison_display",
    "comparison_terms",
    "field_label",
    "layer_comparison_table",
    "parse_int_values",
    "parse_sigma_values",
    "problems_by_field",
]


#: Readable names of a workspace's fields (the keys of validation problems).
_FIELD_NAMES = {
    "dataset": "Dataset",
    "dataset.root": "Dataset folder or file",
    "dataset.kind": "Dataset kind",
    "forget_indices": "Forget set",
    "models": "Models",
    "defaults": "Evaluation defaults",
    "workspace folder": "Workspace folder",
    "workspace": "Workspace",
}
_MODEL_FIELDS = {"arch": "architecture", "name": "name", "role": "role",
                 "seconds": "method time", "checkpoint": "checkpoint file"}  # fmt: skip


def field_label(field: str) -> str:
    """A problem's field as the person reading it names it: ``"dataset.root"`` → ``"Dataset
    folder or file"``, ``"models[2].arch"`` → ``"Model 3: architecture"``,
    ``"defaults.subset_size"`` → ``"Evaluation default: Subset size n"``."""
    if field in _FIELD_NAMES:
        return _FIELD_NAMES[field]
    found = re.fullmatch(r"models\[(\d+)\](?:\.(\w+))?", field)
    if found:
        number, key = int(found.group(1)) + 1, found.group(2)
        return f"Model {number}" + (f": {_MODEL_FIELDS.get(key, key)}" if key else "")
    if field.startswith("defaults."):
        key = field.split(".", 1)[1]
        try:
            shown = setting(key).widget_label or key
        except SettingsError:
            shown = key
        return f"Evaluation default: {shown}"
    if field.startswith("dataset."):
        return f"Dataset {field.split('.', 1)[1]}"
    return field


def problems_by_field(problems: Iterable[Problem]) -> dict[str, list[Problem]]:
    """Validation problems grouped by field, in first-seen order."""
    out: dict[str, list[Problem]] = {}
    for p in problems:
        out.setdefault(p.field, []).append(p)
    return out


_SMALLEST_SUBSET = int(setting("subset_size").minimum or 1)


def parse_sigma_values(text: str) -> list[str | float]:
    """Parse a comma-separated list of σ values, each in the one σ syntax
    (:mod:`sde_core.common.sigma`: ``sqrt_dim``, ``0.5*sqrt_dim``, ``median`` or a number).

    Returns:
        The values as evaluation settings hold them (a rule's canonical text, a float σ).

    Raises:
        InputError: an entry outside the syntax, or no entry at all.
    """
    values: list[str | float] = [
        parse_sigma(token, "σ value").setting()
        for token in (t.strip() for t in text.split(","))
        if token
    ]
    if not values:
        raise InputError(f"give at least one σ value, e.g. 0.3, 1, {SQRT_DIM}")
    return values


def parse_int_values(text: str, minimum: int = _SMALLEST_SUBSET) -> list[int]:
    """Parse a comma-separated list of integers ≥ ``minimum`` (default: the smallest subset
    size n of :data:`~sde_core.pipeline.settings.SETTINGS`).

    Raises:
        InputError: a non-integer or too small entry, or an empty list.
    """
    values = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        if not re.fullmatch(r"\d+", token) or int(token) < minimum:
            raise InputError(f"{token!r} is not an integer ≥ {minimum}")
        values.append(int(token))
    if not values:
        raise InputError(f"give at least one integer ≥ {minimum}, e.g. 100, 200, 400")
    return values


#: Layer-independent columns of the comparison (from the ``output`` probabilities).
_CLASSIC = tuple((m.key, f"{m.label} (%)") for m in (ACC_R, ACC_F, ACC_TE))
#: The attack's column (its rate in %, as the accuracies).
_ASR_COLUMN = f"{ASR.label} (%)"
#: The behaviour check (method §9), layer-independent: D_f against unseen data.
_BEHAVIOUR = (
    (ACC_GAP.key, ACC_GAP.short_label),
    (lo_column(ACC_GAP.key), "Acc gap lo"),
    (hi_column(ACC_GAP.key), "Acc gap hi"),
    ("mia_forget", "MIA on D_f"),
    ("mia_unseen", "MIA on unseen"),
)
#: Metrics shown per layer by the comparison, each as its value and interval columns.
_PER_LAYER_METRICS = (
    OTR.key,
    CALIBRATED_OTR.key,
    F1.key,
    DEPENDENCE_SCORE.key,
    OVER_UNLEARNING_P.key,
)
#: Headline numbers shown as "value [lo, hi]" by :func:`comparison_display` (rates in % as in
#: the charts; F1 on its own scale).
_ESTIMATES = (OTR.key, CALIBRATED_OTR.key, OVER_UNLEARNED_RATE.key, F1.key, MMD_F1.key, W2_F1.key)


def _per_layer_columns() -> list[tuple[str, str]]:
    """``(column, label)`` of the comparison's per-layer columns: each metric of
    :data:`_PER_LAYER_METRICS` with its interval's ends (``"OTR"``, ``"OTR lo"``, ``"OTR hi"``),
    then the validity flags and the number of draws."""
    out = []
    for m in (METRICS[k] for k in _PER_LAYER_METRICS):
        out.append((m.key, m.short_label))
        if m.lo and m.hi:
            out += [(m.lo, f"{m.short_label} lo"), (m.hi, f"{m.short_label} hi")]
    return [*out, ("references_valid", "refs valid"), ("panel_valid", "panels valid"),
            ("draws", "draws")]  # fmt: skip


def layer_comparison_table(models_by_layer: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per model: Acc_r/f/te and MIA ASR (%), then OTR (with its 95% interval), calibrated
    OTR, F1, dependence score, reference validity and the verdict per layer, then the time in
    seconds.

    Args:
        models_by_layer: ``{layer: the models table of an evaluation at that layer}``; every
            table lists the same models. Values are copied, never recomputed; a column a table
            lacks is NaN, a withheld number stays NaN (shown as ``n/a``).
    """
    if not models_by_layer:
        raise InputError("choose at least one layer to compare")
    first = next(iter(models_by_layer.values()))
    nan = np.full(len(first), np.nan)

    def column(frame: pd.DataFrame, name: str) -> np.ndarray:
        return frame[name].to_numpy() if name in frame else nan

    table = first[["name", "role", "method"]].copy()
    for col, label in _CLASSIC:
        table[label] = column(first, col)
    table[_ASR_COLUMN] = column(first, ASR.key).astype(float) * 100
    for col, label in _BEHAVIOUR:
        table[label] = column(first, col)
    for layer, models in models_by_layer.items():
        by_name: Any = models.set_index("name").loc[table["name"]]
        for col, label in _per_layer_columns():
            table[f"{label} [{layer}]"] = column(by_name, col)
        table[f"verdict [{layer}]"] = [verdict_label(row) for row in records(by_name.reset_index())]
        if "inconclusive_reason" in by_name:  # method §12: why the numbers are withheld
            table[f"why inconclusive [{layer}]"] = by_name["inconclusive_reason"].to_numpy()
        if "evidence_conflict" in by_name:  # method §9: SDE vs the model's behaviour
            table[f"conflicting evidence [{layer}]"] = by_name["evidence_conflict"].to_numpy()
    table["time (s)"] = column(first, "seconds")
    return table.reset_index(drop=True)


def comparison_terms(columns: Sequence[str]) -> dict[str, str]:
    """The glossary keys of :func:`comparison_display`'s columns, for their header tooltips
    (``"OTR [output]"`` → ``otr_ci``: the column shows the value with its interval)."""
    keys = {
        **{METRICS[key].short_label: METRICS[key].glossary_key for key in _ESTIMATES},
        OTR.short_label: "otr_ci",
        DEPENDENCE_SCORE.short_label: DEPENDENCE_SCORE.glossary_key,
        **{label: key for key, label in _CLASSIC},
        _ASR_COLUMN: ASR.glossary_key,
        "refs valid": "references_valid",
        "verdict": "verdict",
        "time (s)": "seconds",
        "why inconclusive": "inconclusive_reason",
        "over-unlearned": "over_unlearned",
    }
    return {c: keys[c.split(" [")[0]] for c in columns if c.split(" [")[0] in keys}


def comparison_display(
    models_by_layer: Mapping[str, pd.DataFrame], family: str = "classifier"
) -> pd.DataFrame:
    """The comparison as the page shows it, the answer first: model, role, then per layer the
    verdict and the over-unlearning test (``"yes (p = 1.2e-4)"``), then each headline number as
    ``"62% [48%, 77%]"`` (OTR and calibrated OTR in %, as in the charts) or ``"0.62 [0.48,
    0.77]"`` (F1, dependence score; value and 95% interval over the draws, method §12),
    ``"withheld"`` when the gate withholds it (the ``why inconclusive`` column says why), then
    the accuracies, MIA ASR (%) and time, which stay numbers. The numeric table (for CSV export,
    rates in [0, 1]) is :func:`layer_comparison_table`. A classifier's accuracy and attack columns
    that a language model or a denoiser has no value in say so (``"n/a (language model)"``,
    :func:`~sde_core.viz.family_texts.behaviour_missing`; ``family`` from
    :func:`sde_core.services.answer.model_family`).
    """
    table = layer_comparison_table(models_by_layer)
    out = table[["name", "role"]].copy()
    for layer, models in models_by_layer.items():
        rows = records(models.set_index("name").loc[table["name"]].reset_index())
        out[f"verdict [{layer}]"] = table[f"verdict [{layer}]"].to_numpy()
        out[f"over-unlearned [{layer}]"] = [over_unlearning_text(r) for r in rows]
        for key in _ESTIMATES:
            out[f"{METRICS[key].short_label} [{layer}]"] = [estimate_text(r, key) for r in rows]
        for name in ("conflicting evidence", "refs valid", "why inconclusive"):
            column = f"{name} [{layer}]"
            if column in table:
                out[column] = table[column].to_numpy()
    for column in ("method", *(label for _, label in _CLASSIC), _ASR_COLUMN):
        values = table[column].to_numpy()
        missing = pd.isna(pd.to_numeric(pd.Series(values), errors="coerce")).all()
        if column != "method" and family != "classifier" and missing:
            values = np.array([behaviour_missing(family)] * len(values), dtype=object)
        out[column] = values
    gap = [label for _, label in _BEHAVIOUR[:3]]
    out[gap[0]] = [format_estimate(v, lo, hi) for v, lo, hi in table[gap].to_numpy()]
    if family != "classifier":  # the family's own behaviour check (method §9), in words
        first = records(next(iter(models_by_layer.values())).set_index("name").loc[table["name"]]
                        .reset_index())  # fmt: skip
        cells = [behaviour_cells(r) for r in first]
        out[gap[0]] = [behaviour_missing(family)] * len(out)
        for label in cells[0] if cells else ():
            out[label] = [c[label] for c in cells]
    out["time (s)"] = table["time (s)"].to_numpy()
    return out


class Eta:
    """The remaining time of a long run from its top-level progress (``progress(stage, done,
    total)`` of a sweep, a curve or a workspace): elapsed × (total − done) / done, measured from
    the first call."""

    #: The stages that count a run's units (points, checkpoints, models).
    TOP = ("sweep", "checkpoints", "models")

    def __init__(self, clock: Any = None) -> None:
        import time

        self._clock = clock or time.perf_counter
        self._start: float | None = None
        self._done, self._total = 0, 0

    def update(self, stage: str, done: int, total: int) -> None:
        """Record one progress call (only the top-level stages move the estimate)."""
        if self._start is None:
            self._start = self._clock()
        if stage in self.TOP:
            self._done, self._total = done, total

    def text(self) -> str:
        """``"unit 3 of 5, about 40 s left"`` (``""`` before the first unit finished)."""
        if self._start is None or not self._total or not self._done:
            return ""
        elapsed = self._clock() - self._start
        left = elapsed * (self._total - self._done) / self._done
        shown = f"{left:.0f} s" if left < 120 else f"{left / 60:.1f} min"
        return f"{self._done} of {self._total} done, about {shown} left"
