"""``python -m sde_core evaluate WORKSPACE --json OUT.json [...]`` (method §10).

Evaluates every model of a workspace (CLI flags override the workspace's ``[defaults]``), keeps
results in the workspace's results store so a repeat with the same settings is instant and an
interrupted run resumes, prints a summary table with each model's verdict in words (the
sentences of the report and the dashboard, :mod:`sde_core.viz.verdicts`) and writes the JSON
document of method §10 with each model's ``verdict`` and ``verdict_sentence``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sde_core.cli._args import (
    add_engine_arguments,
    add_settings_arguments,
    add_time_limit_argument,
    engine_from_args,
    settings_overrides,
)
from sde_core.common.fsio import atomic_write_json

__all__ = [
    "json_document",
    "register_evaluate",
    "verdict_lines",
    "write_json_atomic",
]


def write_json_atomic(path: str | Path, document: Any) -> Path:
    """Write ``document`` as indented JSON via a temporary file and an atomic rename."""
    return atomic_write_json(path, document)


def _summaries(result: Any, notes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Each model's :class:`~sde_core.viz.verdicts.summary.VerdictSummary` (name → summary),
    with its family's verdict note from ``notes`` (model name → note)."""
    from sde_core.viz.verdicts.summary import summarize_verdict

    s = result.settings
    return {
        str(row["name"]): summarize_verdict(
            row, s.targets, alpha=s.alpha, alpha_calibrated=s.alpha_calibrated,
            note=(notes or {}).get(str(row["name"]), ""),
        )
        for row in result.models.to_dict("records")
    }  # fmt: skip


def verdict_lines(result: Any, notes: Mapping[str, str] | None = None) -> list[str]:
    """One line per model: its verdict, the OTR interval it rests on and the verdict in a
    sentence — the words of the report's first page (:func:`summarize_verdict`)."""
    return [
        f"{name}: {v.label} ({v.interval}) — {v.sentence}"
        for name, v in _summaries(result, notes).items()
    ]


