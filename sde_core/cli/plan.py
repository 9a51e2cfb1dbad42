"""``python -m sde_core run-plan PLAN [--variant V] [--out DIR] [--store PATH] [...]``.

Runs one variant of an experiment plan (:mod:`sde_core.pipeline.plans`) headless: every job (train,
unlearn, evaluate, toy) becomes a unit of the results store as it finishes, so a repeated or
interrupted run resumes where it stopped and skips finished units. ``PLAN`` is a plan file or
the name of one under ``plans/`` (``table1``, ``fig3_sigma``, ...).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sde_core.cli._args import add_engine_arguments, engine_from_args

__all__ = ["register_run_plan"]


def _print_summary(store: object, run_id: int) -> None:
    """Mean of the headline columns of the ``points`` / ``toy_steps`` tables."""
    from sde_core.pipeline.evaluation.metric_table import (  # scipy: only when printing
        ACC_R,
        ACC_TE,
        ASR,
        CALIBRATED_F1,
        F1,
        MMD_F1,
        OTR,
        W2_F1,
    )

    summary = (
        F1.key,
        CALIBRATED_F1.key,
        OTR.key,
        MMD_F1.key,
        W2_F1.key,
        ACC_R.key,
        ACC_TE.key,
        ASR.key,
    )
    tables = store.tables(run_id)  # type: ignore[attr-defined]
    if "points" in tables:
        df = store.rows(run_id, "points")  # type: ignore[attr-defined]
        keys = [
            k for k in ("forget_ratio", "layer", "value") if df[k].nunique() > 1 or k == "value"
        ]
        cols = [c for c in summary if c in df and df[c].notna().any()]
        print(
            df.groupby(keys, sort=False)[cols].mean().to_string(float_format=lambda v: f"{v:.3f}")
        )
    if "toy_steps" in tables:
        df = store.rows(run_id, "toy_steps")  # type: ignore[attr-defined]
        cols = ["same_mean", "cross_mean", "p_subset", "p_split", "train_acc"]
        print(
            df.groupby(["layer", "step"])[cols].mean().to_string(float_format=lambda v: f"{v:.3g}")
        )


def _cmd_run_plan(args: argparse.Namespace) -> int:
    from sde_core.pipeline.plans.driver import run_plan
    from sde_core.pipeline.plans.graph import build_jobs
    from sde_core.pipeline.plans.spec import load_plan
    from sde_core.pipeline.store import ResultsStore

    plan = load_plan(args.plan)
    if args.list_variants:
        for name in plan.variants:
            v = plan.variant(name)
            print(f"{name}: {len(build_jobs(v))} jobs; " + " ".join(v.notes[:1]))
        return 0
    variant = plan.variant(args.variant, args.override or [])
    if args.dry_run:
        jobs = build_jobs(variant)
        kinds = {k: sum(j.kind == k for j in jobs) for k in dict.fromkeys(j.kind for j in jobs)}
        print(
            f"plan {variant.name} [{variant.variant}] ({variant.paper}): {len(jobs)} jobs {kinds}"
        )
        for note in variant.notes:
            print(f"  note: {note}")
        return 0
    out = Path(args.out)
    store_path = Path(args.store) if args.store else out / "results.sqlite"
    with ResultsStore(store_path) as store:
        report = run_plan(
            variant, out, store, device=args.device, progress=not args.quiet,
            engine=engine_from_args(args, store_path.parent / "submitit"),
        )  # fmt: skip
        if not args.quiet:
            _print_summary(store, report.run_id)
    print(
        f"plan {variant.name} [{variant.variant}]: {len(report.ran)} jobs run, "
        f"{len(report.skipped)} read from the store, {report.seconds:.1f}s; "
        f"results: run {report.run_id} of {store_path}"
    )
    return 0


def register_run_plan(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``run-plan`` command."""
    p = subparsers.add_parser(
        "run-plan",
        help="run an experiment plan (the paper's tables and figures) headless and resumably",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("plan", help="plan file, or a name under plans/ (e.g. table1)")
    p.add_argument("--variant", default="default", help="variant to run (default: default)")
    p.add_argument("--out", default="runs", help="work folder: models, data, activation cache")
    p.add_argument("--store", help="results store (default OUT/results.sqlite)")
    p.add_argument(
        "--override",
        action="append",
        metavar="KEY=VALUE",
        help="set a field of the variant, TOML value, repeatable (e.g. params.seeds=[0])",
    )
    p.add_argument("--device", help="cpu, cuda or auto (overrides the variant's device)")
    p.add_argument("--dry-run", action="store_true", help="validate and list the jobs only")
    p.add_argument("--list-variants", action="store_true", help="list the plan's variants")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary table")
    add_engine_arguments(p)
    p.set_defaults(func=_cmd_run_plan)
