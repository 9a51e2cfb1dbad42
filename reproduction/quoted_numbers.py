"""Numbers quoted in README.md and REPRODUCTION.md, generated from the shipped results stores.

A number the docs quote for a bundled demo is never typed by hand: it sits between markers that
name where it comes from, and this script writes it from the demo's shipped store
(``assets/<demo>/results.sqlite``). Two kinds of marker:

- a **table** of every model of a demo's default run::

      <!-- quoted:table demo-facts -->
      ... generated ...
      <!-- /quoted -->

- a **null-check table** of the same run (``quoted:nulltable demo-facts``): per model the
  subsets the null check judged in each direction and its three calibrated false-call rates
  (method §9), and the paper's split-level test's rate on the same pairs;

- a **null-check summary** over every shipped demo (``quoted:nullsummary``): how many of the
  three calibrated false-call rates' intervals hold the exact level ``1/(R+1)``, how many lie
  below or above it, and on how many models the null check's gate fires; and the range of the
  paper's split-level test's rate on those pairs over every shipped model
  (``quoted:nullsplitrange``);

- a **generated file** shown in full (a table another script writes, e.g. the layer sweep)::

      <!-- quoted:file reproduction/results/facts/layers.md -->
      ... the file's text ...
      <!-- /quoted -->

- an **inline number** inside a sentence (the HTML comments do not render)::

      OTR <!-- quoted:demo-facts/original/otr -->0.15 [0.07, 0.28]<!-- /quoted -->

  The key is ``<demo folder>/<model>/<field>``. ``field`` is a metric of the metric table
  (:data:`~sde_core.pipeline.evaluation.metric_table.METRICS`), shown with its 95% interval as
  the dashboard's tables show it (:func:`~sde_core.viz.formatting.format_estimate`); append
  ``:point`` for the value alone; ``verdict`` is the verdict label
  (:func:`~sde_core.viz.verdicts.labels.verdict_label`); ``precision`` the precision state
  and widest half-width (:func:`~sde_core.pipeline.evaluation.precision.precision_status`,
  ``not reached, ±0.104``); ``<metric>_raw`` is a headline
  number before the gate (two decimals; prose must say so: it is not a verdict).

- a **paired comparison** of two models of a demo's run on the draws both ran (method §15), as
  the Answer page writes it (:func:`~sde_core.viz.answer.difference_text`)::

      <!-- quoted:demo-fashion-edm-mem/compare:retrained:original/f1 -->… points [… , …] vs
      original (paired, 10 draws)<!-- /quoted -->

  The key is ``<demo>/compare:<model>:<reference>/<metric>``, the metric one of
  :data:`~sde_core.pipeline.evaluation.comparisons.COMPARED_METRICS`. Whether two models
  differ "within the uncertainty" is quoted from this, never from two intervals' overlap.

Usage::

    python reproduction/quoted_numbers.py            # rewrite every marked number in place
    python reproduction/quoted_numbers.py --check    # exit 1 and list the stale ones

``tests/test_quoted_numbers.py`` runs the check, so a rebuilt store can never leave stale prose.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from sde_core.pipeline.evaluation.behaviour import stored_behaviour, with_behaviour
from sde_core.pipeline.evaluation.comparisons import COMPARED_METRICS, compare_models
from sde_core.pipeline.evaluation.metric_table import METRICS
from sde_core.pipeline.evaluation.precision import precision_status
from sde_core.pipeline.store import ResultsStore
from sde_core.viz.answer import difference_text
from sde_core.viz.formatting import format_estimate
from sde_core.viz.verdicts.labels import verdict_label

ROOT = Path(__file__).resolve().parents[1]
#: The documents whose marked numbers are generated.
DOCUMENTS = ("README.md", "REPRODUCTION.md")

_FILE = re.compile(
    r"<!-- quoted:file (?P<path>[\w./-]+) -->\n(?P<body>.*?)<!-- /quoted -->", re.DOTALL
)
#: An inline key: three parts split by "/"; the second and third may hold spaces and hyphens
#: (a meta-evaluation's state "not reached (budget spent)", a selector "verdict=consistent
#: with forgetting"), so only "/", ">" and a line end end them.
_INLINE = re.compile(
    r"<!-- quoted:(?P<key>[\w.@:-]+/[^/>\n]+/[^/>\n]+?) -->(?P<body>.*?)<!-- /quoted -->"
)
#: Any marker at all: each must be one of the kinds above (:func:`unread_markers`).
_ANY = re.compile(r"<!-- quoted:(?P<key>[^>\n]*?) -->")
_NULL_SUMMARY = re.compile(r"<!-- quoted:nullsummary -->(?P<body>.*?)<!-- /quoted -->", re.DOTALL)
_SPLIT_RANGE = re.compile(r"<!-- quoted:nullsplitrange -->(?P<body>.*?)<!-- /quoted -->")
#: The shipped demos the null-check summary covers.
DEMO_STORES = ("demo", "demo-mnist1d", "demo-facts", "demo-fashion-edm", "demo-fashion-edm-mem")
_TABLE = re.compile(
    r"<!-- quoted:(?P<kind>table|nulltable) (?P<demo>[\w.-]+) -->\n(?P<body>.*?)<!-- /quoted -->",
    re.DOTALL,
)

#: The columns of a generated table: header and the field each cell shows.
TABLE_FIELDS: tuple[tuple[str, str], ...] = (
    ("verdict", "verdict"),
    ("OTR", "otr"),
    ("calibrated OTR", "calibrated_otr"),
    ("F1", "f1"),
    ("over-unlearned share", "over_unlearned_rate"),
    ("Acc_f − Acc_te, points (classifiers)", "acc_gap"),
    ("draws B", "draws"),
)
#: The columns of a null-check table (method §9).
NULL_TABLE_FIELDS: tuple[tuple[str, str], ...] = (
    ("draws B", "draws"),
    ("unseen subsets", "null_subsets"),
    ("false in-training", "null_calibrated_fpr"),
    ("false over-unlearned", "null_over_unlearned_fpr"),
    ("training subsets", "null_train_subsets"),
    ("false out-of-training", "null_out_of_training_fpr"),
    ("paper's split test (nominal 1%)", "null_split_fpr"),
    ("gate", "null_gate"),
)
_TABLE_KINDS = {"table": TABLE_FIELDS, "nulltable": NULL_TABLE_FIELDS}


class QuotedNumberError(ValueError):
    """A marker names a demo, model or field the shipped stores do not have."""


@dataclass(frozen=True)
class StoredRun:
    """The default run a demo's shipped store holds: its settings and one row per model."""

    demo: str
    settings: Mapping[str, Any]
    models: dict[str, dict[str, Any]]
    draws: pd.DataFrame

    def model(self, name: str, key: str) -> dict[str, Any]:
        """The row of model ``name``; a :class:`QuotedNumberError` naming the marker ``key``
        and the models the run has when it has none of that name."""
        if name not in self.models:
            raise QuotedNumberError(
                f"{key}: demo {self.demo!r} has no model {name!r} (it has {', '.join(self.models)})"
            )
        return self.models[name]


