"""Class-wise forgetting judged against unseen rows of the same class (method §16).

When D_f's class mix differs from the reference pools' (``--forget-class``: D_f is every
training row of class c; :mod:`sde_core.stats.class_mix`), the paper's OTR and the calibrated
verdicts compare one-class targets with mixed-class references and measure the class, so they
are withheld. This module gives the verdict instead:

* :func:`class_wise_row` — computed where a model's activations are (:class:`~.run.ModelRun`'s
  evaluation, so the workspace jobs, the dashboard's session and its streamed runs alike): the
  class-matched permutation test (:func:`sde_core.stats.class_matched.matched_permutation_test`)
  of D_f's rows against D_te's rows of the same classes, its power check — the same test of
  D_r's rows against D_te's rows of up to :data:`POWER_CLASSES` *other* classes, which says in
  which direction training moves the score within a class and whether the test can see it —
  and the class-matched accuracy on D_f against D_te's rows of its classes. Stored as the
  ``class_wise`` table of each model's unit.
* :func:`judged_models` — **the one step every path that builds an EvaluationResult passes
  through** (``evaluate_workspace``, ``stored_result``, ``session_result``, the session's
  ``evaluate``): given the dataset's labels and the forget set (:class:`ForgetClasses`), it
  leaves a random forget set's rows alone; for a class-wise one it withholds the paper's and the
  calibrated verdicts with the class-mix numbers and sets ``class_wise_verdict`` (read first by
  :func:`sde_core.viz.verdicts.verdict_label`) from the class-matched test — or withholds the
  whole verdict, with the reason, when that test is missing, underpowered or points the other
  way (no "over-unlearned" call: there is no class-matched in-training reference).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sde_core.pipeline.evaluation.accuracy_gate import chance_level, withheld_at_chance
from sde_core.stats.class_matched import MatchedTest, matched_permutation_test
from sde_core.stats.class_mix import class_mix_reason

__all__ = [
    "CLASS_WISE_COLUMNS",
    "CLASS_WISE_TABLE",
    "MAX_SUBSET",
    "PERMUTATIONS",
    "POWER_CLASSES",
    "ForgetClasses",
    "class_wise_json",
    "class_wise_row",
    "class_wise_table",
    "class_wise_tables",
    "judged_models",
]

#: The store table (one row per model) that carries the class-matched test.
CLASS_WISE_TABLE = "class_wise"
#: Largest subset size of the class-matched test (the evaluation's n when smaller; at most a
#: quarter of the smallest pool it draws from).
MAX_SUBSET = 100
#: Subsets per side and replicate, and splits per subset.
SUBSETS, MAX_SPLITS = 10, 20
#: Permutations M of each test (smallest p-value 1/(M + 1) = 0.005 < α = 0.01).
PERMUTATIONS = 199
#: Other classes the power check tests (training rows vs unseen rows of each).
POWER_CLASSES = 4
#: Columns :func:`judged_models` adds to a class-wise workspace's ``models`` rows.
CLASS_WISE_COLUMNS = (
    "class_wise_verdict",
    "class_wise_sentence",
    "class_wise_p",
    "class_wise_p_opposite",
    "class_wise_z",
    "class_wise_direction",
    "class_wise_power",
    "class_wise_acc_forget",
    "class_wise_acc_unseen",
)

_MEMO: weakref.WeakKeyDictionary[Any, dict[str, Any] | None] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class ForgetClasses:
    """What the shared step needs of the dataset: its labels and the forget set.

    Attributes:
        train_labels, test_labels: integer class labels of D_tr and D_te.
        forget: D_f's row indices in D_tr. num_classes: C. class_names: for messages.
    """

    train_labels: np.ndarray
    test_labels: np.ndarray
    forget: np.ndarray
    num_classes: int
    class_names: tuple[str, ...] | None = None

    @classmethod
    def of(cls, bundle: Any, forget: np.ndarray) -> ForgetClasses | None:
        """From a loaded dataset bundle (None without integer class labels: text, images to
        denoise)."""
        train = getattr(bundle, "train_labels", None)
        test = getattr(bundle, "test_labels", None)
        if train is None or test is None:
            return None
        train, test = np.asarray(train).reshape(-1), np.asarray(test).reshape(-1)
        if not (np.issubdtype(train.dtype, np.integer) and np.issubdtype(test.dtype, np.integer)):
            return None
        names = getattr(bundle, "class_names", None)
        return cls(
            train, test, np.asarray(forget, dtype=np.int64).reshape(-1),
            int(getattr(bundle, "num_classes", 0) or _classes(train, test)),
            tuple(str(n) for n in names) if names else None,
        )  # fmt: skip

    def mix_reason(self) -> str:
        """The class-mix test's sentence when D_f's classes differ from the pools' (else "")."""
        return class_mix_reason(
            self.train_labels, self.test_labels, self.forget, self.num_classes,
            list(self.class_names) if self.class_names else None,
        )  # fmt: skip

    def name(self, k: int) -> str:
        """Class k's name."""
        names = self.class_names or ()
        return names[k] if 0 <= k < len(names) else str(k)


