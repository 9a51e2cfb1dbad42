"""``workspace init | add-model | validate | show``: create, extend, check or list a workspace.

Files a workspace names must lie inside its folder or a folder listed in ``$SDE_DATA_ROOTS``
(``os.pathsep``-separated), see ``docs/bring-your-own.md``. ``init`` and ``add-model`` write
all their files at once: when they fail, nothing on disk has changed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sde_core.cli._args import Parser, add_time_limit_argument, literal, parse_pairs

__all__ = ["register_workspace"]

_ROOTS_HELP = (
    "Every file must lie inside the workspace folder or a folder listed in $SDE_DATA_ROOTS."
)


def _classes(values: list[str] | None) -> list[int | str] | None:
    """``--forget-class`` values (repeatable, comma-separated): class ids or names."""
    if not values:
        return None
    out: list[int | str] = []
    for value in values:
        for part in (p.strip() for p in value.split(",")):
            if part:
                out.append(int(part) if part.lstrip("-").isdigit() else part)
    return out


def _cmd_workspace_init(args: argparse.Namespace) -> int:
    from sde_core.services.workspaces import create_workspace

    dataset: dict[str, Any] = {"kind": args.dataset_kind}
    if args.dataset_root is not None:
        dataset["root"] = args.dataset_root
    for key in ("train_size", "test_size", "train_indices", "test_indices"):
        if getattr(args, key) is not None:
            dataset[key] = getattr(args, key)
    options = {
        k: literal(v) for k, v in parse_pairs(args.dataset_option, "--dataset-option").items()
    }
    if options:
        dataset["options"] = options
    defaults = {} if args.subset_size is None else {"subset_size": args.subset_size}
    made = create_workspace(
        args.folder, dataset, forget=args.forget, random_forget=args.random_forget,
        forget_classes=_classes(args.forget_class), forget_split=args.forget_split,
        forget_column=args.forget_column, seed=args.seed, name=args.name,
        defaults=defaults, overwrite=args.overwrite,
    )  # fmt: skip
    ws = made.workspace
    print(
        f"created {ws.root / 'workspace.toml'}: |D_tr| = {made.n_train}, |D_f| = "
        f"{made.n_forget}, |D_te| = {made.n_test}"
    )
    for note in made.notes:
        print(f"  {note}")
    print("next: add models with `python -m sde_core workspace add-model` or `train`")
    return 0


def _cmd_workspace_add_model(args: argparse.Namespace) -> int:
    from sde_core.services.workspace_models import ModelSpec, add_model

    kwargs = {k: literal(v) for k, v in parse_pairs(args.arch_kwarg, "--arch-kwarg").items()}
    spec = ModelSpec(
        name=args.name, role=args.role or "", method=args.method, arch=args.arch,
        arch_kwargs=kwargs, trusted=args.trusted, time_limit=args.time_limit,
        check_accuracy=not args.no_accuracy_check,
    )  # fmt: skip
    added = add_model(
        args.workspace, spec, checkpoint=args.checkpoint, activations=args.activations,
        copy=args.copy, replace=args.replace,
    )  # fmt: skip
    entry = added.entry
    where = entry.checkpoint or entry.activations
    print(f"added {entry.role} model {entry.name!r} ({where}) to {args.workspace}")
    for note in added.notes:
        print(f"  {note}")
    return 0


def _cmd_workspace_validate(args: argparse.Namespace) -> int:
    from sde_core.pipeline.workspace_checks import validate_workspace
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.pipeline.workspace_write import rehash_models, write_workspace

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


def _cmd_workspace_trust(args: argparse.Namespace) -> int:
    from sde_core.common.trust_store import trust_store_path
    from sde_core.pipeline.local_trust import model_code, trust_model, untrust_model
    from sde_core.pipeline.workspace_load import load_workspace

    ws = load_workspace(args.folder, validate=False)
    names = args.model or [m.name for m in ws.models if m.trusted]
    if not names:
        print(f"no model of {ws.root} is marked trusted: name one with --model")
        return 1
    for name in names:
        m = ws.model(name)
        if args.list:
            for piece in model_code(ws, m):
                print(f"{name}: {piece.sha256}  {piece.label}")
            continue
        done = untrust_model(ws, m) if args.untrust else trust_model(ws, m)
        verb = "no longer trusted" if args.untrust else "trusted"
        for piece in done:
            print(f"{verb}: {name}: {piece.sha256[:16]}…  {piece.label}")
    if not args.list:
        print(f"trust store: {trust_store_path()}")
    return 0


def _cmd_workspace_show(args: argparse.Namespace) -> int:
    import dataclasses

    from sde_core.pipeline.workspace_load import load_workspace

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
        trusted = " (trusted)" if m.trusted else ""
        print(
            f"  {m.name:<16} {m.role:<10} {m.method or '-':<10} {m.arch or '(file)':<12} "
            f"{secs:>8}  {m.checkpoint or m.activations}{trusted}"
        )
    return 0


def register_workspace(subparsers: argparse._SubParsersAction) -> None:
    """``workspace init | add-model | validate | trust | show``."""
    from sde_core.pipeline.workspace import ROLES

    parser = subparsers.add_parser("workspace", help="create, check or list a workspace")
    sub = parser.add_subparsers(dest="workspace_command", required=True, parser_class=Parser)

    init = sub.add_parser(
        "init",
        help="create FOLDER/workspace.toml (no models yet)",
        description="Create a workspace: the dataset, the forget set and evaluation defaults "
        "whose subset size fits the data. Give exactly one of --forget, --random-forget, "
        f"--forget-class, --forget-split, --forget-column. {_ROOTS_HELP}",
    )
    init.add_argument("folder")
    init.add_argument(
        "--dataset-kind", required=True, help="e.g. fashion-mnist, cifar10, imagefolder, npz, "
        "mnist1d, activations, text"
    )  # fmt: skip
    init.add_argument("--dataset-root", help="data folder/file (relative to FOLDER or absolute)")
    init.add_argument("--dataset-option", action="append", metavar="K=V", help="repeatable")
    init.add_argument("--train-size", type=int, help="random training subset size")
    init.add_argument("--test-size", type=int, help="random test subset size")
    init.add_argument(
        "--train-indices", metavar="FILE",
        help="D_tr = these rows of the training files, in this order (index file relative to "
        "FOLDER); the forget set indexes D_tr",
    )  # fmt: skip
    init.add_argument("--test-indices", metavar="FILE", help="D_te = these rows of the test files")
    init.add_argument(
        "--forget", help="forget set: an index file (.npy/.txt/.json/.pt, indices or a boolean "
        "mask) relative to FOLDER"
    )  # fmt: skip
    init.add_argument("--random-forget", type=float, metavar="FRACTION", help="draw R%% of D_tr")
    init.add_argument(
        "--forget-class", action="append", metavar="C",
        help="forget every training row of class C (id or name; repeatable or comma-separated)",
    )  # fmt: skip
    init.add_argument(
        "--forget-split", metavar="FILE",
        help="text data: forget the training records this file of records holds (JSONL/JSON/"
        "CSV/Parquet, e.g. TOFU's forget10.json; relative to FOLDER)",
    )  # fmt: skip
    init.add_argument(
        "--forget-column", metavar="NAME",
        help="text data: forget the training records whose column NAME is true/yes/1",
    )  # fmt: skip
    init.add_argument("--seed", type=int, default=0, help="seed of --random-forget")
    init.add_argument(
        "--subset-size", type=int, help="[defaults] subset size (default: the largest that fits)"
    )
    init.add_argument("--name", default="")
    init.add_argument("--overwrite", action="store_true")
    init.set_defaults(func=_cmd_workspace_init)

    add = sub.add_parser(
        "add-model",
        help="add an existing checkpoint (or activations file) to a workspace",
        description="Add a model you already have. The checkpoint is loaded without running "
        "code (unless --trusted), its architecture read from the file or inferred (or --arch "
        "with --arch-kwarg), checked on two training samples against the dataset's input shape "
        "and number of classes, and its SHA-256 recorded. Lightning .ckpt files and timm "
        "checkpoints are read as saved; a shared wrapper prefix (model., net.) is stripped. "
        "With --activations alone the model is "
        f"known by its precomputed activations (arch 'precomputed'). {_ROOTS_HELP} Use --copy "
        "to copy the files into WORKSPACE/models/NAME/ instead.",
    )
    add.add_argument("workspace")
    add.add_argument("--name", required=True, help="letters, digits, _ . + - (at most 64)")
    add.add_argument(
        "--checkpoint", help=".safetensors, .pt, .pth or .pth.tar file, or a Hugging Face model "
        "folder (config.json + model.safetensors, as save_pretrained writes it)"
    )  # fmt: skip
    add.add_argument(
        "--activations", help="the model's precomputed activations (.npz or .parquet, one row "
        "per sample; see docs/bring-your-own.md)"
    )  # fmt: skip
    add.add_argument("--role", choices=ROLES, help="default: guessed from the name")
    add.add_argument(
        "--arch", help="registry name, torchvision:NAME, timm:NAME (pip install -e '.[timm]'), "
        "hf (a Hugging Face model folder) or file:PATH.py:CLASS (your own class; runs code: "
        "needs --trusted, its SHA-256 is recorded) (default: read from the file or inferred)",
    )  # fmt: skip
    add.add_argument("--arch-kwarg", action="append", metavar="K=V", help="repeatable, JSON values")
    add.add_argument("--method", default="", help="how the model was produced, e.g. salun")
    add.add_argument(
        "--trusted", action="store_true",
        help="I vouch for this file: allow TorchScript archives, full pickles, a file: "
        "architecture and model folders with pickled .bin weights or custom code (they run "
        "code); recorded as trusted = true in the workspace and, by SHA-256, in your local "
        "trust store",
    )  # fmt: skip
    add_time_limit_argument(add)
    add.add_argument(
        "--no-accuracy-check", action="store_true",
        help="do not refuse an original or retrained classifier that is no better than chance "
        "on a sample of D_r (by default such a model is refused: its training's preprocessing "
        "— normalisation, image size, channel order — most likely differs from the workspace's)",
    )  # fmt: skip
    add.add_argument("--copy", action="store_true", help="copy the files into the workspace")
    add.add_argument("--replace", action="store_true", help="replace a model of the same name")
    add.set_defaults(func=_cmd_workspace_add_model)

    validate = sub.add_parser("validate", help="list every problem; exit 1 on errors")
    validate.add_argument("folder")
    validate.add_argument("--check-data", action="store_true", help="load the dataset too")
    validate.add_argument("--rehash", action="store_true", help="record current checkpoint hashes")
    validate.set_defaults(func=_cmd_workspace_validate)

    trust = sub.add_parser(
        "trust",
        help="trust a model's code on this machine (after reading it): a workspace's "
        "'trusted = true' is not enough",
        description="Record the SHA-256 of the code a model runs (its TorchScript / pickle / "
        "model folder, or its file: class and every module beside it) in your local trust "
        "store ($SDE_TRUST_STORE, else ~/.config/sde-explorer/trusted.json). Read the files "
        "first: a workspace folder may come from someone else.",
    )
    trust.add_argument("folder")
    trust.add_argument(
        "--model", action="append", default=[],
        help="model name (repeatable; default: every model marked trusted)",
    )  # fmt: skip
    trust.add_argument("--list", action="store_true", help="only print what would be trusted")
    trust.add_argument("--untrust", action="store_true", help="remove the models' code instead")
    trust.set_defaults(func=_cmd_workspace_trust)

    show = sub.add_parser("show", help="print the workspace's data and models")
    show.add_argument("folder")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=_cmd_workspace_show)
