"""The EDM training loss of a denoiser and its denoising loss at fixed noise levels.

:func:`edm_loss` is the training objective of Karras et al. (2022, Eq. 2 and Table 1, "EDM"):
per image a noise level ``ln σ ~ N(P_mean, P_std²)`` (``P_mean = −1.2``, ``P_std = 1.2``), a
noisy input ``y + σ·n`` with ``n ~ N(0, I)``, and the squared error of ``D(y + σ·n; σ)`` against
``y`` weighted by ``λ(σ) = (σ² + σ_d²) / (σ·σ_d)²`` (which, with the preconditioning of
:class:`~sde_core.inputs.denoisers.EDMDenoiser`, gives the network an effective target of unit
variance at every σ). The noise is drawn from torch's global generator, which
:func:`~sde_core.learning.training.train` seeds and saves in its resume file.

:func:`denoising_losses` measures a trained denoiser's memorisation (method §14): the mean
squared error of ``D(y + σ_t·ε(y); σ_t)`` against ``y`` per sample at fixed levels σ_t, with
the fixed per-sample probe noise ε(y) that SDE's representation uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from sde_core.errors import TrainingError
from sde_core.inputs.denoisers import EDMDenoiser, probe_noise

__all__ = ["P_MEAN", "P_STD", "denoising_losses", "edm_loss"]

#: Mean of ln σ of the EDM training noise distribution (Karras et al. 2022, Table 1).
P_MEAN = -1.2
#: Standard deviation of ln σ of the EDM training noise distribution.
P_STD = 1.2


def edm_loss(
    model: nn.Module, y: torch.Tensor, *, p_mean: float = P_MEAN, p_std: float = P_STD
) -> torch.Tensor:
    """The EDM loss of a batch of clean images ``y`` ``(N, C, H, W)``: a scalar, the mean over
    images and pixels of ``λ(σ)·(D(y + σ·n; σ) − y)²`` with ``ln σ ~ N(p_mean, p_std²)``.

    Raises:
        TrainingError: ``model`` is not an :class:`EDMDenoiser`.
    """
    if not isinstance(model, EDMDenoiser):
        raise TrainingError(
            f"the EDM loss trains a denoiser (architecture 'edm_unet'), not a "
            f"{type(model).__name__}"
        )
    n = y.shape[0]
    sigma = (torch.randn(n, device=y.device) * p_std + p_mean).exp()
    noisy = y + torch.randn_like(y) * sigma.view(-1, 1, 1, 1)
    sd = model.sigma_data
    weight = (sigma**2 + sd**2) / (sigma * sd) ** 2
    err = (model(noisy, sigma) - y) ** 2
    return (weight.view(-1, 1, 1, 1) * err).mean()


def denoising_losses(
    model: nn.Module,
    dataset: Dataset,
    indices: Sequence[int] | np.ndarray,
    levels: Sequence[float],
    *,
    batch_size: int = 256,
) -> dict[float, np.ndarray]:
    """Per-sample denoising loss ``mean_pixels (D(y + σ_t·ε(y); σ_t) − y)²`` at each level.

    Args:
        model: an :class:`EDMDenoiser` (left in its train/eval mode afterwards).
        dataset: yields ``(image, label)``; images ``(C, H, W)`` in the model's data range.
        indices: rows of ``dataset``.
        levels: noise levels σ_t (> 0).

    Returns:
        ``{σ_t: float64 array (len(indices),)}``.

    Raises:
        TrainingError: ``model`` is not a denoiser, or a level is not positive.
    """
    if not isinstance(model, EDMDenoiser):
        raise TrainingError(f"denoising losses need a denoiser, got {type(model).__name__}")
    if not levels or any(not float(v) > 0 for v in levels):
        raise TrainingError(f"noise levels must be positive numbers, got {list(levels)!r}")
    rows = np.asarray(indices, dtype=np.int64)
    device = next(model.parameters()).device
    out = {float(v): np.empty(rows.size) for v in levels}
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, rows.size, batch_size):
                chunk = rows[start : start + batch_size]
                y = torch.stack([torch.as_tensor(dataset[int(i)][0]) for i in chunk]).to(device)
                eps = probe_noise(y)
                for level in out:
                    err = (model(y + level * eps, level) - y) ** 2
                    out[level][start : start + chunk.size] = err.flatten(1).mean(1).cpu().numpy()
    finally:
        model.train(was_training)
    return out
