"""The truth of each zoo checkpoint (method §17): how far its behaviour on D_f is from the
retrained ensemble's, in units of the retrained models' own spread — what retraining gives and
the verdict must not use.

Three measures of a model on D_f: the accuracy (%), the mean cross-entropy (nats) and a
per-sample likelihood-ratio membership score in the spirit of U-LiRA (Hayes et al. 2024) and
the NeurIPS 2023 unlearning challenge: for each row i of D_f, the logit-scaled confidence on its
label, ``φ_i = log p_i − log(1 − p_i)``, is modelled as Gaussian under the original ensemble
(trained on it: "in") and under the retrained ensemble (never saw it: "out"), with per-row
means and one pooled variance per side ("fixed-variance" LiRA); a model *calls row i a member*
when ``log N(φ_i; μ_in,i, σ_in) > log N(φ_i; μ_out,i, σ_out)``, and its membership score is the
share of D_f it calls member. An ensemble member is scored against the ensembles without it
(leave-one-out), so no model is calibrated on itself.

Each measure is standardised against the retrained ensemble, signed so that the originals' side
is positive: ``z_m = (m − mean_re) / sd_re · sign(mean_or − mean_re)`` (a retrained model: the
mean and SD of the others). The **graded truth** is the mean of the three z (how much of the
original's behaviour on D_f remains, in retrained SDs); the threshold τ is the largest
``max_m |z_m|`` of a retrained model (the retrained models' own spread). The **label**:
``forgot`` when every ``|z_m| ≤ τ``; ``remembers`` when some ``z_m > τ``; ``over-unlearned``
otherwise (some measure beyond the retrained models on the far side, none on the originals').
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sde_core.errors import InputError

__all__ = [
    "LABELS",
    "TRUTH_MEASURES",
    "Truth",
    "behaviour_measures",
    "label_truth",
    "lira_member_share",
]

#: The truth labels.
LABELS = ("forgot", "remembers", "over-unlearned")
#: The three measures of behaviour on D_f the truth combines.
TRUTH_MEASURES = ("forget_accuracy", "forget_loss", "lira_member_share")
_EPS = 1e-12


@dataclass(frozen=True)
class Truth:
    """One checkpoint's truth.

    Attributes:
        name: the checkpoint. measures: its three measures (:data:`TRUTH_MEASURES`).
        z: each measure standardised against the retrained ensemble (originals' side > 0).
        graded: the mean of ``z`` (higher: more of the original's behaviour remains).
        distance: ``max |z|``. threshold: τ. label: one of :data:`LABELS`.
    """

    name: str
    measures: dict[str, float]
    z: dict[str, float]
    graded: float
    distance: float
    threshold: float
    label: str


def _phi(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    p = np.clip(probs[np.arange(len(labels)), labels], _EPS, 1.0 - 1e-15)
    return np.log(p) - np.log1p(-p)


def lira_member_share(phi: np.ndarray, phi_in: np.ndarray, phi_out: np.ndarray) -> float:
    """Share of rows a model with logit confidences ``phi`` ``(N,)`` calls members, against an
    "in" ensemble ``phi_in`` ``(M_in, N)`` and an "out" ensemble ``phi_out`` ``(M_out, N)``
    (per-row means, one pooled variance per side; ties call non-member)."""
    phi_in, phi_out = np.atleast_2d(phi_in), np.atleast_2d(phi_out)
    if phi_in.shape[0] < 2 or phi_out.shape[0] < 2:
        raise InputError("the likelihood-ratio score needs at least two models per ensemble")
    mu_in, mu_out = phi_in.mean(axis=0), phi_out.mean(axis=0)
    var_in = max(
        float(np.mean((phi_in - mu_in) ** 2)) * phi_in.shape[0] / (phi_in.shape[0] - 1), _EPS
    )
    var_out = max(
        float(np.mean((phi_out - mu_out) ** 2)) * phi_out.shape[0] / (phi_out.shape[0] - 1), _EPS
    )
    log_in = -0.5 * ((phi - mu_in) ** 2 / var_in + np.log(var_in))
    log_out = -0.5 * ((phi - mu_out) ** 2 / var_out + np.log(var_out))
    return float(np.mean(log_in > log_out))


def behaviour_measures(
    forget_probs: Mapping[str, np.ndarray],
    labels: np.ndarray,
    originals: Sequence[str],
    retrained: Sequence[str],
) -> dict[str, dict[str, float]]:
    """Each model's three measures on D_f (:data:`TRUTH_MEASURES`).

    Args:
        forget_probs: model -> softmax outputs ``(N_f, C)`` on D_f. labels: D_f's labels.
        originals, retrained: the names of the two ensembles (each at least three models, so a
            member's leave-one-out ensembles keep two).
    """
    if len(originals) < 3 or len(retrained) < 3:
        raise InputError("the truth needs at least three originals and three retrained models")
    phi = {name: _phi(p, labels) for name, p in forget_probs.items()}
    out: dict[str, dict[str, float]] = {}
    for name, probs in forget_probs.items():
        p_true = np.clip(probs[np.arange(len(labels)), labels], _EPS, 1.0)
        ins = np.stack([phi[o] for o in originals if o != name])
        outs = np.stack([phi[r] for r in retrained if r != name])
        out[name] = {
            TRUTH_MEASURES[0]: float(np.mean(probs.argmax(axis=1) == labels) * 100.0),
            TRUTH_MEASURES[1]: float(np.mean(-np.log(p_true))),
            TRUTH_MEASURES[2]: lira_member_share(phi[name], ins, outs),
        }
    return out


def label_truth(
    measures: Mapping[str, Mapping[str, float]],
    originals: Sequence[str],
    retrained: Sequence[str],
) -> dict[str, Truth]:
    """Every model's :class:`Truth` from its measures (:func:`behaviour_measures`) and the two
    ensembles' names (module docstring)."""
    names = list(measures)

    def stats(member: str, key: str, group: Sequence[str]) -> tuple[float, float]:
        values = np.array([measures[g][key] for g in group if g != member])
        return float(values.mean()), float(max(values.std(ddof=1), _EPS))

    def zs(name: str) -> dict[str, float]:
        out = {}
        for key in TRUTH_MEASURES:
            mean_re, sd_re = stats(name, key, retrained)
            mean_or, _ = stats(name, key, originals)
            sign = 1.0 if mean_or >= mean_re else -1.0
            out[key] = sign * (measures[name][key] - mean_re) / sd_re
        return out

    z = {name: zs(name) for name in names}
    tau = max(max(abs(v) for v in z[r].values()) for r in retrained)
    truths = {}
    for name in names:
        dist = max(abs(v) for v in z[name].values())
        if dist <= tau:
            label = LABELS[0]
        elif max(z[name].values()) > tau:
            label = LABELS[1]
        else:
            label = LABELS[2]
        truths[name] = Truth(
            name,
            dict(measures[name]),
            z[name],
            float(np.mean(list(z[name].values()))),
            dist,
            tau,
            label,
        )
    return truths
