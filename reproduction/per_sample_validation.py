"""Validate per-sample evidence (method §18) where the truth is known: on a copy of the mnist1d
demo, a model retrained on D_r plus a random half of D_f ("half": that half is remembered,
the other half never seen) is evaluated beside the original (everything remembered) and the
retrained model (nothing remembered). The per-sample evidence should tell the two halves apart
for "half" (AUC > 0.5) and not for the other two (AUC ≈ 0.5).

Two designs: the defaults (n = 400, the precision design's draws) and a per-sample design
(smaller subsets, many of them; fixed design), which trades each subset's precision for how
often each sample is seen and how much it moves its subset.

    python reproduction/per_sample_validation.py            # ~10 min on 2 quiet cores
    python reproduction/per_sample_validation.py --quick    # the defaults only

Writes reproduction/results/per_sample_validation.csv and its Markdown table (.md, quoted in
REPRODUCTION.md); ``--tables-only`` rewrites the table from the CSV.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "assets" / "demo-mnist1d"
OUT = REPO / "reproduction" / "results" / "per_sample_validation.csv"
#: The evaluation seeds of the per-sample design (the defaults run at the workspace's seed 0).
SEEDS = (0, 1, 2)
#: The Markdown table's columns: CSV column -> heading.
_HEADINGS = {
    "design": "design", "seed": "seed", "model": "model", "subset_size": "n", "subsets": "subsets",
    "auc_kept_vs_forgotten": "AUC remembered vs forgotten half", "auc_low": "95% low",
    "auc_high": "95% high", "evidence_kept": "mean evidence, remembered half",
    "evidence_forgotten": "mean evidence, forgotten half",
    "median_interval_width": "median 95% interval width",
}  # fmt: skip
#: The per-sample design: subsets of 100 (each sample moves its subset 4× more than at 400),
#: 1,000 targets over 10 draws (each sample in ~83 of them), 50 splits each.
PER_SAMPLE_DESIGN = {"subset_size": 100, "targets": 1000, "splits": 50, "draws": 10,
                     "precision": 0.0, "null_pairs": 2, "baseline_targets": 0}  # fmt: skip


def _copy(dest: Path) -> Path:
    shutil.copytree(DEMO, dest, ignore=shutil.ignore_patterns(".sde-cache", "*.sqlite*"))
    return dest


def build(work: Path, seed: int = 17) -> tuple[Path, np.ndarray, np.ndarray]:
    """The workspace with the "half" model, and D_f's two halves (kept, forgotten)."""
    from sde_core.cli import main

    forget = np.load(DEMO / "forget.npy")
    rng = np.random.default_rng(seed)
    forgot = np.sort(rng.choice(forget, forget.size // 2, replace=False))
    kept = np.setdiff1d(forget, forgot)
    half_ws = work / "half-ws"
    if not (half_ws / "models" / "half.safetensors").exists():  # a --work folder keeps it
        shutil.rmtree(half_ws, ignore_errors=True)
        _copy(half_ws)
        np.save(half_ws / "forget.npy", forgot)  # this copy's D_f is the forgotten half only
        t0 = time.perf_counter()
        argv = ["unlearn", str(half_ws), "--method", "retrain", "--name", "half",
                "--out", "models/half.safetensors"]  # fmt: skip
        assert main(argv) == 0
        print(f"trained 'half' on D_r + the kept half in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)  # fmt: skip
    full_ws = work / "full-ws"
    shutil.rmtree(full_ws, ignore_errors=True)
    _copy(full_ws)
    shutil.copy(half_ws / "models" / "half.safetensors", full_ws / "models" / "half.safetensors")
    argv = ["workspace", "add-model", str(full_ws), "--name", "half", "--role", "unlearned",
            "--method", "retrain", "--checkpoint", str(full_ws / "models" / "half.safetensors"),
            "--no-accuracy-check"]  # fmt: skip
    assert main(argv) == 0
    return full_ws, kept, forgot


def validate(ws_path: Path, kept: np.ndarray, forgot: np.ndarray, quick: bool) -> pd.DataFrame:
    from sde_core.pipeline.evaluation.per_sample import sample_evidence
    from sde_core.pipeline.evaluation.plan import draw_subsets
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.stats.per_sample import auc_with_interval

    ws = load_workspace(ws_path)
    forget = np.load(ws_path / "forget.npy")
    data = np.load(ws_path / "data.npz")
    n_train, n_test = len(data["y_train"]), len(data["y_test"])
    designs = [("defaults", ws.defaults)]
    if not quick:  # the cheap design again at held-out seeds: does the AUC move with the seed?
        designs += [
            ("per-sample", dataclasses.replace(ws.defaults, **PER_SAMPLE_DESIGN, seed=seed))
            for seed in SEEDS
        ]
    rows = []
    for design, settings in designs:
        t0 = time.perf_counter()
        result = evaluate_workspace(ws, settings, models=["original", "retrained", "half"])
        seconds = time.perf_counter() - t0
        targets = draw_subsets(n_train, n_test, forget, settings).targets
        for model in ("original", "retrained", "half"):
            ev = sample_evidence(result, model, targets, forget).set_index("row")
            auc, lo, hi = auc_with_interval(
                ev.loc[kept, "evidence"].to_numpy(), ev.loc[forgot, "evidence"].to_numpy()
            )
            rows.append({
                "design": design, "seed": settings.seed, "model": model,
                "subset_size": settings.subset_size,
                "subsets": int(ev["subsets_in"].sum() // settings.subset_size),
                "auc_kept_vs_forgotten": round(auc, 4), "auc_low": round(lo, 4),
                "auc_high": round(hi, 4),
                "evidence_kept": round(float(ev.loc[kept, "evidence"].mean()), 4),
                "evidence_forgotten": round(float(ev.loc[forgot, "evidence"].mean()), 4),
                "median_interval_width": round(float((ev["high"] - ev["low"]).median()), 3),
                "evaluation_seconds": round(seconds, 1),
            })  # fmt: skip
            print(rows[-1], file=sys.stderr)
    return pd.DataFrame(rows)


def write_markdown(table: pd.DataFrame, path: Path) -> None:
    """The validation table as Markdown (the columns of :data:`_HEADINGS`)."""
    from sde_core.viz.report.paper_export import table_to_markdown

    shown = table[list(_HEADINGS)].rename(columns=_HEADINGS).astype(str)
    path.write_text(table_to_markdown(shown), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the default design only")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--work", type=Path, help="keep the copies (and the trained model) here")
    parser.add_argument("--tables-only", action="store_true", help="rewrite the .md from the CSV")
    args = parser.parse_args(argv)
    if args.tables_only:
        write_markdown(pd.read_csv(args.out), args.out.with_suffix(".md"))
        return 0
    from sde_core.common.paths import ROOTS_ENV

    with tempfile.TemporaryDirectory(prefix="sde-per-sample-") as tmp:
        work = args.work.resolve() if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        os.environ[ROOTS_ENV] = str(work)  # the copies are the only folders the run reads
        ws_path, kept, forgot = build(work)
        table = validate(ws_path, kept, forgot, args.quick)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    write_markdown(table, args.out.with_suffix(".md"))
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
