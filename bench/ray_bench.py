"""Benchmark: the local Ray engine vs the local engine on ≥ 8 independent jobs (issue 8).

The jobs are the unit of the paper's Table 1 grid: train one model from scratch on a workspace's
D_tr with its own seed (here the mnist1d demo's data and MLP, a few epochs each). Each job is
single-threaded (``torch.set_num_threads(1)`` inside the job), so on a 2-core machine the Ray
engine, which runs two jobs at once, should take close to half the local engine's time.

It also measures one ResNet-18 CIFAR-sized training step on this CPU and turns the measured
per-job times into an estimate of the paper's CIFAR-10 Table 1 grid on N workers, and appends
everything to ``bench/RESULTS.md``.

Run: ``.venv/bin/python bench/ray_bench.py [--jobs 8] [--epochs 3]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from sde_core.pipeline.engine import Job, LocalEngine, RayEngine, Resources
from sde_core.pipeline.workspace import Workspace
from sde_core.pipeline.workspace_write import write_workspace

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("RESULTS.md")
DEMO_DATA = ROOT / "assets" / "demo-mnist1d" / "data.npz"


def train_one(workspace_root: str, seed: int, epochs: int) -> tuple[str, float]:
    """One Table-1-style job: train the demo MLP with ``seed``; return (checkpoint sha, s)."""
    torch.set_num_threads(1)
    from sde_core.pipeline.jobs import train_model_job

    t0 = time.perf_counter()
    entry, _ = train_model_job(
        workspace_root, f"seed{seed}", "mlp",
        {"input_dim": 40, "hidden": [256, 256], "num_classes": 10},
        {"seed": seed, "optimizer": "adam", "lr": 1e-3, "epochs": epochs, "batch_size": 64,
         "checkpoint_fractions": [1.0]},
        out=f"models/seed{seed}",
    )  # fmt: skip
    return entry.sha256 or "", time.perf_counter() - t0


def warm_up() -> None:
    """A no-op task that makes Ray start its workers."""


def resnet18_epoch_seconds(batch: int = 128, steps: int = 3) -> float:
    """CPU seconds of one CIFAR-10 epoch (50,000 images) of ResNet-18, from a few timed steps."""
    from sde_core.inputs.architectures import build_model

    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()  # warm-up
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    per_step = (time.perf_counter() - t0) / steps
    return per_step * 50_000 / batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if not DEMO_DATA.exists():
        raise SystemExit(f"{DEMO_DATA} is missing: run `python -m sde_core demo build --dataset "
                         "mnist1d` first")  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="ray_bench_"))
    timings: dict[str, float] = {}
    hashes: dict[str, dict[str, str]] = {}
    try:
        for engine_name, engine in (("local", LocalEngine()), ("ray", RayEngine(num_cpus=2))):
            folder = tmp / engine_name
            shutil.copytree(DEMO_DATA.parent, folder, ignore=shutil.ignore_patterns(
                "models", "*.sqlite", ".sde-cache"))  # fmt: skip
            ws = Workspace(folder.resolve(), {"kind": "npz", "root": "data.npz"}, "forget.npy")
            write_workspace(ws)  # the data inside the workspace folder
            jobs = [
                Job(
                    f"seed{s}",
                    train_one,
                    {"workspace_root": str(ws.root), "seed": s, "epochs": args.epochs},
                    resources=Resources(cpus=1),
                )
                for s in range(args.jobs)
            ]
            if isinstance(engine, RayEngine):
                t_init = time.perf_counter()
                engine.run([Job("warm-up", warm_up)])  # start Ray before timing the jobs
                timings["ray start"] = time.perf_counter() - t_init
            t0 = time.perf_counter()
            out = engine.run(jobs)
            timings[engine_name] = time.perf_counter() - t0
            hashes[engine_name] = {k: v[0] for k, v in out.items()}
            per_job = np.mean([v[1] for v in out.values()])
            print(f"{engine_name:5s}: {args.jobs} jobs in {timings[engine_name]:.1f} s "
                  f"(mean job {per_job:.1f} s)")  # fmt: skip
        RayEngine.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    speedup = timings["local"] / timings["ray"]
    same = hashes["local"] == hashes["ray"]
    epoch_cpu = resnet18_epoch_seconds()
    # Paper's Table 1 on CIFAR-10: 3 forget ratios x 5 seeds = 15 retrained ResNet-18 models
    # (the subset sizes n only change the evaluation), 200 epochs each in the unlearning
    # literature's recipe; plus 45 evaluations (seconds each, negligible next to training).
    grid_jobs, epochs = 15, 200
    cpu_hours = grid_jobs * epochs * epoch_cpu / 3600
    lines = [
        f"## ray_bench — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"Machine: {os.cpu_count()} cores. {args.jobs} independent training jobs (mnist1d MLP, "
        f"{args.epochs} epochs, 1 thread each).",
        "",
        "| engine | wall time (s) |",
        "|---|---|",
        f"| local | {timings['local']:.1f} |",
        f"| ray (local instance, 2 CPUs; started beforehand in {timings['ray start']:.1f} s) "
        f"| {timings['ray']:.1f} |",
        "",
        f"Speed-up {speedup:.2f}×; checkpoints bit-identical across engines: {same}.",
        "",
        f"CIFAR-10 Table 1 estimate: one ResNet-18 epoch takes {epoch_cpu:.0f} s on this CPU "
        f"(measured from timed steps, batch 128), so the grid's {grid_jobs} retraining jobs x "
        f"{epochs} epochs cost {cpu_hours:.0f} CPU-hours here; on N workers of this speed "
        f"≈ {cpu_hours:.0f}/N h plus ~1 min per job of evaluation. With a GPU job time t_gpu "
        "(measure with this script on a GPU worker) the grid takes ⌈15/N⌉·t_gpu.",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
