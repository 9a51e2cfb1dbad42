"""Coverage of the evaluation's intervals across seeds (method §12), on the bundled demos.

For every demo, model and seed 0..S-1 the evaluation runs at the workspace ``[defaults]`` with
only the seed changed (the HSIC stages: references, panels, controls, null check; the classic
metrics, cheap, are computed too: the behaviour check behind ``evidence_conflict``; the baselines
do not enter). Each (demo, seed, model) is one unit of a
results store, so an interrupted run resumes where it stopped (``--store``, default
``reproduction/results/coverage.sqlite``).

``--report`` then computes, per model and metric, the many-seed mean of the point value and
the share of seeds whose 95% interval covers it (only seeds where the number is reported: the
gate withholds it when the reference panels do not separate; how often is in the table), and
writes ``reproduction/results/coverage.md``.

    nohup nice -n 10 .venv/bin/python reproduction/interval_coverage.py --seeds 30 \
        > coverage.log 2>&1 &
    .venv/bin/python reproduction/interval_coverage.py --seeds 30 --report

(Named ``interval_coverage`` rather than ``coverage``: a script called ``coverage.py`` would
shadow the coverage package that numba imports.)
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sde_core.pipeline.evaluation.session import EvaluationSession  # noqa: E402
from sde_core.pipeline.store import ResultsStore  # noqa: E402

DEMOS = {"fashion-mnist": ROOT / "assets" / "demo", "mnist1d": ROOT / "assets" / "demo-mnist1d"}
STAGES = ("references", "panels", "controls", "null", "classic")
#: metric -> (point, lo, hi) columns of the models table.
METRICS = {
    "OTR": ("otr", "otr_lo", "otr_hi"),
    "calibrated OTR": ("calibrated_otr", "calibrated_otr_lo", "calibrated_otr_hi"),
    "F1": ("f1", "f1_lo", "f1_hi"),
    "dependence score": ("dependence_score", "dependence_score_lo", "dependence_score_hi"),
}


def _run_key(
    session: EvaluationSession, seeds: int, models: list[str] | None = None
) -> dict[str, object]:
    settings = session.defaults()
    key = {k: v for k, v in settings.result_key().items() if k != "seed"}
    key = {**key, "study": "coverage", "stages": list(STAGES), "seeds": seeds}
    return {**key, "models": sorted(models)} if models else key


def run(seeds: int, store_path: Path, demos: list[str], only: list[str] | None = None) -> None:
    """Evaluate every (demo, seed, model) not yet in the store."""
    sessions = {d: EvaluationSession(DEMOS[d], stage_dir=None, memory_items=0) for d in demos}
    with ResultsStore(store_path) as store:
        runs = {
            d: store.open_run(s.workspace_hash, _run_key(s, seeds, only))
            for d, s in sessions.items()
        }
        for seed in range(seeds):
            for demo, session in sessions.items():
                run_id = runs[demo].id
                done = store.finished_units(run_id)
                settings = session.defaults().with_overrides(seed=seed)
                for entry in session.workspace.models:
                    if only and entry.name not in only:
                        continue
                    unit = f"{seed}/{entry.name}"
                    if unit in done:
                        continue
                    t0 = time.perf_counter()
                    result = session.evaluate([entry.name], settings, stages=STAGES)
                    models = result.models.assign(seed=seed, demo=demo)
                    draws = result.draws.assign(seed=seed, demo=demo)
                    store.put_unit(
                        run_id,
                        unit,
                        {"models": models.to_dict("records"), "draws": draws.to_dict("records")},
                    )
                    print(
                        f"{demo} seed {seed} {entry.name}: {time.perf_counter() - t0:.1f}s",
                        flush=True,
                    )
            for demo in demos:
                names = [m.name for m in sessions[demo].workspace.models]
                count = len([n for n in names if not only or n in only])
                if len(store.finished_units(runs[demo].id)) == seeds * count:
                    store.mark_complete(runs[demo].id)


def _coverage(models: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (demo, name), g in models.groupby(["demo", "name"], sort=False):
        row: dict[str, object] = {"demo": demo, "model": name, "seeds": len(g)}
        row["reported"] = int(np.isfinite(g["otr"].astype(float)).sum())
        for label, (point, lo, hi) in METRICS.items():
            x = g[[point, lo, hi]].astype(float)
            # reported seeds: a finite point value; a bound may be +-inf (an unbounded Fieller
            # interval covers everything), never NaN
            x = x[np.isfinite(x[point]) & x[lo].notna() & x[hi].notna()]
            if len(x) < 2:
                row[f"{label} mean"] = float("nan")
                row[f"{label} coverage"] = float("nan")
                row[f"{label} SD"] = float("nan")
                row[f"{label} width"] = float("nan")
                continue
            mean = float(x[point].mean())
            covered = (x[lo] <= mean + 1e-12) & (mean - 1e-12 <= x[hi])
            row[f"{label} mean"] = mean
            row[f"{label} SD"] = float(x[point].std(ddof=1))
            widths = (x[hi] - x[lo]).to_numpy()
            row[f"{label} width"] = float(np.median(widths))
            row[f"{label} unbounded"] = int(np.sum(~np.isfinite(widths)))
            row[f"{label} coverage"] = float(covered.mean())
            row[f"{label} n"] = len(x)
        rows.append(row)
    return pd.DataFrame(rows)


def _fmt(v: object, digits: int = 3) -> str:
    if isinstance(v, float):
        return "–" if not np.isfinite(v) else f"{v:.{digits}f}"
    return str(v)


def report(
    seeds: int, store_path: Path, out: Path, demos: list[str], only: list[str] | None = None
) -> pd.DataFrame:
    """Coverage table from the stored runs; writes ``out`` (markdown)."""
    frames, caveats = [], []
    with ResultsStore(store_path) as store:
        for demo in demos:
            session = EvaluationSession(DEMOS[demo], stage_dir=None, memory_items=0)
            run_id = store.open_run(session.workspace_hash, _run_key(session, seeds, only)).id
            if "models" not in store.tables(run_id):
                continue
            models = store.rows(run_id, "models")
            models = models[models["seed"] < seeds]
            frames.append(models)
            s = asdict(session.defaults())
            caveats.append(
                {
                    "demo": demo,
                    "layer": s["layer"],
                    "n": s["subset_size"],
                    "seeds": int(models["seed"].nunique()),
                    "split-level FPR (nominal 0.01)": float(models["null_split_fpr"].mean()),
                    "calibrated FPR (nominal ≤ 0.05)": float(models["null_calibrated_fpr"].mean()),
                    "false out-of-training on training subsets (≤ 0.05)": float(
                        models["null_out_of_training_fpr"].mean()
                    ),
                    "calibrated evidence withheld by the null/outlier gate": "{}/{}".format(
                        int(
                            (
                                models["inconclusive_reason"].str.contains("null check|outlying")
                            ).sum()
                        ),
                        len(models),
                    ),
                    "score–spread r pooled (median)": float(models["score_spread_corr"].median()),
                    "within-group r (median)": float(models["score_spread_corr_within"].median()),
                    "within-group r (5th–95th pct)": "{:.2f}–{:.2f}".format(
                        *np.nanpercentile(
                            models[["score_spread_corr_within_lo", "score_spread_corr_within_hi"]]
                            .astype(float)
                            .to_numpy(),
                            [5, 95],
                        )
                    ),
                }
            )
    everything = pd.concat(frames, ignore_index=True)
    table = _coverage(everything)
    flags = (
        everything.assign(
            conflict=everything["evidence_conflict"].astype(str).str.len() > 0,
            over=everything["over_unlearned"].astype(bool),
        )
        .groupby(["demo", "name"], sort=False)
        .agg(seeds=("seed", "nunique"), conflict=("conflict", "sum"), over=("over", "sum"))
        .reset_index()
    )
    done = int(everything["seed"].nunique())
    lines = [
        "# Interval coverage across seeds (method §12)",
        "",
        f"`reproduction/interval_coverage.py --seeds {seeds}"
        + "".join(f" --model {m}" for m in only or [])
        + "`: "
        + ("the models named" if only else "every model")
        + " of each demo at its `[defaults]` "
        "(layer `output`, n = 400, T = 100, K = 200, R = 20, B = 5 draws), seeds 0–"
        f"{done - 1}. 'mean' is the {done}-seed mean of the point value; 'cov.' the share of "
        "seeds whose 95% interval contains it; 'SD' the SD of the point value across seeds; "
        "'width' the median interval width; 'reported' the seeds where the gate let the "
        "numbers through; an unbounded dependence-score interval (Fieller: the denominator "
        "not significant) counts as covering, and 'dep. unbounded' says how many there were.",
        "",
    ]
    head = ["demo", "model", "reported"]
    for label in METRICS:
        head += [f"{label} mean", f"{label} SD", f"{label} width", f"{label} cov."]
    head.append("dep. unbounded")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in table.to_dict("records"):
        cells = [r["demo"], r["model"], f"{r['reported']}/{r['seeds']}"]
        for label in METRICS:
            cells += [
                _fmt(r[f"{label} mean"]),
                _fmt(r[f"{label} SD"]),
                _fmt(r[f"{label} width"]),
                _fmt(r[f"{label} coverage"], 2),
            ]
        cells.append(_fmt(r.get("dependence score unbounded", float("nan")), 0))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += [
        "",
        "## Verdict flags per model (seeds with the flag / seeds)",
        "",
        "| demo | model | conflicting evidence | over-unlearned (model test) |",
        "|---|---|---|---|",
    ]
    for r in flags.to_dict("records"):
        n = r["seeds"]
        lines.append(f"| {r['demo']} | {r['name']} | {r['conflict']}/{n} | {r['over']}/{n} |")
    lines += [
        "",
        "## Measured caveats (null check and spread control, mean over models and seeds)",
        "",
    ]
    cav = pd.DataFrame(caveats)
    lines.append("| " + " | ".join(cav.columns) + " |")
    lines.append("|" + "---|" * len(cav.columns))
    for r in cav.to_dict("records"):
        lines.append("| " + " | ".join(_fmt(v) for v in r.values()) + " |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=30)
    p.add_argument("--store", type=Path, default=ROOT / "reproduction/results/coverage.sqlite")
    p.add_argument("--out", type=Path, default=ROOT / "reproduction/results/coverage.md")
    p.add_argument("--demo", action="append", choices=sorted(DEMOS), help="default: both")
    p.add_argument("--model", action="append", help="only these models (default: all)")
    p.add_argument("--report", action="store_true", help="only write the coverage table")
    args = p.parse_args()
    demos = args.demo or list(DEMOS)
    if not args.report:
        run(args.seeds, args.store, demos, args.model)
    table = report(args.seeds, args.store, args.out, demos, args.model)
    pd.set_option("display.width", 250)
    cols = ["demo", "model", "reported"] + [f"{m} coverage" for m in METRICS]
    print(table[cols].to_string(index=False))


if __name__ == "__main__":
    main()
