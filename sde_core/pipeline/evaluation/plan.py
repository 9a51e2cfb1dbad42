"""Subset planning (method §5, §9, §12): every subset of an evaluation, drawn before any model.

An evaluation makes B independent *draws* (``settings.draws``). Each draw, with its own random
generator seeded from ``(seed, draw)``:

1. splits each reference pool at random into two halves — the retained set D_r and the test set
   D_te: the *reference half* feeds S_IT / S_OOT, the *control half* everything that is
   compared with them by the paper's rule (controlled F1 subsets, baseline subsets, the null
   check's pairs), so no subset ever shares a row with the S_IT / S_OOT it is judged against;
2. draws S_IT (D_r reference half), S_OOT (D_te reference half) and the R panel subsets per side,
   each an independent uniform subset of the *whole* pool (D_r or D_te): a control subset (a
   uniform subset of a random half, drawn independently of the panel) is then one more draw of
   the same scheme, exchangeable with the panel members, so the calibrated rank p-values are
   exact for it (method §9);
3. takes its share of the T targets (each drawn from D_f without replacement, independently of
   the others) and of the T/2 + T/2 controlled subsets (positives from the D_r control half;
   negatives from D_f for a model retrained without it, from the D_te control half otherwise);
4. draws its share of the null check's pairs: two disjoint subsets of the D_te control half.

A precision design sizes the null check once B is fixed (:func:`null_top_up`, method §9): each
draw adds pairs of the D_te control half and training subsets of the D_r control half from a
generator of their own, so the subsets above are the same whatever the size.

The targets are *partitioned* among the draws (not shared), so each draw is an independent
replicate of the whole evaluation and the spread between draws carries both the target and the
reference variance (method §12). When T is too small for B draws (each draw needs a target and a
control of each class) the plan uses ``T // 2`` draws and says so in :attr:`SubsetPlan.notes`;
when the D_te control half cannot hold a disjoint pair the null check is skipped, also with a
note. Pools too small for the references themselves are refused with the numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from sde_core.common.hashing import array_sha256, stable_hash
from sde_core.errors import SettingsError
from sde_core.pipeline.settings import EvalSettings
from sde_core.stats.sampling import disjoint_pairs, independent_subsets, random_halves

__all__ = [
    "F1_NEGATIVE_POOLS",
    "ROLES_WITH_FORGET_NEGATIVES",
    "DrawPlan",
    "F1Negatives",
    "HGroup",
    "SubsetPlan",
    "default_f1_negatives",
    "draw_subsets",
    "group_seed",
    "null_top_up",
    "null_top_up_counts",
]

F1Negatives = Literal["forget", "test"]
#: Pools the controlled F1's out-of-training subsets can come from (method §5).
F1_NEGATIVE_POOLS: tuple[str, ...] = ("forget", "test")
#: Roles whose controlled F1 uses D_f as the out-of-training pool (a model retrained without
#: D_f, method §5); every other role uses D_te.
ROLES_WITH_FORGET_NEGATIVES = frozenset({"retrained"})

#: Stream number of each kind of H computation within a draw (part of its split seed).
_GROUP_CODES = {
    "core_train": 0,
    "core_test": 1,
    "panel_train": 2,
    "panel_test": 3,
    "controls_pos": 4,
    "controls_neg": 5,
    "null": 6,
    "null_extra": 7,
    "null_train": 8,
}


def default_f1_negatives(role: str) -> F1Negatives:
    """The F1 negative pool method §5 prescribes for a model role."""
    return "forget" if role in ROLES_WITH_FORGET_NEGATIVES else "test"


def group_seed(seed: int, draw: int, group: str) -> int:
    """The split seed of one group of subsets of one draw (stable across runs and processes)."""
    code = _GROUP_CODES[group]
    return int(np.random.SeedSequence([int(seed), int(draw), code]).generate_state(1)[0])


@dataclass(frozen=True)
class HGroup:
    """Subsets whose split-half HSIC is computed in one batch (one cached stage unit).

    Attributes:
        name: the group kind (``"core_train"``, ``"panel_test"``, ...).
        draw: the draw it belongs to.
        side: ``"train"`` (rows of D_tr) or ``"test"`` (rows of D_te).
        rows: ``(s, n)`` row indices.
        seed: split seed of the batch (:func:`group_seed`).
    """

    name: str
    draw: int
    side: Literal["train", "test"]
    rows: np.ndarray
    seed: int


@dataclass(frozen=True)
class DrawPlan:
    """The subsets of one draw (row indices, int64; ``n`` = subset size).

    Attributes:
        index: the draw number b (0-based).
        it_ref: ``(n,)`` S_IT ⊂ reference half of D_r. oot_ref: ``(n,)`` S_OOT ⊂ reference half
            of D_te.
        it_panel: ``(R, n)`` ⊂ D_r. oot_panel: ``(R, n)`` ⊂ D_te (each member an independent
            uniform subset of the whole pool, method §9).
        targets: ``(t_b, n)`` ⊂ D_f. target_index: ``(t_b,)`` their numbers among all T targets.
        f1_pos: ``(c_b, n)`` ⊂ control half of D_r. f1_neg_forget: ``(c_b, n)`` ⊂ D_f.
        f1_neg_test: ``(c_b, n)`` ⊂ control half of D_te.
        null_pairs: ``(p_b, 2, n)`` pairs of disjoint subsets of the control half of D_te.
        baseline_controls: k_b, the first k_b positives and negatives the MMD/W2 baselines score.
        retain_halves, test_halves: ``(reference half, control half)`` row indices.
    """

    index: int
    it_ref: np.ndarray
    oot_ref: np.ndarray
    it_panel: np.ndarray
    oot_panel: np.ndarray
    targets: np.ndarray
    target_index: np.ndarray
    f1_pos: np.ndarray
    f1_neg_forget: np.ndarray
    f1_neg_test: np.ndarray
    null_pairs: np.ndarray
    baseline_controls: int
    retain_halves: tuple[np.ndarray, np.ndarray]
    test_halves: tuple[np.ndarray, np.ndarray]

    def f1_negatives(self, pool: F1Negatives) -> np.ndarray:
        """The ``(c_b, n)`` negatives of the given pool."""
        return self.f1_neg_forget if pool == "forget" else self.f1_neg_test

    def groups(self, seed: int, f1_negatives: F1Negatives) -> dict[str, HGroup]:
        """The H batches of this draw, keyed by group kind (null only when it has pairs)."""
        n = self.it_ref.size
        spec: list[tuple[str, Literal["train", "test"], np.ndarray]] = [
            ("core_train", "train", np.vstack([self.it_ref[None, :], self.targets])),
            ("core_test", "test", self.oot_ref[None, :]),
            ("panel_train", "train", self.it_panel),
            ("panel_test", "test", self.oot_panel),
            ("controls_pos", "train", self.f1_pos),
            (
                "controls_neg",
                "train" if f1_negatives == "forget" else "test",
                self.f1_negatives(f1_negatives),
            ),
        ]
        if len(self.null_pairs):
            spec.append(("null", "test", self.null_pairs.reshape(-1, n)))
        return {
            name: HGroup(name, self.index, side, rows, group_seed(seed, self.index, name))
            for name, side, rows in spec
        }


@dataclass(frozen=True)
class SubsetPlan:
    """Every subset of one evaluation, shared by all models (so they are comparable).

    Train-side subsets index D_tr, test-side subsets index D_te.

    Attributes:
        draws: the independent draws (:class:`DrawPlan`), ``len(draws)`` = the draws used.
        forget, retain: the sorted D_f and D_r indices. n_test: |D_te|.
        subset_size: n.
        notes: what was reduced and why (fewer draws, no null check), in plain words.
    """

    draws: tuple[DrawPlan, ...]
    forget: np.ndarray
    retain: np.ndarray
    n_test: int
    subset_size: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    # Concatenations over the draws (the arrays of earlier, single-draw plans).

    @property
    def targets(self) -> np.ndarray:
        """``(T, n)`` every target, draw by draw."""
        return np.vstack([d.targets for d in self.draws])

    @property
    def it_ref(self) -> np.ndarray:
        """``(B, n)`` S_IT of every draw."""
        return np.stack([d.it_ref for d in self.draws])

    @property
    def oot_ref(self) -> np.ndarray:
        """``(B, n)`` S_OOT of every draw."""
        return np.stack([d.oot_ref for d in self.draws])

    @property
    def it_panel(self) -> np.ndarray:
        """``(B·R, n)`` the IT panels, draw by draw."""
        return np.vstack([d.it_panel for d in self.draws])

    @property
    def oot_panel(self) -> np.ndarray:
        """``(B·R, n)`` the OOT panels, draw by draw."""
        return np.vstack([d.oot_panel for d in self.draws])

    @property
    def f1_pos(self) -> np.ndarray:
        """``(T/2, n)`` every controlled positive, draw by draw."""
        return np.vstack([d.f1_pos for d in self.draws])

    @property
    def f1_neg_forget(self) -> np.ndarray:
        """``(T/2, n)`` every controlled negative from D_f, draw by draw."""
        return np.vstack([d.f1_neg_forget for d in self.draws])

    @property
    def f1_neg_test(self) -> np.ndarray:
        """``(T/2, n)`` every controlled negative from D_te, draw by draw."""
        return np.vstack([d.f1_neg_test for d in self.draws])

    def reference_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(train rows, test rows)`` of every draw's S_IT and S_OOT: what the median σ rule
        looks at."""
        return np.concatenate([d.it_ref for d in self.draws]), np.concatenate(
            [d.oot_ref for d in self.draws]
        )

    def fingerprint(self) -> str:
        """A content hash of every subset (equal plans, equal fingerprints)."""
        parts = []
        for d in self.draws:
            for arr in (d.it_ref, d.oot_ref, d.it_panel, d.oot_panel, d.targets, d.f1_pos,
                        d.f1_neg_forget, d.f1_neg_test, d.null_pairs):  # fmt: skip
                parts.append(array_sha256(np.asarray(arr, dtype=np.int64)))
            parts.append(str(d.baseline_controls))
        return stable_hash(parts)


