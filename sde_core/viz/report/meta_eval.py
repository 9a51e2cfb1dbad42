"""The meta-evaluation's outputs (method §17): its markdown table, its ROC figure and the
"how often is it right" card the Method page shows from the shipped CSV.

- :func:`markdown_table`: the table of ``python -m sde_core meta-eval`` as markdown;
- :func:`write_roc_figure`: the ROC curves (truth forgot against remembers) of the chosen
  scores, as a PNG (matplotlib, headless);
- :func:`read_card` / :class:`MetaCard`: the shipped table of a family, read back for the card;
- :func:`family_card` / :class:`FamilyCard`: the card of the open workspace's family, in
  words, for the Method page and the report — where no zoo of that family has been measured,
  it says so instead of showing another family's rates.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.viz.formatting import format_number

__all__ = [
    "HELD_OUT_SEED",
    "FamilyCard",
    "MetaCard",
    "card_sentences",
    "family_card",
    "markdown_table",
    "meta_eval_csvs",
    "method_table",
    "read_card",
    "roc_points",
    "write_roc_figure",
]

#: The shipped meta-evaluation tables (``reproduction/results``) by model family, each with
#: its zoo's dataset and model, in the card's words.
_SHIPPED: dict[str, tuple[tuple[str, str, str], ...]] = {
    "classifier": (
        ("meta_eval_mnist1d.csv", "mnist1d", "an MLP"),
        ("meta_eval_fashion-mnist.csv", "Fashion-MNIST", "a CNN"),
    )
}
#: The evaluation seed of each zoo's held-out run (``meta-eval --eval-seed``), shipped beside
#: its table as ``<stem>-seed<N>.csv``; the card quotes it where present.
HELD_OUT_SEED = 1
#: A family's name in a card's title (the plural of its label).
_TITLES = {"classifier": "Classifiers"}
_COLUMNS = (
    ("auc", "faithfulness AUC"),
    ("auc_runs", "AUC, unlearning runs only"),
    ("spearman", "Spearman ρ"),
    ("spearman_runs", "Spearman ρ, runs only"),
    ("relearn", "robust: relearning"),
    ("int8", "robust: int8"),
    ("int4", "robust: 4-bit"),
)


def _cell(row: Mapping[str, Any], key: str) -> str:
    value = float(row.get(key, math.nan))
    if not math.isfinite(value):
        return "n/a"
    lo, hi = float(row.get(f"{key}_lo", math.nan)), float(row.get(f"{key}_hi", math.nan))
    interval = (
        f" [{format_number(lo, digits=2)}, {format_number(hi, digits=2)}]"
        if math.isfinite(lo) and math.isfinite(hi)
        else ""
    )
    return f"{format_number(value, digits=2)}{interval}"


def markdown_table(rows: Sequence[Mapping[str, Any]], scope: str = "") -> str:
    """The table as markdown (after the ``scope`` line when given): one line per score, each
    cell ``value [lo, hi]``."""
    head = "| score | " + " | ".join(label for _, label in _COLUMNS) + " |"
    lines = [scope, ""] if scope else []
    lines += [head, "|---" * (len(_COLUMNS) + 1) + "|"]
    for row in rows:
        cells = " | ".join(_cell(row, key) for key, _ in _COLUMNS)
        lines.append(f"| {row['label']} | {cells} |")
    return "\n".join(lines) + "\n"


def _counts(values: Sequence[str]) -> str:
    found: dict[str, int] = {}
    for v in values:
        found[v] = found.get(v, 0) + 1
    return ", ".join(f"{k} ×{n}" for k, n in sorted(found.items(), key=lambda kv: -kv[1]))


def method_table(rows: Sequence[Mapping[str, Any]], score: str) -> str:
    """Per kind and method of the zoo: the checkpoints' truth, their verdicts (and, where the
    rows have them, the default design's verdicts, ``verdict_defaults``) and the mean of
    ``score``, as markdown (where the verdict is right, and where not)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r["kind"]), str(r["method"]) or "—"), []).append(r)
    second = any(r.get("verdict_defaults") for r in rows)
    head = "| kind | method | checkpoints | truth | verdicts"
    head += " (fixed design) | verdicts (default design)" if second else ""
    lines = [head + f" | mean {score} |", "|---" * (7 if second else 6) + "|"]
    for (kind, method), group in groups.items():
        values = [float(r[score]) for r in group if math.isfinite(float(r[score]))]
        mean = format_number(float(np.mean(values)), digits=2) if values else "n/a"
        verdicts = _counts([r["verdict"] for r in group])
        if second:
            verdicts += " | " + _counts([r.get("verdict_defaults") or "not run" for r in group])
        lines.append(
            f"| {kind} | {method} | {len(group)} | {_counts([r['truth'] for r in group])} | "
            f"{verdicts} | {mean} |"
        )
    return "\n".join(lines) + "\n"


