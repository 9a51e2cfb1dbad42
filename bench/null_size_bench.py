"""What sizing the null check costs and buys (method §9): wall time of one model's evaluation
at several ``null_size`` values, and the power each size has at the panel effect the shipped
demos show.

``cost``: one model of a workspace evaluated at its ``[defaults]`` with each ``--sizes`` value,
every H computed (a fresh in-memory stage cache per run; the activations come from the
workspace's cache). The models the pilot settles (B = 10) pay the most: their draws add the
most subsets. Prints a markdown table: size, draws B, unseen and training subsets judged,
seconds, and the ratio to the unsized run.

``power``: the gate's and the shown 95% interval's power against a false-call rate of 2α_cal
(:func:`~sde_core.pipeline.meta_eval.null_sizing.gate_power`) at each size and B, for
independent calls and for the panel effect ρ of the shipped stores (:func:`panel_icc` of every
model's per-draw false in-training and out-of-training rates; its median and quartiles).

Usage::

    python bench/null_size_bench.py cost --workspace assets/demo --model original \\
        --sizes 0,300,1000
    python bench/null_size_bench.py power --sizes 300,1000,2000 --draws 10,20,40 --reps 1500
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sde_core.pipeline.evaluation.session import EvaluationSession  # noqa: E402
from sde_core.pipeline.evaluation.stages import StageCache  # noqa: E402
from sde_core.pipeline.meta_eval.null_sizing import gate_power, stores_panel_icc  # noqa: E402

DEMOS = ("demo", "demo-mnist1d", "demo-facts", "demo-fashion-edm", "demo-fashion-edm-mem")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cost(workspace: str, model: str, sizes: list[int]) -> None:
    session = EvaluationSession(workspace, stage_dir=False)
    base = session.defaults()
    session.inputs(model, base)  # activations loaded before any timing
    print(f"`{workspace}`, model `{model}`, load before: {_load()}\n")
    print("| null_size N | draws B | unseen subsets | training subsets | seconds | × unsized |")
    print("|---|---|---|---|---|---|")
    first = None
    for size in sizes:
        settings = base.with_overrides(null_size=size)
        session.cache = StageCache(None, memory_items=8192)  # every H computed
        t0 = time.perf_counter()
        run = session.model_run(model, settings)
        for _ in run.steps():
            pass
        seconds = time.perf_counter() - t0
        row = run.evaluation().model.to_row()
        first = first or seconds
        print(
            f"| {size} | {row['draws']} | {2 * row['null_pairs']} | "
            f"{row['null_train_subsets']} | {seconds:.1f} | {seconds / first:.2f} |"
        )
    print(f"\nload after: {_load()}")


def shipped_icc() -> np.ndarray:
    """ρ of every shipped model's per-draw false in-training and out-of-training rates."""
    return stores_panel_icc([ROOT / "assets" / demo / "results.sqlite" for demo in DEMOS])


def power(sizes: list[int], draws: list[int], reps: int) -> None:
    rho = shipped_icc()
    q1, med, q3 = np.quantile(rho, [0.25, 0.5, 0.75])
    print(
        f"panel effect ρ over {rho.size} (model, rate) pairs of the shipped stores: median "
        f"{med:.3f}, quartiles {q1:.3f}–{q3:.3f}, max {rho.max():.3f}\n"
    )
    print("| N | B | ρ | 95% interval excludes α | gate fires |")
    print("|---|---|---|---|---|")
    for icc in (0.0, round(float(med), 3), round(float(q3), 3)):
        for size in sizes:
            for b in draws:
                g = gate_power(size // 2, b, reps=reps, icc=icc, seed=7)
                print(f"| {size} | {b} | {icc:g} | {g.interval:.2f} | {g.gate:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--workspace", default=str(ROOT / "assets" / "demo"))
    c.add_argument("--model", default="original")
    c.add_argument("--sizes", default="0,300,1000")
    p = sub.add_parser("power")
    p.add_argument("--sizes", default="300,1000")
    p.add_argument("--draws", default="10,20,40")
    p.add_argument("--reps", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.command == "cost":
        cost(args.workspace, args.model, [int(x) for x in args.sizes.split(",")])
    else:
        power(
            [int(x) for x in args.sizes.split(",")],
            [int(x) for x in args.draws.split(",")],
            args.reps,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
