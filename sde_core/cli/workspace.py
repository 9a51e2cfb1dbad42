"""``workspace init | validate | show``: create, check or list a workspace."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.cli._args import Parser, literal, parse_pairs
from sde_core.errors import SettingsError

__all__ = ["register_workspace"]


def _cmd_workspace_init(args: argparse.Namespace) -> int:
    from sde_core.inputs.data import load_dataset, save_index_file
    from sde_core.pipeline.workspace import init_workspace, write_workspace

    dataset: dict[str, Any] = {"kind": args.dataset_kind}
    if args.dataset_root is not None:
        dataset["root"] = args.dataset_root
    for key in ("train_size", "test_size"):
        if getattr(args, key) is not None:
            dataset[key] = getattr(args, key)
    options = {
        k: literal(v) for k, v in parse_pairs(args.dataset_option, "--dataset-option").items()
    }
    if options:
        dataset["options"] = options
    if (args.forget is None) == (args.random_forget is None):
        raise SettingsError("give exactly one of --forget FILE or --random-forget FRACTION")
    forget = args.forget if args.forget is not None else "forget.npy"
    ws = init_workspace(args.folder, dataset, forget, name=args.name, overwrite=args.overwrite)
    if args.random_forget is not None:
        if not 0.0 < args.random_forget < 1.0:
            raise SettingsError(f"--random-forget {args.random_forget} must be in (0, 1), e.g. 0.2")
        n = len(load_dataset(ws.dataset_spec()).train)
        rng = np.random.default_rng(args.seed)
        k = max(1, round(args.random_forget * n))
        save_index_file(ws.path(forget), np.sort(rng.choice(n, size=k, replace=False)))
        write_workspace(ws)
    print(f"created {ws.root / 'workspace.toml'}")
    return 0


def _cmd_workspace_validate(args: argparse.Namespace) -> int:
    from sde_core.pipeline.workspace import (
        load_workspace,
        rehash_models,
        validate_workspace,
        write_workspace,
    )

    ws = load_workspace(args.folder, validate=False)
    if args.rehash:
        changed = rehash_models(ws)
        write_workspace(ws)
        print(f"recorded new hashes for {changed or 'no models'}")
    problems = validate_workspace(ws, check_data=args.check_data)
    for p in problems:
        print(f"{p.severity}: {p}", file=sys.stderr if p.severity == "error" else sys.stdout)
    errors = sum(p.severity == "error" for p in problems)
    if not errors:
        print(f"workspace {ws.root} is valid ({len(ws.models)} models)")
    return 1 if errors else 0


def _cmd_workspace_show(args: argparse.Namespace) -> int:
    import dataclasses

    from sde_core.pipeline.workspace import load_workspace

    ws = load_workspace(args.folder, validate=False)
    if args.json:
        doc = {
            "root": str(ws.root),
            "name": ws.name,
            "dataset": {k: str(v) if isinstance(v, Path) else v for k, v in ws.dataset.items()},
            "forget_indices": ws.forget_indices,
            "defaults": dataclasses.asdict(ws.defaults),
            "models": [dataclasses.asdict(m) for m in ws.models],
        }
        print(json.dumps(doc, indent=2, default=str))
        return 0
    print(f"workspace {ws.name or ws.root.name} ({ws.root})")
    print(f"  dataset: {ws.dataset}")
    print(f"  forget indices: {ws.forget_indices}")
    print(f"  defaults: {dataclasses.asdict(ws.defaults)}")
    for m in ws.models:
        secs = f"{m.seconds:.1f}s" if m.seconds is not None else "-"
        print(
            f"  {m.name:<16} {m.role:<10} {m.method or '-':<10} {m.arch:<12} {secs:>8}"
            f"  {m.checkpoint}"
        )
    return 0


def register_workspace(subparsers: argparse._SubParsersAction) -> None:
    """``workspace init | validate | show``."""
    parser = subparsers.add_parser("workspace", help="create, check or list a workspace")
    sub = parser.add_subparsers(dest="workspace_command", required=True, parser_class=Parser)

    init = sub.add_parser("init", help="create FOLDER/workspace.toml (no models yet)")
    init.add_argument("folder")
    init.add_argument("--dataset-kind", required=True, help="e.g. fashion-mnist, mnist1d, npz")
    init.add_argument("--dataset-root", help="data folder/file (relative to FOLDER or absolute)")
    init.add_argument("--dataset-option", action="append", metavar="K=V", help="repeatable")
    init.add_argument("--train-size", type=int, help="random training subset size")
    init.add_argument("--test-size", type=int, help="random test subset size")
    init.add_argument("--forget", help="existing forget index file (relative to FOLDER)")
    init.add_argument("--random-forget", type=float, metavar="FRACTION", help="draw R%% of D_tr")
    init.add_argument("--seed", type=int, default=0, help="seed of --random-forget")
    init.add_argument("--name", default="")
    init.add_argument("--overwrite", action="store_true")
    init.set_defaults(func=_cmd_workspace_init)

    validate = sub.add_parser("validate", help="list every problem; exit 1 on errors")
    validate.add_argument("folder")
    validate.add_argument("--check-data", action="store_true", help="load the dataset too")
    validate.add_argument("--rehash", action="store_true", help="record current checkpoint hashes")
    validate.set_defaults(func=_cmd_workspace_validate)

    show = sub.add_parser("show", help="print the workspace's data and models")
    show.add_argument("folder")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=_cmd_workspace_show)
