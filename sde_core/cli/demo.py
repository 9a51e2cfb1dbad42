"""``demo build``: regenerate a bundled demo workspace deterministically (resumable)."""

from __future__ import annotations

import argparse

from sde_core.pipeline.demo_recipes import FASHION_SOURCE
from sde_core.pipeline.demos import DEMOS, build_named_demo, redo_demo_sweep, refill_demo_store

__all__ = ["register_demo"]


def _cmd_demo_build(args: argparse.Namespace) -> int:
    if args.sweep_only:
        if args.store_only or args.no_store:
            print("--sweep-only rebuilds the sweep alone: leave out --store-only and --no-store")
            return 2
        for line in redo_demo_sweep(args.dataset, args.out, log=print).summary:
            print(line)
        return 0
    if args.store_only:
        if args.no_store:
            print("--store-only and --no-store exclude each other: give one")
            return 2
        refilled = refill_demo_store(args.dataset, args.out, seed=args.seed, log=print)
        for line in refilled.summary:
            print(line)
        return 0
    result = build_named_demo(
        args.dataset, args.out, seed=args.seed, source=args.source, store=not args.no_store,
        log=print,
    )  # fmt: skip
    for line in result.summary:
        print(line)
    return 0 if result.passed else 1


def register_demo(subparsers: argparse._SubParsersAction) -> None:
    """``demo build [--dataset fashion-mnist|mnist1d|facts] [--out DIR] [--source DIR]``."""
    p = subparsers.add_parser("demo", help="regenerate the bundled demo workspaces")
    sub = p.add_subparsers(dest="demo_command", required=True, parser_class=type(p))
    b = sub.add_parser(
        "build",
        help="rebuild a demo deterministically (resumable) and its precomputed results store",
        description="Rebuild a demo workspace (method §11): data, forget set, nine models and the "
        "results store at the workspace's [defaults]. Finished models are reused; the exit "
        "status is 1 when the method §11 acceptance numbers are not met.",
    )
    b.add_argument(
        "--dataset", choices=tuple(DEMOS), default=next(iter(DEMOS)),
        help="fashion-mnist-edm: the diffusion demo; facts: the language-model demo "
        "(fictitious facts, a small GPT-2 trained on CPU; needs the [llm] extra)",
    )  # fmt: skip
    b.add_argument(
        "--out", help="workspace folder (default: assets/demo, assets/demo-mnist1d, ...)"
    )
    b.add_argument(
        "--source",
        help=f"Fashion-MNIST idx folder (default {FASHION_SOURCE}); for mnist1d the folder "
        "caching the generated data",
    )
    b.add_argument("--seed", type=int, default=0, help="base seed of the whole demo")
    b.add_argument("--no-store", action="store_true", help="skip the precomputed results store")
    b.add_argument(
        "--store-only", action="store_true",
        help="rebuild only the results store of a built demo, from the models it holds, at "
        "the [defaults] its recipe pins (after a change of those defaults)",
    )  # fmt: skip
    b.add_argument(
        "--sweep-only", action="store_true",
        help="rerun only the Figure 6 sweep (fig6_sweep.csv) of a built diffusion demo, from "
        "the models it holds (after a change of the sweep's columns or of the algorithm)",
    )  # fmt: skip
    b.set_defaults(func=_cmd_demo_build)
