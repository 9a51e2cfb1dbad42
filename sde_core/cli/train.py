"""``train`` and ``unlearn``: produce a model and add it to a workspace.

The job writes its checkpoints under ``models/`` without overwriting any file the workspace
refers to (``--replace`` trains into a fresh folder); ``workspace.toml`` is rewritten atomically
only once the job succeeded, so a failed run leaves the workspace as it was.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from sde_core.cli._args import (
    add_engine_arguments,
    add_time_limit_argument,
    engine_from_args,
    literal,
    parse_pairs,
)
from sde_core.errors import SettingsError

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["register_train", "register_unlearn"]


class _EpochBar:
    """A ``progress(epoch, total, loss)`` callback drawing a tqdm bar, opened on the first epoch
    (so an error raised before training starts prints nothing but its one line)."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self.bar: tqdm[Any] | None = None

    def __call__(self, epoch: int, total_epochs: int, loss: float) -> None:
        from tqdm import tqdm

        bar = self.bar
        if bar is None:
            bar = self.bar = tqdm(total=total_epochs, desc=self.desc, unit="epoch", file=sys.stderr)
        bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        bar.update(epoch - bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _run_job(args: argparse.Namespace, job: Any) -> Any:
    """Run one job on the engine chosen by ``--engine/--address``; return its result."""

    from sde_core.pipeline.workspace import cache_path

    folder = cache_path(args.workspace, "submitit")
    return engine_from_args(args, folder).run([job])[job.key]


def _cmd_train(args: argparse.Namespace) -> int:
    from sde_core.learning.training import TrainConfig
    from sde_core.pipeline.engine import Job, Resources
    from sde_core.pipeline.jobs import random_model_job, train_model_job
    from sde_core.pipeline.workspace import check_model_name
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.pipeline.workspace_write import write_workspace

    check_model_name(args.name)
    ws = load_workspace(args.workspace, validate=False)
    if any(m.name == args.name for m in ws.models) and not args.replace:
        raise SettingsError(f"model {args.name!r} exists in the workspace: pass --replace")
    arch_kwargs = {k: literal(v) for k, v in parse_pairs(args.arch_kwarg, "--arch-kwarg").items()}
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
    from sde_core.learning.training import AUGMENTATIONS, OPTIMIZERS, SCHEDULES, TrainConfig

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


def _cmd_unlearn(args: argparse.Namespace) -> int:
    from sde_core.learning.unlearning import parse_params
    from sde_core.pipeline.engine import Job, Resources
    from sde_core.pipeline.jobs import unlearn_model_job
    from sde_core.pipeline.workspace import check_model_name
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.pipeline.workspace_write import write_workspace

    check_model_name(args.name)
    ws = load_workspace(args.workspace, validate=False)
    if any(m.name == args.name for m in ws.models) and not args.replace:
        raise SettingsError(f"model {args.name!r} exists in the workspace: pass --replace")
    params = parse_params(args.method, parse_pairs(args.param, "--param"))
    source = ws.model(args.original) if args.original else ws.original()
    print(f"unlearning {source.name!r} with {args.method} ...", file=sys.stderr)
    job = Job(
        args.name, unlearn_model_job,
        {"workspace_root": str(ws.root), "method": args.method, "name": args.name,
         "params": params, "original": source.name, "device": args.device, "out": args.out,
         "time_limit": args.time_limit, "save_every": args.save_every},
        resources=Resources(cpus=1.0, gpus=0.0 if args.device == "cpu" else 1.0),
    )  # fmt: skip
    entry = _run_job(args, job)
    ws.add_model(entry, replace=args.replace)
    write_workspace(ws)
    print(f"added {entry.role} model {args.name!r} ({entry.seconds:.1f}s) to {ws.root}")
    if entry.checkpoints:
        print(
            f"kept {len(entry.checkpoints)} intermediate checkpoint(s); evaluate them with "
            f"`python -m sde_core evaluate-checkpoints {args.workspace} --model {args.name}`"
        )
    return 0


def register_unlearn(subparsers: argparse._SubParsersAction) -> None:
    """``unlearn WORKSPACE --method M --name N [--param k=v ...]``."""
    from sde_core.learning.unlearning import METHODS

    p = subparsers.add_parser("unlearn", help="unlearn D_f from the original model and add it")
    p.add_argument("workspace")
    p.add_argument("--method", required=True, help=f"one of {', '.join(sorted(METHODS))}")
    p.add_argument("--name", required=True, help="name of the new model")
    p.add_argument("--param", action="append", metavar="K=V", help="method parameter, repeatable")
    p.add_argument("--original", help="name of the model to unlearn from (default: the original)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--out", help="checkpoint path relative to the workspace")
    p.add_argument("--replace", action="store_true", help="replace a model of the same name")
    p.add_argument(
        "--save-every", type=int, metavar="N",
        help="keep the model after every N-th epoch as an intermediate checkpoint (epoch-based "
        "methods: ft, ga, rl, salun, l1_sparse, neggrad_plus), for evaluate-checkpoints and "
        "the Curves view",
    )  # fmt: skip
    add_engine_arguments(p)
    add_time_limit_argument(p)
    p.set_defaults(func=_cmd_unlearn)
