"""The audit-grade report: verdicts, evidence, what was evaluated, as HTML, JSON and tables.

- :func:`report_document` is the report as a JSON document: the evaluation's numbers (the CLI's
  method §10 document), each model's verdict and explanation, and the manifest of what was
  evaluated (checkpoint and data hashes, settings, seeds, software; see
  :mod:`sde_core.services.audit`). ``python -m sde_core verify`` recomputes it.
- :func:`build_html_report` writes one self-contained HTML file (plotly.js inlined, no network
  request) with the sections of :data:`REPORT_SECTIONS`; it embeds :func:`report_document` in a
  ``<script type="application/json" id="sde-report">`` element, so the HTML alone can be
  verified. :func:`sde_core.viz.pdf.html_to_pdf` prints it to PDF.
- :data:`CAVEATS` are method §9's caveats written for a non-expert; the verdict sentences come
  from :mod:`sde_core.viz.verdicts`.
- :func:`tables_for_export` and :func:`to_csv_bytes` / :func:`to_json_bytes` /
  :func:`tables_to_zip` produce download payloads (e.g. for ``st.download_button``).

Every number is written by :func:`sde_core.viz.formatting.format_number`.
"""

from __future__ import annotations

import datetime as _dt
import html
import io
import json
import math
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sde_core import __version__
from sde_core.common.bounded_json import loads_bounded
from sde_core.common.csv_cells import neutralise_formula
from sde_core.errors import SettingsError
from sde_core.families.registry import family_of_entry
from sde_core.pipeline.criterion import Criterion
from sde_core.pipeline.evaluation.metric_table import METRICS
from sde_core.viz.answer import ANSWER_COLOURS, answer_counts, make_scope, workspace_answer
from sde_core.viz.figures import PLOTLY_CONFIG, comparison_bars, hsic_histogram
from sde_core.viz.formatting import (
    format_count,
    format_interval,
    format_number,
    format_percent,
    records,
)
from sde_core.viz.glossary import glossary_table
from sde_core.viz.verdicts import (
    CAN_CERTIFY,
    CANNOT_CERTIFY,
    estimate_text,
    explain_verdict,
    null_check_readings,
    over_unlearning_text,
    retrain_row,
    summarize_verdict,
    summary_order,
    verdict_table,
)

__all__ = [
    "CAVEATS",
    "COMPARISON_GROUPS",
    "EXPORT_TABLE_FORMATS",
    "REPORT_DATA_ID",
    "REPORT_FORMAT",
    "REPORT_FORMAT_VERSION",
    "REPORT_MAX_DEPTH",
    "REPORT_SECTIONS",
    "AuditContext",
    "answer_html",
    "build_html_report",
    "comparison_table",
    "dataset_table",
    "draws_table",
    "manifest_tables",
    "measured_caveats",
    "near_ties_table",
    "null_calibration_text",
    "report_document",
    "report_figures",
    "report_from_html",
    "settings_table",
    "tables_for_export",
    "tables_to_zip",
    "to_csv_bytes",
    "to_json_bytes",
]

#: Formats of :func:`tables_to_zip`.
EXPORT_TABLE_FORMATS = ("csv", "json")
#: ``format`` and ``format_version`` of :func:`report_document`.
REPORT_FORMAT = "sde-report"
REPORT_FORMAT_VERSION = 1
#: ``id`` of the HTML element that holds the report document.
REPORT_DATA_ID = "sde-report"
#: Deepest nesting of a report document that is read (the reports written nest 6 levels).
REPORT_MAX_DEPTH = 64
#: The section titles of the HTML/PDF report, in order (the notes section only with notes).
REPORT_SECTIONS = (
    "The answer, per model",
    "Verdicts",
    "What SDE can and cannot certify",
    "Comparison",
    "Per-draw values",
    "Null calibration",
    "Charts",
    "What was evaluated",
    "Definitions",
    "Caveats",
)

#: The metrics the comparison table shows as "value [lo, hi]": SDE's, then the baselines'.
_HEADLINE_ESTIMATES = ("f1", "calibrated_f1", "dependence_score")
_BASELINE_ESTIMATES = ("mmd_f1", "w2_f1")
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


@dataclass(frozen=True)
class AuditContext:
    """Who ran an audit, for whom and why; printed on the report's first page when given.

    Attributes:
        purpose: why the audit was run (e.g. "erasure request #123, Art. 17 GDPR").
        requester: who asked for it. operator: who ran it (and signs it, with a key).
        role: the operator's role (printed in the signer block).
    """

    purpose: str | None = None
    requester: str | None = None
    operator: str | None = None
    role: str | None = None

    def items(self) -> list[tuple[str, str]]:
        """The given fields as ``(label, text)`` in print order (blank ones left out)."""
        fields = (("Purpose", self.purpose), ("Requested by", self.requester),
                  ("Operated by", self.operator), ("Role", self.role))  # fmt: skip
        return [(label, text.strip()) for label, text in fields if text and text.strip()]

    def to_dict(self) -> dict[str, str]:
        """The given fields as ``{"purpose"|"requester"|"operator": text}``."""
        return {k: v.strip() for k, v in asdict(self).items() if isinstance(v, str) and v.strip()}


