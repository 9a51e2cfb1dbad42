"""Classic unlearning metrics: accuracies and the confidence-based membership-inference attack.

Units: accuracies are top-1 percentages in [0, 100]; the attack success rate (ASR) is the
fraction of ``D_f`` predicted "member", in [0, 1] (method §6; = 1 − MIA-efficacy).

Every metric has an array form (``*_from_probs`` / functions of ``probs``) so the evaluation
engine can reuse cached softmax (``output``) activations without a second forward pass, and a
model form that runs one forward pass (:func:`predict_probs`).
"""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy import stats
from sklearn.svm import SVC
from torch import nn
from torch.utils.data import Dataset, Subset

from sde_core.common.validation import as_index_vector, check_int
from sde_core.errors import InputError
from sde_core.learning.training import make_loader, resolve_device
from sde_core.stats.near_ties import ACTIVATION_RTOL, boundary_near_ties
from sde_core.stats.proportions import wilson_interval

__all__ = [
    "ATTACK_TIE_BAND",
    "MIA_FEATURES",
    "BehaviourCheck",
    "ClassicMetrics",
    "accuracy",
    "accuracy_from_probs",
    "behaviour_check",
    "classic_metrics",
    "entropy",
    "metrics_from_probs",
    "mia_asr",
    "mia_asr_from_probs",
    "mia_decisions_from_probs",
    "mia_feature",
    "modified_entropy",
    "newcombe_interval",
    "predict_probs",
    "top1_near_ties",
    "true_label_confidence",
    "welch_interval",
]

MIA_FEATURES = ("confidence", "entropy", "modified_entropy")
_EPS = 1e-30  # clip inside logs, as in Song & Mittal (2021)
#: Attack decisions with ``|decision_function| ≤`` this are near-ties (method §13). The SVC is
#: solved to libsvm's stopping tolerance (``tol = 1e-3`` on the KKT gap), not to float
#: precision: a 4e-7 change of its inputs (another CPU's softmax) moved the Fashion-MNIST demo's
#: decision values by up to 6e-3 (its intercept by 1.6e-2) and flipped 1 of 1,200 decisions
#: whose value was 5e-4. The band is 4× the largest measured change.
ATTACK_TIE_BAND = 0.025


@dataclass(frozen=True)
class ClassicMetrics:
    """Accuracies (top-1, %) on D_r, D_f, D_te and the MIA attack success rate on D_f (fraction).

    ``*_ties`` count the rows of each number whose decision is a near-tie (method §13): a top-1
    margin within float tolerance (the accuracies) or an attack decision value within
    :data:`ATTACK_TIE_BAND` of the SVC's boundary (``asr``). Another machine may flip those
    decisions, so the number may move by up to ``ties / rows``.
    """

    acc_r: float
    acc_f: float
    acc_te: float
    asr: float
    acc_r_ties: int = 0
    acc_f_ties: int = 0
    acc_te_ties: int = 0
    asr_ties: int = 0

    def to_dict(self) -> dict[str, float]:
        """The metrics as a plain dict with the method §10 keys."""
        return asdict(self)


