"""Benchmark and results of the bundled demos (method §11): evaluation time and per-method table.

For each demo workspace (``assets/demo``, ``assets/demo-mnist1d``):

1. warm the activation cache (every model, the layers ``output``, ``logits``, ``penultimate``);
2. time a full evaluation of the nine models at the workspace's ``[defaults]`` from cached
   activations **without** a results store (HSIC, decisions, calibrated evidence, baselines,
   classic metrics), once per layer;
3. time the same default evaluation answered by (a copy of) the shipped results store;
4. report the method §11 acceptance numbers and, per layer and method: OTR, calibrated OTR, ASR,
   Acc_r / Acc_f / Acc_te, dependence score, controlled F1 and reference validity.

Prints the tables and appends a dated section to ``bench/RESULTS.md``.

Usage: ``python bench/demo_bench.py [--demos fashion-mnist mnist1d] [--layers output logits
penultimate] [--no-append]``
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sde_core.inputs.activation_cache import ActivationCache
from sde_core.inputs.activations import get_activations
from sde_core.inputs.data import load_dataset
from sde_core.pipeline.demo_recipes import DEMO_DATASETS, acceptance_checks, default_demo_folder
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.workspace import Workspace
from sde_core.pipeline.workspace_load import load_workspace

LAYERS = ("output", "logits", "penultimate")
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
COLUMNS = {
    "name": "model",
    "references_valid": "refs valid",
    "otr": "OTR",
    "calibrated_otr": "cal. OTR",
    "asr": "ASR",
    "acc_r": "Acc_r",
    "acc_f": "Acc_f",
    "acc_te": "Acc_te",
    "dependence_score": "dep. score",
    "f1": "F1",
    "calibrated_f1": "cal. F1",
}


@dataclasses.dataclass
class DemoBench:
    """Timings and tables of one demo."""

    dataset: str
    warm_seconds: float
    no_store_seconds: dict[str, float]
    store_seconds: float
    store_cached: list[str]
    tables: dict[str, pd.DataFrame]
    acceptance: list[str]


def _warm_cache(ws: Workspace, layers: tuple[str, ...]) -> float:
    """Extract (or read back) every model's activations of ``layers``; return the seconds."""
    t0 = time.perf_counter()
    bundle = load_dataset(ws.dataset_spec())
    cache = ActivationCache(ws.root / ".sde-cache" / "activations")
    for entry in ws.models:
        for split in ("train", "test"):
            get_activations(
                ws.path(entry.checkpoint), bundle, split, layers, cache, arch=entry.arch
            )
    return time.perf_counter() - t0


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return "–" if pd.isna(value) else f"{value:.3f}"
    return str(value)


def _markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join([header, rule, *rows])


def bench_demo(dataset: str, layers: tuple[str, ...]) -> DemoBench:
    """Run steps 1–4 of the module docstring on one demo."""
    ws = load_workspace(default_demo_folder(dataset))
    defaults = EvalSettings.from_mapping(dataclasses.asdict(ws.defaults))
    warm = _warm_cache(ws, tuple(dict.fromkeys(("output", *layers))))
    timings, tables = {}, {}
    for layer in layers:
        settings = defaults.with_overrides(layer=layer)
        t0 = time.perf_counter()
        result = evaluate_workspace(ws, settings)
        timings[layer] = time.perf_counter() - t0
        tables[layer] = result.models[list(COLUMNS)].rename(columns=COLUMNS)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "results.sqlite"
        shutil.copyfile(ws.root / "results.sqlite", copy)
        t0 = time.perf_counter()
        with ResultsStore(copy) as store:
            stored = evaluate_workspace(ws, defaults, store=store)
        store_seconds = time.perf_counter() - t0
    checks = [str(c) for c in acceptance_checks(stored.models)]
    return DemoBench(dataset, warm, timings, store_seconds, stored.cached_models, tables, checks)


def _section(results: list[DemoBench], layers: tuple[str, ...]) -> str:
    now = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    load = os.getloadavg()[0]
    lines = [
        f"## Demo workspaces — {now}",
        "",
        f"`bench/demo_bench.py`, CPU ({torch.get_num_threads()} threads, {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {load:.1f} at the end), torch {torch.__version__}. "
        "Nine models per demo at the workspace `[defaults]` (n = 400, T = 100, K = 200, R = 20, "
        "σ = √d); 'no store' = full evaluation from cached activations (HSIC, decisions, "
        "calibrated evidence, MMD/W2 baselines, accuracies, MIA ASR); 'store' = the same "
        "default run answered by a copy of the shipped `results.sqlite`.",
        "",
        "| demo | warm activation cache (s) | "
        + " | ".join(f"no store, {la} (s)" for la in layers)
        + " | store, defaults (s) | models from store |",
        "|" + "---|" * (len(layers) + 4),
    ]
    for r in results:
        lines.append(
            f"| {r.dataset} | {r.warm_seconds:.1f} | "
            + " | ".join(f"{r.no_store_seconds[la]:.1f}" for la in layers)
            + f" | {r.store_seconds:.2f} | {len(r.store_cached)}/9 |"
        )
    for r in results:
        lines += ["", f"### {r.dataset}: method §11 acceptance (layer output)", "", "```"]
        lines += [*r.acceptance, "```"]
        for layer in layers:
            lines += ["", f"**{r.dataset}, layer `{layer}`**", "", _markdown(r.tables[layer])]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Parse arguments, run the benchmark, print and append the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demos", nargs="+", choices=DEMO_DATASETS, default=list(DEMO_DATASETS))
    parser.add_argument("--layers", nargs="+", default=list(LAYERS))
    parser.add_argument("--no-append", action="store_true", help="do not write bench/RESULTS.md")
    args = parser.parse_args()
    layers = tuple(args.layers)
    results = [bench_demo(d, layers) for d in args.demos]
    text = _section(results, layers)
    print(text)
    if not args.no_append:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n" + text)


if __name__ == "__main__":
    main()