#: method §9's caveats for a non-expert, as ``{title: explanation}``.
CAVEATS: dict[str, str] = {
    "The paper's reference check is over-confident": (
        "The paper's check compares 200 random splits of ONE subset of training data with 200 "
        "splits of ONE subset of unseen data, as if the splits were independent. They are not. "
        "When we drew both subsets from the same unseen data, where no difference exists, the "
        "check still declared a difference in 20–100% of pairs. 'References valid' is therefore "
        "weaker evidence than its p-value suggests. The calibrated test compares whole subsets "
        "(20 per side) and keeps its false alarms near its nominal rate: see the null-calibration "
        "paragraph for the rates measured on your models."
    ),
    "The score mostly measures spread": (
        "The split-half HSIC of a subset follows how spread out the model's outputs on that "
        "subset are (correlation ≥ 0.99 with a quantity that involves no pairing at all). "
        "Training data often get more confident, more spread-out outputs than unseen data, and "
        "that is what the test detects. The 'score vs spread' chart shows this for your model: "
        "when all points lie on one line, a verdict means 'spread like training data' — a useful "
        "trace of training, but not proof of a deeper statistical dependence."
    ),
    "Where the effect shows up": (
        "The effect is strong on the softmax outputs of models that overfit their training data "
        "(much higher accuracy on training than on test data). It can be weak or absent on "
        "well-regularised models and on inner layers such as the penultimate layer. There, "
        "invalid references are an honest 'cannot tell', not evidence of forgetting."
    ),
    "Check the negative control": (
        "Evaluate a randomly initialised copy of the architecture too (role 'random'). It has "
        "seen no data, so its references should be invalid and its verdicts meaningless. If it "
        "does look like it 'remembers', the differences come from the data themselves (for "
        "example, the forget set differs from the test data), not from training."
    ),
    "No trace found is not a guarantee": (
        "'Consistent with forgetting' means this test found no trace of the forget set; other "
        "attacks might. The goal is to look like the retrained model (retrained without the "
        "forget set), whose out-of-training rate need not be 100%."
    ),
}


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
    behaviour check (method §9). Columns the table lacks are shown as ``n/a``; a withheld
    headline number (method §12) as ``withheld``.
    """
    out = []
    for r in records(models):
        cal = _float(_get(r, "calibrated_otr"))
        panel_invalid = _get(r, "panel_valid") is not None and not bool(r["panel_valid"])
        out.append(
            {
                "model": r["name"],
                "role": _get(r, "role"),
                "method": _get(r, "method"),
                "layer": _get(r, "layer"),
                "σ": format_number(_get(r, "sigma")),
                "draws": format_count(_get(r, "draws")),
                "reference p": format_number(_get(r, "reference_p"), digits=2),
                f"{METRICS['otr'].label} (95% CI)": _rate_with_interval(r, "otr"),
                f"{METRICS['calibrated_otr'].label} (95% CI)": "n/a (panels invalid)"
                if panel_invalid and math.isnan(cal)
                else _rate_with_interval(r, "calibrated_otr"),
                **{METRICS[k].label: estimate_text(r, k) for k in _HEADLINE_ESTIMATES},
                "over-unlearned": over_unlearning_text(r),
                "Acc_r (%)": format_number(_get(r, "acc_r")),
                "Acc_f (%)": format_number(_get(r, "acc_f")),
                "Acc_te (%)": format_number(_get(r, "acc_te")),
                METRICS["asr"].label: format_percent(_get(r, "asr")),
                **{METRICS[k].label: estimate_text(r, k) for k in _BASELINE_ESTIMATES},
                "null FPR, split U-test": format_percent(_get(r, "null_split_fpr")),
                "null FPR, calibrated": format_percent(_get(r, "null_calibrated_fpr")),
                "null FPR, training → out": format_percent(_get(r, "null_out_of_training_fpr")),
                "score–spread r": format_number(_get(r, "score_spread_corr"), digits=2),
                "method time (s)": format_number(_get(r, "seconds")),
                "why withheld": _get(r, "inconclusive_reason") or "",
                "conflicting evidence": _text(_get(r, "evidence_conflict")),
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
                    classic(k) for k in ("acc_r", "acc_f", "acc_te")
                ),
                "attack": classic("asr"),
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
    if "null_split_fpr" not in models or "null_calibrated_fpr" not in models:
        return "This evaluation has no null-calibration diagnostic."
    split = models["null_split_fpr"].astype(float)
    cal = models["null_calibrated_fpr"].astype(float)

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
    return (
        f"For every model, {s.null_pairs} pairs of disjoint subsets of the test "
        "data outside the reference panels — which by construction do not differ — were put "
        "through both tests (method §12). The paper's split-level U-test declared a difference "
        f"in {span(split)} of pairs (at α = {format_percent(s.alpha)}); the calibrated test in "
        f"{span(cal)} of subsets (at α = {format_percent(s.alpha_calibrated)}). {verdicts} The "
        "per-model rates are in the comparison table."
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
                "reference p": format_number(d["reference_p"], digits=2),
                "panel p": format_number(d["panel_p"], digits=2),
                "OTR": num("otr"),
                "calibrated OTR": num("calibrated_otr"),
                "over-unlearned": num("over_unlearned_rate"),
                "F1": num("f1"),
                "calibrated F1": num("calibrated_f1"),
                "dependence score": num("dependence_score"),
                "null FPR, split U-test": format_percent(d["null_split_fpr"]),
                "null FPR, calibrated": format_percent(d["null_calibrated_fpr"]),
            }
        )
    return pd.DataFrame(rows)


def measured_caveats(result: Any) -> dict[str, str]:
    """:data:`CAVEATS` with the numbers measured on this evaluation (method §12's caveats:
    the split-level test's false-alarm rate and the score–spread correlation), so a report
    quotes the open workspace, not constants. Falls back to :data:`CAVEATS` for a result
    without the measurements."""
    try:
        c = result.caveats()
    except (KeyError, AttributeError):
        return dict(CAVEATS)
    out = dict(CAVEATS)

    def span(lo: float, hi: float) -> str:
        if math.isnan(lo):
            return "n/a (no null check ran)"
        a, b = format_percent(lo), format_percent(hi)
        return a if a == b else f"{a}–{b}"

    out["The paper's reference check is over-confident"] = (
        f"The paper's check compares {c.splits} random splits of ONE subset of training data "
        f"with {c.splits} splits of ONE subset of unseen data, as if the splits were "
        "independent. They are not. On this evaluation, pairs of disjoint subsets of the same "
        f"unseen data ({c.null_pairs} pairs per model), where no difference exists, made it "
        f"declare a difference in {span(c.split_fpr_min, c.split_fpr_max)} of pairs (nominal "
        f"level {format_percent(c.alpha)}). The calibrated test, which ranks whole subsets "
        f"against panels of reference subsets, declared one in "
        f"{span(c.calibrated_fpr_min, c.calibrated_fpr_max)} (nominal "
        f"{format_percent(c.alpha_calibrated)}). {c.references_valid} of {c.models} models "
        f"pass the paper's test and {c.panel_valid} the calibrated gate."
    )
    corr = (
        "n/a"
        if math.isnan(c.spread_corr_median)
        else f"{format_number(c.spread_corr_median, digits=3)} (median over models; range "
        f"{format_number(c.spread_corr_min, digits=3)}–"
        f"{format_number(c.spread_corr_max, digits=3)}; within a group of subsets "
        f"{format_number(c.spread_corr_within_min, digits=2)}–"
        f"{format_number(c.spread_corr_within_max, digits=2)})"
    )
    out["The score mostly measures spread"] = (
        "The split-half HSIC of a subset follows how spread out the model's outputs on that "
        f"subset are: on this evaluation the correlation of score and spread is {corr}. "
        "Training data often get more confident, more spread-out outputs than unseen data, and "
        "that is what the test detects. The 'score vs spread' chart shows this for your model: "
        "when all points lie on one line, a verdict means 'spread like training data' — a useful "
        "trace of training, but not proof of a deeper statistical dependence."
    )
    return out


def report_figures(result: Any) -> dict[str, go.Figure]:
    """The default charts of a report: OTR, calibrated OTR and (when computed) MIA ASR per model,
    and the histograms of the first original, retrained and random model (paper Fig. 2)."""
    figs = {"OTR per model": comparison_bars(result.models, "otr")}
    if "calibrated_otr" in result.models:
        figs["Calibrated OTR per model"] = comparison_bars(result.models, "calibrated_otr")
    if "asr" in result.models and np.isfinite(result.models["asr"].astype(float)).any():
        figs["MIA attack success rate per model"] = comparison_bars(result.models, "asr")
    for role in ("original", "retrained", "random"):
        found = result.models[result.models["role"] == role]
        if not found.empty:
            name = str(found.iloc[0]["name"])
            figs[f"H histograms: {name}"] = hsic_histogram(result, name)
    return figs


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


def _verdict_notes(result: Any, manifest: Mapping[str, Any] | None) -> dict[str, str]:
    """Each model's family verdict note (the family seam's ``verdict_note``), known by the
    ``arch`` the manifest records for it and the evaluated layer; none without a manifest."""
    models = (manifest or {}).get("models") or {}
    layer = str(result.settings.layer)
    return {
        str(name): family_of_entry(entry.get("arch"), layer).verdict_note
        for name, entry in models.items()
        if isinstance(entry, Mapping)
    }


def report_document(
    result: Any,
    manifest: Mapping[str, Any] | None = None,
    context: AuditContext | None = None,
) -> dict[str, Any]:
    """The report as a JSON document (what ``verify`` recomputes).

    Returns:
        ``{"format": "sde-report", "format_version": 1, "manifest": …, "settings": …,
        "workspace_hash": …, "models": {name: {…the method §10 fields…, "verdict",
        "explanation", "summary"}}}`` and, with a non-empty ``context``, ``"audit": {"purpose",
        "requester", "operator"}``; non-finite numbers are ``null``.
    """
    doc = result.to_json_dict()
    retrain = retrain_row(result.models)
    by_name = {row["name"]: row for row in records(result.models)}
    s = result.settings
    notes = _verdict_notes(result, manifest)
    for name, entry in doc["models"].items():
        explained = explain_verdict(
            by_name[name], s.targets, retrain, draws=getattr(result, "draws", None),
            note=notes.get(name, ""),
        )  # fmt: skip
        entry["verdict"] = explained.label
        entry["explanation"] = explained.text
        summary = summarize_verdict(
            by_name[name], s.targets, alpha=s.alpha, alpha_calibrated=s.alpha_calibrated,
            note=notes.get(name, ""),
        )  # fmt: skip
        entry["summary"] = {k: v for k, v in asdict(summary).items() if k not in ("name", "role")}
    audit = context.to_dict() if context is not None else {}
    return {
        "format": REPORT_FORMAT,
        "format_version": REPORT_FORMAT_VERSION,
        "manifest": dict(manifest) if manifest is not None else None,
        **({"audit": audit} if audit else {}),
        **doc,
    }


def _json_for_html(document: Mapping[str, Any]) -> str:
    """JSON safe inside ``<script>`` (``</`` escaped; strict: NaN/inf already null)."""
    return json.dumps(document, allow_nan=False, ensure_ascii=False).replace("</", "<\\/")


def report_from_html(text: str) -> dict[str, Any]:
    """The report document embedded in a report's HTML.

    Raises:
        SettingsError: the HTML holds no report document.
    """
    marker = f'<script type="application/json" id="{REPORT_DATA_ID}">'
    start = text.find(marker)
    end = text.find("</script>", start) if start >= 0 else -1
    if start < 0 or end < 0:
        raise SettingsError(
            "this HTML file holds no SDE report document: give the .json or .html written by "
            "`python -m sde_core report` or the dashboard's Report page"
        )
    return loads_bounded(
        text[start + len(marker) : end].encode("utf-8", "surrogatepass"),
        max_depth=REPORT_MAX_DEPTH,
        what="the report document in this HTML file",
        error=SettingsError,
    )


# --------------------------------------------------------------------------- HTML


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; color: #222;
       line-height: 1.45; padding: 0 1em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.hashes td { overflow-wrap: anywhere; }
figure { margin: 1.5em 0; }
figcaption { color: #666; font-size: 0.85em; }
code { font-family: ui-monospace, monospace; background: #f3f3f3; padding: 0 0.2em; }
.meta { color: #666; font-size: 0.9em; }
.wide { overflow-x: auto; }
.verdict-not-forgotten { color: #b24000; font-weight: bold; }
.verdict-consistent-with-forgetting { color: #00795a; font-weight: bold; }
.verdict-over-unlearned { color: #8a5a00; font-weight: bold; }
.verdict-mixed, .verdict-inconclusive { color: #555; font-weight: bold; }
.answers { display: grid; grid-template-columns: repeat(3, 1fr); gap: 0.6em; margin: 0.8em 0; }
.answer { border: 1px solid #999; border-left: 5px solid #555; border-radius: 3px;
          padding: 0.25em 0.5em; break-inside: avoid; font-size: 0.8em; line-height: 1.3; }
.answer p { margin: 0.1em 0; }
.intro, .meta { font-size: 0.8em; margin: 0.25em 0; }
h1 { margin: 0 0 0.2em 0; }
.answer .head { font-weight: bold; }
.answer .caveat, .answer .check { color: #444; font-size: 0.92em; }
.answer.conflict .check { color: #8a0000; font-weight: bold; }
.answer.verdict-box-not-forgotten { border-left-color: #b24000; }
.answer.verdict-box-consistent-with-forgetting { border-left-color: #00795a; }
.answer.verdict-box-over-unlearned { border-left-color: #8a5a00; border-left-style: double;
                                     border-left-width: 7px; }
.audit { border-collapse: collapse; margin: 0.4em 0; }
.audit th { background: none; border: none; padding: 0 1em 0 0; }
.audit td { border: none; padding: 0; }
.check-report { font-size: 0.7em; color: #333; border-top: 1px solid #ccc; padding-top: 0.3em; }
.withheld-list { font-size: 0.85em; }
.verdict-conflicting-evidence { color: #b00020; font-weight: bold; }
.line { border: 1px solid #bbb; border-left: 6px solid #777; border-radius: 3px;
        padding: 0.1em 0.5em; margin: 0.2em 0; break-inside: avoid; font-size: 0.78em; }
.line p { margin: 0.08em 0; }
.line .word { font-weight: bold; text-transform: uppercase; letter-spacing: 0.03em; }
.line .nums, .line .own { color: #444; font-size: 0.92em; }
.line-green { border-left-color: #00795a; } .line-green .word { color: #00795a; }
.line-red { border-left-color: #b24000; } .line-red .word { color: #b24000; }
.line-orange { border-left-color: #c77700; background: #fff6e5; }
.line-orange .word { color: #8a5000; }
.line-gray { border-left-color: #777; } .line-gray .word { color: #555; }
.criterion, .shared { font-size: 0.78em; margin: 0.15em 0; }
.page1 { display: grid; grid-template-columns: 5fr 2fr; gap: 0.8em; align-items: start; }
.scope, .signer { border: 1px solid #999; padding: 0.3em 0.6em; font-size: 0.74em;
                  break-inside: avoid; margin-bottom: 0.5em; }
.scope ul { margin: 0.1em 0; padding-left: 1.2em; }
.scope table, .signer table { font-size: 1em; margin: 0.2em 0; }
.scope td, .scope th, .signer td, .signer th { border: none; padding: 0.05em 0.6em 0.05em 0; }
.signer .blank { border-bottom: 1px solid #333; min-width: 14em; display: inline-block; }
@media print {
  body { max-width: none; margin: 0; font-size: 9.5pt; }
  table { font-size: 7.5pt; }
  figure, tr, .answer { break-inside: avoid; }
  h2 { break-after: avoid; margin: 0.5em 0 0.3em 0; }
  .page-break { break-before: page; }
  .wide { overflow: visible; }
  .modebar-container, .modebar { display: none !important; }
}
@page {
  size: A4 landscape; margin: 12mm 12mm 14mm 12mm;
  @bottom-right { content: "page " counter(page) " of " counter(pages); font-size: 8pt;
                  color: #555; font-family: system-ui, sans-serif; }
}
"""