def null_top_up_counts(draw: DrawPlan, n_draws: int, settings: EvalSettings) -> tuple[int, int]:
    """``(pairs, training subsets)`` draw ``draw`` adds to the null check of a precision design
    of ``n_draws`` draws (method §9), so that the draws judge at least ``settings.null_size``
    unseen subsets (``⌈N/(2B)⌉`` pairs each) and as many training subsets (``⌈N/B⌉`` each, the
    draw's controlled positives counted). Both 0 for the fixed design, ``null_size = 0`` or
    when the D_te control half cannot hold a disjoint pair (no null check at all)."""
    n = draw.it_ref.size
    size = settings.null_size if settings.precision > 0 else 0
    if size <= 0 or n_draws <= 0 or draw.test_halves[1].size < 2 * n:
        return 0, 0
    pairs = max(0, -(-size // (2 * n_draws)) - len(draw.null_pairs))
    return pairs, max(0, -(-size // n_draws) - len(draw.f1_pos))


def null_top_up(
    draw: DrawPlan, n_draws: int, settings: EvalSettings
) -> tuple[np.ndarray, np.ndarray]:
    """The subsets :func:`null_top_up_counts` counts: ``(extra pairs (e, 2, n) of the D_te
    control half, extra training subsets (x, n) of the D_r control half)``. Each comes from a
    generator of its own, seeded from ``(seed, draw)``, and a larger count extends a smaller
    one's subsets (never redraws them)."""
    n = draw.it_ref.size
    pairs, train = null_top_up_counts(draw, n_draws, settings)
    rng_pairs = np.random.default_rng([settings.seed, 0x5DE, draw.index, 0x4E1])
    rng_train = np.random.default_rng([settings.seed, 0x5DE, draw.index, 0x4E2])
    return (
        disjoint_pairs(draw.test_halves[1], n, pairs, rng_pairs),
        independent_subsets(draw.retain_halves[1], n, train, rng_train),
    )


def _check_pools(n: int, n_forget: int, n_retain: int, n_test: int) -> None:
    if n_forget < n:
        raise SettingsError(
            f"subset size {n} is larger than the forget set D_f ({n_forget} rows): choose a "
            f"subset size of at most {n_forget}"
        )
    for name, size in (("retained set D_r", n_retain), ("test set D_te", n_test)):
        if size // 2 < n:
            raise SettingsError(
                f"subset size {n} needs two disjoint halves of at least {n} rows of the {name} "
                f"(one for the references and panels, one for the controls judged against "
                f"them), but it has {size} rows: choose a subset size of at most "
                f"{min(n_forget, n_retain // 2, n_test // 2)}"
            )


def _shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal counts (larger counts first)."""
    return [len(a) for a in np.array_split(np.arange(total), parts)]


def draw_subsets(
    n_train: int, n_test: int, forget: Sequence[int] | np.ndarray, settings: EvalSettings
) -> SubsetPlan:
    """Draw every subset of an evaluation reproducibly from ``settings.seed`` (module docstring).

    Raises:
        SettingsError: D_f is smaller than n, or D_r or D_te has fewer than 2n rows.
    """
    f = np.unique(np.asarray(forget, dtype=np.int64))
    retain = np.setdiff1d(np.arange(n_train, dtype=np.int64), f)
    n = settings.subset_size
    _check_pools(n, f.size, retain.size, n_test)
    notes: list[str] = []
    n_draws = min(settings.draws, settings.targets // 2)
    if n_draws < settings.draws:
        notes.append(
            f"{n_draws} draw{'s' if n_draws > 1 else ''} instead of {settings.draws}: with "
            f"T = {settings.targets} targets each draw needs at least two targets and one "
            "control of each class (raise targets to use more draws)"
        )
    if n_draws == 1:
        notes.append(
            "one draw: its intervals treat the targets as independent trials and cannot include "
            "the variance of the references (use at least two draws)"
        )
    test_pool = np.arange(n_test, dtype=np.int64)
    control_half = n_test // 2
    pairs_possible = control_half >= 2 * n
    if not pairs_possible:
        notes.append(
            f"no null check: it needs two disjoint subsets of n = {n} rows outside the panel, "
            f"and the control half of D_te has {control_half} rows (choose n ≤ "
            f"{control_half // 2} for a null check)"
        )
    half = settings.targets // 2
    k_baseline = settings.baseline_targets // 2
    if k_baseline > half:
        notes.append(
            f"the baselines score {half} controlled subsets per class, not "
            f"{k_baseline}: there are only T/2 = {half} (raise targets)"
        )
    targets_per = _shares(settings.targets, n_draws)
    controls_per = _shares(half, n_draws)
    pairs_per = _shares(settings.null_pairs, n_draws) if pairs_possible else [0] * n_draws
    baseline_per = _shares(min(k_baseline, half), n_draws)
    if settings.precision > 0:  # method §15: up to max_draws draws of the fixed design's size
        n_draws = settings.max_draws
        targets_per = [targets_per[-1]] * n_draws
        controls_per = [controls_per[-1]] * n_draws
        pairs_per = [pairs_per[-1]] * n_draws
        baseline_per = baseline_per + [0] * (n_draws - len(baseline_per))
    draws = []
    start = 0
    for b in range(n_draws):
        rng = np.random.default_rng([settings.seed, 0x5DE, b])
        r_ref, r_ctl = random_halves(retain, rng)
        t_ref, t_ctl = random_halves(test_pool, rng)
        c = controls_per[b]
        pairs = disjoint_pairs(t_ctl, n, pairs_per[b], rng)
        draws.append(
            DrawPlan(
                index=b,
                it_ref=rng.choice(r_ref, n, replace=False).astype(np.int64),
                oot_ref=rng.choice(t_ref, n, replace=False).astype(np.int64),
                it_panel=independent_subsets(retain, n, settings.panel_size, rng),
                oot_panel=independent_subsets(test_pool, n, settings.panel_size, rng),
                targets=independent_subsets(f, n, targets_per[b], rng),
                target_index=np.arange(start, start + targets_per[b], dtype=np.int64),
                f1_pos=independent_subsets(r_ctl, n, c, rng),
                f1_neg_forget=independent_subsets(f, n, c, rng),
                f1_neg_test=independent_subsets(t_ctl, n, c, rng),
                null_pairs=pairs,
                baseline_controls=min(baseline_per[b], c),
                retain_halves=(r_ref, r_ctl),
                test_halves=(t_ref, t_ctl),
            )
        )
        start += targets_per[b]
    return SubsetPlan(
        draws=tuple(draws),
        forget=f,
        retain=retain,
        n_test=int(n_test),
        subset_size=n,
        notes=tuple(notes),
    )
