"""Which representation of a language model, if any, makes SDE agree with its behaviour
(issue 35, REPRODUCTION.md "Language models: output-level layers").

Three steps, each resumable:

    # a second invented-facts workspace, built by the facts demo builder with another seed
    python reproduction/lm_outputs.py build /tmp/facts-seed1 --seed 1
    # every layer × pooling of a workspace at its [defaults] (n, T, K, B), one JSON each
    python reproduction/lm_outputs.py run assets/demo-facts --tag facts [--seed 0]
    python reproduction/lm_outputs.py run /tmp/facts-seed1 --tag facts1
    # the table (markdown) from those JSONs and each workspace's metrics.json
    python reproduction/lm_outputs.py table --metrics facts=assets/demo-facts/metrics.json \\
        facts1=reproduction/results/lm_outputs/facts1_metrics.json --out …/study.md

``run`` evaluates with ``evaluate_workspace`` into a results store of its own (``--store``,
never the workspace's shipped one) and writes the method §10 JSON with each model's verdict
(``json_document``). The behaviour side is ``metrics.json``: each model's mean per-token loss
on D_f and D_te (``sde_core.learning.llm_unlearning.causal_lm_losses``) and the loss-threshold
attack AUC (D_f against D_te).

Agreement, per model: a model *remembers* D_f when its attack AUC is at least
:data:`REMEMBERS_AUC`, else its D_f looks like unseen data. The original and an unlearned
model that remembers agree when SDE says "not forgotten"; the retrained model when it says
"consistent with forgetting"; an unlearned model whose D_f looks unseen when SDE decides and
does not say "not forgotten" (consistent with forgetting, mixed or over-unlearned). A withheld
verdict (inconclusive) agrees with nothing. A representation agrees with behaviour when all
five models do.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reproduction" / "results" / "lm_outputs"
#: The layers of the study: the default hidden state and the output-level layers.
LAYERS = ("layer.3", "answer_logprob", "answer_topk", "answer_dist", "loss_profile")
#: Attack AUC from which a model still remembers D_f (the facts demo's retrained model: 0.58).
REMEMBERS_AUC = 0.6
_SHORT = {
    "not forgotten": "NF",
    "consistent with forgetting": "CF",
    "over-unlearned": "OU",
    "mixed": "mixed",
    "conflicting evidence": "CE",
    "inconclusive": "–",
}
_ROLES = ("original", "retrained", "llm_ga", "llm_gd", "llm_npo")
_NAME = re.compile(r"(?P<tag>[^_]+)_(?P<layer>.+)_(?P<pool>mean|last)_seed(?P<seed>\d+)\.json$")


def build(folder: str, seed: int) -> None:
    """A facts workspace from the demo builder with another seed (no results store)."""
    from sde_core.pipeline.llm_demo import FactsRecipe, build_facts_demo

    report = build_facts_demo(folder, FactsRecipe(seed=seed), store=False, log=print)
    print(json.dumps(report.metrics, indent=1))


def run(workspace: str, tag: str, seed: int, store: str | None, layers: list[str]) -> None:
    """Every layer × pooling of ``workspace`` at its defaults, one JSON each under OUT/json."""
    from sde_core.cli.evaluate import json_document, write_json_atomic
    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.services.answer import verdict_notes

    ws = load_workspace(workspace)
    path = Path(store or f"/tmp/sde-lm-outputs-{tag}.sqlite")
    for layer in layers:
        for pool in (True, False):
            out = OUT / "json" / f"{tag}_{layer}_{'mean' if pool else 'last'}_seed{seed}.json"
            if out.is_file():
                continue
            settings = ws.defaults.with_overrides(layer=layer, pool=pool, seed=seed)
            with ResultsStore(path) as results:
                result = evaluate_workspace(ws, settings, store=results)
            write_json_atomic(out, json_document(result, verdict_notes(ws, layer)))
            print(f"wrote {out}")


def _agrees(role: str, verdict: str, remembers: bool) -> bool:
    if verdict == "inconclusive":
        return False
    if role == "retrained":
        return verdict == "consistent with forgetting"
    if role == "original" or remembers:
        return verdict == "not forgotten"
    return verdict in ("consistent with forgetting", "mixed", "over-unlearned")


def _cell(m: dict[str, Any]) -> str:
    verdict = _SHORT.get(m["verdict"], m["verdict"])
    if m["otr"] is None:
        return verdict
    lo, hi = m["otr_ci"]
    return f"{verdict} {m['otr']:.2f} [{lo:.2f}, {hi:.2f}]"


def table(metrics: dict[str, Path], files: list[Path]) -> str:
    """The study as markdown: behaviour per workspace, then one row per evaluation."""
    behaviour = {tag: json.loads(path.read_text()) for tag, path in metrics.items()}
    lines = [
        "Behaviour (`metrics.json`: mean per-token loss, attack AUC of D_f against D_te; a "
        f"model remembers D_f when its AUC ≥ {REMEMBERS_AUC}):",
        "",
        "| workspace | " + " | ".join(_ROLES) + " |",
        "|---|" + "---|" * len(_ROLES),
    ]
    for tag, values in behaviour.items():
        cells = [
            f"gap {values[r]['loss_gap']:+.3f}, AUC {values[r]['mia_auc']:.2f}"
            + (" (remembers)" if values[r]["mia_auc"] >= REMEMBERS_AUC else "")
            for r in _ROLES
        ]
        lines.append(f"| {tag} | " + " | ".join(cells) + " |")
    docs = []
    for f in files:
        match = _NAME.search(f.name)
        if match and match["tag"] in behaviour:
            docs.append((match, json.loads(f.read_text())))
    order = {layer: i for i, layer in enumerate(LAYERS)}
    docs.sort(key=lambda d: (d[0]["tag"], int(d[0]["seed"]), order.get(d[0]["layer"], 99),
                             d[0]["pool"] != "mean"))  # fmt: skip
    s0 = docs[0][1]["settings"] if docs else {}
    lines += [
        "",
        "SDE verdict and OTR [95% interval] per model (NF not forgotten, CF consistent with "
        "forgetting, OU over-unlearned, – withheld by the gate: the references do not "
        "separate); ref p: the original's median reference p (below α = 0.01: S_IT above "
        "S_OOT as SDE needs; near 1: the opposite direction); agree: models whose verdict "
        f"matches behaviour. n = {s0.get('subset_size')}, T = {s0.get('targets')}, "
        f"K = {s0.get('splits')}, B = {s0.get('draws')} draws, algorithm version "
        f"{s0.get('algorithm')}.",
        "",
        "| workspace | seed | layer | pooling | " + " | ".join(_ROLES) + " | ref p | null FPR "
        "split / calibrated | agree |",
        "|---|---|---|---|" + "---|" * len(_ROLES) + "---|---|---|",
    ]
    for match, doc in docs:
        values = behaviour[match["tag"]]
        models = doc["models"]
        agree = sum(
            _agrees(models[r]["role"], models[r]["verdict"],
                    values[r]["mia_auc"] >= REMEMBERS_AUC)
            for r in _ROLES
        )  # fmt: skip
        c = doc["caveats"]
        lines.append(
            f"| {match['tag']} | {match['seed']} | `{match['layer']}` | {match['pool']} | "
            + " | ".join(_cell(models[r]) for r in _ROLES)
            + f" | {models['original']['reference_p']:.2g} | {c['split_fpr_mean']:.2f} / "
            f"{c['calibrated_fpr_mean']:.3f} | {agree}/5 |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("folder")
    b.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("run")
    r.add_argument("workspace")
    r.add_argument("--tag", required=True)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--store")
    r.add_argument("--layers", nargs="+", default=list(LAYERS))
    t = sub.add_parser("table")
    t.add_argument("--metrics", nargs="+", required=True, metavar="TAG=metrics.json")
    t.add_argument("--out")
    args = parser.parse_args()
    if args.command == "build":
        build(args.folder, args.seed)
    elif args.command == "run":
        run(args.workspace, args.tag, args.seed, args.store, args.layers)
    else:
        metrics = {k: Path(v) for k, v in (m.split("=", 1) for m in args.metrics)}
        text = table(metrics, sorted((OUT / "json").glob("*.json")))
        print(text)
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