@cache
def stored_run(demo: str, root: Path = ROOT) -> StoredRun:
    """The single complete run of ``assets/<demo>/results.sqlite``."""
    path = root / "assets" / demo / "results.sqlite"
    if not path.is_file():
        raise QuotedNumberError(f"no shipped store for demo {demo!r} ({path})")
    with ResultsStore(path, read_only=True) as store:  # a shipped file is never written to
        runs = store.list_runs()
        runs = runs[runs["status"] == "complete"]
        if len(runs) != 1:
            raise QuotedNumberError(
                f"{path} holds {len(runs)} complete runs; the docs quote exactly one"
            )
        run = runs.iloc[0]
        run_id = int(run["id"])
        # the models rows as the pages read them: with the behaviour cross-check of the
        # families that run it as its own stage (method §9), so a verdict quoted is the one shown
        models_df = with_behaviour(store.rows(run_id, "models"), stored_behaviour(store, run_id))
        rows = models_df.to_dict("records")
        draws = store.rows(run_id, "draws")
    models = {str(r["name"]): r for r in rows}
    return StoredRun(demo, json.loads(run["settings"]), models, draws)


def comparison_text(run: StoredRun, pair: str, metric: str) -> str:
    """A paired comparison ``<model>:<reference>`` of ``metric`` in a demo's stored run, as the
    Answer page writes it (see the module docstring)."""
    model, sep, reference = pair.partition(":")
    if not sep or not model or not reference:
        raise QuotedNumberError(f"compare:{pair}: name two models, compare:<model>:<reference>")
    for name in (model, reference):
        run.model(name, f"compare:{pair}")
    if metric not in COMPARED_METRICS:
        raise QuotedNumberError(
            f"compare:{pair}: {metric!r} is not compared; use one of {', '.join(COMPARED_METRICS)}"
        )
    models = pd.DataFrame(list(run.models.values()))
    return difference_text(compare_models(models, run.draws, model, reference, metric), reference)