def _classes(train: np.ndarray, test: np.ndarray) -> int:
    return int(max(train.max(initial=0), test.max(initial=0))) + 1


def _ints(text: Any) -> list[int]:
    return [int(v) for v in str(text or "").split(",") if v.strip()]


def class_wise_table(evaluations: Sequence[Any]) -> pd.DataFrame:
    """The ``class_wise`` rows of several :class:`~.model_evaluation.ModelEvaluation` (may be
    empty)."""
    rows = [r for ev in evaluations for r in getattr(ev, "tables", {}).get(CLASS_WISE_TABLE, [])]
    return pd.DataFrame(rows)


def class_wise_tables(run: Any, complete: bool = True) -> dict[str, list[dict[str, Any]]]:
    """``{"class_wise": [row]}`` of a :class:`~.run.ModelRun` with class labels ({} without):
    what its :class:`~.model_evaluation.ModelEvaluation` carries to the store. Every row
    records D_r's chance level (for :func:`~.accuracy_gate.withheld_at_chance`) and the
    class-mix reason ("" for a random forget set, which needs nothing more); a class-wise run's
    row adds the class-matched test once the run is ``complete`` (before, it says the run has
    not finished, so a streamed partial result is withheld too)."""
    labels = _labels(run)
    if labels is None:
        return {}
    level = chance_level(labels[0], np.asarray(run.plan.forget, dtype=np.int64))
    base: dict[str, Any] = {"model": run.inputs.name, "mix_reason": _mix_reason(run)}
    if level is not None:
        base.update(chance=level[0], n_retain=level[1])
    if not base["mix_reason"]:
        return {CLASS_WISE_TABLE: [base]}
    if not complete:
        return {CLASS_WISE_TABLE: [{**base, "reason": "the evaluation has not finished"}]}
    return {CLASS_WISE_TABLE: [{**(class_wise_row(run) or {}), **base}]}


_MIX: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _labels(run: Any) -> tuple[np.ndarray, np.ndarray] | None:
    inputs = run.inputs
    if inputs.train_labels is None or inputs.test_labels is None:
        return None
    train = np.asarray(inputs.train_labels).reshape(-1)
    test = np.asarray(inputs.test_labels).reshape(-1)
    if not (np.issubdtype(train.dtype, np.integer) and np.issubdtype(test.dtype, np.integer)):
        return None
    return train, test


def _mix_reason(run: Any) -> str:
    """The class-mix reason of a run's labels and forget set ("" for a random forget set)."""
    if run not in _MIX:
        labels = _labels(run)
        _MIX[run] = "" if labels is None else ForgetClasses(
            labels[0], labels[1], np.asarray(run.plan.forget, dtype=np.int64),
            _classes(*labels),
        ).mix_reason()  # fmt: skip
    return _MIX[run]


def class_wise_row(run: Any) -> dict[str, Any] | None:
    """The class-matched test of one :class:`~.run.ModelRun` (None for a random forget set or
    data without class labels); computed once per run.

    The row holds the test's numbers, or ``reason`` saying why there is no test (too few rows
    of the forgotten class in D_te, no activations of the classes needed)."""
    if run in _MEMO:
        return _MEMO[run]
    _MEMO[run] = found = _compute(run)
    return found


