"""Argument helpers shared by the command modules of :mod:`sde_core.cli`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, NoReturn

from sde_core.errors import SDEError, SettingsError

__all__ = [
    "Parser",
    "add_engine_arguments",
    "add_settings_arguments",
    "add_time_limit_argument",
    "literal",
    "parse_pairs",
    "parse_sigma",
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


def parse_sigma(text: str) -> str | float:
    """``"sqrt_dim"``, ``"median"`` or a positive number given on the command line."""
    if text in ("sqrt_dim", "median"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(
            f"--sigma {text!r} must be 'sqrt_dim', 'median' or a positive number"
        ) from None
    if not value > 0:
        raise SettingsError(f"--sigma must be positive; got {text}")
    return value


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """``--engine local|ray`` and ``--address auto|ray://HOST:PORT`` (shared by commands)."""
    parser.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="where jobs run: in this process (default) or on a Ray cluster",
    )
    parser.add_argument(
        "--address",
        help="Ray cluster: 'auto' (ray start on this machine) or ray://HOST:PORT; default: a "
        "new local Ray instance",
    )


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


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """The evaluation settings a command may override (each defaults to the workspace's
    ``[defaults]``); read them back with :func:`settings_overrides`."""
    parser.add_argument(
        "--layer", help="layer alias (output, logits, penultimate, block1..) or name"
    )
    parser.add_argument("--sigma", help="'sqrt_dim', 'median' or a positive number")
    parser.add_argument("--subset-size", type=int, help="n, rows per subset")
    parser.add_argument("--targets", type=int, help="T, target subsets drawn from D_f")
    parser.add_argument("--splits", type=int, help="K, random splits per subset")
    parser.add_argument("--seed", type=int, help="seed of every subset draw and split")
    parser.add_argument(
        "--draws", type=int, help="B, independent reference draws behind every interval (5)"
    )
    parser.add_argument(
        "--null-pairs", type=int, help="disjoint out-of-training pairs (null check)"
    )
    parser.add_argument("--panel-size", type=int, help="R, reference subsets per side (calibrated)")
    parser.add_argument("--bins", type=int, help="histogram bins of the JSD decision")
    parser.add_argument(
        "--baseline-targets", type=int, help="controlled subsets scored by MMD/W2 (0 = off)"
    )
    parser.add_argument("--device", help="cpu (default) or cuda")
    parser.add_argument(
        "--precision", type=float, metavar="W",
        help="half-width of the OTR, calibrated OTR and over-unlearned intervals to reach: a "
        "pilot of --pilot-draws draws fixes how many draws that takes (method §15; 0 = the "
        "fixed B draws)",
    )  # fmt: skip
    parser.add_argument("--pilot-draws", type=int, help="pilot draws of --precision (10)")
    parser.add_argument("--max-draws", type=int, help="budget in draws of --precision (60)")
    parser.add_argument(
        "--token-pooling", choices=("mean", "last"),
        help="language models: a text's hidden state is the mean over its real tokens (mean, "
        "the setting pool = true) or its last real token's (last, pool = false)",
    )  # fmt: skip


def settings_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line by :func:`add_settings_arguments` (None: keep the
    workspace's default), for ``EvalSettings.with_overrides``."""
    return {
        "layer": args.layer,
        "sigma": None if args.sigma is None else parse_sigma(args.sigma),
        "subset_size": args.subset_size,
        "targets": args.targets,
        "splits": args.splits,
        "seed": args.seed,
        "draws": args.draws,
        "null_pairs": args.null_pairs,
        "panel_size": args.panel_size,
        "bins": args.bins,
        "baseline_targets": args.baseline_targets,
        "device": args.device,
        "precision": getattr(args, "precision", None),
        "pilot_draws": getattr(args, "pilot_draws", None),
        "max_draws": getattr(args, "max_draws", None),
        "pool": None if args.token_pooling is None else args.token_pooling == "mean",
    }
