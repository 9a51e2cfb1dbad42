"""SDE at every representation the memorising diffusion demo offers (issue 36).

A denoiser is probed at a noise level σ_t (method §14); the demo's workspace offers its denoised
output and its four U-Net blocks (the family's layer aliases) at each of the five levels. This
script evaluates every model of ``assets/demo-fashion-edm-mem`` at each of those 25
representations, at the workspace's ``[defaults]`` otherwise (the precision design, the sized null
check, the behaviour cross-check), and asks the question the default layer could not answer:
does SDE tell the retrained model (which never saw D_f) from the original (which memorised it)
at *some* representation? It answers with the paired comparison on the same draws (method §15):
the retrained model's OTR and calibrated OTR minus the original's.

Writes ``reproduction/results/diffusion/layers-<folder>.json`` (the numbers) and ``.md`` (the
table REPRODUCTION.md includes between ``quoted:file`` markers). The evaluations go through a
results store (default ``runs/diffusion-layers/results.sqlite``), so a stopped run resumes and
a second run reads back; ``--tables-only`` rewrites the table from the JSON.
tests/pipeline/test_diffusion_mem_demo.py checks the table against the JSON and the JSON's
default layer against the shipped store.

Usage::

    python reproduction/diffusion_layers.py [--store runs/diffusion-layers/results.sqlite]
    python reproduction/diffusion_layers.py --tables-only
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from sde_core.common.signed import signed
from sde_core.pipeline.sweeps import interval_side

ROOT = Path(__file__).resolve().parents[1]
DEMO = "fashion-mnist-edm-mem"
OUT = ROOT / "reproduction" / "results" / "diffusion"
#: The models of the table, in its order, and their column titles.
MODELS = {"original": "original", "retrained": "retrained", "ft": "FT", "ga": "GA",
          "neggrad_plus": "NegGrad+"}  # fmt: skip
#: The numbers kept of each model's row (its ``models`` table columns).
FIELDS = ("otr", "otr_lo", "otr_hi", "calibrated_otr", "calibrated_otr_lo", "calibrated_otr_hi",
          "f1", "draws")  # fmt: skip
#: Rates compared between the retrained model and the original.
COMPARED = ("otr", "calibrated_otr")


def paths(folder: Path) -> tuple[Path, Path]:
    """The JSON and the markdown this script writes for a demo folder."""
    return OUT / f"layers-{folder.name}.json", OUT / f"layers-{folder.name}.md"


def representations(ws: Any) -> list[str]:
    """The layer aliases the demo's original offers, at every noise level (the family's seam:
    :func:`~sde_core.pipeline.model_inputs.entry_layer_infos`, aliases only)."""
    from sde_core.pipeline.model_inputs import entry_layer_infos

    side = int(ws.original().arch_kwargs.get("image_size", 28))
    infos = entry_layer_infos(ws, ws.original(), (1, side, side))
    return [i.name for i in infos if i.module_type.startswith("alias of")]


def _number(value: Any) -> float | None:
    x = float(value)
    return x if math.isfinite(x) else None


def evaluate(folder: Path, store_path: Path) -> dict[str, Any]:
    """Every model at every representation: the JSON this script writes."""
    from sde_core.pipeline.evaluation.comparisons import compare_models
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.settings import ALGORITHM_VERSION
    from sde_core.pipeline.store import ResultsStore
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.viz.verdicts.labels import verdict_label

    ws = load_workspace(folder)
    layers = representations(ws)
    store_path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.perf_counter()
    with ResultsStore(store_path) as store:
        for i, layer in enumerate(layers):
            settings = ws.defaults.with_overrides(layer=layer)
            result = evaluate_workspace(ws, settings, store=store)
            models = {}
            for row in result.models.to_dict("records"):
                models[str(row["name"])] = {
                    "verdict": verdict_label(row),
                    **{key: _number(row[key]) for key in FIELDS},
                    "reason": str(row.get("inconclusive_reason") or ""),
                }
            paired = {}
            for metric in COMPARED:
                c = compare_models(result.models, result.draws, "retrained", "original", metric)
                d = c.paired
                paired[metric] = (
                    {"value": d.value, "lo": d.lo, "hi": d.hi, "draws": d.draws}
                    if d is not None
                    else {"reason": c.reason}
                )
            rows.append({"layer": layer, "models": models, "retrained_vs_original": paired})
            elapsed = time.perf_counter() - t0
            print(f"{layer}: {i + 1}/{len(layers)} in {elapsed:.0f}s", flush=True)
    return {
        "demo": f"assets/{folder.name}",
        "algorithm": ALGORITHM_VERSION,
        "defaults": {
            "layer": ws.defaults.layer,
            "sigma": ws.defaults.sigma,
            "subset_size": ws.defaults.subset_size,
            "precision": ws.defaults.precision,
            "max_draws": ws.defaults.max_draws,
            "null_size": ws.defaults.null_size,
            "seed": ws.defaults.seed,
        },
        "layers": rows,
    }


def _difference(entry: dict[str, Any]) -> str:
    """A paired difference of two rates in points with its interval (``+8 [−3, +19]``)."""
    if "value" not in entry:
        return "withheld"
    value, lo, hi = (signed(100 * entry[key], 0) for key in ("value", "lo", "hi"))
    return f"{value} [{lo}, {hi}]"


def _cell(model: dict[str, Any] | None) -> str:
    if model is None:
        return "—"
    otr = model["otr"]
    return model["verdict"] if otr is None else f"{model['verdict']}, OTR {otr:.2f}"


def markdown(data: dict[str, Any]) -> str:
    """The table of the JSON (what REPRODUCTION.md includes)."""
    d = data["defaults"]
    lines = [
        f"SDE at every representation of `{data['demo']}` (the denoised output and the four "
        "U-Net blocks, each at five noise levels σ_t), every other setting at the workspace's "
        f"defaults (σ = {d['sigma']}, n = {d['subset_size']}, precision ±{d['precision']:g} "
        f"with a budget of {d['max_draws']} draws, null check of N = {d['null_size']}, seed "
        f"{d['seed']}, algorithm version {data['algorithm']}). Each model: its verdict (with "
        "the behaviour cross-check) and OTR; the last two columns: the retrained model minus "
        "the original on the same draws, in points with the paired 95% interval (method §15).",
        "",
        "| representation | " + " | ".join(MODELS.values())
        + " | retrained − original: OTR | calibrated OTR |",
        "|---" * (len(MODELS) + 3) + "|",
    ]  # fmt: skip
    separated = withheld = withheld_verdicts = verdicts = 0
    named = []
    reasons: dict[str, int] = {}
    for row in data["layers"]:
        cells = [f"`{row['layer']}`"] + [_cell(row["models"].get(m)) for m in MODELS]
        pairs = row["retrained_vs_original"]
        cells += [_difference(pairs[m]) for m in COMPARED]
        lines.append("| " + " | ".join(cells) + " |")
        compared = {m: pairs[m] for m in COMPARED if "value" in pairs[m]}
        apart = [m for m, d in compared.items() if interval_side(d["lo"], d["hi"])]
        if apart:
            separated += 1
            named.append(f"`{row['layer']}` ({', '.join(m.replace('_', ' ') for m in apart)})")
        withheld += all("value" not in pairs[m] for m in COMPARED)
        for model in row["models"].values():
            verdicts += 1
            if model["reason"]:
                withheld_verdicts += 1
                why = model["reason"].split(";")[0].split(" (")[0]
                reasons[why] = reasons.get(why, 0) + 1
    total = len(data["layers"])
    lines += [
        "",
        f"The retrained model differs from the original — a paired interval that excludes 0 — at "
        f"{separated} of {total} representations"
        + (f": {', '.join(named)}" if named else "")
        + f"; both rates are withheld at {withheld}. At 95% per comparison, "
        f"{2 * total} comparisons with no true difference would give about {0.1 * total:.1f} "
        "that exclude 0 by chance.",
    ]
    if reasons:
        common = max(reasons, key=lambda r: reasons[r])
        lines[-1] += (
            f" The gate withholds {withheld_verdicts} of the {verdicts} (representation, model) "
            "verdicts "
            f"(the random model included); {reasons[common]} of them because {common}."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from sde_core.pipeline.demo_diffusion import default_diffusion_folder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store", default=str(ROOT / "runs" / "diffusion-layers" / "results.sqlite")
    )
    parser.add_argument(
        "--tables-only", action="store_true", help="rewrite the table from the JSON"
    )
    args = parser.parse_args(argv)
    folder = default_diffusion_folder(DEMO)
    json_path, md_path = paths(folder)
    if not args.tables_only:
        data = evaluate(folder, Path(args.store))
        json_path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {json_path.relative_to(ROOT)}")
    data = json.loads(json_path.read_text(encoding="utf-8"))
    md_path.write_text(markdown(data), encoding="utf-8")
    print(f"wrote {md_path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