#: Glossary entries the report's tables and sentences use.
_REPORT_TERMS = (
    "h", "sigma", "layer", "reference_p", "references_valid", "decision", "otr", "otr_ci",
    "f1", "dependence_score", "score", "spread", "score_spread_corr", "panel_p", "p_in",
    "p_out", "verdict", "calibrated_otr", "calibrated_f1", "n_over_unlearned",
    "null_split_fpr", "null_calibrated_fpr", "null_out_of_training_fpr", "panel_outliers",
    "inconclusive_reason", "evidence_conflict", "acc_gap", "mmd_f1", "w2_f1",
    "acc_r", "acc_f", "acc_te", "asr", "seconds", "eval_seconds", "subset_size", "targets",
    "splits", "panel_size", "seed", "alpha", "alpha_calibrated",
)  # fmt: skip


def _table_html(df: pd.DataFrame, *, hashes: bool = False) -> str:
    """A table; with ``hashes`` long hex digests may wrap anywhere inside their cells."""
    table = df.to_html(index=False, escape=True, na_rep="n/a", border=0)
    return f'<div class="wide{" hashes" if hashes else ""}">{table}</div>'


def _verdicts_html(table: pd.DataFrame, caveats: Mapping[str, str]) -> str:
    """The verdict table, each model's caveat beside its explanation."""
    rows = "".join(
        f"<tr><td>{html.escape(str(r['name']))}</td><td>{html.escape(str(r['role']))}</td>"
        f'<td class="verdict-{r["verdict"].replace(" ", "-")}">{html.escape(r["verdict"])}</td>'
        f"<td>{html.escape(r['explanation'])}</td>"
        f"<td>{html.escape(caveats.get(str(r['name']), ''))}</td></tr>"
        for r in records(table)
    )
    return (
        "<table><thead><tr><th>model</th><th>role</th><th>verdict</th><th>explanation</th>"
        '<th style="width: 22%">the caveat that matters for it</th>'
        f"</tr></thead><tbody>{rows}</tbody></table>"
    )


