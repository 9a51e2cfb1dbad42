"""``python -m sde_core evaluate-checkpoints WORKSPACE [--model M ...]``: a run's curve.

Evaluates every intermediate checkpoint of the named models (default: every model with
checkpoints, e.g. those kept by ``unlearn --save-every N``) into the workspace's checkpoint
store (:func:`~sde_core.pipeline.curves.checkpoint_store_path`), skipping what is stored, so a
stopped run resumes; prints the forecast first, a progress bar with its ETA while it runs, then
the curve (OTR, calibrated OTR, behaviour gap per step) and the best checkpoint by the stated
rule (:data:`~sde_core.pipeline.curves.BEST_RULE`). The runs' end points are the workspace's own
models: ``evaluate`` stores them (the command says when they are missing).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from sde_core.cli._args import add_settings_arguments, settings_overrides

__all__ = ["register_curves"]


def _cmd_curves(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from sde_core.errors import SettingsError
    from sde_core.inputs.data import load_dataset
    from sde_core.pipeline.curves import (
        BEST_RULE,
        best_checkpoint,
        checkpoint_store_path,
        curve_models,
        curve_table,
        evaluate_checkpoints,
        forecast_seconds,
        retrained_reference,
    )
    from sde_core.pipeline.store import ResultsStore, workspace_store_path
    from sde_core.pipeline.workspace_load import load_workspace

    ws = load_workspace(args.workspace)
    settings = ws.defaults.with_overrides(**settings_overrides(args))
    names = args.model or [m.name for m in curve_models(ws)]
    if not names:
        raise SettingsError(
            f"no model of {ws.root} has intermediate checkpoints: keep them with "
            "`python -m sde_core unlearn WS --method ft --name NAME --save-every 2`"
        )
    fingerprint = load_dataset(ws.dataset_spec()).fingerprint
    with (
        ResultsStore(workspace_store_path(ws.root)) as results,
        ResultsStore(checkpoint_store_path(ws.root)) as checkpoints,
    ):

        def table() -> Any:
            return curve_table(
                ws, settings, names, results_store=results, checkpoint_store=checkpoints,
                data_fingerprint=fingerprint,
            )  # fmt: skip

        before = table()
        count, seconds = forecast_seconds(before)
        guess = f"~{seconds:.0f} s" if seconds is not None else "unknown time (no final stored)"
        print(f"{count} checkpoint point(s) to evaluate: forecast {guess}", file=sys.stderr)
        if args.plan_only:
            return 0
        bar: Any = None

        def progress(stage: str, done: int, total: int) -> None:
            nonlocal bar
            if stage != "checkpoints":
                return
            if bar is None:
                bar = tqdm(total=total, desc="checkpoints", unit="ckpt", file=sys.stderr)
            bar.n = done
            bar.refresh()

        try:
            evaluate_checkpoints(ws, settings, names, checkpoints, progress=progress)
        finally:
            if bar is not None:
                bar.close()
        after = table()
        reference = retrained_reference(ws, settings, results, fingerprint)
    _print_curve(after)
    missing = after[(after["point"] != "checkpoint") & ~after["stored"]]
    if not missing.empty:
        print(f"not stored at these settings: {', '.join(sorted(set(missing['model'])))}'s "
              "start or end: run `python -m sde_core evaluate` on the workspace")  # fmt: skip
    if reference is None:
        print("no best checkpoint: the retrained model's calibrated OTR is not stored (or is "
              "withheld) at these settings")  # fmt: skip
        return 0
    rule = BEST_RULE.format(w=args.width, ref=f"{reference[1]:.2f}")
    for name in names:
        best = best_checkpoint(after, name, reference[1], args.width)
        said = f"step {best.step:g} (calibrated OTR {best.calibrated_otr:.2f})" if best else "none"
        print(f"best checkpoint of {name}: {said} — rule: {rule}")
    return 0


def _print_curve(table: Any) -> None:
    from sde_core.pipeline.evaluation.metric_table import ACC_GAP, CALIBRATED_OTR, OTR

    def cell(value: float) -> str:
        return "—" if math.isnan(value) else f"{value:.2f}"

    print(f"{'model':<12} {'step':>6} {'point':<10} {OTR.label:>6} {'calibrated':>10} "
          f"{'acc gap':>8}  conflict")  # fmt: skip
    for r in table.to_dict("records"):
        if not r["stored"]:
            print(f"{r['model']:<12} {r['step']:>6g} {r['point']:<10} not stored")
            continue
        print(f"{r['model']:<12} {r['step']:>6g} {r['point']:<10} {cell(r[OTR.key]):>6} "
              f"{cell(r[CALIBRATED_OTR.key]):>10} {cell(r[ACC_GAP.key]):>8}  "
              f"{'yes' if r['evidence_conflict'] else 'no'}")  # fmt: skip


def register_curves(subparsers: argparse._SubParsersAction) -> None:
    """``evaluate-checkpoints WORKSPACE [--model M ...] [--width W] [--plan-only]``."""
    p = subparsers.add_parser(
        "evaluate-checkpoints",
        help="evaluate a run's intermediate checkpoints (resumable) and print its curve",
    )
    p.add_argument("workspace")
    p.add_argument("--model", action="append", metavar="NAME",
                   help="a model with checkpoints (repeatable; default: all of them)")  # fmt: skip
    p.add_argument("--width", type=float, default=0.1, metavar="W",
                   help="the best checkpoint's calibrated OTR lies within ±W of the retrained "
                   "model's (default 0.1)")  # fmt: skip
    p.add_argument("--plan-only", action="store_true", help="print the forecast and stop")
    add_settings_arguments(p)
    p.set_defaults(func=_cmd_curves)
