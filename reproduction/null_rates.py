"""Level of the calibrated tests in both directions, on the bundled demos (method §9).

For each demo and model, at the workspace ``[defaults]`` with only the seed changed, every
draw's reference panels are drawn as an evaluation draws them (independent uniform subsets of
the whole pool) and judged:

* **false "in-training"**: subsets of unseen data (the control half of D_te, the null check's
  pairs) whose ``p_in`` against the draw's OOT panel is below ``alpha_calibrated`` — and false
  "over-unlearned" (``p_over`` below it);
* **false "out-of-training"**: subsets of training data (the control half of D_r, the
  controlled positives) whose ``p_out`` against the draw's IT panel is below it — the unsafe
  direction: every such error makes a model look more forgotten than it is.

Only the H of the panels, the null subsets and the positives is computed (no targets). With
``--pairs P`` null pairs and ``--positives C`` positives per seed, S seeds judge ``2·P·S``
unseen and ``C·S`` training subsets. The rates are pooled; their 95% interval is Korn–Graubard
over the panels (each draw of each seed is a cluster: its subsets share one panel), as in
method §12. Writes ``reproduction/results/null_rates.md`` (``--out``) and the per-draw counts
beside it (``.json``): runs over further seeds (``--first-seed``) are pooled with the saved ones.

    nice -n 10 .venv/bin/python reproduction/null_rates.py --seeds 10 --pairs 50 --positives 100
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sde_core.pipeline.evaluation.session import EvaluationSession  # noqa: E402
from sde_core.pipeline.evaluation.stages import compute_h  # noqa: E402
from sde_core.stats.calibrated import subset_scores  # noqa: E402
from sde_core.stats.replication import replicate_proportion  # noqa: E402

DEMOS = {"fashion-mnist": ROOT / "assets" / "demo", "mnist1d": ROOT / "assets" / "demo-mnist1d"}


def _p_values(scores: np.ndarray, panel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(p_in, p_out, p_over)`` of each score against one panel (method §9's rank p-values;
    p_in and p_over against an OOT panel, p_out against an IT panel)."""
    r = panel.size + 1
    ge = (panel[None, :] >= scores[:, None]).sum(axis=1)
    le = (panel[None, :] <= scores[:, None]).sum(axis=1)
    return (1 + ge) / r, (1 + le) / r, (1 + le) / r


def measure(
    demo: str, model: str, seeds: range, pairs: int, positives: int
) -> dict[str, list[tuple[float, int]]]:
    """Per-draw ``(rate, subsets)`` of each kind of false call for one demo and model."""
    session = EvaluationSession(DEMOS[demo], stage_dir=None, memory_items=0)
    base = session.defaults()
    a = base.alpha_calibrated
    counts: dict[str, list[tuple[float, int]]] = {"in": [], "over": [], "out": []}
    for seed in seeds:
        t0 = time.perf_counter()
        settings = base.with_overrides(seed=seed, null_pairs=pairs, targets=2 * positives)
        run = session.model_run(model, settings, stages=("references",))
        for d in run.plan.draws:
            groups = d.groups(settings.seed, run.f1_negatives)
            acts = {"train": run.inputs.train_acts, "test": run.inputs.test_acts}

            def scores(name: str, groups=groups, acts=acts, run=run, settings=settings):  # type: ignore[no-untyped-def]
                g = groups[name]
                return subset_scores(compute_h(acts[g.side], g, run.sigma, settings)["h"])

            it_panel, oot_panel = scores("panel_train"), scores("panel_test")
            null, pos = scores("null"), scores("controls_pos")
            p_in, _, p_over = _p_values(null, oot_panel)
            _, p_out, _ = _p_values(pos, it_panel)
            counts["in"].append((float(np.mean(p_in < a)), null.size))
            counts["over"].append((float(np.mean(p_over < a)), null.size))
            counts["out"].append((float(np.mean(p_out < a)), pos.size))
        print(f"{demo} {model} seed {seed}: {time.perf_counter() - t0:.0f}s", flush=True)
    return counts


