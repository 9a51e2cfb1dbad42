"""The Fashion-MNIST demo's RL and SalUn at the library's defaults on seeds never used before.

Issue 33 asks of the default design (method §15: the precision target W = 0.1, a pilot of 10
draws, a budget of 60, the null check sized at N = 1,000): do the two hard models of the
Fashion-MNIST demo get half-widths within W, does their verdict stay the same on five seeds no
earlier run used, and how often, and why, is W "not reached" over twenty? This script evaluates
the named models of a demo (default ``assets/demo``: ``rl`` and ``salun``) at its ``[defaults]``
with only the evaluation seed changed, seeds 8811–8830 (the first five are the "never used"
ones: no shipped store, study or test uses a seed in 8811–8830), and writes
``reproduction/results/held_out_seeds.json`` (the numbers) and ``.md`` (the table and summary
REPRODUCTION.md includes between ``quoted:file`` markers).

Every evaluation goes through a results store (default ``runs/held-out-seeds/results.sqlite``)
and the demo's own stage cache, so a stopped run resumes and a second run reads back;
``--tables-only`` rewrites the table from the JSON.

Usage::

    python reproduction/held_out_seeds.py [--seeds 8811:8831] [--models rl,salun]
    python reproduction/held_out_seeds.py --tables-only
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reproduction" / "results"
#: Seeds no shipped store, study or test had used; the first FIRST_SEEDS are the acceptance's.
SEEDS = range(8811, 8831)
FIRST_SEEDS = 5
#: The rates whose half-width the precision target bounds (method §15), as the JSON keeps them.
RATES = ("otr", "calibrated_otr", "over_unlearned_rate")


def _number(value: Any) -> float | None:
    x = float(value)
    return x if math.isfinite(x) else None


def evaluate(demo: Path, models: list[str], seeds: list[int], store_path: Path) -> dict[str, Any]:
    """Each model at each seed: the JSON this script writes."""
    from sde_core.pipeline.evaluation.metric_table import METRICS
    from sde_core.pipeline.evaluation.precision import miss_reasons, precision_status
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.settings import ALGORITHM_VERSION, PRECISION_RULE_VERSION
    from sde_core.pipeline.store import ResultsStore
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.viz.verdicts.labels import verdict_label

    ws = load_workspace(demo)
    store_path.parent.mkdir(parents=True, exist_ok=True)
    runs = []
    t0 = time.perf_counter()
    with ResultsStore(store_path) as store:
        for i, seed in enumerate(seeds):
            settings = ws.defaults.with_overrides(seed=seed)
            result = evaluate_workspace(ws, settings, models=models, store=store)
            found = {}
            for record in result.models.to_dict("records"):
                row = {str(k): v for k, v in record.items()}
                status = precision_status(row)
                found[str(row["name"])] = {
                    "verdict": verdict_label(row),
                    "draws": int(row["draws"]),
                    "draws_needed": int(row["draws_needed"]),
                    "precision": status[0] if status else "fixed design",
                    "half_width": _number(row["precision_half_width"]),
                    "why": miss_reasons(row),
                    **{
                        f"{rate}{end}": _number(row[str(column)])
                        for rate in RATES
                        for end, column in (
                            ("", METRICS[rate].key),
                            ("_lo", METRICS[rate].lo),
                            ("_hi", METRICS[rate].hi),
                        )
                    },
                    "acc_gap": _number(row["acc_gap"]),
                    "reason": str(row.get("inconclusive_reason") or ""),
                }
            runs.append({"seed": seed, "models": found})
            print(f"seed {seed}: {i + 1}/{len(seeds)} in {time.perf_counter() - t0:.0f}s",
                  flush=True)  # fmt: skip
    return {
        # a copy of a demo (its own caches) reads as the demo: the hash says which content
        "demo": f"assets/{demo.name}",
        "workspace_hash": result.workspace_hash,
        "algorithm": ALGORITHM_VERSION,
        "precision_rule": PRECISION_RULE_VERSION,
        "defaults": {"precision": ws.defaults.precision, "pilot_draws": ws.defaults.pilot_draws,
                     "max_draws": ws.defaults.max_draws, "null_size": ws.defaults.null_size},
        "first_seeds": FIRST_SEEDS,
        "runs": runs,
    }  # fmt: skip


def _interval(m: dict[str, Any], rate: str) -> str:
    if m[rate] is None:
        return "withheld"
    return f"{m[rate]:.2f} [{m[f'{rate}_lo']:.2f}, {m[f'{rate}_hi']:.2f}]"


def _widest(rows: list[dict[str, Any]]) -> float:
    """The widest half-width of ``rows`` (NaN when the target applied to none of them)."""
    return max((r["half_width"] for r in rows if r["half_width"] is not None), default=math.nan)


def summary(data: dict[str, Any]) -> dict[str, Any]:
    """Per model: its verdicts on the first seeds and on all, the widest half-width, and how
    often, and why, W was not reached."""
    out: dict[str, Any] = {}
    names = sorted({n for run in data["runs"] for n in run["models"]})
    first = data["runs"][: data["first_seeds"]]
    for name in names:
        rows = [run["models"][name] for run in data["runs"] if name in run["models"]]
        first_rows = [run["models"][name] for run in first if name in run["models"]]
        head = [r["verdict"] for r in first_rows]
        states = Counter(r["precision"] for r in rows)
        why = Counter(w for r in rows if r["precision"] == "not reached" for w in r["why"])
        out[name] = {
            "seeds": len(rows),
            "first_verdicts": dict(Counter(head)),
            "first_same": len(set(head)) == 1,
            "verdicts": dict(Counter(r["verdict"] for r in rows)),
            "widest_first": _widest(first_rows),
            "widest": _widest(rows),
            "states": dict(states),
            "why": dict(why),
        }
    return out


def markdown(data: dict[str, Any]) -> str:
    """The table and summary of the JSON (what REPRODUCTION.md includes)."""
    d = data["defaults"]
    runs = data["runs"]
    names = sorted({n for run in runs for n in run["models"]})
    lines = [
        f"`python reproduction/held_out_seeds.py` — {data['demo']} at its defaults (W = "
        f"{d['precision']:g}, a pilot of {d['pilot_draws']} draws, a budget of {d['max_draws']}, "
        f"the null check sized at N = {d['null_size']}), seeds {runs[0]['seed']}–"
        f"{runs[-1]['seed']}; precision rule {data['precision_rule']} (method §15). Each cell: "
        "verdict; OTR and calibrated OTR with their 95% intervals; the draws B; the precision "
        "state and the widest half-width.",
        "",
        "| seed | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for run in runs:
        cells = []
        for name in names:
            m = run["models"].get(name)
            if m is None:
                cells.append("—")
                continue
            half = "n/a" if m["half_width"] is None else f"±{m['half_width']:.3f}"
            cells.append(f"{m['verdict']}; OTR {_interval(m, 'otr')}, calibrated "
                         f"{_interval(m, 'calibrated_otr')}; B = {m['draws']}; "
                         f"{m['precision']} {half}")  # fmt: skip
        lines.append(f"| {run['seed']} | " + " | ".join(cells) + " |")
    lines.append("")
    for name, s in summary(data).items():
        first = ", ".join(f"{k} {v}" for k, v in s["first_verdicts"].items())
        states = ", ".join(f"{k} {v}" for k, v in sorted(s["states"].items()))
        why = "; ".join(f"{k}: {v}" for k, v in s["why"].items()) or "none"
        lines.append(
            f"- **{name}**: on the first {data['first_seeds']} seeds {first} — "
            f"{'the same verdict on each' if s['first_same'] else 'the verdict moves'}; widest "
            f"half-width {s['widest_first']:.3f} there. Over all {s['seeds']} seeds: verdicts "
            f"{', '.join(f'{k} {v}' for k, v in s['verdicts'].items())}; precision {states} "
            f"(widest {s['widest']:.3f}); why not reached: {why}."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--demo", type=Path, default=ROOT / "assets" / "demo")
    p.add_argument("--models", default="rl,salun")
    p.add_argument("--seeds", default=f"{SEEDS.start}:{SEEDS.stop}", help="FIRST:STOP")
    p.add_argument(
        "--store", type=Path, default=ROOT / "runs" / "held-out-seeds" / "results.sqlite"
    )
    p.add_argument("--tables-only", action="store_true", help="rewrite the table from the JSON")
    args = p.parse_args()
    json_path, md_path = OUT / "held_out_seeds.json", OUT / "held_out_seeds.md"
    if args.tables_only:
        data = json.loads(json_path.read_text())
    else:
        first, _, stop = args.seeds.partition(":")
        seeds = list(range(int(first), int(stop)))
        data = evaluate(args.demo.resolve(), args.models.split(","), seeds, args.store)
        json_path.write_text(json.dumps(data, indent=1) + "\n")
    md_path.write_text(markdown(data))
    print(f"wrote {md_path.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
