"""Is the split-half HSIC kernel as fast inside an evaluation as in its own benchmark?

The issue: at n = 1000 an evaluation's kernel took 133 ms per subset while
``bench/hsic_bench.py`` gave 48–65 ms in the same hour; at n = 400, 242 subsets took 2.4 s
(10 ms each). This script measures, in ONE run, the per-subset time of the batch engine
(:func:`sde_core.stats.hsic.split_half_batch_stats`) on the same inputs (the demo's activations
and the subsets its evaluation draws: n = 400, K = 200, layer ``output``, d = 10):

(a) **fresh** — a new Python process that imports only the engine, as ``hsic_bench`` does;
(b) **in evaluation** — this process after ``import torch``, a model forward pass and
    ``evaluate_workspace`` on the demo with cached activations: both the per-subset time of every
    batch call the evaluation itself makes (recorded by a wrapper) and the same inputs as (a)
    timed afterwards in the state the evaluation left;
(c) **contended** — the same inputs while another process keeps one core busy (the project's
    machines are shared: that is the ordinary state of an evaluation there).

Each measurement is repeated, interleaved, for the current engine and for the previous one
(``bench/reference_hsic_v3.py``). Then the bandwidth-change scenario of the issue: the nine demo
models × 450 subsets of n = 400 at a new σ, with the splits drawn once for all models and with
or without cached pool distances, against the previous engine; and the HSIC share of a first
evaluation of one model. A dated section is appended to ``bench/RESULTS.md``.

Usage: ``python bench/kernel_in_eval_bench.py [--workspace assets/demo-mnist1d] [--rounds 3]
[--quick] [--no-write]``. Timings on a shared machine are noisy: compare ratios within a run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference_hsic_v3 as v3  # noqa: E402

from sde_core.common.threads import usable_cpus  # noqa: E402
from sde_core.stats.hsic import split_half_batch_stats  # noqa: E402
from sde_core.stats.hsic_pool import pool_sq_distances  # noqa: E402
from sde_core.stats.hsic_splits import draw_batch_splits  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
ENGINES = ("current", "v3")


def _run_engine(engine: str, acts: np.ndarray, sub: np.ndarray, kw: dict[str, Any]) -> None:
    if engine == "current":
        split_half_batch_stats(acts, sub, **kw)
    else:
        v3.split_half_batch_stats_v3(acts, sub, kw["n_splits"], kw["sigma"], kw["estimator"])


def time_per_subset(engine: str, inputs: Path, repeats: int) -> float:
    """Median over ``repeats`` batch calls on the saved inputs of the seconds per subset.

    The median of whole calls, as for the evaluation's own calls (:class:`Recorder`), so that
    every state is summarised by the same statistic.
    """
    data = np.load(inputs)
    acts, sub = data["acts"], data["subsets"]
    kw = json.loads(str(data["kwargs"]))
    _run_engine(engine, acts, sub[:2], kw)  # compile / load caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _run_engine(engine, acts, sub, kw)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / sub.shape[0]


def fresh_process(engine: str, inputs: Path, repeats: int) -> float:
    """(a): the same timing in a new interpreter that imports only the engine."""
    out = subprocess.run(
        [sys.executable, __file__, "--worker", engine, str(inputs), str(repeats)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return float(out.stdout.strip().splitlines()[-1])


class Recorder:
    """Wraps the evaluation's batch call: per-subset seconds of every call it makes."""

    def __init__(self, engine: str, real: Any) -> None:
        self.engine, self.real, self.calls = engine, real, []
        self.saved: tuple[np.ndarray, np.ndarray, dict[str, Any]] | None = None

    def __call__(self, acts: Any, subsets: Any, **kw: Any) -> Any:
        from sde_core.stats.hsic import BatchStats

        t0 = time.perf_counter()
        if self.engine == "current":
            out = self.real(acts, subsets, **kw)
        else:
            h, spread = v3.split_half_batch_stats_v3(
                np.asarray(acts, dtype=np.float64),
                np.asarray(subsets),
                kw["n_splits"],
                kw["sigma"],
                kw["estimator"],
                kw["seed"],
            )
            out = BatchStats(h=h, spread=spread)
        self.calls.append((time.perf_counter() - t0, len(subsets)))
        if self.saved is None:
            keep = {k: kw[k] for k in ("n_splits", "sigma", "estimator")}
            self.saved = (np.asarray(acts, dtype=np.float64), np.asarray(subsets), keep)
        return out

    def per_subset(self) -> float:
        """Median over the evaluation's calls of the seconds per subset."""
        return float(np.median([t / n for t, n in self.calls]))