def _check_probs(
    probs: object, labels: object, name: str = "probs"
) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``probs`` (n, C) rows of a distribution and integer ``labels`` (n,) in [0, C)."""
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels)
    if p.ndim != 2 or p.shape[1] < 2:
        raise InputError(f"{name} must have shape (n, C) with C >= 2 classes, got {p.shape}")
    if y.shape != (p.shape[0],):
        raise InputError(f"labels must have shape ({p.shape[0]},) to match {name}, got {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise InputError(f"labels must be integers, got dtype {y.dtype}")
    if not np.all(np.isfinite(p)) or p.min(initial=0.0) < 0:
        raise InputError(f"{name} has NaN, inf or negative entries: pass softmax probabilities")
    if p.size and not np.allclose(p.sum(axis=1), 1.0, atol=1e-3):
        raise InputError(f"rows of {name} do not sum to 1: apply softmax to the logits first")
    if y.size and (y.min() < 0 or y.max() >= p.shape[1]):
        raise InputError(f"labels must lie in [0, {p.shape[1]}), got {y.min()}..{y.max()}")
    return p, y.astype(np.int64)


def predict_probs(
    model: nn.Module,
    dataset: Dataset,
    indices: object = None,
    *,
    batch_size: int = 256,
    device: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Softmax outputs and labels of ``dataset`` (rows ``indices``, default all) in eval mode.

    ``device=None`` runs on the model's own device; a device string moves the model there.

    Returns:
        ``(probs, labels)``: float64 array of shape ``(n, C)`` and int64 array of shape ``(n,)``.
    """
    if not isinstance(model, nn.Module):
        raise InputError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if not isinstance(dataset, Sized):
        raise InputError(f"dataset must be a sized torch Dataset, got {type(dataset).__name__}")
    if indices is not None:
        dataset = Subset(dataset, as_index_vector(indices, len(dataset), "indices").tolist())
    if len(dataset) == 0:
        raise InputError("dataset is empty: nothing to predict")
    if device is None:
        dev = next((p.device for p in model.parameters()), torch.device("cpu"))
    else:
        dev = resolve_device(device)
        model.to(dev)
    was_training = model.training
    model.eval()
    probs, labels = [], []
    with torch.no_grad():
        for x, y in make_loader(dataset, batch_size, None, shuffle=False):
            logits = model(x.to(dev))
            probs.append(torch.softmax(logits.double(), dim=1).cpu().numpy())
            labels.append(torch.as_tensor(y).cpu().numpy())
    model.train(was_training)
    return np.concatenate(probs), np.concatenate(labels).astype(np.int64)


def accuracy_from_probs(probs: object, labels: object) -> float:
    """Top-1 accuracy in percent of ``probs`` (n, C) against ``labels`` (n,)."""
    p, y = _check_probs(probs, labels)
    if y.size == 0:
        raise InputError("accuracy of an empty set is undefined: give at least one row")
    return float(100.0 * np.mean(p.argmax(axis=1) == y))


def accuracy(
    model: nn.Module,
    dataset: Dataset,
    indices: object = None,
    *,
    batch_size: int = 256,
    device: str | None = None,
) -> float:
    """Top-1 accuracy in percent of ``model`` on ``dataset`` (rows ``indices``, default all)."""
    probs, labels = predict_probs(model, dataset, indices, batch_size=batch_size, device=device)
    return accuracy_from_probs(probs, labels)


