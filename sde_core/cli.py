"""Command-line interface: ``python -m sde_core <command> ...``.

Commands are contributed by *command groups*: functions ``register(subparsers)`` that add one or
more sub-parsers and set ``func=handler`` on them, where ``handler(args) -> int`` returns the exit
status. :data:`COMMAND_GROUPS` lists them; a later module adds its own with
:func:`add_command_group`. Any :class:`~sde_core.errors.SDEError` (bad input) ends the program
with exit status 1 and one line ``error: ...`` on stderr, never a traceback; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from sde_core.errors import SDEError, SettingsError
from sde_core.evaluate_cli import add_engine_arguments, register_evaluate

__all__ = ["COMMAND_GROUPS", "add_command_group", "build_parser", "main", "parse_pairs"]

Registrar = Callable[[argparse._SubParsersAction], None]


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line on stderr (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def parse_pairs(pairs: Sequence[str] | None, what: str) -> dict[str, str]:
    """Turn ``["lr=0.1", "epochs=3"]`` into ``{"lr": "0.1", "epochs": "3"}``."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"{what} {pair!r} must look like key=value")
        out[key.strip()] = value.strip()
    return out


def _literal(text: str) -> Any:
    """A ``key=value`` value as JSON when it parses (numbers, lists, booleans), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# ----------------------------------------------------------------------------- workspace


def _cmd_workspace_init(args: argparse.Namespace) -> int:
    from sde_core.data import load_dataset, save_index_file
    from sde_core.workspace import init_workspace, write_workspace

    dataset: dict[str, Any] = {"kind": args.dataset_kind}
    if args.dataset_root is not None:
        dataset["root"] = args.dataset_root
    for key in ("train_size", "test_size"):
        if getattr(args, key) is not None:
            dataset[key] = getattr(args, key)
    options = {
        k: _literal(v) for k, v in parse_pairs(args.dataset_option, "--dataset-option").items()
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
    from sde_core.workspace import (
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

    from sde_core.workspace import load_workspace

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
    sub = parser.add_subparsers(dest="workspace_command", required=True, parser_class=_Parser)

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


# ----------------------------------------------------------------------------- train


class _EpochBar:
    """A ``progress(epoch, total, loss)`` callback drawing a tqdm bar, opened on the first epoch
    (so an error raised before training starts prints nothing but its one line)."""

    def __init__(self, desc: str) -> None:
        self.desc, self.bar = desc, None

    def __call__(self, epoch: int, total_epochs: int, loss: float) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total_epochs, desc=self.desc, unit="epoch", file=sys.stderr)
        self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        self.bar.update(epoch - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _run_job(args: argparse.Namespace, job: Any) -> Any:
    """Run one job on the engine chosen by ``--engine/--address``; return its result."""
    from sde_core.engine import make_engine

    return make_engine(args.engine, args.address).run([job])[job.key]


def _cmd_train(args: argparse.Namespace) -> int:
    from sde_core.engine import Job, Resources
    from sde_core.jobs import random_model_job, train_model_job
    from sde_core.training import TrainConfig
    from sde_core.workspace import load_workspace, write_workspace

    ws = load_workspace(args.workspace, validate=False)
    if any(m.name == args.name for m in ws.models) and not args.replace:
        raise SettingsError(f"model {args.name!r} exists in the workspace: pass --replace")
    arch_kwargs = {k: _literal(v) for k, v in parse_pairs(args.arch_kwarg, "--arch-kwarg").items()}
    common = {"workspace_root": str(ws.root), "name": args.name, "arch": args.arch,
              "arch_kwargs": arch_kwargs, "out": args.out}  # fmt: skip
    if args.role == "random":
        entry = _run_job(args, Job(args.name, random_model_job, {**common, "seed": args.seed}))
    else:
        config = TrainConfig(
            seed=args.seed, optimizer=args.optimizer, lr=args.lr, momentum=args.momentum,
            weight_decay=args.weight_decay, schedule=args.schedule, epochs=args.epochs,
            batch_size=args.batch_size, augmentation=args.augmentation,
            checkpoint_fractions=tuple(args.checkpoint_fractions), device=args.device,
        )  # fmt: skip
        local = args.engine == "local"
        progress = _EpochBar(f"train {args.name}") if local else None
        job = Job(
            args.name, train_model_job,
            {**common, "config": config.to_dict(), "role": args.role,
             "resume": not args.no_resume, "progress": progress},
            resources=Resources(cpus=1.0, gpus=0.0 if args.device == "cpu" else 1.0),
        )  # fmt: skip
        try:
            entry, loss = _run_job(args, job)
        finally:
            if progress is not None:
                progress.close()
        print(f"trained {args.name}: final loss {loss:.4f} in {entry.seconds:.1f}s")
    ws.add_model(entry, replace=args.replace)
    write_workspace(ws)
    print(f"added model {args.name!r} ({entry.checkpoint}) to {ws.root / 'workspace.toml'}")
    return 0


def register_train(subparsers: argparse._SubParsersAction) -> None:
    """``train WORKSPACE --name N --arch A ...``: train a model on D_tr and add it."""
    from sde_core.training import AUGMENTATIONS, OPTIMIZERS, SCHEDULES, TrainConfig

    d = TrainConfig()
    p = subparsers.add_parser("train", help="train a model on the workspace's D_tr and add it")
    p.add_argument("workspace")
    p.add_argument("--name", required=True)
    p.add_argument("--arch", required=True, help="registry name, e.g. fmnist_cnn, mlp, resnet18")
    p.add_argument("--arch-kwarg", action="append", metavar="K=V", help="repeatable, JSON values")
    p.add_argument("--role", choices=("original", "random"), default="original",
                   help="'random' saves a freshly initialised model without training")  # fmt: skip
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=d.optimizer)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--momentum", type=float, default=d.momentum)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--schedule", choices=SCHEDULES, default=d.schedule)
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--augmentation", choices=AUGMENTATIONS, default=d.augmentation)
    p.add_argument("--checkpoint-fractions", type=float, nargs="+", default=d.checkpoint_fractions)
    p.add_argument("--device", default=d.device, help="cpu, cuda or auto")
    p.add_argument("--out", help="checkpoint folder relative to the workspace (models/NAME)")
    p.add_argument("--no-resume", action="store_true", help="start over even if resume.pt exists")
    p.add_argument("--replace", action="store_true", help="replace a model of the same name")
    add_engine_arguments(p)
    p.set_defaults(func=_cmd_train)


# ----------------------------------------------------------------------------- unlearn


def _cmd_unlearn(args: argparse.Namespace) -> int:
    from sde_core.engine import Job, Resources
    from sde_core.jobs import unlearn_model_job
    from sde_core.unlearning import parse_params
    from sde_core.workspace import load_workspace, write_workspace

    ws = load_workspace(args.workspace, validate=False)
    if any(m.name == args.name for m in ws.models) and not args.replace:
        raise SettingsError(f"model {args.name!r} exists in the workspace: pass --replace")
    params = parse_params(args.method, parse_pairs(args.param, "--param"))
    source = ws.model(args.original) if args.original else ws.original()
    print(f"unlearning {source.name!r} with {args.method} ...", file=sys.stderr)
    job = Job(
        args.name, unlearn_model_job,
        {"workspace_root": str(ws.root), "method": args.method, "name": args.name,
         "params": params, "original": source.name, "device": args.device, "out": args.out},
        resources=Resources(cpus=1.0, gpus=0.0 if args.device == "cpu" else 1.0),
    )  # fmt: skip
    entry = _run_job(args, job)
    ws.add_model(entry, replace=args.replace)
    write_workspace(ws)
    print(f"added {entry.role} model {args.name!r} ({entry.seconds:.1f}s) to {ws.root}")
    return 0


def register_unlearn(subparsers: argparse._SubParsersAction) -> None:
    """``unlearn WORKSPACE --method M --name N [--param k=v ...]``."""
    from sde_core.unlearning import METHODS

    p = subparsers.add_parser("unlearn", help="unlearn D_f from the original model and add it")
    p.add_argument("workspace")
    p.add_argument("--method", required=True, help=f"one of {', '.join(sorted(METHODS))}")
    p.add_argument("--name", required=True, help="name of the new model")
    p.add_argument("--param", action="append", metavar="K=V", help="method parameter, repeatable")
    p.add_argument("--original", help="name of the model to unlearn from (default: the original)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--out", help="checkpoint path relative to the workspace")
    p.add_argument("--replace", action="store_true", help="replace a model of the same name")
    add_engine_arguments(p)
    p.set_defaults(func=_cmd_unlearn)


# ----------------------------------------------------------------------------- entry point

COMMAND_GROUPS: list[Registrar] = [
    register_workspace,
    register_train,
    register_unlearn,
    register_evaluate,
    __import__("sde_core.demo", fromlist=["register_demo"]).register_demo,
    __import__("sde_core.plan_cli", fromlist=["register_run_plan"]).register_run_plan,
]


def add_command_group(register: Registrar) -> None:
    """Add a command group (``register(subparsers)``) to the CLI; idempotent."""
    if register not in COMMAND_GROUPS:
        COMMAND_GROUPS.append(register)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered command group."""
    parser = _Parser(
        prog="python -m sde_core",
        description="SDE Explorer: check whether a model unlearned a forget set.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for register in COMMAND_GROUPS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 bad input or failed check, 2 usage)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return int(exc.code or 0)
    try:
        return int(args.func(args))
    except SDEError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            "error: interrupted (training resumes from resume.pt on the next run)", file=sys.stderr
        )
        return 130