def evaluate_recorded(engine: str, workspace: Path, cache: Path) -> tuple[Recorder, float]:
    """``evaluate_workspace`` on every model with the batch call recorded; (recorder, seconds)."""
    import sde_core.pipeline.evaluation.stages as stages
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace

    rec = Recorder(engine, stages.split_half_batch_stats)  # the evaluation's one kernel call
    stages.split_half_batch_stats = rec
    try:
        t0 = time.perf_counter()
        evaluate_workspace(workspace, cache_dir=cache, stage_dir=False)  # no stage cache
        return rec, time.perf_counter() - t0
    finally:
        stages.split_half_batch_stats = rec.real


class BusyCore:
    """Another process spinning on one core for the duration of a ``with`` block."""

    def __enter__(self) -> BusyCore:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def sigma_change(workspace: Path, cache: Path, n_subsets: int, quick: bool) -> dict[str, Any]:
    """Nine models × ``n_subsets`` subsets of n = 400 at a new σ (the issue's 30 s target)."""
    from sde_core.inputs.activation_cache import ActivationCache
    from sde_core.inputs.activations import get_activations
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.pipeline.workspace_load import load_workspace

    ws = load_workspace(workspace)
    bundle = load_dataset(DatasetSpec.from_dict(ws.dataset, base_dir=ws.root))
    store = ActivationCache(cache)
    models = list(ws.models)
    acts = {
        e.name: get_activations(
            ws.path(e.checkpoint), bundle, "train", ["output"], store, arch=e.arch
        )["output"].astype(np.float64)
        for e in models
    }
    n, k = 400, 200
    pool = next(iter(acts.values())).shape[0]
    rng = np.random.default_rng(0)
    sub = np.stack([rng.choice(pool, n, replace=False) for _ in range(n_subsets)])
    sigma = float(np.sqrt(next(iter(acts.values())).shape[1])) * 0.7  # "a new σ"
    t0 = time.perf_counter()
    splits = draw_batch_splits(n, k, 0, n_subsets)
    out: dict[str, Any] = {"models": len(models), "subsets": n_subsets, "n": n, "K": k}
    out["draw_splits_s"] = time.perf_counter() - t0
    kw = {"n_splits": k, "sigma": sigma}

    def total(fn: Any) -> float:
        t0 = time.perf_counter()
        for a in acts.values():
            fn(a)
        return time.perf_counter() - t0

    out["current, splits redrawn"] = total(lambda a: split_half_batch_stats(a, sub, **kw))
    out["current, splits drawn once"] = total(
        lambda a: split_half_batch_stats(a, sub, splits=splits, **kw)
    )
    # Cached pool distances: built per model (timed apart: the pipeline builds them once per
    # model and layer), then only the σ-dependent work is timed.
    build = run64 = run32 = 0.0
    for a in acts.values():
        t0 = time.perf_counter()
        dist = pool_sq_distances(a, np.unique(sub))
        t1 = time.perf_counter()
        split_half_batch_stats(a, sub, splits=splits, distances=dist, **kw)
        t2 = time.perf_counter()
        split_half_batch_stats(a, sub, splits=splits, distances=dist, precision="float32", **kw)
        build, run64, run32 = build + t1 - t0, run64 + t2 - t1, run32 + time.perf_counter() - t2
        out["pool_distances_mb"] = dist.d2.nbytes / 2**20
        del dist
    out["pool_distances_s"] = build
    out["current, splits once + pool distances"] = run64
    out["current float32, splits once + pool distances"] = run32
    if not quick:
        out["v3 (previous engine)"] = total(
            lambda a: v3.split_half_batch_stats_v3(a, sub, k, sigma)
        )
    return out