def json_document(result: Any, notes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The method §10 JSON document with each model's ``verdict`` (the label) and
    ``verdict_sentence`` added, the same words as the table's verdict lines and the report."""
    doc = result.to_json_dict()
    for name, summary in _summaries(result, notes).items():
        doc["models"][name]["verdict"] = summary.label
        doc["models"][name]["verdict_sentence"] = summary.sentence
    return doc


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from sde_core.inputs.extraction import torch_device as check_device
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore, workspace_store_path
    from sde_core.pipeline.workspace import cache_path
    from sde_core.pipeline.workspace_load import load_workspace

    ws = load_workspace(args.workspace)
    settings = ws.defaults.with_overrides(**settings_overrides(args))
    check_device(settings.device)  # before anything is computed
    bars: dict[str, tuple[str, Any]] = {}

    def progress(stage: str, done: int, total: int) -> None:
        key = "models" if stage == "models" else "work"
        current = bars.get(key)
        if current is None or current[0] != stage:
            if current is not None:
                current[1].close()
            bar = tqdm(total=total, desc=stage, leave=key == "models", file=sys.stderr)
            current = bars[key] = (stage, bar)
        current[1].n = done
        current[1].refresh()

    store_path = None if args.no_store else Path(args.store or workspace_store_path(ws.root))
    models = args.models.split(",") if args.models else None
    if args.plan_only:
        return _plan_only(ws, settings, models)
    if args.behaviour_only:
        return _behaviour_only(ws, store_path)
    report = None if args.quiet else progress
    engine = engine_from_args(args, cache_path(ws.root, "submitit"))
    if store_path is None:
        result = evaluate_workspace(
            ws, settings, models=models, progress=report, engine=engine,
            time_limit=args.time_limit,
        )  # fmt: skip
    else:
        with ResultsStore(store_path, repair=args.repair) as store:
            if store.repair_report is not None:
                print(store.repair_report.summary(), file=sys.stderr)
            result = evaluate_workspace(
                ws, settings, models=models, store=store, progress=report, engine=engine,
                time_limit=args.time_limit,
            )  # fmt: skip
    for _, bar in bars.values():
        bar.close()
    from sde_core.services.answer import verdict_notes

    notes = verdict_notes(ws, settings.layer)
    if not args.quiet:
        _print_table(result, notes)
    if args.json:
        write_json_atomic(args.json, json_document(result, notes))
        if not args.quiet:
            print(f"wrote {args.json}")
    for name, message in result.failed.items():
        print(f"error: model {name!r} was not evaluated: {message}", file=sys.stderr)
    return 1 if result.failed else 0


def _behaviour_only(ws: Any, store_path: Path | None) -> int:
    """``--behaviour-only``: add the behaviour units of the language models and denoisers to
    every stored run of the workspace that lacks them (method §9); no SDE number is computed."""
    from sde_core.errors import SettingsError
    from sde_core.pipeline.evaluation.behaviour import add_behaviour_units
    from sde_core.pipeline.evaluation.stages import StageCache
    from sde_core.pipeline.evaluation.workspace_run import stage_cache_dir
    from sde_core.pipeline.store import ResultsStore

    if store_path is None:
        raise SettingsError("--behaviour-only adds units to a results store: drop --no-store")
    with ResultsStore(store_path) as store:
        written = add_behaviour_units(ws, store, cache=StageCache(stage_cache_dir(ws.root)))
    for run_id, n in written.items():
        print(f"run {run_id}: {n} behaviour unit(s) added")
    if not written:
        print(f"no stored run of this workspace in {store_path}: evaluate it first")
    return 0


def _plan_only(ws: Any, settings: Any, models: list[str] | None) -> int:
    """``--plan-only``: each model's pilot and the forecast of the precision run (method §15)."""
    from sde_core.pipeline.evaluation.planner import forecast_sentence, forecast_workspace

    forecasts = forecast_workspace(ws, settings, models=models)
    for f in forecasts:
        widths = ", ".join(f"{k} ±{v:.3f}" for k, v in f.half_widths.items()) or "none (withheld)"
        seconds = "?" if f.seconds != f.seconds else f"{f.seconds:.0f}"
        budget = f" (needs {f.needed}: budget max_draws spent)" if f.budget_spent else ""
        print(
            f"{f.model}: {f.draws} draws{budget}, {f.targets} targets, ≈ {seconds} s; "
            f"predicted half-widths {widths} (pilot {f.pilot_draws} draws, "
            f"{f.pilot_seconds:.1f} s)"
        )
    print(f"plan at ±{settings.precision:g}: {forecast_sentence(forecasts)}")
    return 0


def _print_table(result: Any, family_notes: Mapping[str, str]) -> None:
    """The summary table, then why numbers are withheld ("–"), which models could not be
    evaluated (their own inputs failed) and what the plan reduced."""
    from sde_core.pipeline.evaluation.precision import precision_status
    from sde_core.pipeline.evaluation.summary import CLI_COLUMNS
    from sde_core.viz.behaviour_text import behaviour_text

    if not result.models.empty:
        table = result.models[list(CLI_COLUMNS)]
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="–"))
        print("verdicts:")
        for line in verdict_lines(result, family_notes):
            print(f"  {line}")
    for row in result.models.to_dict("records"):
        status = precision_status(row)  # a precision design (method §15)
        if status is not None:
            print(f"{row['name']}: {status[1]}")
        if row["inconclusive_reason"]:  # a class-wise verdict withholds the OTR only (§16)
            what = "OTR withheld" if row.get("class_wise_verdict") else "inconclusive"
            print(f"{row['name']}: {what} — {row['inconclusive_reason']}")
        if row.get("behaviour_measure"):  # a language model's or a denoiser's check (§9)
            print(f"{row['name']}: behaviour — {behaviour_text(row)}")
        if row.get("evidence_conflict"):
            print(f"{row['name']}: conflicting evidence — {row['evidence_conflict']}")
    for name, message in result.failed.items():
        print(f"{name}: not evaluated — {message}")
    notes = {row["notes"] for row in result.models.to_dict("records") if row["notes"]}
    for note in sorted(notes):
        print(f"note: {note}")
    if result.cached_models:
        print(f"(from the results store: {', '.join(result.cached_models)})")


def register_evaluate(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` command."""
    p = subparsers.add_parser(
        "evaluate",
        help="evaluate every model of a workspace (SDE, calibrated evidence, baselines, metrics)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("workspace", help="workspace folder or its workspace.toml")
    p.add_argument("--json", metavar="OUT.json", help="write the method §10 JSON document here")
    add_settings_arguments(p)
    p.add_argument("--models", help="comma-separated model names (default: all)")
    p.add_argument("--store", help="results store path (default <workspace>/.sde-cache/...)")
    p.add_argument("--no-store", action="store_true", help="do not read or write the store")
    p.add_argument(
        "--repair",
        action="store_true",
        help="drop damaged results from the store (a damaged file is kept aside) and recompute",
    )
    add_engine_arguments(p)
    add_time_limit_argument(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars or table")
    p.add_argument(
        "--behaviour-only",
        action="store_true",
        help="add the behaviour check of the language models and denoisers (loss gaps, "
        "likelihood attacks) to every stored run of the workspace that lacks it; no SDE "
        "number is recomputed",
    )
    p.add_argument(
        "--plan-only",
        action="store_true",
        help="with --precision W: run each model's pilot and print the draws, targets and "
        "seconds the run would take, without running it (the pilot is kept in the stage cache)",
    )
    p.set_defaults(func=_cmd_evaluate)
