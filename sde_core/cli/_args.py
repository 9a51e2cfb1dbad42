"""Argument helpers shared by the command modules of :mod:`sde_core.cli`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, NoReturn

from sde_core.common.sigma import parse_sigma
from sde_core.errors import SDEError, SettingsError
from sde_core.pipeline.settings import SETTINGS, Setting, with_stated_design

__all__ = [
    "Parser",
    "add_engine_arguments",
    "add_settings_arguments",
    "add_time_limit_argument",
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
