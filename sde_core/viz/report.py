"""Plain-language verdicts, caveats, a self-contained HTML report and export tables.

- :func:`verdict_sentence` / :func:`verdict_label` explain one model's result to a non-expert,
  combining the paper's OTR, the calibrated OTR (method §9) and the Retrain model's value.
- :data:`CAVEATS` are method §9's caveats written for a non-expert.
- :func:`build_html_report` writes one HTML file that opens offline (plotly.js is inlined).
- :func:`tables_for_export` and :func:`to_csv_bytes` / :func:`to_json_bytes` /
  :func:`tables_to_zip` produce download payloads (e.g. for ``st.download_button``).
"""

from __future__ import annotations

import datetime as _dt
import html
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sde_core import __version__
from sde_core.errors import SettingsError
from sde_core.viz.figures import PLOTLY_CONFIG, comparison_bars, hsic_histogram

__all__ = [
    "CAVEATS",
    "EXPORT_TABLE_FORMATS",
    "build_html_report",
    "comparison_table",
    "null_calibration_text",
    "report_figures",
    "settings_table",
    "tables_for_export",
    "tables_to_zip",
    "to_csv_bytes",
    "to_json_bytes",
    "verdict_label",
    "verdict_sentence",
    "verdict_table",
]

#: Formats of :func:`tables_to_zip`.
EXPORT_TABLE_FORMATS = ("csv", "json")

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


def _pct(x: float) -> str:
    """A rate in [0, 1] as a whole percentage (``"n/a"`` for NaN)."""
    return f"{100 * x:.0f}%" if np.isfinite(x) else "n/a"


def _interval(lo: float, hi: float) -> str:
    """An interval of rates as whole percentages, e.g. ``"1–8%"``."""
    return f"{100 * float(lo):.0f}–{100 * float(hi):.0f}%"


def _ci(lo: float, hi: float) -> str:
    return f"95% CI {_interval(lo, hi)}"


def verdict_label(row: Mapping[str, Any]) -> str:
    """Short verdict of the paper's rule for one ``models`` row.

    Returns:
        ``"inconclusive"`` (invalid references), ``"not forgotten"`` (OTR's 95% interval below
        50%), ``"consistent with forgetting"`` (interval above 50%) or ``"mixed"``.
    """
    if not bool(row["references_valid"]):
        return "inconclusive"
    if float(row["otr_hi"]) < 0.5:
        return "not forgotten"
    if float(row["otr_lo"]) > 0.5:
        return "consistent with forgetting"
    return "mixed"


def _calibrated_part(row: Mapping[str, Any], targets: int, label: str) -> str:
    if not bool(row["panel_valid"]):
        return (
            f" The calibrated test's reference panels do not separate training from unseen data "
            f"(p = {float(row['panel_p']):.2g}), so the calibrated test is inconclusive."
        )
    n_in, n_out = int(row["n_in_training"]), int(row["n_out_of_training"])
    n_inc = int(row["n_inconclusive"])
    text = (
        f" The calibrated test (whole reference subsets) finds {n_out} of {targets} draws "
        f"unseen-like, {n_in} training-like and {n_inc} inconclusive "
        f"(calibrated OTR {_pct(float(row['calibrated_otr']))})."
    )
    disagree = (label == "not forgotten" and n_out > n_in) or (
        label == "consistent with forgetting" and n_in > n_out
    )
    if disagree:
        text += " The two tests disagree: treat this result with caution."
    return text


def _retrain_part(row: Mapping[str, Any], retrain: Mapping[str, Any] | None) -> str:
    if row["role"] == "retrained":
        return " This retrained model is the gold standard the other models are compared with."
    if retrain is None:
        return (
            " There is no retrained model to compare with: add one (role 'retrained'), the gold "
            "standard of unlearning."
        )
    name = retrain["name"]
    if not bool(retrain["references_valid"]):
        return f" The retrained model {name} has invalid references, so it gives no reference OTR."
    re_otr, re_lo, re_hi = (float(retrain[k]) for k in ("otr", "otr_lo", "otr_hi"))
    ref = f"The retrained model {name} (the gold standard) has OTR {_pct(re_otr)}"
    if not bool(row["references_valid"]):
        return f" {ref}."
    lo, hi = float(row["otr_lo"]), float(row["otr_hi"])
    if hi < re_lo:
        where = "this model's OTR is clearly lower, so it forgets less than retraining would"
    elif lo > re_hi:
        where = "this model's OTR is clearly higher than retraining's"
    else:
        where = "this model is within the uncertainty of it"
    return f" {ref} ({_ci(re_lo, re_hi)}): {where}."


