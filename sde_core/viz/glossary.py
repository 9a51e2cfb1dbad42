"""One glossary of every metric and setting the dashboard and the report show.

Each :class:`Term` has a short label, a one-line definition a non-expert can read, and the
section of ``docs/method.md`` that defines it exactly ("method §N"). The dashboard shows the
definition on hover (``help=``) with a link to the section on its Method page; the report lists
the definitions of what it shows. Keys are the column names of the evaluation's tables where
one exists (``otr``, ``reference_p``, ``spread`` …) and setting names (``subset_size`` …); the
settings' entries are built from :data:`~sde_core.pipeline.settings.SETTINGS`, where each
setting is declared once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from sde_core.errors import SettingsError
from sde_core.pipeline.evaluation.metric_table import (
    ACC_F,
    ACC_GAP,
    ACC_R,
    ACC_TE,
    ASR,
    ATTACK_AUC,
    ATTACK_AUC_VS_RETRAINED,
    CALIBRATED_F1,
    CALIBRATED_OTR,
    DEPENDENCE_SCORE,
    F1,
    LOSS_GAP,
    LOSS_GAP_VS_RETRAINED,
    MINK_AUC,
    MMD_F1,
    NULL_CALIBRATED_FPR,
    NULL_OUT_OF_TRAINING_FPR,
    NULL_OVER_UNLEARNED_FPR,
    OTR,
    OVER_UNLEARNED_RATE,
    OVER_UNLEARNING_P,
    PANEL_P,
    REFERENCE_P,
    TEXT_AUC,
    W2_F1,
    ZLIB_AUC,
    hi_column,
    lo_column,
)
from sde_core.pipeline.settings import SETTINGS

__all__ = [
    "GLOSSARY",
    "METHOD_SECTIONS",
    "Term",
    "glossary_table",
    "help_text",
    "label",
    "method_anchor",
    "method_reference",
    "term",
]

#: Sections of ``docs/method.md``: number (or name) -> (title, anchor).
METHOD_SECTIONS: dict[int | str, tuple[str, str]] = {
    1: ("Notation", "1-notation"),
    2: ("Split-half HSIC", "2-split-half-hsic"),
    3: ("Reference validity", "3-reference-validity"),
    4: ("Decision rule", "4-decision-rule"),
    5: ("Headline metrics", "5-headline-metrics"),
    6: ("Baselines and classic metrics", "6-baselines-and-classic-metrics"),
    7: ("Unlearning methods", "7-unlearning-methods"),
    8: ("Experiment protocols", "8-experiment-protocols"),
    9: ("Calibrated evidence", "9-calibrated-evidence"),
    10: ("Public API and outputs", "10-public-api-and-outputs"),
    11: ("The bundled demos", "11-the-bundled-demos"),
    12: ("Replication, disjointness and the gate", "12-replication-disjointness-and-the-gate"),
    13: ("Reproduced: what a re-run must match", "13-reproduced-what-a-re-run-must-match"),
    14: ("Diffusion models (denoisers)", "14-diffusion-models-denoisers"),
    15: (
        "Precision target, planner and paired comparisons",
        "15-precision-target-planner-and-paired-comparisons",
    ),
    16: (
        "Class-wise forgetting: when the references cannot match the targets",
        "16-class-wise-forgetting-when-the-references-cannot-match-the-targets",
    ),
    17: ("Meta-evaluation: how often the verdict is right",
         "17-meta-evaluation-how-often-the-verdict-is-right"),
    18: ("Per-sample evidence: which forget samples still look remembered",
         "18-per-sample-evidence-which-forget-samples-still-look-remembered"),
    "choices": ("Deviations and choices", "deviations-and-choices"),
}  # fmt: skip


@dataclass(frozen=True)
class Term:
    """A glossary entry.

    Attributes:
        label: short name shown in tables and charts (e.g. ``"OTR"``).
        definition: one sentence for a non-expert, with units where the value has any.
        section: the defining section of ``docs/method.md`` (a key of :data:`METHOD_SECTIONS`).
    """

    label: str
    definition: str
    section: int | str


GLOSSARY: dict[str, Term] = {
    # ------------------------------------------------------------------ the statistic
    "h": Term(
        "H(S, h)",
        "Split-half HSIC: how strongly the model's activations on two random halves of a "
        "subset S depend on each other (unitless), one value per random split.",
        2,
    ),
    "h_median": Term("median H", "The median of a subset's K split-half HSIC values.", 2),
    "dim": Term("d", "Dimension of the layer's activations (after pooling feature maps).", 1),
    # ------------------------------------------------------------------ paper's evidence
    REFERENCE_P.key: Term(
        REFERENCE_P.label,
        "The paper's check of the references: one-sided Mann–Whitney U p-value that H on "
        "training data (S_IT) exceeds H on unseen data (S_OOT), over the splits of one subset "
        "each; below α = 0.01 the references are valid.",
        3,
    ),
    "references_valid": Term(
        "references valid",
        "Whether the paper's check separates training from unseen data (p < α); if not, every "
        "decision of the paper's rule is inconclusive.",
        3,
    ),
    "d_it": Term(
        "D(S, S_IT)",
        "Jensen–Shannon divergence (base 2, 0–1) between a target's H values and those of the "
        "training reference S_IT.",
        4,
    ),
    "d_oot": Term(
        "D(S, S_OOT)",
        "Jensen–Shannon divergence (base 2, 0–1) between a target's H values and those of the "
        "unseen reference S_OOT.",
        4,
    ),
    "decision": Term(
        "decision",
        "The paper's rule for one target subset: in-training when its H values are closer to "
        "S_IT's than to S_OOT's, else out-of-training (ties count as in-training).",
        4,
    ),
    OTR.key: Term(
        OTR.label,
        "Out-of-training rate: the share of forget-set subsets the paper's rule finds "
        "unseen-like; higher means more forgetting.",
        5,
    ),
    "otr_ci": Term(
        "OTR 95% CI",
        "95% Korn–Graubard interval of the OTR over the B independent reference draws: the "
        "range the rate is compatible with, reference variance included.",
        12,
    ),
    lo_column(OTR.key): Term(
        f"{OTR.label} lo", "Lower end of the OTR's 95% Korn–Graubard interval.", 12
    ),
    hi_column(OTR.key): Term(
        f"{OTR.label} hi", "Upper end of the OTR's 95% Korn–Graubard interval.", 12
    ),
    "paired_difference": Term(
        "paired difference",
        "A rate of one model minus another's, draw by draw on the same references, panels and "
        "targets, with its 95% interval: the variance the two share cancels.",
        15,
    ),
    "over_unlearned": Term(
        "over-unlearned",
        "The model-level over-unlearning test: the model's outputs on the forget set are "
        "significantly flatter (lower spread) than on unseen data (its p-value is "
        "over_unlearning_p). A change in how the model answers, not proof it forgot.",
        9,
    ),
    OVER_UNLEARNED_RATE.key: Term(
        OVER_UNLEARNED_RATE.label,
        "Share of forget-set subsets judged over-unlearned (flatter outputs than unseen data); "
        "never counted as forgotten.",
        9,
    ),
    "evidence_conflict": Term(
        "conflicting evidence",
        "SDE says forgotten or over-unlearned, but the model still classifies the forget set "
        "significantly better than unseen data (accuracy, loss and membership-attack gaps with "
        "95% intervals): the verdict is not certified.",
        9,
    ),
    ACC_GAP.key: Term(
        ACC_GAP.label,
        "Accuracy on the forget set minus on unseen test data, in percentage points, with a "
        "95% interval (positive: the model still fits the forget set better).",
        9,
    ),
    LOSS_GAP.key: Term(
        LOSS_GAP.label,
        "Mean cross-entropy on the forget set minus on unseen test data (nats; negative: the "
        "model still fits the forget set better).",
        9,
    ),
    LOSS_GAP_VS_RETRAINED.key: Term(
        LOSS_GAP_VS_RETRAINED.label,
        "The loss gap minus the retrained model's, computed on the same rows (a language "
        "model's texts, a denoiser's images): ≈ 0 when the model treats the forget set as the "
        "model that never saw it does; negative: it still fits the forget set better.",
        9,
    ),
    ATTACK_AUC.key: Term(
        ATTACK_AUC.label,
        "How well a text's loss tells the forget set from unseen texts (0.5: not at all, 1: "
        "perfectly), with a 95% DeLong interval; a language model's membership attack.",
        9,
    ),
    ATTACK_AUC_VS_RETRAINED.key: Term(
        ATTACK_AUC_VS_RETRAINED.label,
        "The loss attack's AUC minus the retrained model's on the same texts, with the paired "
        "DeLong interval: above 0, the model still knows the forget set better than a model "
        "that never saw it.",
        9,
    ),
    ZLIB_AUC.key: Term(
        ZLIB_AUC.label,
        "The AUC of the zlib-ratio attack (a text's loss over its zlib-compressed length, "
        "Carlini et al. 2021), forget set against unseen texts.",
        9,
    ),
    MINK_AUC.key: Term(
        MINK_AUC.label,
        "The AUC of the Min-K% attack (the mean loss of a text's 20% least likely tokens, Shi "
        "et al. 2024), forget set against unseen texts.",
        9,
    ),
    TEXT_AUC.key: Term(
        TEXT_AUC.label,
        "The loss attack's AUC with the loss over the whole text, question included, instead "
        "of the answer alone.",
        9,
    ),
    "mia_forget": Term(
        "MIA on D_f",
        "Share of the forget set a membership attack (fitted on other data) calls 'member'.",
        9,
    ),
    "mia_unseen": Term(
        "MIA on unseen",
        "Share of held-out unseen rows the same attack calls 'member' (its false-alarm rate).",
        9,
    ),
    OVER_UNLEARNING_P.key: Term(
        OVER_UNLEARNING_P.label,
        "p-value of the model-level over-unlearning test (the draws combined).",
        12,
    ),
    F1.key: Term(
        F1.label,
        "Controlled F1 (0–1): how well the paper's rule tells known training subsets from known "
        "unseen ones (in-training is the positive class).",
        5,
    ),
    "f1_precision": Term("F1 precision", "Precision of the controlled decisions.", 5),
    "f1_recall": Term("F1 recall", "Recall of the controlled decisions.", 5),
    DEPENDENCE_SCORE.key: Term(
        DEPENDENCE_SCORE.label,
        "Where the forget set's median H lies between unseen data (0) and training data (1).",
        5,
    ),
    # ------------------------------------------------------------------ calibrated evidence
    "score": Term("score s(S)", "A subset's score: the mean of its split-half HSIC values.", 9),
    "spread": Term(
        "spread",
        "(1 − mean kernel value)² / (n/2): how spread out the subset's activations are, a "
        "quantity that needs no pairing; when scores track it, spread drives the verdicts.",
        9,
    ),
    "score_spread_corr": Term(
        "score–spread r",
        "Correlation between subset scores and spreads; near 1, the test mostly measures spread.",
        9,
    ),
    PANEL_P.key: Term(
        PANEL_P.label,
        "Subset-level check: one-sided Mann–Whitney U p-value that the R training panel "
        "subsets score above the R unseen panel subsets.",
        9,
    ),
    "panel_valid": Term(
        "panels valid",
        "Whether the calibrated panels separate training from unseen data (panel p < α).",
        9,
    ),
    "p_in": Term(
        "p_in",
        "Rank p-value that a target scores higher than unseen data (small: still remembered).",
        9,
    ),
    "p_out": Term(
        "p_out",
        "Rank p-value that a target scores lower than training data (small: forgotten).",
        9,
    ),
    "verdict": Term(
        "calibrated verdict",
        "A target's verdict from the rank p-values: in-training, out-of-training, "
        "over-unlearned or inconclusive.",
        9,
    ),
    CALIBRATED_OTR.key: Term(
        CALIBRATED_OTR.label,
        "Share of forget-set subsets whose calibrated verdict is out-of-training "
        "(over-unlearned subsets are not counted).",
        9,
    ),
    lo_column(CALIBRATED_OTR.key): Term(
        f"{CALIBRATED_OTR.short_label} lo", "Lower end of the calibrated OTR's interval.", 9
    ),
    hi_column(CALIBRATED_OTR.key): Term(
        f"{CALIBRATED_OTR.short_label} hi", "Upper end of the calibrated OTR's interval.", 9
    ),
    CALIBRATED_F1.key: Term(
        CALIBRATED_F1.label, "Controlled F1 of the calibrated verdicts (0–1).", 9
    ),
    "n_in_training": Term(
        "in-training", "Forget-set subsets the calibrated test finds training-like.", 9
    ),
    "n_out_of_training": Term(
        "out-of-training", "Forget-set subsets the calibrated test finds unseen-like.", 9
    ),
    "n_inconclusive": Term(
        "inconclusive", "Forget-set subsets the calibrated test cannot place either way.", 9
    ),
    "n_over_unlearned": Term(
        "over-unlearned",
        "Forget-set subsets that score significantly below unseen data: the model's outputs on "
        "them are flatter (lower spread) than on data it never saw.",
        9,
    ),
    "null_split_fpr": Term(
        "null FPR (paper's test)",
        "How often the paper's split-level test declares a difference between two subsets of "
        "unseen data, where none exists (should be about α).",
        9,
    ),
    NULL_CALIBRATED_FPR.key: Term(
        NULL_CALIBRATED_FPR.label,
        "The same false-alarm rate for the calibrated subset-level test: unseen subsets called "
        "in-training (should be at most α).",
        9,
    ),
    NULL_OVER_UNLEARNED_FPR.key: Term(
        NULL_OVER_UNLEARNED_FPR.label,
        "The calibrated test's false alarms in the other direction: unseen subsets called "
        "over-unlearned (should be at most α).",
        9,
    ),
    NULL_OUT_OF_TRAINING_FPR.key: Term(
        NULL_OUT_OF_TRAINING_FPR.label,
        "Share of training subsets the calibrated test calls out-of-training — the unsafe "
        "direction (should be at most α).",
        9,
    ),
    "panel_outliers": Term(
        "panel outliers",
        "Reference-panel members so far from the rest that a verdict becomes unreachable "
        "(any one withholds the calibrated verdicts).",
        9,
    ),
    "inconclusive_reason": Term(
        "why inconclusive",
        "Why the headline numbers are withheld: the calibrated references do not separate "
        "training from unseen data, the null check finds false calls above their level, or a "
        "panel member is an outlier.",
        12,
    ),
    # ------------------------------------------------------------------ baselines, classic
    MMD_F1.key: Term(
        MMD_F1.label, "Controlled F1 of the MMD² distance baseline (0–1), over the draws, gated.", 6
    ),
    W2_F1.key: Term(
        W2_F1.label,
        "Controlled F1 of the Wasserstein-2 distance baseline (0–1), over the draws, gated.",
        6,
    ),
    ACC_R.key: Term(ACC_R.label, "Top-1 accuracy on the retained training data D_r (%).", 6),
    ACC_F.key: Term(ACC_F.label, "Top-1 accuracy on the forget set D_f (%).", 6),
    ACC_TE.key: Term(ACC_TE.label, "Top-1 accuracy on the test data D_te (%).", 6),
    ASR.key: Term(
        ASR.label,
        "Membership-inference attack success: share of the forget set a confidence attack "
        "calls 'member'; lower means more forgetting (compare with the retrained model).",
        6,
    ),
    "seconds": Term(
        "method time (s)", "Wall-clock seconds it took to train or unlearn the model.", 7
    ),
    "eval_seconds": Term(
        "evaluation time (s)", "Wall-clock seconds of this model's evaluation.", 10
    ),
    # ------------------------------------------------------------------ settings (one table)
    **{entry.name: Term(entry.short_label, entry.definition, entry.section) for entry in SETTINGS},
    "algorithm": Term(
        "algorithm version",
        "Version of the numerics behind stored results; results of other versions are never mixed.",
        10,
    ),
}


def term(key: str) -> Term:
    """The glossary entry of ``key``.

    Raises:
        SettingsError: unknown key (the message lists the known ones).
    """
    if key not in GLOSSARY:
        raise SettingsError(f"no glossary entry {key!r}; known: {', '.join(sorted(GLOSSARY))}")
    return GLOSSARY[key]


def label(key: str) -> str:
    """The short label of ``key`` (the key itself when it has no entry)."""
    found = GLOSSARY.get(key)
    return found.label if found else key


def method_anchor(section: int | str) -> str:
    """The anchor of a section of ``docs/method.md`` (e.g. ``"3-reference-validity"``).

    Raises:
        SettingsError: unknown section.
    """
    if section not in METHOD_SECTIONS:
        raise SettingsError(f"docs/method.md has no section {section!r}")
    return METHOD_SECTIONS[section][1]


def method_reference(key: str) -> str:
    """``"method §3"`` (or ``"method: Deviations and choices"``) for the section of ``key``."""
    section = term(key).section
    if isinstance(section, int):
        return f"method §{section}"
    return f"method: {METHOD_SECTIONS[section][0]}"


def help_text(key: str, link: str | None = "method") -> str:
    """The hover text of ``key``: its definition and a Markdown link to its method section.

    Args:
        key: a glossary key.
        link: the URL of the rendered method document (the dashboard's Method page is
            ``"method"``, relative to the current page); None for plain text.
    """
    entry = term(key)
    ref = method_reference(key)
    if link is None:
        return f"{entry.definition} ({ref})"
    return f"{entry.definition} [{ref}]({link}#{method_anchor(entry.section)})"


def glossary_table(keys: Iterable[str] | None = None) -> pd.DataFrame:
    """The entries of ``keys`` (default: all) as rows ``term``, ``definition``, ``defined in``."""
    chosen = list(GLOSSARY) if keys is None else [k for k in dict.fromkeys(keys) if k in GLOSSARY]
    return pd.DataFrame(
        [
            {
                "term": GLOSSARY[k].label,
                "definition": GLOSSARY[k].definition,
                "defined in": method_reference(k),
            }
            for k in chosen
        ],
        columns=["term", "definition", "defined in"],
    )
