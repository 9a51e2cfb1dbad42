"""Command-line interface: ``python -m sde_core <command> ...``.

Commands are contributed by *command groups*: functions ``register(subparsers)`` that add one or
more sub-parsers and set ``func=handler`` on them, where ``handler(args) -> int`` returns the exit
status. :data:`COMMAND_GROUPS` lists them; a later module adds its own with
:func:`add_command_group`. Any :class:`~sde_core.errors.SDEError` (bad input) ends the program
with exit status 1 and one line ``error: ...`` on stderr, never a traceback; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from sde_core.cli._args import Parser
from sde_core.cli.curves import register_curves
from sde_core.cli.demo import register_demo
from sde_core.cli.evaluate import register_evaluate
from sde_core.cli.meta_eval import register_meta_eval
from sde_core.cli.plan import register_run_plan
from sde_core.cli.train import register_train, register_unlearn
from sde_core.cli.verify import register_verify
from sde_core.cli.workspace import register_workspace
from sde_core.errors import SDEError

__all__ = [
    "COMMAND_GROUPS",
    "add_command_group",
    "build_parser",
    "main",
]

Registrar = Callable[[argparse._SubParsersAction], None]


COMMAND_GROUPS: list[Registrar] = [
    register_workspace,
    register_train,
    register_unlearn,
    register_evaluate,
    register_demo,
    register_run_plan,
    register_verify,
    register_curves,
    register_meta_eval,
]


def add_command_group(register: Registrar) -> None:
    """Add a command group (``register(subparsers)``) to the CLI; idempotent."""
    if register not in COMMAND_GROUPS:
        COMMAND_GROUPS.append(register)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered command group."""
    parser = Parser(
        prog="python -m sde_core",
        description="SDE Explorer: check whether a model unlearned a forget set.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
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
