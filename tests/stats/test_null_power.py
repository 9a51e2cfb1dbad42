"""The null check's power (``stats/null_power.py``) against an independent reference: seeded
binomial simulations judged by SciPy's exact (Clopper–Pearson) interval."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from sde_core.stats.null_power import null_check_power


@pytest.mark.parametrize(("m", "one_sided"), [(40, 0.975), (50, 0.99), (267, 0.99)])
def test_power_matches_a_simulation_with_scipys_exact_interval(m: int, one_sided: float) -> None:
    p = null_check_power(m, level=0.05, true_rate=0.10, one_sided=one_sided)
    confidence = 2 * one_sided - 1  # a two-sided interval whose lower end is that one-sided bound
    fires = {
        k: stats.binomtest(k, m).proportion_ci(confidence, method="exact").low > 0.05
        for k in range(m + 1)
    }
    assert p.first_call == min(k for k, f in fires.items() if f)
    calls = np.random.default_rng(0).binomial(m, 0.10, size=20_000)
    simulated = float(np.mean([fires[int(k)] for k in calls]))
    assert p.power == pytest.approx(simulated, abs=0.01)


def test_the_defaults_cannot_detect_twice_the_level() -> None:
    """40 unseen subsets (20 pairs): the gate catches a false-call rate of 2α = 10% one time in
    ten; at the level itself it fires at most at its own level."""
    assert null_check_power(40, one_sided=0.99).power < 0.11
    assert null_check_power(40, true_rate=0.05, one_sided=0.99).power <= 0.01
    assert null_check_power(0).power == 0.0
