"""The report's tables: the comparison of the models (two groups of columns), the near ties, the
settings, the per-draw values, the null calibration's paragraph, and the manifest's data and
files. Every number is written by :func:`sde_core.viz.formatting.format_number`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd

from sde_core.pipeline.evaluation.metric_table import (
    ACC_F,
    ACC_R,
    ACC_TE,
    ASR,
    CALIBRATED_F1,
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    F1,
    METRICS,
    MMD_F1,
    NULL_CALIBRATED_FPR,
    NULL_OUT_OF_TRAINING_FPR,
    OTR,
    OVER_UNLEARNED_RATE,
    PANEL_P,
    REFERENCE_P,
    W2_F1,
)
from sde_core.viz.behaviour_text import behaviour_text
from sde_core.viz.formatting import (
    format_count,
    format_interval,
    format_number,
    format_percent,
    records,
)
from sde_core.viz.verdicts.labels import (
    estimate_text,
    over_unlearning_text,
)
from sde_core.viz.verdicts.null_check import null_check_power, null_check_readings

__all__ = [
    "COMPARISON_GROUPS",
    "comparison_table",
    "dataset_table",
    "draws_table",
    "manifest_tables",
    "near_ties_table",
    "null_calibration_text",
    "settings_table",
]

#: The metrics the comparison table shows as "value [lo, hi]": SDE's, then the baselines'.
_HEADLINE_ESTIMATES = (F1.key, CALIBRATED_F1.key, DEPENDENCE_SCORE.key)
_BASELINE_ESTIMATES = (MMD_F1.key, W2_F1.key)
#: The comparison table's columns, printed as two tables (one would squeeze 25 columns into a page).
COMPARISON_GROUPS: dict[str, tuple[str, ...]] = {
    "Headline numbers": (
        "model", "role", "method", "OTR (95% CI)", "calibrated OTR (95% CI)", "F1",
        "calibrated F1", "dependence score", "over-unlearned",
    ),
    "Diagnostics and classic metrics": (
        "model", "layer", "σ", "draws", "reference p", "Acc_r (%)", "Acc_f (%)", "Acc_te (%)",
        "MIA ASR", "MMD F1", "W2 F1", "null FPR, split U-test", "null FPR, calibrated",
        "score–spread r", "method time (s)",
    ),
}  # fmt: skip


def _get(row: Mapping[str, Any], key: str) -> Any:
    """``row[key]`` or None when the column is absent."""
    return row.get(key)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _rate_with_interval(row: Mapping[str, Any], key: str) -> str:
    """A rate as ``"62% (48–77%)"`` with its 95% interval (``"withheld"``/``"n/a"`` without)."""
    e = METRICS[key].from_columns(row)
    if math.isnan(e.value):
        return "withheld" if _get(row, "inconclusive_reason") else "n/a"
    return f"{format_percent(e.value)} ({format_interval(e.lo, e.hi)})"


def _text(value: Any) -> str:
    """A text column's value, "" when it is missing (None or NaN in an older row)."""
    return value if isinstance(value, str) else ""