def first_evaluation_share(workspace: Path, model: str) -> dict[str, float]:
    """A first evaluation of one model (cold activation cache) vs its HSIC at a new σ."""
    import sde_core.pipeline.evaluation.stages as stages
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace

    with tempfile.TemporaryDirectory() as tmp:
        rec = Recorder("current", stages.split_half_batch_stats)
        stages.split_half_batch_stats = rec
        try:
            t0 = time.perf_counter()
            evaluate_workspace(workspace, models=[model], cache_dir=Path(tmp), stage_dir=False)
            first = time.perf_counter() - t0
        finally:
            stages.split_half_batch_stats = rec.real
    calls = rec.calls
    return {"first evaluation s": first, "HSIC in it s": sum(t for t, _ in calls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", default=str(ROOT / "assets" / "demo-mnist1d"))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--quick", action="store_true", help="fewer subsets, no v3 σ sweep")
    parser.add_argument("--no-write", action="store_true", help="do not append to RESULTS.md")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        engine, inputs, repeats = args.worker
        print(time_per_subset(engine, Path(inputs), int(repeats)))
        return

    import torch

    workspace = Path(args.workspace)
    model = torch.nn.Sequential(torch.nn.Linear(40, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    with torch.no_grad():
        model(torch.randn(6000, 40))
    rows: dict[str, dict[str, list[float]]] = {e: {} for e in ENGINES}
    eval_seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "activations"
        evaluate_recorded("current", workspace, cache)  # fills the activation cache
        inputs = Path(tmp) / "inputs.npz"
        for r in range(args.rounds):
            for engine in ENGINES:
                rec, secs = evaluate_recorded(engine, workspace, cache)
                eval_seconds[engine] = secs
                if r == 0 and engine == "current" and rec.saved is not None:
                    acts, sub, kw = rec.saved
                    np.savez(inputs, acts=acts, subsets=sub, kwargs=json.dumps(kw))
                got = rows[engine]
                got.setdefault("(b) calls inside the evaluation", []).append(rec.per_subset())
                got.setdefault("(b) same inputs after the evaluation", []).append(
                    time_per_subset(engine, inputs, 5)
                )
                got.setdefault("(a) fresh process", []).append(fresh_process(engine, inputs, 5))
                with BusyCore():
                    got.setdefault("(c) one core taken by another process", []).append(
                        time_per_subset(engine, inputs, 5)
                    )
                print(engine, {k: f"{v[-1] * 1e3:.2f} ms" for k, v in got.items()}, flush=True)
        sweep = sigma_change(workspace, cache, 120 if args.quick else 450, args.quick)
        print(sweep, flush=True)
    share = first_evaluation_share(workspace, "original")
    print(share, flush=True)
    section = report(rows, eval_seconds, sweep, share, workspace, args.rounds)
    print(section)
    if not args.no_write:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n" + section)
        print(f"appended to {RESULTS}")


def report(
    rows: dict[str, dict[str, list[float]]],
    eval_seconds: dict[str, float],
    sweep: dict[str, Any],
    share: dict[str, float],
    workspace: Path,
    rounds: int,
) -> str:
    now = dt.datetime.now(dt.UTC)
    lines = [
        f"## kernel_in_eval_bench — {now:%Y-%m-%d %H:%M} UTC",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores ({usable_cpus()} usable), load "
        f"average {os.getloadavg()[0]:.1f} at the end; workspace `{workspace.name}`, "
        "n = 400, K = 200, layer `output` (d = 10). Per-subset ms of the batch engine: each "
        "round takes the median over batch calls (the evaluation's own 18 calls of 171 or 71 "
        "subsets; 5 calls on the first call's inputs otherwise); median (min–max) of "
        f"{rounds} interleaved rounds; 'ratio' = state ÷ (a) fresh process.",
        "",
        "| engine | state | ms per subset | ratio |",
        "|---|---|---|---|",
    ]
    for engine, got in rows.items():
        fresh = float(np.median(got["(a) fresh process"]))
        for state, vals in got.items():
            med = float(np.median(vals))
            lines.append(
                f"| {engine} | {state} | {med * 1e3:.2f} ({min(vals) * 1e3:.2f}–"
                f"{max(vals) * 1e3:.2f}) | {med / fresh:.2f} |"
            )
    lines += [
        "",
        "Whole evaluation of the nine models (cached activations), last round: "
        + ", ".join(f"{e} {s:.1f} s" for e, s in eval_seconds.items())
        + ".",
        "",
        f"σ change: {sweep['models']} models × {sweep['subsets']} subsets (n = {sweep['n']}, "
        f"K = {sweep['K']}) at a new σ. Splits drawn once for all models: "
        f"{sweep['draw_splits_s']:.1f} s; pool distances for all models: "
        f"{sweep['pool_distances_s']:.1f} s ({sweep['pool_distances_mb']:.0f} MB each); neither "
        "is in the totals below.",
        "",
        "| engine | total (s) | ms per subset |",
        "|---|---|---|",
    ]
    per = sweep["models"] * sweep["subsets"]
    for key, val in sweep.items():
        if key.startswith(("current", "v3")):
            lines.append(f"| {key} | {val:.1f} | {val / per * 1e3:.2f} |")
    first, hsic = share["first evaluation s"], share["HSIC in it s"]
    lines += [
        "",
        f"First evaluation of `original` (cold activation cache): {first:.1f} s, of which the "
        f"split-half HSIC {hsic:.1f} s ({hsic / first:.2f}).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
