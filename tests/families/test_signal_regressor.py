"""A toy family end to end: a 1-D signal regressor (sde_core/families/signal_regressor.py) is
detected, its layers are its family's, and its activations run through the evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.designs import fixed_settings
from torch import nn
from torch.utils.data import TensorDataset

from sde_core.errors import ActivationError
from sde_core.families.registry import family_of
from sde_core.families.signal_regressor import SIGNAL_REGRESSOR
from sde_core.inputs.activations import extract_activations, list_layers, resolve_layer
from sde_core.pipeline.evaluation.plan import draw_subsets
from sde_core.pipeline.evaluation.run import evaluate_arrays
from sde_core.pipeline.model_inputs import ModelInputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_TR, N_TE, N_F, D = 1200, 800, 300, 16


class SignalRegressor(nn.Module):
    """``(N, D)`` signals → ``(N, 1)`` predictions through one hidden layer."""

    sde_family = "signal_regressor"

    def __init__(self, width: int = 128) -> None:
        super().__init__()
        self.hidden = nn.Sequential(nn.Linear(D, width), nn.ReLU())
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden(x.flatten(1)))


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    """Noisy targets of a smooth function of the signal (noise a model can only memorise)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_TR + N_TE, D)).astype(np.float32)
    y = np.sin(x @ rng.normal(size=D) / 2) + rng.normal(scale=0.5, size=len(x))
    forget = rng.choice(N_TR, N_F, replace=False)
    return torch.from_numpy(x[:N_TR]), torch.from_numpy(x[N_TR:]), torch.tensor(y[:N_TR]), forget


def _fit(x: torch.Tensor, y: torch.Tensor, seed: int) -> SignalRegressor:
    """Full-batch Adam on the mean squared error (the family's objective), long enough to fit
    part of the noise of its training rows."""
    torch.manual_seed(seed)
    model = SignalRegressor()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        nn.functional.mse_loss(model(x).squeeze(1), y.float()).backward()
        opt.step()
    return model.eval()


def test_a_signal_regressor_is_its_family_and_runs_through_the_evaluation():
    x_tr, x_te, y_tr, forget = _data()
    retain = np.setdiff1d(np.arange(N_TR), forget)
    original = _fit(x_tr, y_tr, seed=1)
    retrained = _fit(x_tr[retain], y_tr[retain], seed=1)
    assert family_of(original) is SIGNAL_REGRESSOR
    # its layers are its family's: no softmax output, no noise levels
    names = [info.name for info in list_layers(original, (D,))]
    assert names[:2] == ["prediction", "hidden"]
    with pytest.raises(ActivationError, match="unknown layer 'output'"):
        resolve_layer(original, "output")
    with pytest.raises(ActivationError, match="only a denoiser is probed at noise levels"):
        resolve_layer(original, "hidden@0.5")

    settings = fixed_settings(
        subset_size=60, targets=20, splits=40, panel_size=20, null_pairs=6, baseline_targets=6
    )
    plan = draw_subsets(N_TR, N_TE, forget, settings)
    layer = SIGNAL_REGRESSOR.advice["strongest_layer"]  # "prediction", the model's output
    otr = {}
    for name, role, model in (("orig", "original", original), ("re", "retrained", retrained)):
        tr = extract_activations(model, TensorDataset(x_tr), layer)[layer]
        te = extract_activations(model, TensorDataset(x_te), layer)[layer]
        assert tr.shape == (N_TR, 1) and te.shape == (N_TE, 1)
        summary = evaluate_arrays(ModelInputs(name, role, tr, te), plan, settings).summary
        assert summary["references_valid"] and summary["panel_valid"], summary
        assert summary["otr_lo"] <= summary["otr"] <= summary["otr_hi"]
        otr[role] = summary["otr"]
    # D_f is training data of the original only: fewer of its targets read as out of training
    assert otr["original"] < otr["retrained"], otr