def top1_near_ties(probs: object) -> int:
    """Rows of ``probs`` (n, C) whose top-1 class can change when each probability moves by
    :data:`~sde_core.stats.near_ties.ACTIVATION_RTOL` (top-1 minus top-2 within twice that)."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] < 2:
        return 0
    top = np.sort(p, axis=1)[:, -2:]
    return boundary_near_ties(top[:, 1] - top[:, 0], 2 * ACTIVATION_RTOL)


def true_label_confidence(probs: object, labels: object) -> np.ndarray:
    """Softmax probability of the true label, ``p_y``: shape ``(n,)``, values in [0, 1]."""
    p, y = _check_probs(probs, labels)
    return p[np.arange(y.size), y]


def entropy(probs: object) -> np.ndarray:
    """Prediction entropy ``−Σ_i p_i log p_i`` (nats) of each row of ``probs`` (n, C)."""
    p = np.asarray(probs, dtype=np.float64)
    _check_probs(p, np.zeros(p.shape[0] if p.ndim else 0, dtype=np.int64))
    return -np.sum(p * np.log(np.clip(p, _EPS, None)), axis=1)


def modified_entropy(probs: object, labels: object) -> np.ndarray:
    """Song & Mittal (2021) modified entropy, shape ``(n,)``.

    ``Mentr = −(1 − p_y)·log(p_y) − Σ_{i≠y} p_i·log(1 − p_i)`` (logs clipped at 1e-30).
    """
    p, y = _check_probs(probs, labels)
    rows = np.arange(y.size)
    p_y = p[rows, y]
    terms = -p * np.log(np.clip(1.0 - p, _EPS, None))
    terms[rows, y] = 0.0
    return -(1.0 - p_y) * np.log(np.clip(p_y, _EPS, None)) + terms.sum(axis=1)


def mia_feature(probs: object, labels: object, feature: str = "confidence") -> np.ndarray:
    """The attack feature of each row, shape ``(n,)``: see :data:`MIA_FEATURES`."""
    if feature == "confidence":
        return true_label_confidence(probs, labels)
    if feature == "entropy":
        _check_probs(probs, labels)
        return entropy(probs)
    if feature == "modified_entropy":
        return modified_entropy(probs, labels)
    raise InputError(f"unknown MIA feature {feature!r}; choose one of {list(MIA_FEATURES)}")


def _fit_attack(members: np.ndarray, non_members: np.ndarray) -> SVC:
    """The membership attack of method §6: ``SVC(C=3, gamma="auto", kernel="rbf")`` on the 1-D
    feature, members labelled 1 and non-members 0."""
    x = np.concatenate([members, non_members]).reshape(-1, 1)
    target = np.concatenate(
        [np.ones(members.size, dtype=np.int64), np.zeros(non_members.size, dtype=np.int64)]
    )
    return SVC(C=3, gamma="auto", kernel="rbf").fit(x, target)


def mia_decisions_from_probs(
    probs_train: object,
    y_train: object,
    probs_test: object,
    y_test: object,
    forget_idx: object,
    retain_idx: object,
    *,
    seed: int = 0,
    feature: str = "confidence",
) -> np.ndarray:
    """The confidence-based MIA's decision values on ``D_f`` (method §6), shape ``(|D_f|,)``.

    Shadow members: ``m = min(|D_r|, |D_te|)`` rows of ``D_r`` drawn without replacement with
    ``seed`` (label 1); shadow non-members: ``D_te`` (label 0; subsampled to m with the same RNG
    only when ``|D_te| > |D_r|``). Attack: ``SVC(C=3, gamma="auto", kernel="rbf")`` on the 1-D
    feature; a row is predicted "member" when its decision value is positive.

    Args:
        probs_train: softmax outputs on ``D_tr``, shape ``(n_train, C)``.
        y_train: labels of ``D_tr``, shape ``(n_train,)``.
        probs_test, y_test: the same for ``D_te``.
        forget_idx, retain_idx: row indices of ``D_f`` and ``D_r`` in ``probs_train``.
        seed: seed of the shadow-member sample.
        feature: ``"confidence"`` (default), ``"entropy"`` or ``"modified_entropy"``.
    """
    f_train = mia_feature(probs_train, y_train, feature)
    f_test = mia_feature(probs_test, y_test, feature)
    forget = as_index_vector(forget_idx, f_train.size, "forget_idx")
    retain = as_index_vector(retain_idx, f_train.size, "retain_idx")
    if f_test.size == 0:
        raise InputError("the test set is empty: the attack needs non-member examples")
    rng = np.random.default_rng(seed)
    m = min(retain.size, f_test.size)
    members = f_train[rng.choice(retain, size=m, replace=False)]
    non_members = f_test if f_test.size == m else f_test[rng.choice(f_test.size, m, replace=False)]
    attack = _fit_attack(members, non_members)
    return np.asarray(attack.decision_function(f_train[forget].reshape(-1, 1)), dtype=np.float64)


def mia_asr_from_probs(
    probs_train: object,
    y_train: object,
    probs_test: object,
    y_test: object,
    forget_idx: object,
    retain_idx: object,
    *,
    seed: int = 0,
    feature: str = "confidence",
) -> float:
    """Confidence-based MIA attack success rate on ``D_f`` (method §6), as a fraction in [0, 1]:
    the share of :func:`mia_decisions_from_probs` that are positive ("member")."""
    values = mia_decisions_from_probs(
        probs_train, y_train, probs_test, y_test, forget_idx, retain_idx, seed=seed,
        feature=feature,
    )  # fmt: skip
    return float(np.mean(values > 0))


def mia_asr(
    model: nn.Module,
    train_dataset: Dataset,
    test_dataset: Dataset,
    forget_idx: object,
    retain_idx: object,
    *,
    seed: int = 0,
    feature: str = "confidence",
    batch_size: int = 256,
    device: str | None = None,
) -> float:
    """:func:`mia_asr_from_probs` with the softmax outputs of ``model`` (eval mode)."""
    p_tr, y_tr = predict_probs(model, train_dataset, batch_size=batch_size, device=device)
    p_te, y_te = predict_probs(model, test_dataset, batch_size=batch_size, device=device)
    return mia_asr_from_probs(
        p_tr, y_tr, p_te, y_te, forget_idx, retain_idx, seed=seed, feature=feature
    )


def metrics_from_probs(
    probs_train: object,
    y_train: object,
    probs_test: object,
    y_test: object,
    forget_idx: object,
    retain_idx: object,
    *,
    seed: int = 0,
    feature: str = "confidence",
) -> ClassicMetrics:
    """All classic metrics from precomputed softmax outputs (shapes: :func:`mia_asr_from_probs`)."""
    p_tr, y_tr = _check_probs(probs_train, y_train, "probs_train")
    forget = as_index_vector(forget_idx, y_tr.size, "forget_idx")
    retain = as_index_vector(retain_idx, y_tr.size, "retain_idx")
    attack = mia_decisions_from_probs(
        p_tr, y_tr, probs_test, y_test, forget, retain, seed=seed, feature=feature
    )
    return ClassicMetrics(
        acc_r=accuracy_from_probs(p_tr[retain], y_tr[retain]),
        acc_f=accuracy_from_probs(p_tr[forget], y_tr[forget]),
        acc_te=accuracy_from_probs(probs_test, y_test),
        asr=float(np.mean(attack > 0)),
        acc_r_ties=top1_near_ties(p_tr[retain]),
        acc_f_ties=top1_near_ties(p_tr[forget]),
        acc_te_ties=top1_near_ties(probs_test),
        asr_ties=boundary_near_ties(attack, ATTACK_TIE_BAND),
    )


def classic_metrics(
    model: nn.Module,
    train_dataset: Dataset,
    test_dataset: Dataset,
    forget_idx: object,
    retain_idx: object = None,
    *,
    seed: int = 0,
    feature: str = "confidence",
    batch_size: int = 256,
    device: str | None = None,
) -> ClassicMetrics:
    """Acc_r, Acc_f, Acc_te and ASR of ``model`` with one forward pass over D_tr and D_te.

    ``retain_idx`` defaults to every index of ``train_dataset`` not in ``forget_idx``.
    """
    p_tr, y_tr = predict_probs(model, train_dataset, batch_size=batch_size, device=device)
    p_te, y_te = predict_probs(model, test_dataset, batch_size=batch_size, device=device)
    forget = as_index_vector(forget_idx, y_tr.size, "forget_idx")
    retain = (
        np.setdiff1d(np.arange(y_tr.size), forget)
        if retain_idx is None
        else as_index_vector(retain_idx, y_tr.size, "retain_idx")
    )
    return metrics_from_probs(p_tr, y_tr, p_te, y_te, forget, retain, seed=seed, feature=feature)


# ----------------------------------------------------------------------------- behaviour check


@dataclass(frozen=True)
class BehaviourCheck:
    """What the model still does on D_f compared with unseen data D_te (method §9, "Behaviour").

    Every gap is ``D_f − D_te`` with a 95% interval; a model that fits D_f better than unseen
    data has a positive accuracy gap, a negative loss gap and a positive MIA gap.

    Attributes:
        acc_gap, acc_gap_lo, acc_gap_hi: top-1 accuracy on D_f minus on D_te, in percentage
            points (Newcombe's hybrid-score interval for two independent proportions).
        loss_gap, loss_gap_lo, loss_gap_hi: mean cross-entropy on D_f minus on D_te, in nats
            (Welch t interval).
        mia_forget, mia_unseen: share of D_f and of held-out unseen rows that a membership
            attack calls "member" (fractions; the attack of method §6 fitted on a shadow sample
            of D_r against one half of D_te and applied to the other half).
        mia_gap_lo, mia_gap_hi: Newcombe interval of ``mia_forget − mia_unseen`` (fractions).
        mia_ties: attack decisions (on D_f and the held-out rows) within
            :data:`ATTACK_TIE_BAND` of the SVC's boundary: near-ties (method §13).
    """

    acc_gap: float
    acc_gap_lo: float
    acc_gap_hi: float
    loss_gap: float
    loss_gap_lo: float
    loss_gap_hi: float
    mia_forget: float
    mia_unseen: float
    mia_gap_lo: float
    mia_gap_hi: float
    mia_ties: int = 0

    def fits_forget_set_better(self) -> bool:
        """True when the accuracy gap's 95% interval lies above 0: the model still classifies
        D_f significantly better than data it never saw."""
        return bool(self.acc_gap_lo > 0)

    def to_dict(self) -> dict[str, float]:
        """The numbers as a plain dict (the ``models`` table's columns)."""
        return asdict(self)


def newcombe_interval(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float]:
    """95% interval of ``k1/n1 − k2/n2`` for independent proportions (Newcombe 1998, method 10:
    the hybrid score interval built from the two Wilson intervals).

    Examples:
        >>> # Newcombe (1998), example (a)
        >>> tuple(round(v, 4) for v in newcombe_interval(56, 70, 48, 80))
        (0.0524, 0.3339)
    """
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_interval(k1, n1)
    l2, u2 = wilson_interval(k2, n2)
    d = p1 - p2
    lo = d - float(np.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2))
    hi = d + float(np.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))
    return max(-1.0, lo), min(1.0, hi)


