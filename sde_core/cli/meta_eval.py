"""``python -m sde_core meta-eval PLAN [--work DIR] [--out DIR]``: the meta-evaluation of
method §17.

Builds the plan's checkpoint zoo (resumable, one cached checkpoint at a time), scores every
checkpoint with SDE and the retrain-free alternatives (cached too), labels its truth from the
retrained and original ensembles, and writes into ``--out`` (default
``reproduction/results``): ``meta_eval_<plan>.csv`` (one row per score),
``meta_eval_<plan>_checkpoints.csv`` (one row per checkpoint), ``meta_eval_<plan>.md`` (the
table), ``meta_eval_<plan>.json`` (the null check's power and gated share, the zoo's size and
times) and ``meta_eval_<plan>_roc.png``. Progress goes to stderr with an ETA; Ctrl-C stops it
and a rerun resumes from the caches.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["VERDICT_SCORE", "register_meta_eval"]

#: The verdict's ordinal (higher: more forgotten) for the meta-evaluation.
VERDICT_SCORE = {
    "consistent with forgetting": 1.0,
    "over-unlearned": 0.75,
    "mixed": 0.5,
    "inconclusive": 0.5,
    "conflicting evidence": 0.25,
    "not forgotten": 0.0,
}


def _progress(stage: str) -> Any:
    def show(label: str, done: int, total: int, eta: float | None) -> None:
        left = "" if eta is None else f", about {max(eta, 0.0) / 60:.1f} min left"
        print(f"{stage} {done}/{total}: {label}{left}", file=sys.stderr, flush=True)

    return show


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    from sde_core.common.fsio import atomic_write_text

    if not rows:
        return
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    atomic_write_text(path, buf.getvalue())


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (nested) as None, for JSON."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _null_power(settings: Any, default_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The null check's power against a false-call rate of 2α: at the plan's fixed design
    (binomial, Clopper–Pearson as ``stats/null_power.py``, and simulated with the evaluation's
    Korn–Graubard interval over its B draws, ``meta_eval/null_sizing.py``), and for each
    checkpoint's default-design run (its pairs and draws; the panel effect of the shipped
    demos, ``SHIPPED_PANEL_ICC``): the median, least and greatest."""
    import numpy as np

    from sde_core.pipeline.meta_eval.null_sizing import (
        SHIPPED_PANEL_ICC,
        gate_power,
        pairs_for_gate_power,
    )
    from sde_core.stats.null_power import null_check_power, subsets_for_power

    a, level, draws = settings.alpha, settings.alpha_calibrated, settings.draws
    out: dict[str, Any] = {"level": level, "true_rate": 2 * level, "draws": draws}
    pairs = settings.null_pairs
    gate = null_check_power(2 * pairs, level, 2 * level, 1 - a)
    shown = null_check_power(2 * pairs, level, 2 * level, 0.975)
    simulated = gate_power(pairs, draws, level, 2 * level, a, reps=2000)
    out["fixed_design"] = {
        "pairs": pairs,
        "subsets": 2 * pairs,
        "gate_power": gate.power,
        "interval_power": shown.power,
        "gate_power_kg": simulated.gate,
        "interval_power_kg": simulated.interval,
    }
    designs = sorted(
        {(int(r["null_pairs"]), int(r["draws"])) for r in default_rows if r.get("null_pairs")}
    )
    found = {
        d: gate_power(*d, level, 2 * level, a, reps=2000, icc=SHIPPED_PANEL_ICC) for d in designs
    }
    runs = [
        found[(int(r["null_pairs"]), int(r["draws"]))] for r in default_rows if r.get("null_pairs")
    ]
    if runs:
        interval = np.array([g.interval for g in runs])
        fired = np.array([g.gate for g in runs])
        out["default_design"] = {
            "icc": SHIPPED_PANEL_ICC,
            "checkpoints": len(runs),
            "unseen_subsets_min": min(2 * g.pairs for g in runs),
            "draws_median": float(np.median([g.draws for g in runs])),
            "draws_min": min(g.draws for g in runs),
            "draws_max": max(g.draws for g in runs),
            "interval_power_median": float(np.median(interval)),
            "interval_power_min": float(interval.min()),
            "interval_power_max": float(interval.max()),
            "gate_power_median": float(np.median(fired)),
            "below_80": int(np.sum(interval < 0.8)),
        }
    out["subsets_for_80"] = {
        "gate": subsets_for_power(0.8, level, 2 * level, 1 - a),
        "interval": subsets_for_power(0.8, level, 2 * level, 0.975),
    }
    out["pairs_for_80_kg"] = {
        f"draws_{b}": pairs_for_gate_power(b, 0.8, level, 2 * level, a, step=20, reps=300)
        for b in (draws, 2 * draws)
    }
    train = settings.targets // 2
    out["out_of_training"] = {
        "subsets": train,
        "gate_power": null_check_power(train, level, 2 * level, 1 - a).power,
    }
    return out


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


