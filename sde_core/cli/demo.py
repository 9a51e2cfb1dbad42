"""``demo build``: regenerate a bundled demo workspace deterministically (resumable)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sde_core.pipeline.demo import (
    DEMO_DATASETS,
    FASHION_SOURCE,
    acceptance_checks,
    build_demo,
    default_demo_folder,
    demo_recipe,
)
from sde_core.pipeline.demo_diffusion import DIFFUSION_DEMOS
from sde_core.pipeline.llm_demo import FACTS_DATASET

__all__ = ["register_demo"]


def _cmd_diffusion_build(args: argparse.Namespace) -> int:
    from sde_core.pipeline.demo_diffusion import (
        build_diffusion_demo,
        default_diffusion_folder,
        diffusion_recipe,
    )

    recipe = diffusion_recipe(args.dataset, seed=args.seed)
    folder = Path(args.out) if args.out else default_diffusion_folder(args.dataset)
    report, rows = build_diffusion_demo(
        recipe, folder, source=args.source, store=not args.no_store, log=print
    )
    print(
        f"built {report.folder}: {len(report.built)} model(s) produced, "
        f"{len(report.skipped)} reused, workspace hash {report.workspace_hash[:16]}, "
        f"{report.total_seconds:.1f}s in all"
    )
    print("denoising loss D_f / D_r / D_te, gap = (D_te − D_f) / D_te; paired with the "
          "retrained model on D_f and on D_te (± standard error):")  # fmt: skip
    for r in rows:
        print(f"  {r.model:<13} σ_t={r.noise_level:<5g} {r.forget:.5f} / {r.retain:.5f} / "
              f"{r.test:.5f}  gap {r.gap:+.4f}  paired D_f {r.paired_forget:+.4f} "
              f"± {r.paired_forget_se:.4f}, D_te {r.paired_test:+.4f} "
              f"± {r.paired_test_se:.4f}")  # fmt: skip
    return 0


def _cmd_demo_build(args: argparse.Namespace) -> int:
    if args.dataset in DIFFUSION_DEMOS:
        return _cmd_diffusion_build(args)
    if args.dataset == FACTS_DATASET:
        return _build_facts(args)
    recipe = demo_recipe(args.dataset, seed=args.seed)
    folder = Path(args.out) if args.out else default_demo_folder(args.dataset)
    report = build_demo(recipe, folder, source=args.source, store=not args.no_store, log=print)
    print(
        f"built {report.folder}: {len(report.built)} model(s) produced, "
        f"{len(report.skipped)} reused, workspace hash {report.workspace_hash[:16]}, "
        f"{report.total_seconds:.1f}s in all"
    )
    if report.store is None:
        return 0
    from sde_core.pipeline.store import ResultsStore

    with ResultsStore(report.store) as st:
        run_id = int(st.list_runs()["id"].iloc[-1])
        checks = acceptance_checks(st.rows(run_id, "models"))
    for check in checks:
        print(check)
    return 0 if all(c.passed for c in checks) else 1


def _build_facts(args: argparse.Namespace) -> int:
    """The language-model demo (``--dataset facts``)."""
    from sde_core.pipeline.llm_demo import FactsRecipe, build_facts_demo, default_facts_folder

    report = build_facts_demo(
        Path(args.out) if args.out else default_facts_folder(),
        FactsRecipe(seed=args.seed), store=not args.no_store, log=print,
    )  # fmt: skip
    print(
        f"built {report.folder} in {report.total_seconds:.0f}s ("
        + ", ".join(f"{k} {v:.0f}s" for k, v in report.seconds.items())
        + f"); workspace hash {report.workspace_hash[:16]}"
    )
    return 0


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
        "--dataset", choices=(*DEMO_DATASETS, *DIFFUSION_DEMOS, FACTS_DATASET),
        default=DEMO_DATASETS[0],
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
    b.set_defaults(func=_cmd_demo_build)
