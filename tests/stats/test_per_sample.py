"""Per-sample evidence (method §18) on subsets whose members' positions are known: the
estimator is unbiased for each sample's own position under the linear model, its intervals
cover at their level, the draw centring removes what a draw shares, and the AUC matches a
count of pairs done here."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from sde_core.errors import InputError, SettingsError
from sde_core.pipeline.evaluation.per_sample import sample_evidence, target_positions
from sde_core.stats.per_sample import auc_with_interval, per_sample_evidence


def _subsets(pool: np.ndarray, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    return np.stack([rng.choice(pool, n, replace=False) for _ in range(k)])


def _linear(c: dict[int, float], members: np.ndarray, noise: float, rng) -> np.ndarray:
    values = np.array([[c[int(i)] for i in row] for row in members])
    return values.mean(axis=1) + rng.normal(0.0, noise, len(members))


def test_the_estimate_is_each_samples_own_position_and_its_interval_covers():
    rng = np.random.default_rng(0)
    pool = np.arange(100, 160)  # N = 60 rows, not starting at 0
    c = {int(i): float(i % 2) for i in pool}  # odd rows remembered (1), even forgotten (0)
    estimates, covered = [], []
    for _ in range(40):
        members = _subsets(pool, 15, 400, rng)
        found = per_sample_evidence(members, _linear(c, members, 0.02, rng), pool)
        assert np.array_equal(found.rows, pool) and found.subset_size == 15
        truth = np.array([c[int(i)] for i in found.rows])
        estimates.append(found.estimate - truth)
        covered.append((found.low <= truth) & (truth <= found.high))
    bias = np.mean(estimates, axis=0)
    assert np.abs(bias).max() < 0.1 and abs(bias.mean()) < 0.01  # unbiased, sample by sample
    assert 0.92 <= np.mean(covered) <= 0.98  # 95% intervals, 2,400 of them


def test_a_draws_shared_offset_cancels():
    rng = np.random.default_rng(1)
    pool = np.arange(40)
    c = {int(i): float(i < 20) for i in pool}
    members = _subsets(pool, 10, 300, rng)
    z = _linear(c, members, 0.01, rng)
    draws = np.repeat(np.arange(3), 100)
    shifted = z + np.array([0.0, 5.0, -3.0])[draws]  # each draw's references moved
    plain = per_sample_evidence(members, z, pool, groups=draws)
    centred = per_sample_evidence(members, shifted, pool, groups=draws)
    assert np.allclose(plain.estimate - plain.estimate.mean(),
                       centred.estimate - centred.estimate.mean())  # fmt: skip
    ignored = per_sample_evidence(members, shifted, pool)
    assert np.mean(np.abs(ignored.estimate - plain.estimate)) > np.mean(
        np.abs(centred.estimate - plain.estimate - (centred.estimate - plain.estimate).mean())
    )


def test_auc_is_the_share_of_pairs_won_with_ties_half():
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 6, 30).astype(float), rng.integers(0, 5, 25).astype(float)
    pairs = [1.0 if a > b else 0.5 if a == b else 0.0 for a, b in itertools.product(x, y)]
    auc, lo, hi = auc_with_interval(x, y)
    assert auc == pytest.approx(np.mean(pairs), abs=1e-12)
    assert lo < auc < hi and lo >= 0 and hi <= 1
    assert auc_with_interval(np.ones(5), np.zeros(5))[0] == 1.0


def test_bad_inputs_are_named():
    pool = np.arange(10)
    members = np.array([[0, 1], [2, 3], [4, 5]])
    with pytest.raises(InputError, match="positions has 2 values for 3 subsets"):
        per_sample_evidence(members, np.zeros(2), pool)
    with pytest.raises(InputError, match="row of the pool"):
        per_sample_evidence(np.array([[0, 11], [2, 3]]), np.zeros(2), pool)
    with pytest.raises(InputError, match="twice"):
        per_sample_evidence(np.array([[0, 0], [2, 3]]), np.zeros(2), pool)
    with pytest.raises(InputError, match="integer"):
        per_sample_evidence(members.astype(float), np.zeros(3), pool)


class _Result:
    """The parts of an evaluation result :func:`sample_evidence` reads."""

    def __init__(self, subsets: pd.DataFrame) -> None:
        self.subsets = subsets


def _result(targets: np.ndarray, positions: np.ndarray, draws: np.ndarray) -> _Result:
    """Targets scored ``oot + position · gap`` on panels whose medians are ``oot``/``oot+gap``
    (a different scale per draw)."""
    rows = []
    for d in np.unique(draws):
        oot, gap = 2.0 + d, 0.5 * (d + 1)
        for kind, value in (("it_panel", oot + gap), ("oot_panel", oot)):
            rows += [{"model": "m", "kind": kind, "draw": d, "index": j, "score": value + e}
                     for j, e in enumerate((-0.1, 0.0, 0.1))]  # fmt: skip
        for j in np.flatnonzero(draws == d):
            score = oot + positions[j] * gap
            rows.append({"model": "m", "kind": "target", "draw": d, "index": j, "score": score})
    return _Result(pd.DataFrame(rows))


def test_positions_are_placed_on_each_draws_panels_and_attributed_to_members():
    rng = np.random.default_rng(3)
    forget = np.arange(500, 560)
    c = {int(i): 1.0 if i < 530 else 0.0 for i in forget}
    targets = _subsets(forget, 12, 600, rng)
    z = _linear(c, targets, 0.01, rng)
    draws = np.repeat(np.arange(4), 150)
    result = _result(targets, z, draws)
    placed = target_positions(result, "m")
    assert np.allclose(placed["position"].to_numpy(), z)  # every draw's own scale undone
    table = sample_evidence(result, "m", targets, forget)
    assert list(table["rank"]) == list(range(1, 61))
    remembered = table["row"] < 530
    auc = auc_with_interval(table.loc[remembered, "evidence"], table.loc[~remembered, "evidence"])
    assert auc[1] > 0.9
    with pytest.raises(SettingsError, match="no scored targets for 'x'"):
        sample_evidence(result, "x", targets, forget)
    with pytest.raises(SettingsError, match="pass the evaluation's own targets"):
        sample_evidence(result, "m", targets[:10], forget)