def verdict_sentence(
    row: Mapping[str, Any], targets: int, retrain: Mapping[str, Any] | None = None
) -> str:
    """A plain-language verdict for one model, for a non-expert.

    Args:
        row: the model's row of the ``models`` table (a dict or a pandas Series).
        targets: T, the number of target subsets drawn (``result.settings.targets``).
        retrain: the Retrain model's row, or None when the workspace has none.

    Returns:
        Sentences stating the paper's verdict with its numbers (draws out of T, OTR and its 95%
        Wilson interval), the calibrated test's counts, and the comparison with the Retrain model.
    """
    if isinstance(targets, bool) or not isinstance(targets, (int, np.integer)) or targets < 1:
        raise SettingsError(f"targets must be a positive number of draws; got {targets!r}")
    label = verdict_label(row)
    otr, lo, hi = float(row["otr"]), float(row["otr_lo"]), float(row["otr_hi"])
    k_out = round(otr * targets)
    k_in = targets - k_out
    stats = f"(OTR {_pct(otr)}, {_ci(lo, hi)})"
    if label == "inconclusive":
        text = (
            f"References invalid (p = {float(row['reference_p']):.2g}): this model's split-half "
            "HSIC does not tell its training data from unseen data here, so every decision is "
            "inconclusive — try another layer, σ, a larger n or more splits."
        )
    elif label == "not forgotten":
        text = (
            f"Subsets of the forget set still look like training data in {k_in} of {targets} "
            f"draws {stats}: the model has NOT forgotten them."
        )
    elif label == "consistent with forgetting":
        text = (
            f"Subsets of the forget set look like unseen data in {k_out} of {targets} draws "
            f"{stats}: consistent with forgetting."
        )
    else:
        text = (
            f"Subsets of the forget set look like unseen data in {k_out} of {targets} draws and "
            f"like training data in {k_in} {stats}: the evidence is mixed (partial forgetting or "
            "a weak signal)."
        )
    text += _calibrated_part(row, targets, label)
    if row["role"] == "random":
        text += (
            " This randomly initialised model is the negative control: it has seen no data, so "
            "a 'remembered' verdict here is a false alarm or a difference in the data "
            "themselves, not a trace of training."
        )
    return text + _retrain_part(row, retrain)


def _retrain_row(models: pd.DataFrame) -> dict[str, Any] | None:
    found = models[models["role"] == "retrained"]
    return None if found.empty else found.iloc[0].to_dict()


def verdict_table(result: Any) -> pd.DataFrame:
    """One row per model: ``name``, ``role``, ``method``, ``verdict`` (:func:`verdict_label`)
    and ``explanation`` (:func:`verdict_sentence`, compared with the first retrained model)."""
    retrain = _retrain_row(result.models)
    rows = [
        {
            "name": row["name"],
            "role": row["role"],
            "method": row["method"],
            "verdict": verdict_label(row),
            "explanation": verdict_sentence(row, result.settings.targets, retrain),
        }
        for row in result.models.to_dict("records")
    ]
    return pd.DataFrame(rows, columns=["name", "role", "method", "verdict", "explanation"])


def _num(x: Any, digits: int = 3) -> str:
    value = float(x)
    return f"{value:.{digits}g}" if np.isfinite(value) else "n/a"