def welch_interval(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Mean difference ``x̄ − ȳ`` of two independent samples with its 95% Welch t interval:
    ``(difference, lo, hi)``."""
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = float(np.sqrt(vx + vy))
    diff = float(x.mean() - y.mean())
    if se == 0:
        return diff, diff, diff
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    half = float(stats.t.ppf(0.975, df)) * se
    return diff, diff - half, diff + half


def behaviour_check(
    probs_train: object,
    y_train: object,
    probs_test: object,
    y_test: object,
    forget_idx: object,
    retain_idx: object,
    *,
    seed: int = 0,
) -> BehaviourCheck:
    """Accuracy, loss and membership gaps of D_f against unseen data, with 95% intervals.

    Args:
        probs_train, y_train: softmax outputs ``(n_train, C)`` and labels on D_tr.
        probs_test, y_test: the same on D_te (at least 4 rows).
        forget_idx, retain_idx: row indices of D_f and D_r.
        seed: seed of the attack's shadow sample and of the D_te halves.
    """
    p_tr, y_tr = _check_probs(probs_train, y_train, "probs_train")
    p_te, y_te = _check_probs(probs_test, y_test, "probs_test")
    forget = as_index_vector(forget_idx, y_tr.size, "forget_idx")
    retain = as_index_vector(retain_idx, y_tr.size, "retain_idx")
    if forget.size < 2 or y_te.size < 4 or retain.size < 2:
        raise InputError(
            "the behaviour check needs at least 2 forget rows, 2 retained rows and 4 test rows"
        )
    right_f = p_tr[forget].argmax(axis=1) == y_tr[forget]
    right_te = p_te.argmax(axis=1) == y_te
    k_f, k_te = int(right_f.sum()), int(right_te.sum())
    lo, hi = newcombe_interval(k_f, forget.size, k_te, y_te.size)
    acc_gap = 100.0 * (k_f / forget.size - k_te / y_te.size)
    conf_f = true_label_confidence(p_tr[forget], y_tr[forget])
    conf_te = true_label_confidence(p_te, y_te)
    loss = welch_interval(
        -np.log(np.clip(conf_f, _EPS, None)), -np.log(np.clip(conf_te, _EPS, None))
    )
    rng = np.random.default_rng([seed, 0xB1])
    perm = rng.permutation(y_te.size)
    fit_rows, held_rows = perm[: y_te.size // 2], perm[y_te.size // 2 :]
    m = min(retain.size, fit_rows.size)
    members = true_label_confidence(p_tr, y_tr)[rng.choice(retain, size=m, replace=False)]
    non_members = conf_te[fit_rows[:m]]
    attack = _fit_attack(members, non_members)
    value_f = attack.decision_function(conf_f.reshape(-1, 1))
    value_un = attack.decision_function(conf_te[held_rows].reshape(-1, 1))
    called_f, called_un = int(np.sum(value_f > 0)), int(np.sum(value_un > 0))
    mia_lo, mia_hi = newcombe_interval(called_f, forget.size, called_un, held_rows.size)
    return BehaviourCheck(
        acc_gap=acc_gap,
        acc_gap_lo=100.0 * lo,
        acc_gap_hi=100.0 * hi,
        loss_gap=loss[0],
        loss_gap_lo=loss[1],
        loss_gap_hi=loss[2],
        mia_forget=called_f / forget.size,
        mia_unseen=called_un / held_rows.size,
        mia_gap_lo=mia_lo,
        mia_gap_hi=mia_hi,
        mia_ties=boundary_near_ties(np.concatenate([value_f, value_un]), ATTACK_TIE_BAND),
    )