def summarise(demo: str, model: str, seeds: int, counts: dict) -> dict[str, object]:  # type: ignore[type-arg]
    """Pooled rates with their Korn–Graubard interval over the panels."""
    out: dict[str, object] = {"demo": demo, "model": model, "seeds": seeds}
    for key in ("in", "over", "out"):
        data = counts[key]
        est = replicate_proportion([v for v, _ in data], [m for _, m in data])
        out[key] = (est.value, est.lo, est.hi, sum(m for _, m in data), len(data))
    return out


def write(rows: list[dict[str, object]], path: Path, command: str) -> None:
    """The markdown table of the measured rates."""
    lines = [
        "# Level of the calibrated tests in both directions (method §9)",
        "",
        f"`{command}` — at each demo's `[defaults]` (layer `output`, n = 400, K = 200, R = 20, "
        "B = 5 draws, α = 0.05), only the seed, the number of null pairs and of controlled "
        "positives changed. A false call is a rank p-value below α: `p_in` (unseen subset "
        "called in-training) and `p_over` (called over-unlearned) against the draw's OOT panel, "
        "`p_out` (training subset called out-of-training) against its IT panel. The exact level "
        "of `p < 0.05` with R = 20 is 1/21 = 0.048; acceptance asks ≤ α + 0.01 = 0.06. 95% "
        "intervals: Korn–Graubard over the panels (one cluster per draw and seed).",
        "",
        "| demo | model | seeds | false in-training (unseen) | false over-unlearned (unseen) "
        "| false out-of-training (training) | unseen subsets | training subsets | panels |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [str(r["demo"]), str(r["model"]), str(r["seeds"])]
        for key in ("in", "over", "out"):
            v, lo, hi, _, _ = r[key]  # type: ignore[misc]
            cells.append(f"{v:.3f} [{lo:.3f}, {hi:.3f}]")
        cells += [str(r["in"][3]), str(r["out"][3]), str(r["in"][4])]  # type: ignore[index]
        lines.append("| " + " | ".join(cells) + " |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def key_of(demo: str, model: str) -> str:
    """The key of one demo and model in the saved counts."""
    return f"{demo}/{model}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0, help="seeds first..first+seeds-1")
    p.add_argument("--pairs", type=int, default=50, help="null pairs per seed (2 subsets each)")
    p.add_argument("--positives", type=int, default=100, help="training subsets per seed")
    p.add_argument("--demo", action="append", choices=sorted(DEMOS), help="default: both")
    p.add_argument("--model", action="append", help="default: original")
    p.add_argument("--out", type=Path, default=ROOT / "reproduction/results/null_rates.md")
    args = p.parse_args()
    raw_path = args.out.with_suffix(".json")  # per-draw counts, pooled across runs
    raw = json.loads(raw_path.read_text()) if raw_path.exists() else {}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for demo in args.demo or list(DEMOS):
        for model in args.model or ["original"]:
            empty: dict[str, list] = {"seeds": [], "in": [], "over": [], "out": []}  # type: ignore[type-arg]
            entry = raw.setdefault(key_of(demo, model), empty)
            if set(seeds) & set(entry["seeds"]):
                raise SystemExit(f"{key_of(demo, model)}: some of {seeds} are already measured")
            counts = measure(demo, model, seeds, args.pairs, args.positives)
            entry["seeds"] += list(seeds)
            for key in ("in", "over", "out"):
                entry[key] += counts[key]
            raw_path.write_text(json.dumps(raw))
    rows = []
    for key, entry in raw.items():
        demo, model = key.split("/")
        rows.append(summarise(demo, model, len(entry["seeds"]), entry))
        print(rows[-1])
    write(
        rows,
        args.out,
        "python reproduction/null_rates.py --seeds S --first-seed F --pairs 50 "
        "--positives 100 (runs pooled; seeds listed per row)",
    )


if __name__ == "__main__":
    main()
