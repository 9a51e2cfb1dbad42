"""Precision target, planner and paired comparisons, measured (method §15, issue 23).

``run``: for each seed, every named model of a workspace is evaluated with the precision design
(``--precision`` W, pilot ``pilot_draws``, budget ``max_draws`` from the workspace defaults
unless given) on the stages that form the headline rates (references, targets and panels; the
controls, null check, classic metrics and baselines are left out to fit the machine, so the
null-check gate is not applied here). Before each run the planner (:func:`forecast`) predicts
the draws and seconds from the pilot; the run then measures them. One JSON line per (seed,
model) goes to ``--out`` (resumable: finished lines are skipped), with every draw's rates.

``report``: coverage of the many-seed mean (the mean of every draw of every seed: the draws are
i.i.d. replicates), widths, paired against unpaired difference widths on common draws, and the
planner's prediction against the measured run; a markdown section to stdout.

Usage::

    nice -n 10 python bench/precision_bench.py run --workspace DIR --models rl,salun,retrained \\
        --seeds 2000:2030 --precision 0.1 --out fm.jsonl
    python bench/precision_bench.py report fm.jsonl [more.jsonl ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sde_core.stats.precision import paired_difference, unpaired_difference  # noqa: E402

RATES = ("otr", "calibrated_otr", "over_unlearned_rate")


def _run(args: argparse.Namespace) -> None:
    from sde_core.inputs.activation_cache import ActivationCache
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.inputs.indices import load_index_file
    from sde_core.pipeline.evaluation.plan import draw_subsets
    from sde_core.pipeline.evaluation.planner import forecast
    from sde_core.pipeline.evaluation.run import ModelRun
    from sde_core.pipeline.model_inputs import load_model_inputs
    from sde_core.pipeline.workspace import cache_path
    from sde_core.pipeline.workspace_load import load_workspace

    ws = load_workspace(args.workspace)
    base = ws.defaults.with_overrides(
        precision=args.precision, pilot_draws=args.pilot_draws, max_draws=args.max_draws
    )
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train))
    acts = ActivationCache(str(cache_path(ws.root, "activations")))
    names = args.models.split(",")
    inputs = {
        m.name: load_model_inputs(m, ws, bundle, base, acts, None)
        for m in ws.models
        if m.name in names
    }
    out = Path(args.out)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            rec = json.loads(line)
            done.add((rec["seed"], rec["model"]))
    lo, hi = (int(x) for x in args.seeds.split(":"))
    for seed in range(lo, hi):
        settings = base.with_overrides(seed=seed)
        plan = draw_subsets(len(bundle.train), len(bundle.test), forget, settings)
        for name in names:
            if (seed, name) in done:
                continue
            run = ModelRun(inputs[name], plan, settings, stages=("references", "panels"))
            t0 = time.perf_counter()
            fc = forecast(run)
            for _ in run.steps():
                pass
            seconds = time.perf_counter() - t0
            ev = run.evaluation()
            m = ev.model
            rec = {
                "workspace": ws.name,
                "seed": seed,
                "model": name,
                "precision": args.precision,
                "draws": m.draws,
                "needed": m.draws_needed,
                "forecast_draws": fc.draws,
                "forecast_seconds": fc.seconds,
                "pilot_seconds": fc.pilot_seconds,
                "seconds": seconds,
                "half_width": m.precision_half_width,
                "per_draw": {r: [getattr(d, r) for d in ev.draws] for r in RATES},
                "targets": [d.targets for d in ev.draws],
                **{
                    r: [getattr(m, r).value, getattr(m, r).lo, getattr(m, r).hi]
                    for r in ("otr", "calibrated_otr", "over_unlearned_rate")
                },
            }
            with out.open("a") as fh:
                fh.write(json.dumps(rec) + "\n")
            print(f"seed {seed} {name}: {m.draws} draws, {seconds:.1f} s", flush=True)


def _reported(rec: dict, rate: str) -> tuple[float, float]:
    """The interval the library reports for a record: Stein's joined with the Korn–Graubard
    interval of the same draws (recomputed here, so records written before that join was
    added are read as the current code reports them)."""
    from sde_core.stats.replication import replicate_proportion

    kg = replicate_proportion(rec["per_draw"][rate], rec["targets"])
    return min(rec[rate][1], kg.lo), max(rec[rate][2], kg.hi)


def _report(args: argparse.Namespace) -> None:
    recs = [json.loads(line) for p in args.files for line in Path(p).read_text().splitlines()]
    by_ws: dict[str, list[dict]] = {}
    for r in recs:
        by_ws.setdefault(r["workspace"], []).append(r)
    for ws, rows in by_ws.items():
        seeds = sorted({r["seed"] for r in rows})
        print(
            f"\n### {ws}: {len(seeds)} seeds ({seeds[0]}–{seeds[-1]}), W = {rows[0]['precision']}\n"
        )
        print(
            "| model | rate | many-seed mean | mean draws (range) | mean half-width (max) | "
            "coverage | planner draws = run | planner seconds / measured (median, range) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        models = sorted({r["model"] for r in rows})
        for name in models:
            mine = [r for r in rows if r["model"] == name]
            draws = np.array([r["draws"] for r in mine])
            ratio = np.array([r["forecast_seconds"] / (r["seconds"]) for r in mine])
            same = sum(r["forecast_draws"] == r["draws"] for r in mine)
            for rate in RATES:
                values = [r for r in mine if r[rate][0] is not None and np.isfinite(r[rate][0])]
                if not values:
                    continue
                truth = float(np.mean(np.concatenate([r["per_draw"][rate] for r in mine])))
                bounds = [_reported(r, rate) for r in values]
                cover = sum(lo <= truth <= hi for lo, hi in bounds)
                halves = np.array([(hi - lo) / 2 for lo, hi in bounds])
                print(
                    f"| {name} | {rate} | {truth:.3f} | {draws.mean():.1f} ({draws.min()}–"
                    f"{draws.max()}) | {halves.mean():.3f} ({halves.max():.3f}) | "
                    f"{cover}/{len(values)} = {cover / len(values):.2f} | {same}/{len(mine)} | "
                    f"{np.median(ratio):.2f} ({ratio.min():.2f}–{ratio.max():.2f}) |"
                )
        print(
            "\nPaired against unpaired differences on each seed's common draws "
            "(first minus second; coverage of the many-seed mean difference):\n"
        )
        print(
            "| pair | rate | many-seed mean difference | mean paired half-width | "
            "mean unpaired half-width | ratio (median) | paired coverage |"
        )
        print("|---|---|---|---|---|---|---|")
        for a, b in combinations(models, 2):
            for rate in RATES:
                pairs = []
                for s in seeds:
                    ra = next((r for r in rows if r["seed"] == s and r["model"] == a), None)
                    rb = next((r for r in rows if r["seed"] == s and r["model"] == b), None)
                    if ra is None or rb is None:
                        continue
                    k = min(len(ra["per_draw"][rate]), len(rb["per_draw"][rate]))
                    x, y = np.array(ra["per_draw"][rate][:k]), np.array(rb["per_draw"][rate][:k])
                    if k >= 2 and np.all(np.isfinite(x)) and np.all(np.isfinite(y)):
                        pairs.append((x, y, ra["targets"][:k]))
                if not pairs:
                    continue
                truth = float(np.mean(np.concatenate([x - y for x, y, _ in pairs])))
                paired = [paired_difference(x, y, t) for x, y, t in pairs]
                unpaired = [unpaired_difference(x, y, t) for x, y, t in pairs]
                both = zip(paired, unpaired, strict=True)
                ratios = np.array([p.half_width / u.half_width for p, u in both if u.half_width])
                cover = sum(p.lo <= truth <= p.hi for p in paired)
                print(
                    f"| {a} − {b} | {rate} | {truth:+.3f} | "
                    f"{np.mean([p.half_width for p in paired]):.3f} | "
                    f"{np.mean([u.half_width for u in unpaired]):.3f} | "
                    f"{np.median(ratios) if ratios.size else float('nan'):.2f} | "
                    f"{cover}/{len(paired)} |"
                )


def betting_half_widths(x: np.ndarray, alpha: float = 0.05, grid: int = 801) -> np.ndarray:
    """Half-width after each draw of the hedged-capital betting confidence sequence for a mean
    in [0, 1] (Waudby-Smith & Ramdas 2023, JRSS-B, "Estimating means of bounded random
    variables by betting", the hedged capital process with predictable plug-in bets, θ = 1/2,
    truncation c = 1/2), as the running intersection of the CS on a grid of candidate means."""
    m = np.linspace(0.0, 1.0, grid)
    log_plus = np.zeros(grid)
    log_minus = np.zeros(grid)
    lo, hi = 0.0, 1.0
    out = np.empty(x.size)
    total, sq = 0.0, 0.0
    for i, xi in enumerate(x, start=1):
        mu = (0.5 + total) / i
        var = (0.25 + sq) / i
        lam = min(np.sqrt(2 * np.log(2 / alpha) / (var * i * np.log(i + 1))), 1.0)
        lp = np.minimum(lam, 0.5 / np.maximum(m, 1e-12))
        lm = np.minimum(lam, 0.5 / np.maximum(1 - m, 1e-12))
        log_plus += np.log1p(lp * (xi - m))
        log_minus += np.log1p(-lm * (xi - m))
        cap = np.logaddexp(log_plus, log_minus) - np.log(2)
        inside = m[cap < np.log(1 / alpha)]
        if inside.size:
            lo, hi = max(lo, float(inside.min())), min(hi, float(inside.max()))
        out[i - 1] = (hi - lo) / 2
        total += xi
        sq += (xi - mu) ** 2
    return out


def _design(args: argparse.Namespace) -> None:
    """Stein's two-stage design against the betting confidence sequence on per-draw values
    resampled from the measured ones (a model's draws pooled over every seed)."""
    from sde_core.stats.precision import stein_draws

    recs = [json.loads(line) for p in args.files for line in Path(p).read_text().splitlines()]
    rng = np.random.default_rng(0)
    print("| demo | model | rate | per-draw SD | Stein: mean draws (n0 = 10) | betting CS: "
          "median draws to ±W | betting CS half-width at Stein's mean draws |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for ws, name in sorted({(r["workspace"], r["model"]) for r in recs}):
        mine = [r for r in recs if r["workspace"] == ws and r["model"] == name]
        for rate in ("otr", "calibrated_otr"):
            pool = np.concatenate([r["per_draw"][rate] for r in mine])
            pool = pool[np.isfinite(pool)]
            if pool.size < 20 or pool.std() < 0.02:
                continue
            stein = [stein_draws(rng.choice(pool, 10), [20] * 10, args.precision).draws
                     for _ in range(400)]  # fmt: skip
            mean_b = round(float(np.mean(stein)))
            reach, at_b = [], []
            for _ in range(100):
                hw = betting_half_widths(rng.choice(pool, args.horizon))
                ok = np.nonzero(hw <= args.precision)[0]
                reach.append(ok[0] + 1 if ok.size else np.inf)
                at_b.append(hw[mean_b - 1])
            print(
                f"| {ws} | {name} | {rate} | {pool.std(ddof=1):.3f} | {np.mean(stein):.1f} | "
                f"{np.median(reach):.0f} | {np.mean(at_b):.3f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(required=True)
    run = sub.add_parser("run")
    run.add_argument("--workspace", required=True)
    run.add_argument("--models", required=True)
    run.add_argument("--seeds", default="2000:2030", help="first:last (exclusive)")
    run.add_argument("--precision", type=float, default=0.1)
    run.add_argument("--pilot-draws", type=int, default=10)
    run.add_argument("--max-draws", type=int, default=60)
    run.add_argument("--out", required=True)
    run.set_defaults(func=_run)
    rep = sub.add_parser("report")
    rep.add_argument("files", nargs="+")
    rep.set_defaults(func=_report)
    des = sub.add_parser("design")
    des.add_argument("files", nargs="+")
    des.add_argument("--precision", type=float, default=0.1)
    des.add_argument("--horizon", type=int, default=300)
    des.set_defaults(func=_design)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