def answer_html(
    result: Any, criterion: Criterion | None = None, manifest: Mapping[str, Any] | None = None
) -> str:
    """Page 1's answer: the criterion, one line per audited model (its word, sentence,
    interval, paired differences and own caveat), the caveats they share stated once, the
    yardsticks in a line each, and the scope-and-limitations box."""
    s = result.settings
    criterion = criterion or Criterion()
    notes = _verdict_notes(result, manifest)
    answer = workspace_answer(
        result.models, result.draws, criterion, s.targets,
        alpha=s.alpha, alpha_calibrated=s.alpha_calibrated, notes=notes,
    )  # fmt: skip
    parts = [
        f'<p class="criterion"><strong>Criterion:</strong> {html.escape(criterion.describe())}.'
        f" <strong>Answer:</strong> {html.escape(answer_counts(answer.lines))}.</p>"
    ]
    for line in answer.lines:
        own = f'<p class="own">Caveat: {html.escape(line.caveat)}</p>' if line.caveat else ""
        nums = " · ".join((line.interval, line.vs_retrained, line.vs_original))
        parts.append(
            f'<div class="line line-{ANSWER_COLOURS[line.label]}"><p>'
            f'<span class="word">{html.escape(line.label)}</span> — '
            f"<strong>{html.escape(line.sentence)}</strong></p>"
            f'<p class="nums">{html.escape(nums)}</p>{own}</div>'
        )
    for text in answer.shared_caveats:
        parts.append(f'<p class="shared"><strong>Caveat:</strong> {html.escape(text)}</p>')
    yardsticks = [
        summarize_verdict(
            r,
            s.targets,
            alpha=s.alpha,
            alpha_calibrated=s.alpha_calibrated,
            note=notes.get(str(r["name"]), ""),
        )
        for r in summary_order(result.models)
        if r.get("role") != "unlearned"
    ]
    if yardsticks:
        items = "".join(
            f"<li><strong>{html.escape(a.name)}</strong> ({html.escape(a.role)}): "
            f"{html.escape(a.sentence)} {html.escape(a.interval)}.</li>"
            for a in yardsticks
        )
        parts.append(f'<ul class="shared">{items}</ul>')
    return "".join(parts)


