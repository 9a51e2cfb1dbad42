"""``python -m sde_core meta-eval PLAN [--work DIR] [--out DIR]``: the meta-evaluation of
method §17.

Builds the plan's checkpoint zoo (resumable, one cached checkpoint at a time), scores every
checkpoint with SDE and the retrain-free alternatives (cached too), labels its truth from the
retrained and original ensembles, and writes into ``--out`` (default
``reproduction/results``): ``meta_eval_<plan>.csv`` (one row per score),
``meta_eval_<plan>_checkpoints.csv`` (one row per checkpoint), ``meta_eval_<plan>.md`` (the
table), ``meta_eval_<plan>.json`` (the null check's power and gated share, the zoo's size and
times) and ``meta_eval_<plan>_roc.png``. Progress goes to stderr with an ETA; Ctrl-C stops it
and a rerun resumes from the caches. ``--eval-seed N`` evaluates the same zoo with another seed
(files ``meta_eval_<plan>-seedN*``): how much the tables move with the evaluation's own
randomness.
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

__all__ = ["register_meta_eval"]


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
    plan_name: str,
    work: Path | None,
    out: Path,
    data: str | None,
    scored_only: bool = False,
    eval_seed: int | None = None,
) -> dict:
    """Run the meta-evaluation and write its files; returns the JSON summary. With
    ``scored_only`` nothing is computed: the table covers the checkpoints scored so far. With
    ``eval_seed`` the plan's zoo (same work folder) is evaluated with that seed instead of its
    ``[eval] seed`` (:meth:`MetaPlan.with_eval_seed`; files ``meta_eval_<plan>-seed<N>*``)."""
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
    from sde_core.pipeline.meta_eval.summary import (
        LAYER_LABELS,
        VERDICT_SCORE,
        as_number,
        confusion,
        default_design,
        layer_scores,
        null_power,
        withheld_counts,
    )
    from sde_core.pipeline.meta_eval.truth import behaviour_measures, label_truth
    from sde_core.pipeline.meta_eval.zoo import build_zoo, load_zoo, zoo_probs
    from sde_core.viz.report.meta_eval import markdown_table, method_table, write_roc_figure
    from sde_core.viz.verdicts.labels import verdict_label

    plan = load_meta_plan(plan_name, data)
    work = work or Path("runs") / f"meta-eval-{plan.name}"
    if eval_seed is not None:
        plan = plan.with_eval_seed(eval_seed)
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
            n: as_number(r.get(raw_column(CALIBRATED_OTR.key))) for n, r in defaults.items()
        },
        **{
            f"{column}@{layer}": {
                n: read(rec["layers"][layer]["row"])
                for n, rec in records.items()
                if layer in rec.get("layers", {})
            }
            for layer in plan.layers
            for column, read in layer_scores(verdict_label).items()
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
            for column, label in LAYER_LABELS.items()
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
        "null_power": null_power(plan.settings, default_rows),
        "null_check_defaults": null_check_share(rows, "sde_verdict"),
        "null_check_defaults_own": null_check_share(rows, "sde_verdict_defaults"),
        "default_design": default_design(rows, default_rows),
        "confusion": confusion(rows, counts, "verdict"),
        "confusion_defaults": confusion(rows, counts, "verdict_defaults"),
        "withheld": withheld_counts(
            [records[r["checkpoint"]]["row"] for r in rows if r["verdict"] == "inconclusive"]
        ),
        "withheld_defaults": withheld_counts(
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
        args.eval_seed,
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
    p.add_argument(
        "--eval-seed",
        type=int,
        help="evaluate the plan's zoo with this seed instead of its [eval] seed (a held-out "
        "check of the evaluation's own randomness; outputs named PLAN-seedN, the zoo reused)",
    )
    p.set_defaults(func=_cmd)