def roc_points(positives: np.ndarray, negatives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(false positive rate, true positive rate)`` of the thresholds of a score (higher:
    positive), from (0, 0) to (1, 1)."""
    thresholds = np.unique(np.concatenate([positives, negatives]))[::-1]
    fpr = [0.0] + [float(np.mean(negatives >= t)) for t in thresholds]
    tpr = [0.0] + [float(np.mean(positives >= t)) for t in thresholds]
    return np.array(fpr), np.array(tpr)


def write_roc_figure(
    rows: Sequence[Mapping[str, Any]], scores: Mapping[str, str], path: str | Path, title: str
) -> Path:
    """Write the ROC curves of ``scores`` (column -> label) over the checkpoint ``rows`` (truth
    ``forgot`` positive, ``remembers`` negative) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    for name, label in scores.items():
        kept = [r for r in rows if np.isfinite(r[name])]
        pos = np.array([r[name] for r in kept if r["truth"] == "forgot"], dtype=float)
        neg = np.array([r[name] for r in kept if r["truth"] == "remembers"], dtype=float)
        if pos.size and neg.size:
            fpr, tpr = roc_points(pos, neg)
            ax.plot(fpr, tpr, drawstyle="steps-post", label=label)
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("share of 'remembers' checkpoints called forgotten")
    ax.set_ylabel("share of 'forgot' checkpoints called forgotten")
    ax.set_title(title, fontsize=10)
    if ax.get_legend_handles_labels()[0]:  # a zoo without both classes draws no curve
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def meta_eval_csvs(family: str, root: str | Path | None = None) -> list[tuple[Path, str, str]]:
    """The shipped meta-evaluation tables of a model family that exist under ``root`` (the
    repository by default), each with its zoo's dataset and model; empty when there is none."""
    base = Path(root) if root is not None else Path(__file__).resolve().parents[3]
    found = [
        (base / "reproduction" / "results" / name, data, model)
        for name, data, model in _SHIPPED.get(family, ())
    ]
    return [entry for entry in found if entry[0].is_file()]


@dataclass(frozen=True)
class MetaCard:
    """The card's numbers: the verdict's and the best retrain-free score's rows, and the
    design they come from (``default`` where the zoo ran the library's default design)."""

    checkpoints: int
    verdict: dict[str, float]
    best_label: str
    best: dict[str, float]
    calibrated: dict[str, float]
    design: str = "fixed"


def read_card(path: str | Path) -> MetaCard | None:
    """The card's numbers from a shipped table (None when it lacks the verdict row)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))

    def numbers(row: Mapping[str, str]) -> dict[str, float]:
        out = {}
        for k, v in row.items():
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                continue
        return out

    by = {r["score"]: r for r in rows}
    if "sde_verdict" not in by or "sde_calibrated_otr" not in by:
        return None
    others = [r for r in rows if not r["score"].startswith(("sde_", "retrain_"))]

    def ranking(r: Mapping[str, str]) -> float:
        try:
            value = float(r.get("spearman_runs", "nan"))
        except ValueError:
            return -2.0
        return value if math.isfinite(value) else -2.0

    best = max(others, key=ranking)
    default = "sde_verdict_defaults" in by and "sde_calibrated_otr_defaults" in by
    suffix = "_defaults" if default else ""
    return MetaCard(
        checkpoints=int(float(by[f"sde_verdict{suffix}"]["n"])),
        verdict=numbers(by[f"sde_verdict{suffix}"]),
        best_label=best["label"],
        best=numbers(best),
        calibrated=numbers(by[f"sde_calibrated_otr{suffix}"]),
        design="default" if default else "fixed",
    )


def card_sentences(card: MetaCard) -> list[str]:
    """The card in words: how often the verdict was right, wrong or abstained, and how the
    calibrated OTR and the best retrain-free alternative separate the truth."""
    v = card.verdict

    def pct(x: float) -> str:
        return f"{format_number(100.0 * x, digits=2)}%"

    design = (
        "at the library's default design"
        if card.design == "default"
        else "at the zoo's small fixed design"
    )
    return [
        f"On {card.checkpoints} checkpoints whose truth is known, the verdict {design} was "
        f"right on "
        f"{pct(v['right'])}, wrong on {pct(v['wrong'])} and decided neither way on "
        f"{pct(v['abstained'])} of those that forgot or remember.",
        f"Over the unlearning runs the calibrated OTR follows the graded truth with Spearman ρ "
        f"{_cell(card.calibrated, 'spearman_runs')}, the best retrain-free alternative "
        f"({card.best_label}) with {_cell(card.best, 'spearman_runs')}"
        + (
            "; no unlearning run of this zoo reached the retrained models' behaviour, so how "
            "SDE does on runs that really forgot is not measured yet."
            if not math.isfinite(card.calibrated.get("auc_runs", math.nan))
            else f"; its AUC over the unlearning runs is {_cell(card.calibrated, 'auc_runs')}."
        ),
    ]


def _held_out_sentence(card: MetaCard) -> str:
    """What the same zoo gave at the held-out evaluation seed (:data:`HELD_OUT_SEED`)."""
    v = card.verdict
    right, wrong, abstained = (
        f"{format_number(100.0 * v[key], digits=2)}%" for key in ("right", "wrong", "abstained")
    )
    return (
        f"Evaluated again at a held-out seed ({HELD_OUT_SEED}), the verdict on the same zoo was "
        f"right on {right}, wrong on {wrong} and abstained on {abstained}: how often it "
        "abstains moves with the evaluation's own randomness."
    )


@dataclass(frozen=True)
class FamilyCard:
    """The "how often is it right" card of one model family (:func:`family_card`).

    Attributes:
        title: its heading. sentences: what it says (Markdown-free text).
        caption: where the numbers come from ("" when nothing was measured).
        measured: whether a zoo of this family was measured.
    """

    title: str
    sentences: list[str]
    caption: str
    measured: bool


def family_card(family: str, label: str, root: str | Path | None = None) -> FamilyCard | None:
    """The card of the model family ``family`` (its registry name; ``label``: the user's word
    for it, e.g. "causal language model") from its shipped meta-evaluation tables, one zoo
    after the other; for a family with none, a card that says the verdict's error rates are
    not measured for it; None when the family's tables exist in the repository but none under
    ``root`` (an installed package without ``reproduction/``: nothing is said rather than "not
    measured")."""
    cards = []
    for path, data, model in meta_eval_csvs(family, root):
        card = read_card(path)
        held_path = path.with_name(f"{path.stem}-seed{HELD_OUT_SEED}.csv")
        held = read_card(held_path) if held_path.is_file() else None
        if card is not None:
            cards.append((card, data, model, held))
    if family in _SHIPPED and not cards:
        return None
    if not cards:
        measured = "; ".join(
            f"{_TITLES[name].lower()} ({', '.join(data for _, data, _ in zoos)})"
            for name, zoos in _SHIPPED.items()
        )
        return FamilyCard(
            title=f"How often is it right? Not measured for a {label} (method §17)",
            sentences=[
                f"No meta-evaluation is shipped for a {label}: the verdict's rates of being "
                f"right and wrong were measured on zoos of {measured} only, and they do not "
                "carry over to another family. Read this workspace's verdict as not validated "
                "on checkpoints of its own kind; the behaviour cross-check beside it is the "
                "independent evidence."
            ],
            caption="",
            measured=False,
        )
    sentences = []
    for card, data, model, held in cards:
        first, *rest = card_sentences(card)
        sentences += [f"The {data} zoo ({model}): {first[:1].lower()}{first[1:]}", *rest]
        if held is not None:
            sentences.append(_held_out_sentence(held))
    names = " and ".join(data for _, data, _, _ in cards)
    return FamilyCard(
        title=f"How often is it right? {_TITLES[family]}, measured on the {names} "
        f"{'zoos' if len(cards) > 1 else 'zoo'} (method §17)",
        sentences=sentences,
        caption=(
            "Checkpoints with known truth: retrained and original models from several seeds, "
            "unlearning methods at graded strengths, relearned and quantised models. One "
            "family; these rates are the output layer's (the penultimate layer's: "
            "REPRODUCTION.md, Meta-evaluation)."
        ),
        measured=True,
    )