def _compute(run: Any) -> dict[str, Any] | None:
    from sde_core.learning.metrics import newcombe_interval

    inputs, settings = run.inputs, run.settings
    labels, mix = _labels(run), _mix_reason(run)
    if labels is None or not mix:
        return None
    train, test = labels
    forget = np.asarray(run.plan.forget, dtype=np.int64)
    classes = ForgetClasses(train, test, forget, _classes(train, test))
    offset = train.size
    mine = np.unique(train[forget])
    unseen = np.flatnonzero(np.isin(test, mine))
    row: dict[str, Any] = {
        "model": inputs.name, "mix_reason": mix, "classes": ",".join(map(str, mine)),
        "alpha": float(settings.alpha), "reason": "",
    }  # fmt: skip
    probs_tr, probs_te = inputs.train_probs, inputs.test_probs
    if probs_tr is not None and probs_te is not None and unseen.size:
        k1 = int(np.sum(np.argmax(probs_tr[forget], axis=1) == train[forget]))
        k2 = int(np.sum(np.argmax(probs_te[unseen], axis=1) == test[unseen]))
        lo, hi = newcombe_interval(k1, forget.size, k2, unseen.size)
        row.update(acc_forget=k1 / forget.size, n_forget=int(forget.size),
                   acc_unseen=k2 / unseen.size, n_unseen=int(unseen.size),
                   gap_lo=float(lo), gap_hi=float(hi))  # fmt: skip
    n = min(int(settings.subset_size), MAX_SUBSET, min(forget.size, unseen.size) // 4)
    if n < 10:
        row["reason"] = (
            f"the class-matched test needs at least 40 rows of the forgotten class(es) in D_f "
            f"and in D_te; they hold {forget.size} and {unseen.size}"
        )
        return row
    retain = np.setdiff1d(np.arange(train.size), forget)
    others = [
        k for k in range(classes.num_classes)
        if k not in mine and min(np.sum(train[retain] == k), np.sum(test == k)) >= 2 * n
    ]  # fmt: skip
    rng = np.random.default_rng([int(settings.seed), 0xC1A5])
    power = sorted(rng.choice(others, min(POWER_CLASSES, len(others)), replace=False).tolist())
    if len(power) < 2:
        row["reason"] = (
            "the power check needs two other classes with at least "
            f"{2 * n} rows in D_r and in D_te; the data have {len(others)}"
        )
        return row
    acts = np.vstack([inputs.train_acts, inputs.test_acts])
    common = {
        "subset_size": n, "subsets": SUBSETS, "splits": min(int(settings.splits), MAX_SPLITS),
        "permutations": PERMUTATIONS, "sigma": float(run.sigma),
        "estimator": settings.estimator, "device": "cpu",
    }  # fmt: skip

    def test_of(a: np.ndarray, b_test: np.ndarray, seed: int) -> MatchedTest:
        return matched_permutation_test(
            acts, a, b_test + offset, train[a], test[b_test], seed=seed, **common
        )

    checks = [
        test_of(retain[train[retain] == k], np.flatnonzero(test == k), settings.seed + 1 + k)
        for k in power
    ]
    direction = -1 if float(np.median([c.z for c in checks])) < 0 else 1
    alpha = float(settings.alpha)
    main = test_of(forget, unseen, settings.seed)
    row.update(
        subset_size=n, subsets=SUBSETS, splits=common["splits"], permutations=PERMUTATIONS,
        statistic=main.statistic, z=main.z, p_in=main.p_toward(direction),
        p_opposite=main.p_toward(-direction), direction=direction,
        power_classes=",".join(map(str, power)),
        power_z=",".join(f"{c.z:.3f}" for c in checks),
        power_separated=sum(c.p_toward(direction) < alpha for c in checks),
        power_tested=len(checks),
    )  # fmt: skip
    return row


def _number(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    try:
        return float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _decide(
    cw: Mapping[str, Any], name: str, classes: ForgetClasses | None
) -> tuple[str, str, str]:
    """``(label, sentence or reason, conflict)`` of one model's class-matched test: label ""
    withholds (the second item is then the reason)."""
    if cw.get("reason"):
        return "", f"no class-matched test: {cw['reason']}", ""
    alpha = _number(cw, "alpha")
    ks = _ints(cw.get("classes"))
    said = ", ".join((classes.name(k) if classes else str(k)) for k in ks)
    sep, tested = int(_number(cw, "power_separated")), int(_number(cw, "power_tested"))
    p_in, p_opp, z = _number(cw, "p_in"), _number(cw, "p_opposite"), _number(cw, "z")
    way = "lower" if _number(cw, "direction") < 0 else "higher"
    power = (
        f"training makes the score {way} within a class: D_r vs D_te rows of {sep} of "
        f"{tested} other classes differ so at p < {alpha:g}"
    )
    if 4 * sep < 3 * tested:
        why = f"the class-matched test has no power here: {power}, fewer than three quarters"
        return "", f"{why}, so unseen-like forget rows would say nothing (method §16)", ""
    numbers = (
        f"forget rows vs unseen rows of class {said}: z = {z:+.2f}, one-sided permutation "
        f"p = {p_in:.3g} toward training, {p_opp:.3g} the other way ({power})"
    )
    if p_in < alpha:
        text = (
            f"{name} has NOT forgotten class {said}: its forget rows still differ from unseen "
            f"rows of that class in the direction training moves them ({numbers})."
        )
        return "not forgotten", text, ""
    if p_opp < alpha:
        why = (
            f"its forget rows differ from unseen rows of class {said} in the direction "
            f"opposite to training ({numbers}); with no in-training reference of that class "
            "this is neither forgetting nor a measurable over-unlearning (method §16)"
        )
        return "", why, ""
    conflict = ""
    lo = _number(cw, "gap_lo")
    if lo > 0:
        conflict = (
            f"class-matched behaviour: {100 * _number(cw, 'acc_forget'):.1f}% accuracy on D_f "
            f"against {100 * _number(cw, 'acc_unseen'):.1f}% on unseen rows of class {said} "
            f"(gap interval {100 * lo:.2f} to {100 * _number(cw, 'gap_hi'):.2f} points, "
            "above 0) while the class-matched test finds nothing"
        )
    text = (
        f"{name} treats class {said} like data it never saw: its forget rows do not differ "
        f"from unseen rows of that class ({numbers})."
    )
    return "consistent with forgetting", text, conflict


def judged_models(
    models: pd.DataFrame,
    class_wise: pd.DataFrame | None,
    classes: ForgetClasses | None = None,
) -> pd.DataFrame:
    """**The one step** between an evaluation's rows and its result (module docstring).

    Args:
        models: the ``models`` table. class_wise: the ``class_wise`` table (may be empty or
            None: a result stored before the test existed, or a partial run).
        classes: the dataset's labels and the forget set; None takes the class-mix reason the
            ``class_wise`` rows recorded (a session's result, built from the evaluations alone).

    A reference model at chance on D_r withholds every verdict first
    (:func:`~.accuracy_gate.withheld_at_chance`, with ``classes`` only).

    Returns:
        ``models`` itself for a random forget set (and no model at chance), else a copy:
        ``inconclusive_reason`` led by the class-mix reason (the paper's and the calibrated
        verdicts withheld, their numbers kept), ``evidence_conflict`` replaced by the
        class-matched behaviour's, and the :data:`CLASS_WISE_COLUMNS`.
    """
    cw = class_wise if class_wise is not None else pd.DataFrame()
    recorded: dict[str, dict[str, Any]] = (
        {str(r["model"]): {str(k): v for k, v in r.items()} for r in cw.to_dict("records")}
        if "model" in cw
        else {}
    )
    level = chance_level(classes.train_labels, classes.forget) if classes is not None else None
    if level is None:  # the level the evaluations recorded
        noted = [r for r in recorded.values() if not math.isnan(_number(r, "chance"))]
        level = (_number(noted[0], "chance"), int(_number(noted[0], "n_retain"))) if noted else None
    models = withheld_at_chance(models, level)  # a reference model at chance (issue 40)
    if classes is not None:
        mix = classes.mix_reason()
    else:
        mix = next((str(r["mix_reason"]) for r in recorded.values() if r.get("mix_reason")), "")
    if models.empty or not mix or "inconclusive_reason" not in models:
        return models
    out = models.copy()
    withheld = mix
    reasons: list[str] = []
    conflicts: list[str] = []
    extra: dict[str, list[Any]] = {c: [] for c in CLASS_WISE_COLUMNS}
    for row in out.to_dict("records"):
        name = str(row.get("name"))
        found = recorded.get(name)
        if found is None:
            label, text, conflict = (
                "",
                (
                    "the class-matched test (method §16) is not in this result (stored before the "
                    "test existed, or the evaluation stopped early): evaluate again — with "
                    "--no-store, or after removing the workspace's results store, for a stored run"
                ),
                "",
            )
        else:
            label, text, conflict = _decide(found, name, classes)
        old = str(row.get("inconclusive_reason") or "")
        why = withheld if label else f"{withheld}; {text}"
        reasons.append(f"{why}; {old}" if old else why)
        conflicts.append(conflict)
        extra["class_wise_verdict"].append(label)
        extra["class_wise_sentence"].append(text if label else "")
        got: Mapping[str, Any] = found or {}
        for col, key in (("class_wise_p", "p_in"), ("class_wise_p_opposite", "p_opposite"),
                         ("class_wise_z", "z"), ("class_wise_direction", "direction"),
                         ("class_wise_acc_forget", "acc_forget"),
                         ("class_wise_acc_unseen", "acc_unseen")):  # fmt: skip
            extra[col].append(_number(got, key))
        tested = _number(got, "power_tested")
        extra["class_wise_power"].append(
            "" if math.isnan(tested) else f"{int(_number(got, 'power_separated'))}/{int(tested)}"
        )
    out["inconclusive_reason"] = reasons
    if "evidence_conflict" in out:
        out["evidence_conflict"] = conflicts
    for col, values in extra.items():
        out[col] = values
    return out


def class_wise_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """The class-matched test's entries of one model's JSON document ({} for a random forget
    set); NaN numbers become null."""
    if "class_wise_verdict" not in row:
        return {}

    def num(key: str) -> float | None:
        v = _number(row, key)
        return None if math.isnan(v) else v

    return {
        "class_wise": {
            "verdict": row.get("class_wise_verdict") or None,
            "sentence": row.get("class_wise_sentence") or None,
            "p_toward_training": num("class_wise_p"),
            "p_opposite": num("class_wise_p_opposite"),
            "z": num("class_wise_z"),
            "training_direction": num("class_wise_direction"),
            "power": row.get("class_wise_power") or None,
            "accuracy_forget": num("class_wise_acc_forget"),
            "accuracy_unseen_same_class": num("class_wise_acc_unseen"),
        }
    }
