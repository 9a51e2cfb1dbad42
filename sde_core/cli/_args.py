"""Argument helpers shared by the command modules of :mod:`sde_core.cli`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from sde_core.common.sigma import parse_sigma
from sde_core.errors import SDEError, SettingsError
from sde_core.pipeline.settings import SETTINGS, Setting, with_stated_design

__all__ = [
    "Parser",
    "add_engine_arguments",
    "add_settings_arguments",
    "add_time_limit_argument",
    "engine_from_args",
    "literal",
    "parse_pairs",
    "settings_overrides",
]


class Parser(argparse.ArgumentParser):
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


def literal(text: str) -> Any:
    """A ``key=value`` value as JSON when it parses (numbers, lists, booleans), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


#: The ``--engine`` names.
ENGINES = ("local", "ray", "slurm", "submitit-local")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """``--engine local|ray|slurm|submitit-local`` and their options (shared by commands)."""
    parser.add_argument(
        "--engine",
        "--executor",
        dest="engine",
        choices=ENGINES,
        default="local",
        help="where jobs run: in this process (default), on a Ray cluster, as Slurm jobs "
        "through submitit, or as local child processes through submitit (to test a Slurm set-up)",
    )
    parser.add_argument(
        "--address",
        help="Ray cluster: 'auto' (ray start on this machine) or ray://HOST:PORT; default: a "
        "new local Ray instance",
    )
    slurm = parser.add_argument_group("Slurm (--engine slurm or submitit-local)")
    slurm.add_argument("--partition", help="the Slurm partition of every job")
    slurm.add_argument(
        "--time-min", type=int, default=60, help="each job's time limit in minutes (default 60)"
    )
    slurm.add_argument("--gpus", type=int, help="GPUs per job (default: what the job asks for)")
    slurm.add_argument("--cpus", type=int, help="CPUs per job (default: what the job asks for)")
    slurm.add_argument("--mem-gb", type=float, help="memory per job in GB")
    slurm.add_argument(
        "--max-running",
        type=int,
        help="at most this many jobs submitted and unfinished at once (default: the usable "
        "CPUs with submitit-local, whose jobs all run on this machine; unbounded on Slurm)",
    )
    slurm.add_argument(
        "--jobs-folder",
        help="where submitit keeps job files, logs and the resume manifest (on a filesystem "
        "the nodes share; default: a 'submitit' folder beside the results store)",
    )
    slurm.add_argument(
        "--slurm-option",
        action="append",
        metavar="KEY=VALUE",
        help="a further submitit parameter, e.g. slurm_account=lab or "
        'slurm_additional_parameters=\'{"qos": "high"}\' (JSON value), repeatable',
    )


def engine_from_args(args: argparse.Namespace, jobs_folder: Path) -> Any:
    """The engine ``--engine`` and its options ask for; ``jobs_folder`` is the default folder
    of the submitit engines."""
    name = getattr(args, "engine", "local")
    if name in ("slurm", "submitit-local"):
        from sde_core.pipeline.engine_submitit import SubmititEngine

        if getattr(args, "address", None):
            raise SDEError("--address only applies to --engine ray")
        extra = {k: literal(v) for k, v in parse_pairs(args.slurm_option, "--slurm-option").items()}
        return SubmititEngine(
            Path(args.jobs_folder) if args.jobs_folder else jobs_folder,
            cluster="slurm" if name == "slurm" else "local",
            partition=args.partition, time_min=args.time_min, gpus=args.gpus, cpus=args.cpus,
            mem_gb=args.mem_gb, extra=extra, max_running=args.max_running,
        )  # fmt: skip
    from sde_core.pipeline.engine import make_engine

    return make_engine(name, getattr(args, "address", None))


def _seconds(text: str) -> float:
    """A ``--time-limit`` value: a positive, finite number of seconds."""
    from sde_core.inputs.isolation import check_time_limit

    try:
        return check_time_limit(float(text))
    except (ValueError, SDEError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive number of seconds (e.g. 600)"
        ) from None


def add_time_limit_argument(parser: argparse.ArgumentParser) -> None:
    """``--time-limit SECONDS``: how long each step of a trusted model may run in its child
    process (default :data:`~sde_core.inputs.isolation.DEFAULT_TIME_LIMIT`)."""
    from sde_core.inputs.isolation import DEFAULT_TIME_LIMIT

    parser.add_argument(
        "--time-limit",
        type=_seconds,
        metavar="SECONDS",
        help="a trusted model (TorchScript, full pickle) is loaded and run in a separate "
        "process; each step (loading, one batch) that takes longer is stopped, with every "
        f"process it started (default {DEFAULT_TIME_LIMIT:g})",
    )


def _flag_help(entry: Setting) -> str:
    """A setting's help: its definition, accepted values and library default (the table's)."""
    default = entry.default
    if entry.cli_words:
        default = next(word for word, value in entry.cli_words if value == default)
    named = entry.symbol == entry.name or entry.definition.startswith(entry.symbol)
    symbol = "" if named else f"{entry.symbol}: "
    return (
        f"{symbol}{entry.definition} Accepts {entry.bounds_text()}; default: the workspace's "
        f"[defaults], else {default}"
    ).replace("%", "%%")


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per evaluation setting of :data:`~sde_core.pipeline.settings.SETTINGS` (each
    defaults to the workspace's ``[defaults]``); read them back with :func:`settings_overrides`."""
    for entry in SETTINGS:
        kwargs: dict[str, Any] = {"dest": entry.name, "help": _flag_help(entry)}
        if entry.kind == "int":
            kwargs["type"] = int
        elif entry.kind == "float":
            kwargs["type"] = float
        elif entry.kind == "choice":
            kwargs["choices"] = entry.choices
        elif entry.cli_words:
            kwargs["choices"] = [word for word, _ in entry.cli_words]
        parser.add_argument(entry.cli_flag, **kwargs)


def settings_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line by :func:`add_settings_arguments` (None: keep the
    workspace's default), for ``EvalSettings.with_overrides``.

    Raises:
        SettingsError: a σ outside the one σ syntax (:mod:`sde_core.common.sigma`).
    """
    out: dict[str, Any] = {}
    for entry in SETTINGS:
        value = getattr(args, entry.name)
        if value is not None and entry.kind == "sigma":
            value = parse_sigma(value, entry.cli_flag, error=SettingsError).setting()
        elif value is not None and entry.cli_words:
            value = dict(entry.cli_words)[value]
        out[entry.name] = value
    return with_stated_design(out)  # --draws without --precision: the fixed design of B draws
