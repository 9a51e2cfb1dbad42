"""The EDM sampler and the nearest-neighbour copy test, against closed forms: the exact ODE
solution for Gaussian data, and the ideal denoiser of a finite training set (whose samples are
known to be copies of its images)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sde_core.errors import TrainingError
from sde_core.inputs.denoisers import EDMDenoiser
from sde_core.learning.diffusion_sampling import (
    COPY_RATIO,
    SIGMA_MAX,
    SIGMA_MIN,
    copy_test,
    edm_sample,
    edm_sigmas,
)


def test_sigmas_follow_the_karras_schedule():
    sigmas = edm_sigmas(18)
    assert sigmas.shape == (19,) and float(sigmas[-1]) == 0.0
    assert float(sigmas[0]) == pytest.approx(SIGMA_MAX) and float(sigmas[-2]) == pytest.approx(
        SIGMA_MIN
    )
    assert bool((sigmas[:-1].diff() < 0).all())
    # the midpoint in σ^(1/ρ) is the mean of the end points' σ^(1/ρ)
    mid = edm_sigmas(3)[1].item()
    assert mid ** (1 / 7) == pytest.approx((SIGMA_MAX ** (1 / 7) + SIGMA_MIN ** (1 / 7)) / 2)
    with pytest.raises(TrainingError, match="sigma_min < sigma_max"):
        edm_sigmas(5, sigma_min=1.0, sigma_max=0.5)


@pytest.mark.parametrize(("solver", "order"), [("heun", 2), ("euler", 1)])
def test_gaussian_data_converge_to_the_exact_ode_solution_at_the_solvers_order(solver, order):
    # data N(0, s²): D(x; σ) = x·s²/(s² + σ²), and the flow maps x(σ_max) to
    # x(σ_max)·√(s² + σ_min²)/√(s² + σ_max²)
    s = 0.5

    def ideal(x, sigma):
        return x * s**2 / (s**2 + sigma.double().view(-1, 1) ** 2)

    start = torch.randn((64, 3), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    exact = start * SIGMA_MAX * np.sqrt(s**2 + SIGMA_MIN**2) / np.sqrt(s**2 + SIGMA_MAX**2)
    errors = []
    for steps in (40, 80):
        out = edm_sample(ideal, 64, (3,), steps=steps, solver=solver, seed=3)
        errors.append((out.double() - exact).abs().max().item() / exact.abs().max().item())
    assert errors[0] / errors[1] == pytest.approx(2**order, rel=0.15), errors
    assert errors[1] < (0.005 if solver == "heun" else 0.05), errors


def _ideal_denoiser(images: torch.Tensor):
    """The exact denoiser of the empirical distribution of ``images``: a posterior mean."""
    flat = images.reshape(images.shape[0], -1).double()

    def denoise(x, sigma):
        xf = x.reshape(x.shape[0], -1).double()
        logits = -(torch.cdist(xf, flat) ** 2) / (2 * sigma.double().view(-1, 1) ** 2)
        return (logits.softmax(1) @ flat).reshape(x.shape).float()

    return denoise


def test_the_ideal_denoiser_of_a_training_set_generates_copies():
    train = torch.randn((6, 1, 4, 4), generator=torch.Generator().manual_seed(0))
    samples = edm_sample(_ideal_denoiser(train), 40, (1, 4, 4), steps=18, seed=1)
    test = copy_test(samples, train)
    assert test.copies == 40 and test.share == 1.0
    assert (test.d1 < 1e-2).all()  # exact reproductions
    assert test.interval()[0] > 0.9
    assert set(test.nearest) <= set(range(6)) and len(set(test.nearest)) > 1


def test_copy_test_on_hand_made_distances():
    train = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    samples = np.array([[0.5, 0.0], [5.0, 0.0], [3.0, 0.0], [0.0, 9.0]])
    test = copy_test(samples, train)
    assert list(test.nearest) == [0, 0, 0, 2]
    assert test.d1 == pytest.approx([0.5, 5.0, 3.0, 1.0])
    assert test.d2 == pytest.approx([9.5, 5.0, 7.0, 9.0])
    # 0.5 < 9.5/3: a copy; 5 vs 5/3 and 3 vs 7/3: not; 1 < 9/3: a copy
    assert list(test.is_copy) == [True, False, False, True]
    assert test.ratio == COPY_RATIO and test.share == 0.5
    assert test.share_among(np.array([2])) == 0.25
    lo, hi = test.interval()
    assert 0 < lo < 0.5 < hi < 1


def test_copy_test_refuses_bad_input():
    with pytest.raises(TrainingError, match="two reference images"):
        copy_test(np.zeros((2, 3)), np.zeros((1, 3)))
    with pytest.raises(TrainingError, match="one size"):
        copy_test(np.zeros((2, 3)), np.zeros((4, 5)))
    with pytest.raises(TrainingError, match="unknown solver"):
        edm_sample(lambda x, s: x, 2, (1,), solver="rk4")


def test_sampling_a_network_is_seeded_and_independent_of_the_batch():
    torch.manual_seed(0)
    model = EDMDenoiser(1, (4, 8), 8, image_size=8)
    model.train()
    a = edm_sample(model, 5, (1, 8, 8), steps=4, seed=7, batch_size=2)
    b = edm_sample(model, 5, (1, 8, 8), steps=4, seed=7, batch_size=5)
    assert model.training  # its mode is restored
    assert a.shape == (5, 1, 8, 8) and torch.allclose(a, b, atol=1e-5)
    assert not torch.allclose(a, edm_sample(model, 5, (1, 8, 8), steps=4, seed=8))
