"""Draw the reproduction figures (PNG) and tables (Markdown + CSV) from a plan results store.

Usage (from the repository root, after the plans have run)::

    .venv/bin/python reproduction/make_figures.py [--store runs/results.sqlite]
        [--variant default] [--out reproduction]

For each plan it reads the newest complete run of the variant (plans are run by
``python -m sde_core run-plan PLAN --variant VARIANT``) and writes ``<out>/<figure>.png`` for the
``default`` variant or ``<out>/<figure>_<variant>.png`` otherwise, plus
``<out>/results/<variant>/<table>.md`` and ``.csv``. Every number comes from the store; nothing
is typed in. Needs matplotlib (Agg backend).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sde_core.pipeline.settings import ALGORITHM_VERSION
from sde_core.pipeline.store import ResultsStore

COLORS = {"S_IT": "#1f77b4", "S_OOT": "#ff7f0e", "S_target": "#2ca02c"}
LAYER_STYLE = {"penultimate": "-o", "output": "-s", "logits": "-^", "hidden": "-v"}


def plan_runs(store: ResultsStore, plan: str | None, variant: str) -> list[tuple[int, dict]]:
    """``(run id, settings)`` of every complete run of ``plan`` (any plan: None) / ``variant``
    made with the current evaluation algorithm (older numerics are never mixed in)."""
    out = []
    for row in store.list_runs().itertuples():
        settings = json.loads(row.settings)
        if (
            settings.get("algorithm") == ALGORITHM_VERSION
            and settings.get("variant") == variant
            and plan in (None, settings.get("plan"))
            and row.status == "complete"
        ):
            out.append((int(row.id), settings))
    return out


def latest_run(store: ResultsStore, plan: str, variant: str) -> int | None:
    """The complete run of ``plan`` / ``variant`` with the most units (the newest on a tie):
    the full run rather than a reduced or diagnostic one."""
    runs = store.list_runs().set_index("id")
    found = plan_runs(store, plan, variant)
    if not found:
        return None
    return max(found, key=lambda r: (runs.loc[r[0], "units"], r[0]))[0]


def mean_sd(df: pd.DataFrame, by: list[str], col: str) -> pd.DataFrame:
    """Mean, sample SD and count of ``col`` per group."""
    g = df.groupby(by, sort=False)[col]
    return pd.DataFrame({"mean": g.mean(), "sd": g.std(ddof=1), "n": g.count()}).reset_index()


def fmt_ms(mean: float, sd: float) -> str:
    """``0.93 ± 0.02`` (``± –`` with one seed)."""
    return f"{mean:.2f} ± {sd:.2f}" if np.isfinite(sd) else f"{mean:.2f}"


def markdown(df: pd.DataFrame) -> str:
    """A GitHub Markdown table of ``df`` (cells as text)."""
    cells = [[str(c) for c in df.columns]] + [[str(v) for v in row] for row in df.to_numpy()]
    lines = ["| " + " | ".join(r) + " |" for r in cells]
    lines.insert(1, "|" + "---|" * len(df.columns))
    return "\n".join(lines) + "\n"


class Writer:
    """Writes PNGs and Markdown/CSV tables for one variant."""

    def __init__(self, out: Path, variant: str) -> None:
        self.out, self.variant = out, variant
        self.tables = out / "results" / variant
        self.tables.mkdir(parents=True, exist_ok=True)

    def png(self, fig: plt.Figure, name: str) -> None:
        suffix = "" if self.variant == "default" else f"_{self.variant}"
        path = self.out / f"{name}{suffix}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        print(f"wrote {path}")

    def table(self, df: pd.DataFrame, name: str) -> None:
        df.to_csv(self.tables / f"{name}.csv", index=False)
        (self.tables / f"{name}.md").write_text(markdown(df))
        print(f"wrote {self.tables / name}.md")


def grid_table(points: pd.DataFrame, cols: dict[str, str]) -> pd.DataFrame:
    """Rows (layer, R), one column per (metric, n): mean ± SD over seeds."""
    out = []
    for (layer, ratio), part in points.groupby(["layer", "forget_ratio"], sort=False):
        row = {"layer": layer, "R": f"{ratio:.0%}"}
        for col, label in cols.items():
            for n, cell in part.groupby("subset_size"):
                values = cell[col]
                row[f"{label} n={n}"] = (
                    f"{int(values.sum())}/{len(values)}"
                    if values.dtype == bool
                    else fmt_ms(values.mean(), values.std(ddof=1))
                )
        out.append(row)
    return pd.DataFrame(out)


def table1(store: ResultsStore, run: int, w: Writer) -> None:
    p = store.rows(run, "points")
    w.table(grid_table(p, {"f1": "F1", "calibrated_f1": "cal. F1"}), "table1")
    w.table(
        grid_table(p, {"references_valid": "valid refs", "acc_te": "test acc"}), "table1_context"
    )
    grid_plot(p, w, "table1", {"f1": "F1", "calibrated_f1": "calibrated F1"})


def grid_plot(p: pd.DataFrame, w: Writer, name: str, metrics: dict[str, str]) -> None:
    """F1 vs n, one panel per layer; colour = metric, marker and line style = R; mean ± SD."""
    layers = list(dict.fromkeys(p["layer"]))
    fig, axes = plt.subplots(
        1, len(layers), figsize=(5 * len(layers), 4.2), sharey=True, layout="constrained"
    )
    styles = ("-o", "--s", ":^")
    for ax, layer in zip(np.atleast_1d(axes), layers, strict=True):
        part = p[p["layer"] == layer]
        for ci, (col, label) in enumerate(metrics.items()):
            for style, (ratio, cell) in zip(styles, part.groupby("forget_ratio"), strict=False):
                s = mean_sd(cell, ["subset_size"], col)
                ax.errorbar(
                    s["subset_size"],
                    s["mean"],
                    s["sd"].fillna(0),
                    fmt=style,
                    color=f"C{ci}",
                    capsize=2,
                    label=f"{label}, R={ratio:.0%}",
                )
        ax.set_title(f"layer {layer}")
        ax.set_xlabel("subset size n")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    first = np.atleast_1d(axes)[0]
    first.set_ylabel("F1 (mean ± SD over seeds)")
    fig.legend(*first.get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize=8)
    fig.suptitle(f"{name} [{w.variant}]")
    w.png(fig, name)


def table3(store: ResultsStore, run: int, w: Writer) -> None:
    p = store.rows(run, "points")
    w.table(grid_table(p, {"f1": "SDE", "mmd_f1": "MMD", "w2_f1": "W2"}), "table3_baselines")
    grid_plot(p, w, "table3_baselines", {"f1": "SDE", "mmd_f1": "MMD", "w2_f1": "W2"})


def sweep_plot(store: ResultsStore, run: int, w: Writer, name: str) -> None:
    p = store.rows(run, "points")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True, layout="constrained")
    for ax, (metric, label) in zip(
        axes,
        (("f1", "F1 (paper's JSD rule)"), ("calibrated_f1", "calibrated F1 (method §9)")),
        strict=True,
    ):
        if name == "fig4_layer":
            s = mean_sd(p, ["x"], metric).sort_values("x")
            ax.errorbar(s["x"], s["mean"], s["sd"].fillna(0), fmt="-o", capsize=2)
            names = p.drop_duplicates("x").sort_values("x")
            ax.set_xticks(names["x"], names["layer"], rotation=20)
            ax.set_xlabel("layer (input side → output side)")
        for layer, part in p.groupby("layer", sort=False):
            if name == "fig3_sigma":
                grid = part[~part["sigma_rule"].isin(["median"])]
                s = mean_sd(grid, ["sigma_rule"], metric).merge(
                    mean_sd(grid, ["sigma_rule"], "sigma")[["sigma_rule", "mean"]].rename(
                        columns={"mean": "x"}
                    ),
                    on="sigma_rule",
                )
                s = s.sort_values("x").drop_duplicates("x")
                line = ax.errorbar(
                    s["x"],
                    s["mean"],
                    s["sd"].fillna(0),
                    fmt=LAYER_STYLE.get(layer, "-o"),
                    capsize=2,
                    label=layer,
                )
                color = line[0].get_color()
                sq = part[part["sigma_rule"] == "sqrt_dim"]["sigma"].mean()
                med = part[part["sigma_rule"] == "median"]["sigma"].mean()
                ax.axvline(sq, ls="--", color=color, lw=1)
                ax.axvline(med, ls=":", color=color, lw=1.5)
                ax.set_xscale("log")
                ax.set_xlabel("σ (dashed: √d rule, dotted: median rule)")
            elif name == "training_sufficiency":
                s = mean_sd(part, ["checkpoint"], metric).sort_values("checkpoint")
                ax.errorbar(
                    s["checkpoint"],
                    s["mean"],
                    s["sd"].fillna(0),
                    fmt=LAYER_STYLE.get(layer, "-o"),
                    capsize=2,
                    label=layer,
                )
                ax.set_xlabel("checkpoint (fraction of training)")
        ax.set_title(label)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("F1 (mean ± SD over seeds)")
    if name != "fig4_layer":
        axes[0].legend(title="layer")
    fig.suptitle(f"{name} [{w.variant}]")
    w.png(fig, name)
    if name == "fig3_sigma":
        rules = p[p["sigma_rule"].isin(["sqrt_dim", "median"])]
        rows = []
        for (layer, rule), part in rules.groupby(["layer", "sigma_rule"], sort=False):
            rows.append(
                {
                    "layer": layer,
                    "rule": rule,
                    "σ": f"{part['sigma'].mean():.3g}",
                    "F1": fmt_ms(part["f1"].mean(), part["f1"].std(ddof=1)),
                    "cal. F1": fmt_ms(
                        part["calibrated_f1"].mean(), part["calibrated_f1"].std(ddof=1)
                    ),
                }
            )
        best = p.groupby(["layer", "sigma_rule"])["f1"].mean().reset_index()
        for layer, part in best.groupby("layer"):
            top = part.sort_values("f1").iloc[-1]
            rows.append(
                {
                    "layer": layer,
                    "rule": f"best: {top['sigma_rule']}",
                    "σ": "",
                    "F1": f"{top['f1']:.2f}",
                    "cal. F1": "",
                }
            )
        w.table(pd.DataFrame(rows), "fig3_sigma_rules")
    else:
        key = "layer" if name == "fig4_layer" else "checkpoint"
        rows = []
        for (layer, value), part in p.groupby(["layer", key], sort=False):
            rows.append(
                {
                    "layer": layer,
                    key: value,
                    "F1": fmt_ms(part["f1"].mean(), part["f1"].std(ddof=1)),
                    "cal. F1": fmt_ms(
                        part["calibrated_f1"].mean(), part["calibrated_f1"].std(ddof=1)
                    ),
                    "valid refs": f"{part['references_valid'].mean():.0%}",
                    "train acc (D_r)": f"{part['acc_r'].mean():.1f}",
                    "test acc": f"{part['acc_te'].mean():.1f}",
                }
            )
        w.table(pd.DataFrame(rows), name)


def table4(store: ResultsStore, run: int, w: Writer) -> None:
    p = store.rows(run, "points")
    models = store.rows(run, "models")
    secs = models.groupby("model")["seconds"].mean()
    rows = []
    for (model, layer), part in p.groupby(["model", "layer"], sort=False):

        def m(col: str, digits: int = 2, part: pd.DataFrame = part) -> str:
            x = part[col].astype(float)
            v, s = x.mean(), x.std(ddof=1)
            text = f"{v:.{digits}f} ± {s:.{digits}f}" if np.isfinite(s) else f"{v:.{digits}f}"
            shown = int(np.isfinite(x).sum())
            if 0 < shown < len(x):  # the gate withheld it in some seeds
                text += f" ({shown} of {len(x)} seeds)"
            return text

        rows.append(
            {
                "model": model,
                "layer": layer,
                "Acc_r": m("acc_r", 1),
                "Acc_f": m("acc_f", 1),
                "Acc_te": m("acc_te", 1),
                "ASR": m("asr"),
                "F1": m("f1"),
                "OTR": m("otr"),
                "valid refs": f"{part['references_valid'].mean():.0%}",
                "gate passed": f"{part['panel_valid'].mean():.0%}",
                "cal. OTR": m("calibrated_otr"),
                "over-unl.": m("over_unlearned_rate"),
                "dep. score": m("dependence_score"),
                "time (s)": f"{secs.get(model, float('nan')):.1f}",
            }
        )
    df = pd.DataFrame(rows)
    w.table(df.replace("nan", "–"), "table4_methods")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True, layout="constrained")
    for ax, layer in zip(axes, ("output", "penultimate"), strict=True):
        part = p[p["layer"] == layer]
        s = part.groupby("model", sort=False)[["otr", "calibrated_otr", "asr"]].mean()
        x = np.arange(len(s))
        ax.bar(x - 0.27, s["otr"], 0.27, label="OTR (paper)")
        ax.bar(x, s["calibrated_otr"].fillna(0), 0.27, label="calibrated OTR")
        ax.bar(x + 0.27, s["asr"], 0.27, label="MIA ASR")
        ax.set_xticks(x, s.index, rotation=30)
        ax.set_title(f"layer {layer}")
        ax.grid(axis="y", alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=3)
    axes[0].set_ylabel("rate")
    fig.suptitle(
        f"Table 4 [{w.variant}]: higher OTR = more forgetting; ASR closer to retrained = better"
    )
    w.png(fig, "table4_methods")


def fig2(store: ResultsStore, run: int, w: Writer) -> None:
    h = store.rows(run, "h_values")
    p = store.rows(run, "points")
    models = list(dict.fromkeys(h["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 3.4), layout="constrained")
    rows = []
    for ax, model in zip(np.atleast_1d(axes), models, strict=True):
        part = h[(h["model"] == model) & (h["seed"] == h["seed"].min())]
        edges = np.histogram_bin_edges(part["h"], bins=30)
        for name, color in COLORS.items():
            ax.hist(part[part["set"] == name]["h"], bins=edges, alpha=0.55, color=color, label=name)
        pr = p[(p["model"] == model) & (p["seed"] == p["seed"].min())].iloc[0]
        ax.set_title(
            f"h_{ {'original': 'or', 'random': 'rand', 'retrained': 're'}[model] }: "
            f"U-test p = {pr['reference_p']:.2g}"
        )
        ax.set_xlabel("H(S, h)")
        target_h = part[part["set"] == "S_target"]["h"]
        rows.append(
            {
                "model": model,
                "layer": pr["layer"],
                "n": pr["subset_size"],
                "U-test p (S_IT > S_OOT), median of draws": f"{pr['reference_p']:.3g}",
                "references": "valid" if pr["references_valid"] else "invalid",
                "panel p (the gate)": f"{pr['panel_p']:.3g}",
                "OTR of D_f targets [95% CI]": "– (withheld: inconclusive)"
                if not np.isfinite(pr["otr"])
                else f"{pr['otr']:.2f} [{pr['otr_lo']:.2f}, {pr['otr_hi']:.2f}]",
                "median H(S_IT), draw 1": f"{part[part['set'] == 'S_IT']['h'].median():.3g}",
                "median H(S_OOT), draw 1": f"{part[part['set'] == 'S_OOT']['h'].median():.3g}",
                "median H(S_target), draw 1": f"{target_h.median():.3g}",
                "null FPR split U-test": f"{pr['null_split_fpr']:.2f}",
                "null FPR calibrated": f"{pr['null_calibrated_fpr']:.2f}",
            }
        )
    np.atleast_1d(axes)[0].legend()
    fig.suptitle(f"Fig. 2 [{w.variant}]")
    w.png(fig, "fig2_histograms")
    w.table(pd.DataFrame(rows), "fig2_histograms")


def toy(store: ResultsStore, run: int, w: Writer) -> None:
    steps = store.rows(run, "toy_steps")
    layers = list(dict.fromkeys(steps["layer"]))
    fig, axes = plt.subplots(1, len(layers), figsize=(5 * len(layers), 3.4), layout="constrained")
    for ax, layer in zip(np.atleast_1d(axes), layers, strict=True):
        part = steps[steps["layer"] == layer]
        g = part.groupby("step")[["same_mean", "cross_mean"]].mean()
        x = np.maximum(g.index.to_numpy(), 1)
        ax.plot(x, g["same_mean"], "-o", label="H(S_same)")
        ax.plot(x, g["cross_mean"], "-s", label="H(S_cross)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training step (step 0 drawn at 1)")
        ax.set_title(f"layer {layer}")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].legend()
    np.atleast_1d(axes)[0].set_ylabel("mean H over subsets and seeds")
    fig.suptitle(f"App. A.4 fixed-batch toy [{w.variant}]")
    w.png(fig, "fig5_toy")
    rows = []
    for (layer, step), part in steps.groupby(["layer", "step"], sort=False):
        rows.append(
            {
                "layer": layer,
                "step": step,
                "same": f"{part['same_mean'].mean():.3g}",
                "cross": f"{part['cross_mean'].mean():.3g}",
                "ratio": f"{part['same_mean'].mean() / part['cross_mean'].mean():.2f}",
                "p subset U (per seed)": ", ".join(f"{v:.2g}" for v in part["p_subset"]),
                "p split U (per seed)": ", ".join(f"{v:.2g}" for v in part["p_split"]),
                "train acc": f"{part['train_acc'].mean():.1f}",
            }
        )
    w.table(pd.DataFrame(rows), "toy")


def calibration(store: ResultsStore, runs: dict[str, int], w: Writer) -> None:
    """method §9 across every evaluation of the variant (trained models; the random control is
    left out): null-check FPRs and the spread correlations, with the layers, n and seeds."""
    frames = [
        store.rows(run, "points").assign(plan=plan)
        for plan, run in runs.items()
        if "points" in store.tables(run)
    ]
    if not frames:
        return
    p = pd.concat(frames, ignore_index=True)
    p = p[p["role"] != "random"]
    rows = []
    for plan, part in p.groupby("plan", sort=False):
        rows.append(
            {
                "plan": plan,
                "layers": ", ".join(sorted(set(part["layer"]))),
                "n": ", ".join(str(v) for v in sorted(set(part["subset_size"]))),
                "seeds": part["seed"].nunique(),
                "evaluations": len(part),
                "null FPR, split-level U (nominal 0.01)": f"{part['null_split_fpr'].mean():.2f}",
                "null FPR, calibrated (≤ 0.05)": f"{part['null_calibrated_fpr'].mean():.2f}",
                "corr(score, spread) median": f"{part['score_spread_corr'].median():.3f}",
                "corr ≥ 0.99": f"{(part['score_spread_corr'] >= 0.99).mean():.0%}",
                "within-group corr median": f"{part['score_spread_corr_within'].median():.2f}"
                if "score_spread_corr_within" in part
                else "–",
                "valid refs (paper)": f"{part['references_valid'].mean():.0%}",
                "valid panel (calibrated)": f"{part['panel_valid'].mean():.0%}",
            }
        )
    w.table(pd.DataFrame(rows), "calibration")
    by_panel = []
    for run, settings in plan_runs(store, None, w.variant):
        if "points" in store.tables(run):
            pts = store.rows(run, "points")
            panel = settings["config"].get("eval", {}).get("panel_size", 20)
            by_panel.append(pts[pts["role"] != "random"].assign(panel_size=panel))
    key = [
        "plan",
        "seed",
        "model",
        "forget_ratio",
        "subset_size",
        "layer",
        "sigma_rule",
        "checkpoint",
        "panel_size",
    ]  # an evaluation repeated by another run counts once
    allp = pd.concat(by_panel, ignore_index=True).drop_duplicates(key)
    rows = []
    for panel, part in allp.groupby("panel_size"):
        rows.append(
            {
                "panel size R": panel,
                "evaluations": len(part),
                "smallest rank p-value": f"1/{panel + 1} = {1 / (panel + 1):.3f}",
                "null FPR, split-level U (nominal 0.01)": f"{part['null_split_fpr'].mean():.2f}",
                "null FPR, calibrated (nominal 0.05)": f"{part['null_calibrated_fpr'].mean():.3f}",
            }
        )
    w.table(pd.DataFrame(rows), "calibration_by_panel")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
    bins = np.linspace(0, 1, 21)
    axes[0].hist(p["null_split_fpr"], bins=bins, alpha=0.6, label="paper's split-level U-test")
    axes[0].hist(p["null_calibrated_fpr"], bins=bins, alpha=0.6, label="calibrated subset test")
    axes[0].axvline(0.01, color="k", ls="--", lw=1)
    axes[0].set_xlabel("false-positive rate on pairs of D_te subsets")
    axes[0].set_ylabel("evaluations")
    axes[0].legend()
    axes[1].hist(p["score_spread_corr"].dropna(), bins=np.linspace(0.8, 1, 21))
    axes[1].set_xlabel("corr(subset score, spread) per evaluation")
    fig.suptitle(f"method §9 findings over {len(p)} evaluations [{w.variant}]")
    w.png(fig, "calibration")


PLANS: dict[str, Callable[[ResultsStore, int, Writer], None]] = {
    "table1": table1,
    "table3_baselines": table3,
    "fig3_sigma": lambda s, r, w: sweep_plot(s, r, w, "fig3_sigma"),
    "fig4_layer": lambda s, r, w: sweep_plot(s, r, w, "fig4_layer"),
    "training_sufficiency": lambda s, r, w: sweep_plot(s, r, w, "training_sufficiency"),
    "table4_methods": table4,
    "fig2_histograms": fig2,
    "toy_fixed_batch": toy,
}


def main() -> None:
    """Parse the arguments and draw everything that the store holds."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default="runs/results.sqlite")
    ap.add_argument("--variant", default="default")
    ap.add_argument("--out", default="reproduction")
    args = ap.parse_args()
    w = Writer(Path(args.out), args.variant)
    runs: dict[str, int] = {}
    with ResultsStore(args.store) as store:
        for plan, draw in PLANS.items():
            run = latest_run(store, plan, args.variant)
            if run is None:
                print(f"no complete run of {plan} [{args.variant}] in {args.store}")
                continue
            runs[plan] = run
            draw(store, run, w)
        calibration(store, runs, w)


if __name__ == "__main__":
    main()