#: The scores read at each of a plan's other layers (``[eval] layers``), by column prefix.
_LAYER_LABELS = {
    "sde_verdict": "SDE verdict (ordinal)",
    "sde_otr": "SDE OTR (before the gate)",
    "sde_calibrated_otr": "SDE calibrated OTR (before the gate)",
}


def _layer_scores(verdict_label: Any) -> dict[str, Any]:
    """How each of :data:`_LAYER_LABELS` is read from an evaluation row."""
    from sde_core.pipeline.evaluation.metric_table import CALIBRATED_OTR, OTR, raw_column

    return {
        "sde_verdict": lambda r: VERDICT_SCORE[verdict_label(r)],
        "sde_otr": lambda r: _number(r.get(raw_column(OTR.key))),
        "sde_calibrated_otr": lambda r: _number(r.get(raw_column(CALIBRATED_OTR.key))),
    }


def _default_design(
    rows: Sequence[Mapping[str, Any]], default_rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The default-design pass on the zoo: its draws, how often the precision target was
    reached (method §15's states), and how often its verdict is the fixed design's."""
    import numpy as np

    from sde_core.pipeline.evaluation.precision import precision_status

    states: dict[str, int] = {}
    for r in default_rows:
        found = precision_status({k: math.nan if v is None else v for k, v in r.items()})
        state = found[0] if found else "fixed design"
        states[state] = states.get(state, 0) + 1
    both = [r for r in rows if r["verdict_defaults"]]
    same = sum(1 for r in both if r["verdict"] == r["verdict_defaults"])
    draws = [int(r["draws"]) for r in default_rows]
    return {
        "checkpoints": len(default_rows),
        "precision_states": states,
        "draws_median": float(np.median(draws)) if draws else float("nan"),
        "draws_min": min(draws, default=0),
        "draws_max": max(draws, default=0),
        "same_verdict": same,
        "same_verdict_share": same / len(both) if both else float("nan"),
    }


def _confusion(
    rows: Sequence[Mapping[str, Any]], truths: Mapping[str, int], column: str
) -> dict[str, dict[str, int]]:
    """Checkpoints by truth and by the verdict in ``column``."""
    return {
        t: {v: sum(1 for r in rows if r["truth"] == t and r[column] == v) for v in VERDICT_SCORE}
        for t in truths
    }


#: Why an inconclusive verdict was withheld, by the words of its ``inconclusive_reason`` (the
#: null check's: ``scores.NULL_GATE``).
_WITHHELD = (
    ("panel outlier", "an outlying panel member"),
    ("reference test", "split-level reference test is not significant"),
    ("panels do not separate", "panels do not separate"),
)


def _withheld(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many inconclusive verdicts each reason withheld (the first reason a row names;
    "other" for the rest)."""
    from sde_core.pipeline.meta_eval.scores import NULL_GATE

    reasons = (*_WITHHELD, ("null check", NULL_GATE))
    out = dict.fromkeys([name for name, _ in reasons] + ["other"], 0)
    for row in rows:
        text = str(row.get("inconclusive_reason") or "")
        hits = [(text.find(words), name) for name, words in reasons if words in text]
        out[min(hits)[1] if hits else "other"] += 1
    return out


def _interleaved(zoo: Sequence[Any]) -> list[Any]:
    """The scoring order: the ensembles, then the bases' checkpoints alternating (so a run
    stopped early has scored every base alike)."""
    rank: dict[int, int] = {}
    keys = []
    for i, unit in enumerate(zoo):
        if not unit.parent:
            keys.append((0, i, 0))
        else:
            rank[unit.base] = rank.get(unit.base, -1) + 1
            keys.append((1, rank[unit.base], unit.base))
    return [u for _, u in sorted(zip(keys, zoo, strict=True), key=lambda kv: kv[0])]


def run_meta_eval(
    plan_name: str, work: Path | None, out: Path, data: str | None, scored_only: bool = False
) -> dict:
    """Run the meta-evaluation and write its files; returns the JSON summary. With
    ``scored_only`` nothing is computed: the table covers the checkpoints scored so far."""
    from sde_core.common.fsio import atomic_write_json, atomic_write_text
    from sde_core.pipeline.evaluation.metric_table import (
        ACC_F,
        ACC_R,
        ACC_TE,
        ASR,
        CALIBRATED_OTR,
        raw_column,
    )
    from sde_core.pipeline.meta_eval.agreement import (
        checkpoint_table,
        meta_table,
        null_check_share,
        reference_gap,
    )
    from sde_core.pipeline.meta_eval.scores import NULL_GATE, SCORES, score_zoo
    from sde_core.pipeline.meta_eval.spec import load_meta_plan
    from sde_core.pipeline.meta_eval.truth import behaviour_measures, label_truth
    from sde_core.pipeline.meta_eval.zoo import build_zoo, load_zoo, zoo_probs
    from sde_core.viz.report.meta_eval import markdown_table, method_table, write_roc_figure
    from sde_core.viz.verdicts.labels import verdict_label

    plan = load_meta_plan(plan_name, data)
    work = work or Path("runs") / f"meta-eval-{plan.name}"
    t0 = time.perf_counter()
    zoo = load_zoo(plan, work) if scored_only else build_zoo(plan, work, _progress("zoo"))
    t_zoo = time.perf_counter() - t0
    planned = len(zoo)
    records = score_zoo(plan, work, _interleaved(zoo), _progress("scores"), compute=not scored_only)
    zoo = [u for u in zoo if u.name in records]
    t_scores = time.perf_counter() - t0 - t_zoo
    dataset = plan.load_data()
    forget_probs = {u.name: zoo_probs(work, u.name)[0][dataset.forget] for u in zoo}
    originals = [u.name for u in zoo if u.kind == "original"]
    retrained = [u.name for u in zoo if u.kind == "retrained"]
    truths = label_truth(
        behaviour_measures(forget_probs, dataset.y_train[dataset.forget], originals, retrained),
        originals,
        retrained,
    )
    verdicts = {name: verdict_label(rec["row"]) for name, rec in records.items()}
    defaults = {n: rec["defaults"]["row"] for n, rec in records.items() if "defaults" in rec}
    reference = records["reference"]
    extra = {
        "sde_verdict": {n: VERDICT_SCORE[v] for n, v in verdicts.items()},
        "sde_verdict_defaults": {n: VERDICT_SCORE[verdict_label(r)] for n, r in defaults.items()},
        "sde_calibrated_otr_defaults": {
            n: _number(r.get(raw_column(CALIBRATED_OTR.key))) for n, r in defaults.items()
        },
        **{
            f"{column}@{layer}": {
                n: read(rec["layers"][layer]["row"])
                for n, rec in records.items()
                if layer in rec.get("layers", {})
            }
            for layer in plan.layers
            for column, read in _layer_scores(verdict_label).items()
        },
        "retrain_avg_gap": {
            n: reference_gap(rec, reference, (ACC_F.key, ACC_R.key, ACC_TE.key), ASR.key)
            for n, rec in records.items()
        },
    }
    rows = checkpoint_table(zoo, truths, records, extra)
    for row in rows:
        row["verdict"] = verdicts[row["checkpoint"]]
        row["verdict_defaults"] = (
            verdict_label(defaults[row["checkpoint"]]) if row["checkpoint"] in defaults else ""
        )
        row["draws_defaults"] = defaults.get(row["checkpoint"], {}).get("draws")
    default_rows = [defaults[r["checkpoint"]] for r in rows if r["checkpoint"] in defaults]
    labels = {
        "sde_verdict": "SDE verdict (ordinal)",
        "sde_verdict_defaults": "SDE verdict (ordinal), default design",
        **{s.name: s.label for s in SCORES},
        "sde_calibrated_otr_defaults": f"SDE {CALIBRATED_OTR.label} (before the gate), "
        "default design",
        **{
            f"{column}@{layer}": f"{label}, layer {layer}"
            for layer in plan.layers
            for column, label in _LAYER_LABELS.items()
        },
        "retrain_avg_gap": "retrain-based: −average gap to one retrained model "
        "(Acc_f, Acc_r, Acc_te, ASR)",
    }
    verdict_columns = (
        "sde_verdict",
        "sde_verdict_defaults",
        *(f"sde_verdict@{x}" for x in plan.layers),
    )
    table = meta_table(rows, labels, plan.bootstrap, plan.meta_seed, verdicts=verdict_columns)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"meta_eval_{plan.name}"
    _write_csv(out / f"{stem}.csv", table.rows)
    _write_csv(out / f"{stem}_checkpoints.csv", rows)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["truth"]] = counts.get(row["truth"], 0) + 1
    st = plan.settings
    truth = ", ".join(f"{v} {k}" for k, v in counts.items())
    scope = (
        f"{len(rows)} checkpoints of `{plan.name}` ({truth}); layer `output`, "
        f"n = {st.subset_size}, T = {st.targets}, K = {st.splits}, "
        f"B = {st.draws}, R = {st.panel_size}; point value [95% bootstrap interval over the "
        f"checkpoints, {plan.bootstrap} resamples]"
    )
    atomic_write_text(out / f"{stem}.md", markdown_table(table.rows, scope))
    atomic_write_text(out / f"{stem}_methods.md", method_table(rows, "sde_calibrated_otr"))
    roc = {
        k: labels[k]
        for k in (
            "sde_verdict",
            "sde_calibrated_otr",
            "sde_otr",
            "mmd_otr",
            "forget_loss_gap",
            "loss_attack",
            "retrain_avg_gap",
        )
    }
    write_roc_figure(rows, roc, out / f"{stem}_roc.png", plan.title)
    kinds: dict[str, int] = {}
    for row in rows:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    summary = {
        "plan": plan.name,
        "checkpoints": len(rows),
        "scored_of_planned": [len(zoo), planned],
        "kinds": kinds,
        "truth": counts,
        "threshold": next(iter(truths.values())).threshold,
        "truth_moves": table.truth_moves,
        "zoo_seconds": round(sum(u.seconds for u in zoo if math.isfinite(u.seconds)), 1),
        "score_seconds": round(sum(float(r.get("seconds", 0.0)) for r in records.values()), 1),
        "default_design_seconds": round(
            sum(float(r["defaults"]["seconds"]) for r in records.values() if "defaults" in r), 1
        ),
        "layer_seconds": {
            layer: round(
                sum(
                    float(r["layers"][layer]["seconds"])
                    for r in records.values()
                    if layer in r.get("layers", {})
                ),
                1,
            )
            for layer in plan.layers
        },
        "this_run_seconds": round(t_zoo + t_scores, 1),
        "null_power": _null_power(plan.settings, default_rows),
        "null_check_defaults": null_check_share(rows, "sde_verdict"),
        "null_check_defaults_own": null_check_share(rows, "sde_verdict_defaults"),
        "default_design": _default_design(rows, default_rows),
        "confusion": _confusion(rows, counts, "verdict"),
        "confusion_defaults": _confusion(rows, counts, "verdict_defaults"),
        "withheld": _withheld(
            [records[r["checkpoint"]]["row"] for r in rows if r["verdict"] == "inconclusive"]
        ),
        "withheld_defaults": _withheld(
            [defaults[r["checkpoint"]] for r in rows if r["verdict_defaults"] == "inconclusive"]
        ),
        "null_gated_default": sum(
            1
            for r in rows
            if NULL_GATE in str(records[r["checkpoint"]]["row"].get("inconclusive_reason") or "")
        ),
        "settings": {
            k: getattr(plan.settings, k)
            for k in ("subset_size", "targets", "splits", "draws", "panel_size", "null_pairs")
        },
        "default_settings": {
            k: getattr(plan.default_settings, k) for k in ("precision", "max_draws", "null_size")
        },
    }
    atomic_write_json(out / f"{stem}.json", _finite(summary))
    return summary


def _cmd(args: argparse.Namespace) -> int:
    summary = run_meta_eval(
        args.plan,
        Path(args.work) if args.work else None,
        Path(args.out),
        args.data,
        args.scored_only,
    )
    if not args.quiet:
        gated = summary["null_check_defaults"]
        print(f"{summary['checkpoints']} checkpoints {summary['truth']}; tables in {args.out}")
        print(f"the default design's null check gates {gated['gated']:.0%} of the zoo")
    return 0


def register_meta_eval(sub: argparse._SubParsersAction) -> None:
    """Add ``meta-eval`` to the CLI."""
    p = sub.add_parser(
        "meta-eval",
        help="meta-evaluation: how often SDE and the retrain-free scores are right on a zoo",
        description=__doc__,
    )
    p.add_argument("plan", help="a meta-evaluation plan file, or a shipped one's name (mnist1d)")
    p.add_argument("--work", help="work folder: the zoo and the scores (runs/meta-eval-PLAN)")
    p.add_argument("--out", default="reproduction/results", help="where the tables go")
    p.add_argument("--data", help="folder with data.npz and forget.npy (overrides the plan)")
    p.add_argument("--quiet", action="store_true", help="no summary on stdout")
    p.add_argument(
        "--scored-only",
        action="store_true",
        help="compute nothing: the tables over the checkpoints already scored (a partial run)",
    )
    p.set_defaults(func=_cmd)
