"""Do the demos' decisions depend on the HSIC engine's arithmetic? (method §2, "Precision")

For both bundled demos at their ``[defaults]``, every model is evaluated with

* ``float64`` — the CPU engine's default (the reference here);
* ``float32 (CPU engine)`` — ``precision="float32"``: float32 gathers on the centred Gram;
* ``float32 (torch engine)`` — the torch engine on the CPU device with its default float32
  gathers: the arithmetic a CUDA GPU uses by default (``device=None`` there);
* ``v3`` — the previous engine (``bench/reference_hsic_v3.py``: uncentred Gram), to show how
  far the stored numbers move with the new arithmetic.

and the per-subset JSD decisions, calibrated verdicts, rank p-values (``p_in``, ``p_out``), the
reference p-value and the model-level metrics are compared with the float64 run. A dated section
is appended to ``bench/RESULTS.md``.

Usage: ``python bench/precision_decisions_bench.py [--demos mnist1d fashion-mnist] [--no-write]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference_hsic_v3 as v3  # noqa: E402

import sde_core.pipeline.evaluation.stages as stages  # noqa: E402
from sde_core.pipeline.demo_recipes import default_demo_folder  # noqa: E402
from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace  # noqa: E402
from sde_core.stats.hsic import BatchStats  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
REAL = stages.split_half_batch_stats
SUBSET_KEYS = ["model", "kind", "index"]
EXACT = ["decision", "in_training_raw", "verdict"]
NUMERIC = ["p_in", "p_out", "d_it", "d_oot", "score"]
MODEL_EXACT = ["references_valid", "panel_valid", "otr", "f1", "calibrated_otr_raw"]
MODEL_NUMERIC = ["reference_p", "panel_p", "dependence_score"]


def _v3_batch(acts: Any, subsets: Any, **kw: Any) -> BatchStats:
    h, spread = v3.split_half_batch_stats_v3(
        np.asarray(acts, dtype=np.float64),
        np.asarray(subsets),
        kw["n_splits"],
        kw["sigma"],
        kw["estimator"],
        kw["seed"],
    )
    return BatchStats(h=h, spread=spread)


ENGINES = {
    "float64": REAL,
    "float32 (CPU engine)": functools.partial(REAL, precision="float32"),
    "float32 (torch engine)": lambda a, s, **kw: REAL(
        a, s, **{**kw, "device": "cpu"}, backend="torch", precision="float32"
    ),
    "v3": _v3_batch,
}


def evaluate(workspace: Path, engine: str, cache: Path) -> tuple[Any, float]:
    stages.split_half_batch_stats = ENGINES[engine]
    try:
        t0 = time.perf_counter()
        result = evaluate_workspace(workspace, cache_dir=cache)
        return result, time.perf_counter() - t0
    finally:
        stages.split_half_batch_stats = REAL


def compare(ref: Any, got: Any) -> dict[str, Any]:
    a = ref.subsets.set_index(SUBSET_KEYS).sort_index()
    b = got.subsets.set_index(SUBSET_KEYS).sort_index()
    out: dict[str, Any] = {"subsets": len(a)}
    for col in EXACT:
        same = (a[col] == b[col]) | (a[col].isna() & b[col].isna())
        out[f"{col} differ"] = int((~same).sum())
    for col in NUMERIC:
        diff = (a[col] - b[col]).abs()
        out[f"max |Δ {col}|"] = float(diff.max())
    ma = ref.models.set_index("name")
    mb = got.models.set_index("name")
    out["model metrics differ"] = [
        f"{name}.{col}"
        for col in MODEL_EXACT
        for name in ma.index
        if not (pd.isna(ma.at[name, col]) and pd.isna(mb.at[name, col]))
        and ma.at[name, col] != mb.at[name, col]
    ]
    for col in MODEL_NUMERIC:
        out[f"max |Δ {col}|"] = float((ma[col] - mb[col]).abs().max())
    # H values themselves: largest relative change, apart for the random-init models (whose
    # near-constant outputs the uncentred arithmetic got wrong)
    for label, keep in (("H, trained models", False), ("H, random models", True)):
        rel = [
            float(np.max(np.abs(got.arrays[k] - v) / np.abs(v)))
            for k, v in ref.arrays.items()
            if (ma.at[k.split("/")[0], "role"] == "random") == keep
        ]
        out[f"max rel Δ {label}"] = max(rel) if rel else float("nan")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demos", nargs="+", default=["mnist1d", "fashion-mnist"])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    lines = [
        f"## precision_decisions_bench — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        "Each demo at its `[defaults]` (layer `output`, n = 400, K = 200, 100 targets, 20+20 "
        "panel subsets), nine models; every engine compared with the float64 CPU engine. "
        "'differ' = number of subsets (targets, F1 subsets) whose label changed.",
        "",
    ]
    for demo in args.demos:
        workspace = default_demo_folder(demo)
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp)
            ref, secs = evaluate(workspace, "float64", cache)
            lines += [f"### {demo} (float64 evaluation {secs:.1f} s)", ""]
            header = None
            for engine in list(ENGINES)[1:]:
                got, secs = evaluate(workspace, engine, cache)
                cmp = compare(ref, got)
                print(demo, engine, f"{secs:.1f} s", cmp, flush=True)
                if header is None:
                    header = ["engine", "seconds", *cmp]
                    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                cells = [engine, f"{secs:.1f}"]
                for value in cmp.values():
                    if isinstance(value, float):
                        cells.append(f"{value:.1e}")
                    elif isinstance(value, list):
                        cells.append(", ".join(value) if value else "none")
                    else:
                        cells.append(str(value))
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    section = "\n".join(lines)
    print(section)
    if not args.no_write:
        with RESULTS.open("a", encoding="utf-8") as fh:
            fh.write("\n" + section)


if __name__ == "__main__":
    main()
