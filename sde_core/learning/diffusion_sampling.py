"""Sampling from an EDM denoiser and the nearest-neighbour copy test of memorisation.

:func:`edm_sample` is the deterministic sampler of Karras et al. (2022, Algorithm 1 with
``S_churn = 0``): the probability-flow ODE ``dx/dσ = (x − D(x; σ)) / σ`` integrated from
``x ~ N(0, σ_max²·I)`` over the noise levels of :func:`edm_sigmas`,
``σ_i = (σ_max^{1/ρ} + i/(N−1)·(σ_min^{1/ρ} − σ_max^{1/ρ}))^ρ`` (then 0), with Heun's
second-order correction on every step but the last (``solver="heun"``) or Euler steps only
(``solver="euler"``). The starting noise comes from one seeded CPU generator, so a seed gives
the same samples on any device and batch size.

:func:`copy_test` is the per-sample memorisation test of the diffusion-memorisation literature
(Carlini et al. 2023; Somepalli et al. 2023; Gu et al. 2025): a generated sample is a **copy**
when its ℓ2 distance to the nearest training image is below ``ratio`` (1/3) of its distance to
the second nearest. The share of copies among a model's samples measures how much of what it
generates is a training image reproduced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from sde_core.common.validation import check_int
from sde_core.errors import TrainingError
from sde_core.stats.proportions import wilson_interval

__all__ = [
    "COPY_RATIO",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "SOLVERS",
    "CopyTest",
    "copy_test",
    "edm_sample",
    "edm_sigmas",
]

#: Smallest and largest noise level of the sampler (Karras et al. 2022, Table 1, "EDM").
SIGMA_MIN = 0.002
SIGMA_MAX = 80.0
#: The time-discretisation exponent ρ of the sampler's noise levels.
RHO = 7.0
#: A sample copies a training image when d(nearest) < COPY_RATIO · d(second nearest).
COPY_RATIO = 1.0 / 3.0
#: The ODE solvers of :func:`edm_sample`.
SOLVERS = ("heun", "euler")

Denoise = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``denoise(x, sigma)``: the denoised estimate of ``x`` ``(N, ...)`` at the levels ``sigma``
``(N,)``."""


def edm_sigmas(
    steps: int, sigma_min: float = SIGMA_MIN, sigma_max: float = SIGMA_MAX, rho: float = RHO
) -> torch.Tensor:
    """The ``steps`` noise levels of the EDM sampler, descending from ``sigma_max`` to
    ``sigma_min``, followed by 0: a float64 tensor ``(steps + 1,)``.

    Raises:
        TrainingError: fewer than 2 steps, or not ``0 < sigma_min < sigma_max``.
    """
    steps = check_int(steps, "steps", minimum=2, error=TrainingError)
    if not (0 < sigma_min < sigma_max and np.isfinite(sigma_max) and rho > 0):
        raise TrainingError(
            f"the sampler needs 0 < sigma_min < sigma_max and rho > 0; got {sigma_min}, "
            f"{sigma_max}, {rho}"
        )
    i = torch.arange(steps, dtype=torch.float64)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    sigmas = (hi + i / (steps - 1) * (lo - hi)) ** rho
    return torch.cat([sigmas, torch.zeros(1, dtype=torch.float64)])


def edm_sample(
    denoise: Denoise | torch.nn.Module,
    count: int,
    shape: tuple[int, ...],
    *,
    steps: int = 18,
    solver: str = "heun",
    seed: int = 0,
    sigma_min: float = SIGMA_MIN,
    sigma_max: float = SIGMA_MAX,
    batch_size: int = 256,
) -> torch.Tensor:
    """``count`` samples ``(count, *shape)`` (float32, CPU) of the deterministic EDM sampler.

    Args:
        denoise: ``D(x; σ)`` (an :class:`~sde_core.inputs.denoisers.EDMDenoiser` or any callable
            ``(x, sigma (N,)) -> denoised x``); a module is run in eval mode without gradients
            (its train/eval mode is restored).
        count: number of samples.
        shape: one sample's shape, e.g. ``(1, 16, 16)``.
        steps: noise levels of :func:`edm_sigmas` (18 in Karras et al. for CIFAR-10: 35
            evaluations of D with Heun).
        solver: ``"heun"`` (second order) or ``"euler"``.
        seed: seed of the starting noise (sample i's noise does not depend on ``batch_size``).
        sigma_min, sigma_max: the range of noise levels.
        batch_size: samples denoised together.

    Raises:
        TrainingError: an unknown solver or invalid sizes.
    """
    if solver not in SOLVERS:
        raise TrainingError(f"unknown solver {solver!r}; use one of {list(SOLVERS)}")
    count = check_int(count, "count", minimum=1, error=TrainingError)
    batch_size = check_int(batch_size, "batch_size", minimum=1, error=TrainingError)
    sigmas = edm_sigmas(steps, sigma_min, sigma_max)
    gen = torch.Generator().manual_seed(int(seed))
    noise = torch.randn((count, *shape), generator=gen, dtype=torch.float64)
    module = denoise if isinstance(denoise, torch.nn.Module) else None
    device = next(module.parameters()).device if module is not None else torch.device("cpu")
    was_training = module.training if module is not None else False
    if module is not None:
        module.eval()
    out = torch.empty((count, *shape), dtype=torch.float32)
    try:
        with torch.inference_mode():
            for start in range(0, count, batch_size):
                x = noise[start : start + batch_size] * sigmas[0]
                out[start : start + x.shape[0]] = _integrate(denoise, x, sigmas, solver, device)
    finally:
        if module is not None:
            module.train(was_training)
    return out


