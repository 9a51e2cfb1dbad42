"""EU-k (``learning/layer_unlearning.py``): the last k weight layers re-learnt from scratch on
D_r, every layer below them frozen — bit for bit, batch-norm statistics included."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from sde_core.errors import TrainingError
from sde_core.learning.layer_unlearning import last_weight_layers
from sde_core.learning.training import TrainConfig, train
from sde_core.learning.unlearning import EUKParams, UnlearnData, unlearn

N, D, C = 160, 12, 3
RECIPE = TrainConfig(epochs=40, batch_size=32, optimizer="adam", lr=1e-2, weight_decay=0.0, seed=0)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(D, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
        nn.Linear(32, C),
    )  # fmt: skip


@pytest.fixture(scope="module")
def setup():
    """An original that memorised random labels on noise, and its D_f (20%)."""
    g = torch.Generator().manual_seed(0)
    data_set = TensorDataset(torch.randn(N, D, generator=g), torch.randint(0, C, (N,), generator=g))
    model = _model()
    train(model, data_set, RECIPE)
    forget = np.random.default_rng(0).choice(N, size=N // 5, replace=False)
    return model.eval(), UnlearnData.from_forget(data_set, forget, train_config=RECIPE)


def _forget_accuracy(model: nn.Module, data: UnlearnData) -> float:
    x, y = data.train.tensors[0][data.forget_idx], data.train.tensors[1][data.forget_idx]
    with torch.no_grad():
        return float((model.eval()(x).argmax(1) == y).float().mean())


def test_the_last_k_weight_layers_in_registration_order():
    model = _model()
    assert last_weight_layers(model, 1) == ["5"]
    assert last_weight_layers(model, 3) == ["0", "3", "5"]
    with pytest.raises(TrainingError, match="k=4 but the model has 3 weight layers"):
        last_weight_layers(model, 4)


@pytest.mark.parametrize("k", [1, 2])
def test_eu_k_freezes_every_layer_below_and_relearns_the_rest(setup, k):
    original, data = setup
    before = copy.deepcopy(original.state_dict())
    result = unlearn("eu_k", original, data, k=k, epochs=5)
    state, kept = result.model.state_dict(), original.state_dict()
    assert all(torch.equal(kept[n], before[n]) for n in before)  # the original is untouched
    first = {1: "5.", 2: "3."}[k]
    below = [n for n in state if n < first]  # "0.*" and "1.*": linear, batch norm and its stats
    assert below and all(torch.equal(state[n], before[n]) for n in below)
    relearnt = [n for n in state if n >= first]
    assert all(not torch.equal(state[n], before[n]) for n in relearnt)
    assert result.info["layers"] == last_weight_layers(original, k)
    assert all(p.requires_grad for p in result.model.parameters())
    assert result.model[1].momentum == original[1].momentum


def test_eu_k_over_every_layer_is_a_retraining_and_forgets(setup):
    original, data = setup
    assert _forget_accuracy(original, data) == 1.0
    every = unlearn("eu_k", original, data, k=3)
    assert _forget_accuracy(every.model, data) < 0.6  # unseen random labels are not predicted
    head = unlearn("eu_k", original, data, k=1)
    assert _forget_accuracy(head.model, data) > _forget_accuracy(every.model, data)


def test_eu_k_parameters_are_checked():
    with pytest.raises(TrainingError, match="k"):
        EUKParams(k=0)
    with pytest.raises(ValueError, match="optimizer"):
        EUKParams(optimizer="magic")
    bare = UnlearnData(
        TensorDataset(torch.randn(10, D), torch.zeros(10, dtype=torch.long)),
        np.arange(2),
        np.arange(2, 10),
    )
    with pytest.raises(TrainingError, match="recipe"):
        unlearn("eu_k", _model(), bare, k=1)
