"""Benchmark: activation extraction throughput vs a bare ``model(x)`` loop, with/without cache.

Runs on CPU with small data: ``fmnist_cnn`` on Fashion-MNIST (Debian's dataset-fashion-mnist
files when installed, else random 28×28 images) and CIFAR ResNet-18 on random 32×32 images.
Prints a table and appends a dated section to ``bench/RESULTS.md``.

Usage: ``python bench/extract_bench.py [--n-fmnist 4000] [--n-resnet 512] [--batch-size 256]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sde_core.inputs.activation_cache import ActivationCache
from sde_core.inputs.activations import get_activations
from sde_core.inputs.architectures import build_model
from sde_core.inputs.data import DatasetBundle, DatasetSpec, load_dataset
from sde_core.inputs.extraction import extract_activations
from sde_core.inputs.models import save_checkpoint

FASHION_ROOT = Path("/usr/share/datasets/fashion-mnist")
LAYERS = ["output", "logits", "penultimate", "block1"]


def _timed(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time in seconds over ``repeats`` runs (after one warm-up run)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _bundle(kind: str, n: int, workdir: Path) -> DatasetBundle:
    if kind == "fashion" and FASHION_ROOT.is_dir():
        return load_dataset(DatasetSpec("fashion-mnist", FASHION_ROOT, train_size=n, test_size=n))
    rng = np.random.default_rng(0)
    shape = (28, 28) if kind == "fashion" else (32, 32, 3)
    path = workdir / f"{kind}.npz"
    np.savez(
        path,
        x_train=rng.integers(0, 256, (n, *shape), dtype=np.uint8),
        y_train=np.arange(n) % 10,
        x_test=rng.integers(0, 256, (n, *shape), dtype=np.uint8),
        y_test=np.arange(n) % 10,
    )
    return load_dataset(DatasetSpec("npz", path))


def bench_case(arch: str, kwargs: dict, bundle: DatasetBundle, batch: int, workdir: Path) -> dict:
    """Samples/second of a bare loop, one-pass extraction, and get_activations cold/warm."""
    torch.manual_seed(0)
    model = build_model(arch, **kwargs).eval()
    ckpt = save_checkpoint(model, workdir / f"{arch}.safetensors", arch)
    n = len(bundle.train)
    batches = [bundle.train.get_batch(np.arange(s, min(s + batch, n))) for s in range(0, n, batch)]

    def bare() -> None:  # the same tensors the extraction feeds, already materialised
        with torch.inference_mode():
            for xb, _ in batches:
                model(xb)

    def bare_with_loading() -> None:  # including the dataset's uint8 -> float conversion
        with torch.inference_mode():
            for s in range(0, n, batch):
                model(bundle.train.get_batch(np.arange(s, min(s + batch, n)))[0])

    def extract() -> None:
        extract_activations(model, bundle.train, LAYERS, batch_size=batch)

    def cold() -> None:
        cache = ActivationCache(tempfile.mkdtemp(dir=workdir))
        get_activations(ckpt, bundle, "train", LAYERS, cache, batch_size=batch)

    warm_cache = ActivationCache(workdir / f"cache_{arch}")
    get_activations(ckpt, bundle, "train", LAYERS, warm_cache, batch_size=batch)

    def warm() -> None:
        get_activations(ckpt, bundle, "train", LAYERS, warm_cache, batch_size=batch)

    repeats = 3
    times = {
        "bare model(x)": _timed(bare, repeats),
        "bare + data loading": _timed(bare_with_loading, repeats),
        f"extract {len(LAYERS)} layers": _timed(extract, repeats),
        "get_activations, cold cache": _timed(cold, repeats),
        "get_activations, warm cache": _timed(warm, repeats),
    }
    return {"arch": arch, "n": n, "times": times}


def render(results: list[dict]) -> str:
    """Markdown table: seconds, samples/s and speed relative to the bare loop."""
    lines = ["| model | n | mode | seconds | samples/s | vs bare |", "|---|---|---|---|---|---|"]
    for res in results:
        base = res["times"]["bare model(x)"]
        for mode, sec in res["times"].items():
            lines.append(
                f"| {res['arch']} | {res['n']} | {mode} | {sec:.3f} | {res['n'] / sec:,.0f} "
                f"| {base / sec:.2f}× |"
            )
    return "\n".join(lines)


def main() -> None:
    """Run both cases, print the table and append it to bench/RESULTS.md."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-fmnist", type=int, default=4000)
    parser.add_argument("--n-resnet", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        results = [
            bench_case(
                "fmnist_cnn",
                {},
                _bundle("fashion", args.n_fmnist, workdir),
                args.batch_size,
                workdir,
            ),
            bench_case(
                "resnet18", {}, _bundle("cifar", args.n_resnet, workdir), args.batch_size, workdir
            ),
        ]
    table = render(results)
    print(table)
    header = (
        f"\n## Activation extraction — {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}\n\n"
        f"`bench/extract_bench.py`, CPU ({torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}), torch {torch.__version__}, "
        f"batch {args.batch_size}, layers {LAYERS} in one pass; best of 3. "
        "'vs bare' = bare-loop time / mode time (≥ 0.9× is the target for extraction).\n\n"
    )
    results_md = Path(__file__).resolve().parent / "RESULTS.md"
    with open(results_md, "a", encoding="utf-8") as fh:
        fh.write(header + table + "\n")


if __name__ == "__main__":
    main()