def _integrate(
    denoise: Denoise | torch.nn.Module,
    x: torch.Tensor,
    sigmas: torch.Tensor,
    solver: str,
    device: torch.device,
) -> torch.Tensor:
    """Integrate one batch (float64 state; the denoiser sees float32 on its device)."""

    def d(x_now: torch.Tensor, sigma: float) -> torch.Tensor:
        level = torch.full((x_now.shape[0],), sigma, dtype=torch.float32, device=device)
        denoised = denoise(x_now.to(device, torch.float32), level)
        return (x_now - denoised.to("cpu", torch.float64)) / sigma

    for i in range(len(sigmas) - 1):
        s_cur, s_next = float(sigmas[i]), float(sigmas[i + 1])
        slope = d(x, s_cur)
        x_next = x + (s_next - s_cur) * slope
        if solver == "heun" and s_next > 0:
            x_next = x + (s_next - s_cur) * 0.5 * (slope + d(x_next, s_next))
        x = x_next
    return x.to(torch.float32)


@dataclass(frozen=True)
class CopyTest:
    """The nearest-neighbour copy test of a set of generated samples.

    Attributes:
        nearest: index (into the reference images) of each sample's nearest image ``(S,)``.
        d1, d2: ℓ2 distance of each sample to its nearest and second-nearest image ``(S,)``.
        is_copy: ``d1 < ratio·d2`` ``(S,)``.
        ratio: the threshold (:data:`COPY_RATIO`).
    """

    nearest: np.ndarray
    d1: np.ndarray
    d2: np.ndarray
    is_copy: np.ndarray
    ratio: float

    @property
    def copies(self) -> int:
        """Number of samples that copy a reference image."""
        return int(self.is_copy.sum())

    @property
    def share(self) -> float:
        """Share of samples that copy a reference image."""
        return self.copies / self.is_copy.size

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Wilson interval of :attr:`share` (the samples are independent draws)."""
        return wilson_interval(self.copies, int(self.is_copy.size), confidence)

    def share_among(self, rows: np.ndarray) -> float:
        """Share of samples that copy one of the reference images ``rows``."""
        return float((self.is_copy & np.isin(self.nearest, rows)).mean())


def copy_test(
    samples: np.ndarray | torch.Tensor,
    images: np.ndarray | torch.Tensor,
    *,
    ratio: float = COPY_RATIO,
    chunk: int = 512,
) -> CopyTest:
    """Which ``samples`` copy one of ``images``: nearest and second-nearest ℓ2 distances
    (pixels flattened, float64), a copy when ``d1 < ratio·d2``.

    Raises:
        TrainingError: fewer than two images, mismatched pixel counts, or ratio not in (0, 1].
    """
    s = _flat(samples)
    ref = _flat(images)
    if ref.shape[0] < 2:
        raise TrainingError(f"the copy test needs at least two reference images, got {len(ref)}")
    if s.shape[1] != ref.shape[1]:
        raise TrainingError(
            f"samples have {s.shape[1]} pixels but the reference images {ref.shape[1]}; "
            "compare images of one size"
        )
    if not 0 < ratio <= 1:
        raise TrainingError(f"the copy ratio must be in (0, 1], got {ratio}")
    ref_sq = (ref**2).sum(1)
    nearest = np.empty(s.shape[0], dtype=np.int64)
    d1 = np.empty(s.shape[0])
    d2 = np.empty(s.shape[0])
    for start in range(0, s.shape[0], chunk):
        part = s[start : start + chunk]
        sq = np.maximum((part**2).sum(1)[:, None] + ref_sq[None, :] - 2 * part @ ref.T, 0.0)
        two = np.argpartition(sq, 1, axis=1)[:, :2]
        vals = np.take_along_axis(sq, two, axis=1)
        order = np.argsort(vals, axis=1, kind="stable")
        two = np.take_along_axis(two, order, axis=1)
        vals = np.take_along_axis(vals, order, axis=1)
        stop = start + part.shape[0]
        nearest[start:stop] = two[:, 0]
        d1[start:stop] = np.sqrt(vals[:, 0])
        d2[start:stop] = np.sqrt(vals[:, 1])
    return CopyTest(nearest, d1, d2, d1 < ratio * d2, float(ratio))


def _flat(x: np.ndarray | torch.Tensor) -> np.ndarray:
    array = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    return array.reshape(array.shape[0], -1).astype(np.float64)
