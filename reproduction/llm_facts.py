"""Cross-checks of SDE on the language-model demo (assets/demo-facts), for REPRODUCTION.md.

For each model, beside the loss gap and the loss-threshold MIA of ``metrics.json``:

- a **hidden-state probe**: a logistic regression trained to tell D_r (members) from one half of
  D_te on the layer's pooled hidden states, scored on D_f against the other half of D_te (ROC
  AUC). A model whose hidden states still carry the in-training signal for D_f scores near the
  original's AUC; one for which D_f looks unseen scores near 0.5. The probe never sees D_f.
- the **spread** of the hidden states (mean squared distance to the subset mean, the quantity the
  biased split-half HSIC tracks, method §9) of D_f, D_r and D_te, as ratios to D_te.

Usage (after ``python -m sde_core demo build --dataset facts``):

    python reproduction/llm_facts.py [--layer layer.3] [--pooling mean|last] [--out FILE.md]

With ``--sweep A.json B.json …`` it instead tabulates evaluation JSONs written by
``python -m sde_core evaluate assets/demo-facts --layer L --token-pooling P --json …``: per layer
and pooling, each model's OTR with its interval, calibrated OTR and dependence score (– where
the gate withholds them), and the null check's false-positive rates.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from sde_core.inputs.data import load_dataset
from sde_core.inputs.indices import load_index_file
from sde_core.pipeline.llm_demo import FACTS_LOSS_GAP
from sde_core.pipeline.model_inputs import entry_activations
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.services.evaluation import activation_cache

ROOT = Path(__file__).resolve().parents[1]


def spread(x: np.ndarray) -> float:
    """Mean squared distance of the rows to their mean."""
    return float(((x - x.mean(axis=0)) ** 2).sum(axis=1).mean())


def _number(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def sweep_table(files: list[str]) -> str:
    """Markdown tables of several evaluation JSONs (one row per layer and pooling)."""
    docs = [json.loads(Path(f).read_text()) for f in files]
    models = list(docs[0]["models"])
    head = "| layer | pooling | " + " | ".join(models) + " | null FPR split / calibrated |"
    versions = sorted({str(d["settings"].get("algorithm")) for d in docs})
    s0 = docs[0]["settings"]
    lines = [
        "OTR [95% interval] · calibrated OTR · dependence score per model; – : withheld by the "
        "gate (the reference panels do not separate); algorithm version "
        f"{', '.join(versions)}; n = {s0['subset_size']}, T = {s0['targets']}, "
        f"K = {s0['splits']}, B = {s0['draws']} draws, seed {s0['seed']}",
        "",
        head,
        "|" + "---|" * (len(models) + 3),
    ]
    for doc in docs:
        settings, caveats = doc["settings"], doc["caveats"]
        cells = []
        for name in models:
            m = doc["models"][name]
            lo, hi = m["otr_ci"]
            cells.append(
                f"{_number(m['otr'])} [{_number(lo)}, {_number(hi)}] · "
                f"{_number(m['calibrated_otr'])} · {_number(m['dependence_score'])}"
                if m["otr"] is not None
                else "–"
            )
        pooling = "mean" if settings["pool"] else "last"
        lines.append(
            f"| {settings['layer']} | {pooling} | "
            + " | ".join(cells)
            + f" | {caveats['split_fpr_mean']:.2f} / {caveats['calibrated_fpr_mean']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workspace", default=str(ROOT / "assets" / "demo-facts"))
    parser.add_argument("--layer", default="layer.3")
    parser.add_argument("--pooling", choices=("mean", "last"), default="mean")
    parser.add_argument("--out", help="also write the table to this markdown file")
    parser.add_argument("--sweep", nargs="+", metavar="JSON", help="tabulate evaluation JSONs")
    args = parser.parse_args()
    if args.sweep:
        text = sweep_table(args.sweep)
        print(text)
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
        return
    ws = load_workspace(args.workspace)
    bundle = load_dataset(ws.dataset_spec())
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train_labels))
    retain = np.setdiff1d(np.arange(len(bundle.train_labels)), forget)
    rng = np.random.default_rng(0)
    test = rng.permutation(len(bundle.test_labels))
    test_fit, test_score = test[: test.size // 2], test[test.size // 2 :]
    metrics = json.loads((Path(args.workspace) / "metrics.json").read_text())
    cache = activation_cache(ws)
    lines = [
        f"layer `{args.layer}`, {args.pooling} pooling; probe: logistic regression D_r vs half "
        "of D_te, scored on D_f vs the other half",
        "",
        "| model | loss D_f | loss D_r | loss D_te | loss gap | loss MIA AUC | probe AUC "
        "| spread D_f / D_te | spread D_r / D_te |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in ws.models:
        acts = {
            split: entry_activations(ws, entry, bundle, split, args.layer, cache,
                                     pool=args.pooling == "mean")[args.layer]
            for split in ("train", "test")
        }  # fmt: skip
        tr, te = acts["train"].astype(np.float64), acts["test"].astype(np.float64)
        x_fit = np.concatenate([tr[retain], te[test_fit]])
        y_fit = np.r_[np.ones(retain.size), np.zeros(test_fit.size)]
        scaler = StandardScaler().fit(x_fit)
        probe = LogisticRegression(max_iter=2000, C=1.0).fit(scaler.transform(x_fit), y_fit)
        x_score = scaler.transform(np.concatenate([tr[forget], te[test_score]]))
        y_score = np.r_[np.ones(forget.size), np.zeros(test_score.size)]
        auc = roc_auc_score(y_score, probe.decision_function(x_score))
        m = metrics[entry.name]
        s_te = spread(te)
        lines.append(
            f"| {entry.name} | {m['loss_forget']:.3f} | {m['loss_retain']:.3f} | "
            f"{m['loss_test']:.3f} | {m[FACTS_LOSS_GAP]:+.3f} | {m['mia_auc']:.2f} | {auc:.2f} | "
            f"{spread(tr[forget]) / s_te:.2f} | {spread(tr[retain]) / s_te:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