def _scope_html(result: Any, manifest: Mapping[str, Any] | None, workspace_name: str) -> str:
    data = (manifest or {}).get("data", {})
    forget = (manifest or {}).get("forget_set", {}).get("size")
    kind = data.get("spec", {}).get("kind", "")
    text = f"{workspace_name}" + (f" ({kind})" if kind else "")
    if data.get("n_train") is not None:
        text += f": {data['n_train']} training rows, {data.get('n_test')} unseen"
    scope = make_scope(result.settings, text, forget, len(result.models))
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in scope.rows()
    )
    limits = "".join(f"<li>{html.escape(t)}</li>" for t in CANNOT_CERTIFY[:3])
    return (
        f'<div class="scope"><strong>Scope and limitations</strong><table>{rows}</table>'
        f"<p>This answer does not establish:</p><ul>{limits}</ul></div>"
    )


def _signer_html(context: AuditContext | None, signed_by: str | None, date: str) -> str:
    def cell(value: str | None) -> str:
        return (
            html.escape(value.strip()) if value and value.strip() else '<span class="blank"></span>'
        )

    name = context.operator if context is not None else None
    role = context.role if context is not None else None
    key = (
        f"Ed25519 key <code>{html.escape(signed_by)}</code>"
        if signed_by
        else "not signed electronically"
    )
    return (
        '<div class="signer"><strong>Signed by</strong><table>'
        f"<tr><th>Name</th><td>{cell(name)}</td></tr>"
        f"<tr><th>Role</th><td>{cell(role)}</td></tr>"
        f"<tr><th>Date</th><td>{html.escape(date)}</td></tr>"
        f"<tr><th>Signature</th><td>{key}</td></tr></table></div>"
    )