def comparison_table(models: pd.DataFrame) -> pd.DataFrame:
    """The ``models`` table formatted for reading (strings; rates in %, intervals inline).

    Columns: model, role, method, layer, σ, draws, reference p, OTR (95% CI), calibrated OTR
    (95% CI), F1, calibrated F1, dependence score (each ``value [lo, hi]`` over the draws),
    over-unlearned (the model-level test with its p), Acc_r/Acc_f/Acc_te (%), MIA ASR, MMD F1,
    W2 F1, null FPR of both tests (and false out-of-training on training subsets), score–spread
    correlation, method time (s), why numbers are withheld and the conflicting evidence of the
    behaviour check (method §9) and the check itself with its intervals, for every family
    (:func:`~sde_core.viz.behaviour_text.behaviour_text`). Columns the table lacks are shown as
    ``n/a``; a withheld
    headline number (method §12) as ``withheld``.
    """
    out = []
    for r in records(models):
        cal = _float(_get(r, CALIBRATED_OTR.key))
        panel_invalid = _get(r, "panel_valid") is not None and not bool(r["panel_valid"])
        out.append(
            {
                "model": r["name"],
                "role": _get(r, "role"),
                "method": _get(r, "method"),
                "layer": _get(r, "layer"),
                "σ": format_number(_get(r, "sigma")),
                "draws": format_count(_get(r, "draws")),
                REFERENCE_P.label: format_number(_get(r, REFERENCE_P.key), digits=2),
                f"{OTR.label} (95% CI)": _rate_with_interval(r, OTR.key),
                f"{CALIBRATED_OTR.label} (95% CI)": "n/a (panels invalid)"
                if panel_invalid and math.isnan(cal)
                else _rate_with_interval(r, CALIBRATED_OTR.key),
                **{METRICS[k].label: estimate_text(r, k) for k in _HEADLINE_ESTIMATES},
                "over-unlearned": over_unlearning_text(r),
                f"{ACC_R.label} (%)": format_number(_get(r, ACC_R.key)),
                f"{ACC_F.label} (%)": format_number(_get(r, ACC_F.key)),
                f"{ACC_TE.label} (%)": format_number(_get(r, ACC_TE.key)),
                ASR.label: format_percent(_get(r, ASR.key)),
                **{METRICS[k].label: estimate_text(r, k) for k in _BASELINE_ESTIMATES},
                "null FPR, split U-test": format_percent(_get(r, "null_split_fpr")),
                "null FPR, calibrated": format_percent(_get(r, NULL_CALIBRATED_FPR.key)),
                "null FPR, training → out": format_percent(_get(r, NULL_OUT_OF_TRAINING_FPR.key)),
                "score–spread r": format_number(_get(r, "score_spread_corr"), digits=2),
                "method time (s)": format_number(_get(r, "seconds")),
                "why withheld": _get(r, "inconclusive_reason") or "",
                "conflicting evidence": _text(_get(r, "evidence_conflict")),
                "behaviour check": behaviour_text(r),
            }
        )
    return pd.DataFrame(out)


def near_ties_table(result: Any) -> pd.DataFrame:
    """Per model, the decisions another machine could flip (method §13): target and control
    decisions, gates, top-1 and attack decisions, with the H tolerance they were found with."""
    rows = []
    for name in result.models["name"]:
        t = result.near_ties(name)

        def classic(key: str, ties: Any = t) -> str:
            v = ties.classic.get(key, math.nan)
            return "not recorded" if not math.isfinite(v) else str(int(v))

        rows.append(
            {
                "model": name,
                "targets": f"{t.targets} of {t.targets_total}",
                "controls": f"{t.controls} of {t.controls_total}",
                "gates": "; ".join(t.gates) or "none",
                "top-1 (D_r, D_f, D_te)": ", ".join(
                    classic(k) for k in (ACC_R.key, ACC_F.key, ACC_TE.key)
                ),
                "attack": classic(ASR.key),
                "H tolerance (relative)": format_number(t.h_rtol, digits=2),
            }
        )
    return pd.DataFrame(rows)


def settings_table(settings: Any) -> pd.DataFrame:
    """The evaluation settings as rows ``setting``, ``value`` (values as strings)."""
    return pd.DataFrame(
        [{"setting": k, "value": str(v)} for k, v in asdict(settings).items()],
        columns=["setting", "value"],
    )