def comparison_table(models: pd.DataFrame) -> pd.DataFrame:
    """The ``models`` table formatted for reading (strings; rates in %, intervals inline).

    Columns: model, role, method, layer, σ, reference p, OTR (95% CI), calibrated OTR (95% CI),
    F1, calibrated F1, dependence score, Acc_r/Acc_f/Acc_te (%), MIA ASR, MMD F1, W2 F1, null
    FPR of both tests, score–spread correlation, method time (s).
    """
    out = []
    for r in models.to_dict("records"):
        cal = float(r["calibrated_otr"])
        out.append(
            {
                "model": r["name"],
                "role": r["role"],
                "method": r["method"],
                "layer": r["layer"],
                "σ": _num(r["sigma"]),
                "reference p": _num(r["reference_p"], 2),
                "OTR (95% CI)": f"{_pct(float(r['otr']))} ({_interval(r['otr_lo'], r['otr_hi'])})",
                "calibrated OTR (95% CI)": "n/a (panels invalid)"
                if not np.isfinite(cal)
                else f"{_pct(cal)} ({_interval(r['calibrated_otr_lo'], r['calibrated_otr_hi'])})",
                "F1": _num(r["f1"]),
                "calibrated F1": _num(r["calibrated_f1"]),
                "dependence score": _num(r["dependence_score"]),
                "Acc_r (%)": _num(r["acc_r"]),
                "Acc_f (%)": _num(r["acc_f"]),
                "Acc_te (%)": _num(r["acc_te"]),
                "MIA ASR": _pct(float(r["asr"])),
                "MMD F1": _num(r["mmd_f1"]),
                "W2 F1": _num(r["w2_f1"]),
                "null FPR, split U-test": _pct(float(r["null_split_fpr"])),
                "null FPR, calibrated": _pct(float(r["null_calibrated_fpr"])),
                "score–spread r": _num(r["score_spread_corr"], 2),
                "method time (s)": _num(r["seconds"]),
            }
        )
    return pd.DataFrame(out)


def settings_table(settings: Any) -> pd.DataFrame:
    """The evaluation settings as rows ``setting``, ``value`` (values as strings)."""
    return pd.DataFrame(
        [{"setting": k, "value": str(v)} for k, v in asdict(settings).items()],
        columns=["setting", "value"],
    )


def null_calibration_text(result: Any) -> str:
    """A paragraph on the null-calibration diagnostic (method §9) across the result's models."""
    s = result.settings
    split = result.models["null_split_fpr"].astype(float)
    cal = result.models["null_calibrated_fpr"].astype(float)

    def span(x: pd.Series) -> str:
        x = x[np.isfinite(x)]
        if x.empty:
            return "n/a"
        lo, hi = _pct(float(x.min())), _pct(float(x.max()))
        return lo if lo == hi else f"{lo}–{hi}"

    return (
        f"For every model, {s.null_pairs} pairs of disjoint subsets of the test "
        "data — which by construction do not differ — were put through both tests. The paper's "
        f"split-level U-test declared a difference in {span(split)} of pairs (a well-calibrated "
        f"test would do so in about {_pct(s.alpha)}); the calibrated test in {span(cal)} (it "
        f"should stay at or below {_pct(s.alpha_calibrated)}). The per-model rates are in the "
        "comparison table."
    )


def report_figures(result: Any) -> dict[str, go.Figure]:
    """The default charts of a report: OTR, calibrated OTR and (when computed) MIA ASR per model,
    and the histograms of the first original, retrained and random model (paper Fig. 2)."""
    figs = {
        "OTR per model": comparison_bars(result.models, "otr"),
        "Calibrated OTR per model": comparison_bars(result.models, "calibrated_otr"),
    }
    if np.isfinite(result.models["asr"].astype(float)).any():
        figs["MIA attack success rate per model"] = comparison_bars(result.models, "asr")
    for role in ("original", "retrained", "random"):
        found = result.models[result.models["role"] == role]
        if not found.empty:
            name = str(found.iloc[0]["name"])
            figs[f"H histograms: {name}"] = hsic_histogram(result, name)
    return figs


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; color: #222;
       line-height: 1.45; padding: 0 1em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