def field_text(row: Mapping[str, Any], field: str) -> str:
    """One model's ``field`` as the docs quote it (see the module docstring)."""
    name, _, option = field.partition(":")
    if option not in ("", "point"):
        raise QuotedNumberError(f"unknown option {option!r} in field {field!r} (only ':point')")
    if name == "verdict":
        return verdict_label(row)
    if name == "draws":  # the draws run (the precision design's B for this model, method §15)
        return str(int(row["draws"]))
    if name == "precision":  # the precision state and the widest half-width (method §15)
        status = precision_status(row)
        if status is None:
            return "fixed design"
        half = float(row["precision_half_width"])
        return status[0] if not math.isfinite(half) else f"{status[0]}, ±{half:.3f}"
    if name in ("null_subsets", "null_train_subsets"):  # the null check's size (method §9)
        count = row["null_pairs"] * 2 if name == "null_subsets" else row[name]
        return str(int(count))
    if name == "null_split_fpr":
        return f"{100 * float(row[name]):.0f}%"
    if name == "null_gate":
        return "fires" if "null check" in str(row.get("inconclusive_reason") or "") else "passes"
    if name.endswith("_raw") and name.removesuffix("_raw") in METRICS:
        # a headline number before the gate (method §12): only under that label in the prose
        if name not in row:
            raise QuotedNumberError(f"the store has no {name!r} (no number before the gate)")
        value = float(row[name])
        return "n/a" if not math.isfinite(value) else f"{value:.2f}"
    metric = METRICS.get(name)
    if metric is None:
        raise QuotedNumberError(f"unknown field {name!r}: use a metric of the metric table")
    estimate = metric.from_columns(row, str(row.get("inconclusive_reason") or ""))
    if name == "acc_gap":  # percentage points, stored as points already
        value = estimate.value
        if not math.isfinite(value):
            return "n/a"
        if option or not (math.isfinite(estimate.lo) and math.isfinite(estimate.hi)):
            return f"{value:+.1f}".replace("-", "−")
        return f"{value:+.1f} [{estimate.lo:+.1f}, {estimate.hi:+.1f}]".replace("-", "−")
    if metric.unit == "%" and metric.scale == 1:  # stored in percent already (Acc_f, Acc_te)
        return "n/a" if not math.isfinite(estimate.value) else f"{estimate.value:.1f}%"
    lo, hi = (None, None) if option else (estimate.lo, estimate.hi)
    return format_estimate(
        estimate.value, lo, hi, percent=False, reason=estimate.withheld_reason or None
    )


def meta_eval_text(stem: str, row: str, field: str, root: Path = ROOT) -> str:
    """A number of a shipped meta-evaluation (method §17): ``row`` a score of
    ``reproduction/results/<stem>.csv`` (``sde_verdict``…) and ``field`` its column (``auc``:
    with its bootstrap interval; ``:point``: the value alone; ``right``/``wrong``/``abstained``
    as percentages); any other ``row`` is a path into ``<stem>.json`` (``summary`` its top,
    ``null_power.default`` a nested object) and ``field`` a key there (``:percent`` for a
    share)."""
    import csv

    name, _, option = field.partition(":")
    folder = root / "reproduction" / "results"
    with open(folder / f"{stem}.csv", newline="", encoding="utf-8") as fh:
        rows = {r["score"]: r for r in csv.DictReader(fh)}
    if row not in rows:
        node: Any = json.loads((folder / f"{stem}.json").read_text(encoding="utf-8"))
        path = [] if row == "summary" else row.removeprefix("summary.").split(".")
        for part in [*path, name]:
            if not isinstance(node, dict) or part not in node:
                raise QuotedNumberError(f"{stem}.json has no {row}/{name}")
            node = node[part]
        if isinstance(node, float):
            if option == "percent":
                return f"{100 * node:.0f}%"
            if node.is_integer():
                return str(int(node))
            return f"{node:.0f}" if abs(node) >= 100 else f"{node:.2f}"
        return str(node)
    if name not in rows[row]:
        raise QuotedNumberError(f"{stem}.csv has no column {name!r}")
    value = float(rows[row][name])
    if name in ("right", "wrong", "abstained"):
        return f"{100 * value:.0f}%"
    lo, hi = rows[row].get(f"{name}_lo", ""), rows[row].get(f"{name}_hi", "")
    if not math.isfinite(value):
        return "n/a"
    if option or lo in ("", "nan") or hi in ("", "nan"):
        return f"{value:.2f}"
    return f"{value:.2f} [{float(lo):.2f}, {float(hi):.2f}]"


