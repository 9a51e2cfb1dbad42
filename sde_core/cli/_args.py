"""Argument helpers shared by the command modules of :mod:`sde_core.cli`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, NoReturn

from sde_core.errors import SettingsError

__all__ = ["Parser", "add_engine_arguments", "literal", "parse_pairs", "parse_sigma"]


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