def null_calibration_text(result: Any) -> str:
    """A paragraph on the null-calibration diagnostic (method §9) across the result's models."""
    s = result.settings
    models = result.models
    if "null_split_fpr" not in models or NULL_CALIBRATED_FPR.key not in models:
        return "This evaluation has no null-calibration diagnostic."
    split = models["null_split_fpr"].astype(float)
    cal = models[NULL_CALIBRATED_FPR.key].astype(float)

    def span(x: pd.Series) -> str:
        x = x[np.isfinite(x)]
        if x.empty:
            return "n/a"
        lo, hi = format_percent(float(x.min())), format_percent(float(x.max()))
        return lo if lo == hi else f"{lo}–{hi}"

    failed = {
        reading.test: [
            str(r["name"])
            for r in records(models)
            for x in null_check_readings(r, s.alpha, s.alpha_calibrated)
            if x.test == reading.test and x.passed is False
        ]
        for reading in null_check_readings({}, s.alpha, s.alpha_calibrated)
    }
    verdicts = " ".join(
        f"The {test} fails its null check (significantly more false alarms than its level, "
        f"one-sided binomial p < 0.05) for: {', '.join(names)}."
        if names
        else f"The {test} passes its null check for every model."
        for test, names in failed.items()
    )
    column = models["null_pairs"] if "null_pairs" in models else pd.Series(dtype=float)
    pairs = sorted({int(x) for x in pd.to_numeric(column, errors="coerce").dropna()})
    ends = dict.fromkeys((pairs[0], pairs[-1])) if pairs else {s.null_pairs: None}
    counted = "–".join(str(x) for x in ends)  # "40" or "40–204"
    powers = pd.Series([null_check_power(r, s.alpha_calibrated)[0] for r in records(models)])
    power = (
        f" Its power: the calibrated check's 95% interval rules out its level when the true "
        f"false-call rate is twice it with probability {span(powers)} over the "
        "models (their subsets and draws, a draw's shared panel counted; method §9)."
        if np.isfinite(powers).any()
        else ""
    )
    return (
        f"For every model, {counted} pairs of disjoint subsets of the test "
        "data outside the reference panels — which by construction do not differ — were put "
        "through both tests (method §9). The paper's split-level U-test declared a difference "
        f"in {span(split)} of pairs (at α = {format_percent(s.alpha)}); the calibrated test in "
        f"{span(cal)} of subsets (at α = {format_percent(s.alpha_calibrated)}). {verdicts}"
        f"{power} The per-model rates are in the comparison table."
    )