def meta_eval_checkpoints_text(stem: str, selector: str, field: str, root: Path = ROOT) -> str:
    """A range, a count or the names of some checkpoints of a shipped meta-evaluation:
    ``reproduction/results/<stem>_checkpoints.csv``'s rows whose columns match ``selector``
    (``kind=unlearned,method=rl|salun``: comma-separated ``column=value``, ``|`` between the
    values allowed). ``field``: ``column:rangeN`` gives ``lo–hi`` with N decimals (the number
    alone when both agree), ``count`` how many rows match, ``names`` their names."""
    import csv

    path = root / "reproduction" / "results" / f"{stem}_checkpoints.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    wanted: dict[str, set[str]] = {}
    for part in filter(None, selector.split(",")):
        column, sep, values = part.partition("=")
        if not sep or not rows or column not in rows[0]:
            raise QuotedNumberError(f"{path.name}: bad selector {part!r}")
        wanted[column] = set(values.split("|"))
    chosen = [r for r in rows if all(r[c] in v for c, v in wanted.items())]
    if not chosen:
        raise QuotedNumberError(f"{path.name}: no checkpoint matches {selector!r}")
    if field == "count":
        return str(len(chosen))
    if field == "names":
        return ", ".join(r["checkpoint"] for r in chosen)
    name, _, option = field.partition(":")
    if name not in chosen[0] or not option.startswith("range") or not option[5:].isdigit():
        raise QuotedNumberError(f"{path.name}: want column:rangeN, count or names, got {field!r}")
    values = [float(r[name]) for r in chosen]
    if not all(math.isfinite(v) for v in values):
        raise QuotedNumberError(f"{path.name}: {name} is not finite for {selector!r}")
    digits = int(option[5:])
    lo, hi = (f"{v:.{digits}f}".replace("-", "−") for v in (min(values), max(values)))
    return lo if lo == hi else f"{lo}–{hi}"


def quoted(key: str, root: Path = ROOT) -> str:
    """The text of an inline marker's key ``<demo>/<model>/<field>`` (a demo's store), or
    ``meta_eval_<plan>/<score or summary>/<field>`` (a shipped meta-evaluation)."""
    demo, model, field = key.split("/")
    if demo.startswith("meta_eval_"):
        if model.startswith("checkpoints:"):
            return meta_eval_checkpoints_text(demo, model.removeprefix("checkpoints:"), field, root)
        return meta_eval_text(demo, model, field, root)
    run = stored_run(demo, root)
    if model.startswith("compare:"):
        return comparison_text(run, model.removeprefix("compare:"), field)
    return field_text(run.model(model, key), field)


def table(demo: str, root: Path = ROOT, kind: str = "table") -> str:
    """The markdown table of every model of ``demo``'s stored default run: the headline
    (``kind`` ``"table"``) or the null check (``"nulltable"``)."""
    run = stored_run(demo, root)
    s = run.settings
    fields = _TABLE_KINDS[kind]
    design = (
        f"precision ±{s['precision']:g} (a pilot of {s.get('pilot_draws')} draws of "
        f"{int(s['targets']) // int(s['draws'])} targets, budget {s.get('max_draws')}: B per model "
        "below)"
        if s.get("precision")
        else f"B = {s.get('draws')} draws"
    )
    if kind == "nulltable":
        size = s.get("null_size") if s.get("precision") else None
        design += f", null check sized at N = {size}" if size else ", null check unsized"
    scope = (
        f"`assets/{demo}`, layer `{s.get('layer')}`, σ = {s.get('sigma')}, n = "
        f"{s.get('subset_size')}, T = {s.get('targets')}, {design}, seed "
        f"{s.get('seed')}, algorithm version {s.get('algorithm')}; point value [95% interval]"
    )
    head = "| model | " + " | ".join(h for h, _ in fields) + " |"
    rule = "|---" * (len(fields) + 1) + "|"
    lines = [scope, "", head, rule]
    for name, row in run.models.items():
        cells = [field_text(row, f) for _, f in fields]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def null_summary(root: Path = ROOT) -> str:
    """One sentence on the null check of every model of every shipped demo (module docstring)."""
    rates = ("null_calibrated_fpr", "null_over_unlearned_fpr", "null_out_of_training_fpr")
    holds = below = above = gated = models = 0
    level = None
    for demo in DEMO_STORES:
        run = stored_run(demo, root)
        level = 1.0 / (int(run.settings["panel_size"]) + 1)
        for row in run.models.values():
            models += 1
            gated += "null check" in str(row.get("inconclusive_reason") or "")
            for rate in rates:
                lo, hi = float(row[f"{rate}_lo"]), float(row[f"{rate}_hi"])
                holds += lo <= level <= hi
                below += hi < level
                above += lo > level
    total = holds + below + above
    return (
        f"{holds} of the {total} intervals ({models} models × 3 rates) hold the exact level "
        f"{level:.3f}, {below} lie below it, {above} above it; the gate fires on {gated} of "
        f"the {models} models"
    )