def _vector(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` without fill patterns (Chromium prints a patterned fill as a raster
    image per bar, which made a demo's PDF 85 MB): patterned traces keep their outline, drawn
    heavier, over a light fill; bars keep their text labels, which say what the patterns did."""
    out = go.Figure(fig)
    for trace in out.data:
        marker = getattr(trace, "marker", None)
        pattern = getattr(marker, "pattern", None) if marker is not None else None
        shape = getattr(pattern, "shape", None) if pattern is not None else None
        if not shape or (not isinstance(shape, str) and not any(shape)):
            continue
        trace.marker.pattern = None
        if trace.type == "histogram":
            trace.marker.line.width = 2.5
            trace.opacity = 0.35
    return out


def _comparison_html(models: pd.DataFrame) -> str:
    """The comparison as two tables and the reasons numbers are withheld as a list below."""
    table = comparison_table(models)
    parts = [
        f"<h3>{html.escape(title)}</h3>"
        + _table_html(table[[c for c in columns if c in table.columns]])
        for title, columns in COMPARISON_GROUPS.items()
    ]
    withheld = [(r["model"], r["why withheld"]) for r in records(table) if r["why withheld"]]
    if withheld:
        items = "".join(
            f"<li><strong>{html.escape(str(m))}</strong>: {html.escape(str(why))}</li>"
            for m, why in withheld
        )
        parts.append(f'<p>Why numbers are withheld (method §12):</p><ul class="withheld-list">'
                     f"{items}</ul>")  # fmt: skip
    return "".join(parts)


def _audit_html(context: AuditContext | None) -> str:
    rows = context.items() if context is not None else []
    if not rows:
        return ""
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="audit">{cells}</table>'


def _check_html(file_hint: str, document_sha256: str | None, signed_by: str | None) -> str:
    digest = (
        f"The report's data document (<code>{html.escape(_json_name(file_hint))}</code>) has "
        f"SHA-256 <code>{html.escape(document_sha256)}</code>. "
        if document_sha256
        else ""
    )
    signed = (
        f"It is signed with the operator's Ed25519 key <code>{html.escape(signed_by)}</code> "
        f"(<code>{html.escape(_stem(file_hint))}.sig.json</code>); compare that fingerprint "
        "with the one the operator published. "
        if signed_by
        else "This report is not signed. "
    )
    return (
        f'<p class="check-report"><strong>Checking this report.</strong> {digest}{signed}'
        f"<code>python -m sde_core verify {html.escape(file_hint)}</code> re-hashes every "
        "file the manifest names, recomputes every number and checks the signature; "
        "<code>--signature-only</code> checks only that no byte changed.</p>"
    )


def _footer_css(title: str, document_sha256: str | None) -> str:
    """The printed footer of every page: the report and its SHA-256 (the page number is at
    the right, from the static style)."""
    text = " ".join((title + (f" · SHA-256 {document_sha256}" if document_sha256 else "")).split())
    quoted = text.replace("\\", "\\\\").replace('"', '\\"').replace("<", "\\3c ")
    return (
        f'@page {{ @bottom-left {{ content: "{quoted}"; font-size: 7pt; color: #555; '
        "font-family: ui-monospace, monospace; } }"
    )


def _stem(file_hint: str) -> str:
    for suffix in (".html", ".htm", ".json", ".pdf"):
        if file_hint.lower().endswith(suffix):
            return file_hint[: -len(suffix)]
    return file_hint


def _json_name(file_hint: str) -> str:
    return f"{_stem(file_hint)}.json"


def _certify_html() -> str:
    can = "".join(f"<li>{html.escape(t)}</li>" for t in CAN_CERTIFY)
    cannot = "".join(f"<li>{html.escape(t)}</li>" for t in CANNOT_CERTIFY)
    return f"<p><strong>It can establish:</strong></p><ul>{can}</ul>" + (
        f"<p><strong>It cannot establish:</strong></p><ul>{cannot}</ul>"
    )


def _manifest_html(manifest: Mapping[str, Any] | None, file_hint: str) -> str:
    if manifest is None:
        return (
            "<p>This report was built without a manifest: it does not pin the checkpoints or "
            "the data and cannot be verified.</p>"
        )
    parts = [
        "<p>Everything below pins what was evaluated. To re-check this report against the "
        f"workspace, run <code>python -m sde_core verify {html.escape(file_hint)}</code>: it "
        "re-hashes every file, recomputes every number and says, per model, whether it is "
        "<em>identical</em>; <em>equivalent</em> — numbers moved only as far as another "
        "machine's last-bit differences allow (a decision that is a near-tie, a number within "
        "its conditioning; each moved field is named; method §13); or what <em>differs</em> "
        "(a file hash, a decision that is not a near-tie, a number beyond its tolerance).</p>"
    ]
    for title, table in manifest_tables(manifest).items():
        parts.append(f"<h3>{html.escape(title)}</h3>")
        parts.append(_table_html(table, hashes=True))
    return "".join(parts)


def build_html_report(
    result: Any,
    workspace_name: str,
    figures: Mapping[str, go.Figure] | Sequence[go.Figure] | None = None,
    notes: str | None = None,
    manifest: Mapping[str, Any] | None = None,
    file_hint: str = "REPORT.html",
    *,
    context: AuditContext | None = None,
    document_sha256: str | None = None,
    signed_by: str | None = None,
    criterion: Criterion | None = None,
) -> str:
    """A self-contained HTML report of an evaluation (opens offline: plotly.js is inlined once).

    The first page answers: who asked and why (``context``), one box per model with its verdict
    in a sentence, its paired differences and its own caveat (:func:`answer_html`), and how
    to check the report. Printed, every page is numbered.

    Args:
        result: an :class:`~sde_core.pipeline.evaluation.workspace_run.EvaluationResult`.
        workspace_name: shown in the title.
        figures: charts to embed, as ``{title: figure}`` or a list (default
            :func:`report_figures`).
        notes: free text from the user (escaped; blank lines separate paragraphs).
        manifest: what was evaluated (:func:`sde_core.services.audit.build_manifest`); without
            it the report says it cannot be verified.
        file_hint: the file name shown in the ``verify`` command.
        context: purpose, requester and operator, printed when given.
        document_sha256: the SHA-256 of the report's JSON file, printed on the first page.
        signed_by: the fingerprint of the key that signs the report files, if any.
        criterion: the workspace's criterion of forgetting (default: :class:`Criterion`'s).

    Returns:
        The HTML document with the sections of :data:`REPORT_SECTIONS` (and the notes), and the
        :func:`report_document` embedded for ``verify``.
    """
    if figures is None:
        figures = report_figures(result)
    items = list(figures.items()) if isinstance(figures, Mapping) else [(None, f) for f in figures]
    charts = []
    for i, (title, fig) in enumerate(items):
        caption = f"<figcaption>{html.escape(title)}</figcaption>" if title else ""
        body = _vector(fig).to_html(
            full_html=False, include_plotlyjs=i == 0, config=PLOTLY_CONFIG, default_width="100%"
        )
        charts.append(f"<figure>{body}{caption}</figure>")
    caveats = "".join(
        f"<li><strong>{html.escape(t)}.</strong> {html.escape(text)}</li>"
        for t, text in measured_caveats(result).items()
    )
    s = result.settings
    family_notes = _verdict_notes(result, manifest)
    model_caveats = {
        str(r["name"]): summarize_verdict(
            r,
            s.targets,
            alpha=s.alpha,
            alpha_calibrated=s.alpha_calibrated,
            note=family_notes.get(str(r["name"]), ""),
        ).caveat
        for r in records(result.models)
    }
    per_draw = draws_table(result)
    draws_html = (
        "<p>Each draw's own statistics (method §12: independent references, panels, targets "
        "and controls per draw; the headline numbers combine them — rates and F1 with a "
        "Korn–Graubard interval, the dependence score with Fieller's, p-values as the median "
        "and range). Numbers the gate withholds are withheld here too.</p>" + _table_html(per_draw)
        if not per_draw.empty
        else "<p>This result has no per-draw values.</p>"
    )
    notes_html = ""
    if notes and notes.strip():
        paragraphs = [p.strip() for p in notes.split("\n\n") if p.strip()]
        notes_html = "<h2>Notes</h2>" + "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"SDE report: {workspace_name}"
    document = _json_for_html(report_document(result, manifest, context))
    sections = dict(
        zip(
            REPORT_SECTIONS,
            (
                '<div class="page1"><div>'
                + answer_html(result, criterion, manifest)
                + "</div><div>"
                + _scope_html(result, manifest, workspace_name)
                + _signer_html(context, signed_by, now)
                + _check_html(file_hint, document_sha256, signed_by)
                + "</div></div>",
                _verdicts_html(verdict_table(result), model_caveats),
                _certify_html(),
                _comparison_html(result.models),
                draws_html,
                f"<p>{html.escape(null_calibration_text(result))}</p>",
                "".join(charts) or "<p>No charts.</p>",
                _manifest_html(manifest, file_hint)
                + f"<h3>Settings</h3>{_table_html(settings_table(result.settings))}"
                + "<h3>Near-ties</h3><p>Decisions whose inputs lie within float tolerance of "
                "their boundary: another machine may flip them, and the numbers built on them "
                "may move accordingly (method §13).</p>" + _table_html(near_ties_table(result)),
                _table_html(glossary_table(_REPORT_TERMS)),
                f"<ul>{caveats}</ul>",
            ),
            strict=True,
        )
    )
    page_break = '<div class="page-break"></div>'  # printed, the answers fill page 1
    body = "\n".join(
        f"{page_break if i == 1 else ''}<h2>{html.escape(t)}</h2>\n{content}"
        for i, (t, content) in enumerate(sections.items())
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_STYLE}{_footer_css(title, document_sha256)}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
{_audit_html(context)}
<p class="meta">Generated {now} by sde_core {html.escape(__version__)}
 · workspace hash {html.escape(str(result.workspace_hash))}
 · {len(result.models)} models · layer {html.escape(str(s.layer))}</p>
<p class="intro">Split-half Dependence Evaluation (SDE) asks whether subsets of the forget set
still look like the model's training data (in-training) or like data it never saw
(out-of-training). The out-of-training rate (OTR) is the share of {s.targets} random
forget-set subsets of {s.subset_size} rows that look unseen: higher means more forgetting;
the retrained model, which never saw the forget set, is the yardstick.</p>
{body}
{notes_html}
<script type="application/json" id="{REPORT_DATA_ID}">{document}</script>
</body>
</html>
"""


def tables_for_export(result: Any, *, include_h: bool = False) -> dict[str, pd.DataFrame]:
    """The result's tables for download.

    Returns:
        ``{"models": one row per model, "subsets": one row per scored subset, "verdicts":``
        :func:`verdict_table` ``, "settings":`` :func:`settings_table` ``}`` and, with
        ``include_h``, ``"h_values"``: every raw H value as rows ``model, array, subset, split,
        h`` (``subset`` is the row of a ``(T, K)`` array, 0 for the ``(K,)`` references).
    """
    tables = {
        "models": result.models.copy(),
        "subsets": result.subsets.copy(),
        "verdicts": verdict_table(result),
        "settings": settings_table(result.settings),
    }
    if include_h:
        parts = []
        for key, arr in result.arrays.items():
            model, name = key.split("/", 1)
            a = np.atleast_2d(np.asarray(arr, dtype=np.float64))
            subset, split = np.indices(a.shape)
            parts.append(
                pd.DataFrame(
                    {
                        "model": model,
                        "array": name,
                        "subset": subset.ravel(),
                        "split": split.ravel(),
                        "h": a.ravel(),
                    }
                )
            )
        columns = ["model", "array", "subset", "split", "h"]
        tables["h_values"] = (
            pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
        )
    return tables


def to_csv_bytes(df: pd.DataFrame) -> bytes:
    """UTF-8 CSV of a table (no index; floats at full precision, NaN as an empty field; text
    a spreadsheet would run as a formula gets a leading apostrophe, see
    :func:`~sde_core.common.csv_cells.neutralise_formula`)."""
    safe = df.map(neutralise_formula).rename(columns=neutralise_formula)
    return safe.to_csv(index=False).encode("utf-8")


def _json_cell(value: Any) -> Any:
    """A JSON value of a table cell: Python scalars, missing and non-finite numbers as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return None
    if not isinstance(value, (str, bool, int, float)) and pd.isna(value):
        return None
    return value


def to_json_bytes(df: pd.DataFrame) -> bytes:
    """UTF-8 JSON of a table: a list of row objects (floats exact, NaN/inf/missing as null)."""
    rows = [
        {str(k): _json_cell(v) for k, v in zip(df.columns, values, strict=True)}
        for values in df.itertuples(index=False, name=None)
    ]
    return json.dumps(rows, ensure_ascii=False).encode("utf-8")


def tables_to_zip(tables: Mapping[str, pd.DataFrame], fmt: str = "csv") -> bytes:
    """A ZIP archive holding ``<name>.<fmt>`` for every table."""
    if fmt not in EXPORT_TABLE_FORMATS:
        raise SettingsError(f"table format must be one of {EXPORT_TABLE_FORMATS}; got {fmt!r}")
    write = to_csv_bytes if fmt == "csv" else to_json_bytes
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, df in tables.items():
            archive.writestr(f"{name}.{fmt}", write(df))
    return buffer.getvalue()
