"""EU-k: exact unlearning of the last k layers (Goel et al. 2022, "Towards adversarial
evaluation of machine unlearning"; method §7).

The model's last ``k`` weight layers (``nn.Linear`` and ``nn.Conv*``, in the order the model
registers its modules — for a sequential network, its forward order) are re-initialised and
trained from scratch on ``D_r`` with the original's recipe; every parameter registered before
the first of them stays frozen, and so do the running statistics of a frozen batch-norm layer.
Every layer from the first re-learnt one on (a batch-norm layer between them too) starts
afresh. ``k`` = all weight layers is Retrain; ``k = 1`` re-learns the classifier head on the
original's features. The strength knob is ``k``: the more layers are re-learnt, the less of D_f's
influence can remain in the features below them.

:mod:`sde_core.learning.unlearning` registers it as ``eu_k`` (its parameters, the recipe and
the copy of the original are prepared there).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import Dataset

from sde_core.errors import TrainingError
from sde_core.learning.training import TrainConfig, train

__all__ = ["last_weight_layers", "relearn_last_layers"]

_WEIGHT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def last_weight_layers(model: nn.Module, k: int) -> list[str]:
    """The names of ``model``'s last ``k`` weight layers in registration order.

    Raises:
        TrainingError: the model has fewer than ``k`` weight layers.
    """
    names = [n for n, m in model.named_modules() if isinstance(m, _WEIGHT_LAYERS)]
    if k > len(names):
        raise TrainingError(
            f"EU-k: k={k} but the model has {len(names)} weight layers (Linear/Conv); "
            f"use k between 1 and {len(names)}"
        )
    return names[len(names) - k :]


def relearn_last_layers(
    model: nn.Module, retain: Dataset, config: TrainConfig, k: int
) -> tuple[nn.Module, list[str], float]:
    """EU-k on ``model`` (modified in place: pass a copy): re-initialise its last ``k`` weight
    layers and every layer after the first of them, train them on ``retain`` with ``config``,
    the layers below frozen. Returns the model (every parameter trainable again), the names
    of the re-learnt weight layers and the final training loss."""
    layers = last_weight_layers(model, k)
    torch.manual_seed(config.seed)
    first, learnt = layers[0], False
    frozen_norms: list[tuple[_BatchNorm, float | None, torch.Tensor | None]] = []
    for name, module in model.named_modules():
        learnt = learnt or name == first
        reset = getattr(module, "reset_parameters", None)
        if learnt and callable(reset):
            reset()  # from the first re-learnt layer on, every layer starts afresh
        if not learnt and isinstance(module, _BatchNorm):
            tracked = module.num_batches_tracked
            count = None if tracked is None else tracked.clone()
            frozen_norms.append((module, module.momentum, count))
            module.momentum = 0.0  # running statistics unchanged: (1 − 0)·running + 0·batch
        for p in module.parameters(recurse=False):
            p.requires_grad_(learnt)
    out = train(model, retain, config)
    for norm, momentum, count in frozen_norms:
        norm.momentum = momentum
        tracked = norm.num_batches_tracked
        if count is not None and isinstance(tracked, torch.Tensor):
            tracked.copy_(count)
    for p in out.model.parameters():
        p.requires_grad_(True)
    return out.model, layers, float(out.losses[-1])