def null_split_range(root: Path = ROOT) -> str:
    """The range of the paper's split-level test's rate on the null check's pairs over every
    model of every shipped demo (``10–45%``; nominal 1%)."""
    rates = [
        float(row["null_split_fpr"])
        for demo in DEMO_STORES
        for row in stored_run(demo, root).models.values()
    ]
    return f"{100 * min(rates):.0f}–{100 * max(rates):.0f}%"


def included(path: str, root: Path = ROOT) -> str:
    """The text of a generated file of the repository (inside it: no absolute path, no ``..``)."""
    target = (root / path).resolve()
    if Path(path).is_absolute() or ".." in Path(path).parts or not target.is_file():
        raise QuotedNumberError(f"no generated file {path!r} in the repository")
    return target.read_text(encoding="utf-8")


def render(text: str, root: Path = ROOT) -> str:
    """``text`` with every marked number and table regenerated from the stores."""
    text = _FILE.sub(
        lambda m: f"<!-- quoted:file {m['path']} -->\n{included(m['path'], root)}<!-- /quoted -->",
        text,
    )
    text = _TABLE.sub(
        lambda m: (
            f"<!-- quoted:{m['kind']} {m['demo']} -->\n{table(m['demo'], root, m['kind'])}"
            "<!-- /quoted -->"
        ),
        text,
    )
    text = _NULL_SUMMARY.sub(
        lambda m: f"<!-- quoted:nullsummary -->{null_summary(root)}<!-- /quoted -->", text
    )
    text = _SPLIT_RANGE.sub(
        lambda m: f"<!-- quoted:nullsplitrange -->{null_split_range(root)}<!-- /quoted -->", text
    )
    return _INLINE.sub(
        lambda m: f"<!-- quoted:{m['key']} -->{quoted(m['key'], root)}<!-- /quoted -->", text
    )


def markers(text: str) -> Iterator[tuple[str, str]]:
    """Every marker of ``text`` as (key, the text it holds now)."""
    for m in _FILE.finditer(text):
        yield f"file {m['path']}", m["body"]
    for m in _TABLE.finditer(text):
        yield f"{m['kind']} {m['demo']}", m["body"]
    for m in _NULL_SUMMARY.finditer(text):
        yield "nullsummary", m["body"]
    for m in _SPLIT_RANGE.finditer(text):
        yield "nullsplitrange", m["body"]
    for m in _INLINE.finditer(text):
        yield m["key"], m["body"]


def unread_markers(text: str) -> list[str]:
    """The keys of markers in ``text`` that none of the kinds above reads: a marker this script
    would leave as it is, however stale its number (``tests/test_quoted_numbers.py`` wants
    none)."""
    read = {key for key, _ in markers(text)}
    return [m["key"] for m in _ANY.finditer(text) if m["key"] not in read]


def stale(text: str, root: Path = ROOT) -> list[tuple[str, str, str]]:
    """The markers of ``text`` whose content differs from the store: (key, found, expected)."""
    out = []
    for key, body in markers(text):
        kind, _, name = key.partition(" ")
        if kind == "file":
            want = included(name, root)
        elif kind in _TABLE_KINDS:
            want = table(name, root, kind)
        elif kind == "nullsummary":
            want = null_summary(root)
        elif kind == "nullsplitrange":
            want = null_split_range(root)
        else:
            want = quoted(key, root)
        if body != want:
            out.append((key, body, want))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="list stale numbers, write nothing")
    args = parser.parse_args(argv)
    bad = 0
    for name in DOCUMENTS:
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        if args.check:
            for key, found, want in stale(text):
                bad += 1
                print(f"{name}: {key}: quotes {found.strip()!r}, the store gives {want.strip()!r}")
        else:
            new = render(text)
            if new != text:
                path.write_text(new, encoding="utf-8")
                print(f"{name}: updated")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