figure { margin: 1.5em 0; }
figcaption { color: #666; font-size: 0.85em; }
.meta { color: #666; font-size: 0.9em; }
.wide { overflow-x: auto; }
.verdict-not-forgotten { color: #b24000; font-weight: bold; }
.verdict-consistent-with-forgetting { color: #00795a; font-weight: bold; }
.verdict-mixed, .verdict-inconclusive { color: #555; font-weight: bold; }
"""


def _table_html(df: pd.DataFrame) -> str:
    table = df.to_html(index=False, escape=True, na_rep="n/a", border=0)
    return f'<div class="wide">{table}</div>'


def _verdicts_html(table: pd.DataFrame) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(str(r['name']))}</td><td>{html.escape(str(r['role']))}</td>"
        f'<td class="verdict-{r["verdict"].replace(" ", "-")}">{html.escape(r["verdict"])}</td>'
        f"<td>{html.escape(r['explanation'])}</td></tr>"
        for r in table.to_dict("records")
    )
    return (
        "<table><thead><tr><th>model</th><th>role</th><th>verdict</th><th>explanation</th>"
        f"</tr></thead><tbody>{rows}</tbody></table>"
    )


def build_html_report(
    result: Any,
    workspace_name: str,
    figures: Mapping[str, go.Figure] | Sequence[go.Figure] | None = None,
    notes: str | None = None,
) -> str:
    """A self-contained HTML report of an evaluation (opens offline: plotly.js is inlined once).

    Args:
        result: an :class:`~sde_core.pipeline.evaluate.EvaluationResult`.
        workspace_name: shown in the title.
        figures: charts to embed, as ``{title: figure}`` or a list (default
            :func:`report_figures`).
        notes: free text from the user (escaped; blank lines separate paragraphs).

    Returns:
        The HTML document: title, generation date (UTC), sde_core version, workspace hash, the
        settings, the per-model verdicts, the comparison table, the null-calibration paragraph,
        the charts, the caveats and the notes.
    """
    if figures is None:
        figures = report_figures(result)
    items = list(figures.items()) if isinstance(figures, Mapping) else [(None, f) for f in figures]
    charts = []
    for i, (title, fig) in enumerate(items):
        caption = f"<figcaption>{html.escape(title)}</figcaption>" if title else ""
        body = fig.to_html(full_html=False, include_plotlyjs=i == 0, config=PLOTLY_CONFIG)
        charts.append(f"<figure>{body}{caption}</figure>")
    caveats = "".join(
        f"<li><strong>{html.escape(t)}.</strong> {html.escape(text)}</li>"
        for t, text in CAVEATS.items()
    )
    notes_html = ""
    if notes and notes.strip():
        paragraphs = [p.strip() for p in notes.split("\n\n") if p.strip()]
        notes_html = "<h2>Notes</h2>" + "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"SDE report: {workspace_name}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p class="meta">Generated {now} by sde_core {html.escape(__version__)}
 · workspace hash {html.escape(str(result.workspace_hash))}
 · {len(result.models)} models</p>
<p>Split-half Dependence Evaluation asks whether subsets of the forget set still look like the
model's training data (in-training) or like data it never saw (out-of-training). The
out-of-training rate (OTR) is the share of {result.settings.targets} random forget-set subsets
that look unseen: higher means more forgetting; the retrained model is the target.</p>
<h2>Verdicts</h2>
{_verdicts_html(verdict_table(result))}
<h2>Comparison</h2>
{_table_html(comparison_table(result.models))}
<h2>Null calibration</h2>
<p>{html.escape(null_calibration_text(result))}</p>
<h2>Charts</h2>
{"".join(charts) or "<p>No charts.</p>"}
<h2>Settings</h2>
{_table_html(settings_table(result.settings))}
<h2>Caveats</h2>
<ul>{caveats}</ul>
{notes_html}
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
    """UTF-8 CSV of a table (no index; floats at full precision, NaN as an empty field)."""
    return df.to_csv(index=False).encode("utf-8")


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
    records = [
        {str(k): _json_cell(v) for k, v in zip(df.columns, values, strict=True)}
        for values in df.itertuples(index=False, name=None)
    ]
    return json.dumps(records, ensure_ascii=False).encode("utf-8")


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