def draws_table(result: Any) -> pd.DataFrame:
    """Every model's per-draw statistics (method §12), formatted: model, draw, targets,
    controls, reference p, panel p, OTR, calibrated OTR, over-unlearned share, F1, calibrated
    F1, dependence score, null FPR of both tests. Each draw's own (ungated) values; the
    headline numbers combine them. Empty when the result has no ``draws`` table."""
    draws = getattr(result, "draws", None)
    if draws is None or draws.empty:
        return pd.DataFrame()
    gated = {str(r["name"]): bool(r.get("inconclusive_reason")) for r in records(result.models)}
    rows = []
    for d in records(draws):
        withheld = gated.get(str(d["model"]), False)

        def num(key: str, d: Mapping[str, Any] = d, withheld: bool = withheld) -> str:
            if withheld and METRICS[key].gate is not None:
                return "withheld"
            if METRICS[key].unit == "%":
                return format_percent(d[key])
            return format_number(d[key], digits=3)

        rows.append(
            {
                "model": d["model"],
                "draw": int(d["draw"]) + 1,
                "targets": int(d["targets"]),
                "controls": int(d["controls"]),
                REFERENCE_P.label: format_number(d[REFERENCE_P.key], digits=2),
                PANEL_P.label: format_number(d[PANEL_P.key], digits=2),
                OTR.label: num(OTR.key),
                CALIBRATED_OTR.label: num(CALIBRATED_OTR.key),
                "over-unlearned": num(OVER_UNLEARNED_RATE.key),
                F1.label: num(F1.key),
                CALIBRATED_F1.label: num(CALIBRATED_F1.key),
                DEPENDENCE_SCORE.label: num(DEPENDENCE_SCORE.key),
                "null FPR, split U-test": format_percent(d["null_split_fpr"]),
                "null FPR, calibrated": format_percent(d[NULL_CALIBRATED_FPR.key]),
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- the manifest


def dataset_table(manifest: Mapping[str, Any]) -> pd.DataFrame:
    """The evaluated data as a small table (rows ``item``, ``value``) from a manifest."""
    data = manifest.get("data", {})
    forget = manifest.get("forget_set", {})
    spec = data.get("spec", {})
    names = data.get("class_names") or []
    classes = f"{len(names)}: " + ", ".join(map(str, names)) if names else "n/a"
    rows = [
        ("kind", spec.get("kind", "n/a")),
        ("source", spec.get("root", "n/a")),
        ("training rows (D_tr)", data.get("n_train", "n/a")),
        ("test rows (D_te)", data.get("n_test", "n/a")),
        ("classes", classes),
        ("forget set (D_f)", f"{forget.get('size', 'n/a')} rows from {forget.get('path', 'n/a')}"),
        ("data fingerprint (SHA-256)", data.get("fingerprint", "n/a")),
        ("forget-set indices (SHA-256)", forget.get("indices_sha256", "n/a")),
    ]
    return pd.DataFrame([{"item": k, "value": str(v)} for k, v in rows], columns=["item", "value"])


def manifest_tables(manifest: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """The manifest as titled tables: workspace, data, models, seeds, software, timing."""
    ws = manifest.get("workspace", {})
    generator = manifest.get("generator", {})
    workspace = pd.DataFrame(
        [
            {"item": item, "value": "" if value is None else str(value)}
            for item, value in (
                ("name", ws.get("name")),
                ("folder", ws.get("path")),
                ("workspace hash", ws.get("hash")),
                ("workspace.toml (SHA-256)", ws.get("toml_sha256")),
                ("created (UTC)", manifest.get("created")),
                ("sde_core", generator.get("sde_core")),
                ("ALGORITHM_VERSION", generator.get("algorithm_version")),
            )
        ],
        columns=["item", "value"],
    )
    models = pd.DataFrame(
        [
            {
                "model": name,
                "role": str(m.get("role", "")),
                "method": str(m.get("method", "")),
                "architecture": str(m.get("arch", "")),
                "checkpoint": str(m.get("checkpoint", "")),
                "SHA-256": str(m.get("sha256", "")),
                "matches workspace.toml": {True: "yes", False: "NO", None: "not recorded"}[
                    m.get("matches_recorded")
                ],
                "model seed": "n/a" if m.get("seed") is None else str(m.get("seed")),
                "method time (s)": format_number(m.get("method_seconds")),
                "evaluation time (s)": format_number(m.get("evaluation_seconds")),
            }
            for name, m in manifest.get("models", {}).items()
        ]
    )
    seeds = manifest.get("seeds", {})
    seed_rows = [{"item": "evaluation seed", "value": str(seeds.get("evaluation", ""))}]
    seed_rows += [{"item": k, "value": str(v)} for k, v in seeds.get("derived", {}).items()]
    env = manifest.get("environment", {})
    software = [
        {"item": "Python", "value": str(env.get("python", ""))},
        {"item": "platform", "value": str(env.get("platform", ""))},
        {"item": "CPU cores", "value": str(env.get("cpu_count", ""))},
    ] + [
        {"item": package, "value": str(version)}
        for package, version in env.get("packages", {}).items()
    ]
    timing = manifest.get("timing", {})
    timing_rows = [
        {"item": key.replace("_", " "), "value": format_number(value)}
        for key, value in timing.items()
    ]
    return {
        "Workspace and generator": workspace,
        "Data": dataset_table(manifest),
        "Models (checkpoint hashes)": models,
        "Seeds": pd.DataFrame(seed_rows, columns=["item", "value"]),
        "Software and platform": pd.DataFrame(software, columns=["item", "value"]),
        "Wall times": pd.DataFrame(timing_rows, columns=["item", "value"]),
    }
