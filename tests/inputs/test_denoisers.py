"""EDM denoisers (method §14): preconditioning, the EDM loss, the fixed probe noise, layers at
noise levels, checkpoints, training and the unlearning methods that apply to a denoiser."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file
from torch.utils.data import Subset, TensorDataset

from sde_core.errors import ActivationError, TrainingError
from sde_core.inputs.arch_inference import infer_architecture_from_shapes
from sde_core.inputs.architectures import build_model
from sde_core.inputs.denoisers import (
    EDMDenoiser,
    noise_layer_name,
    parse_noise_layer,
    probe_noise,
)
from sde_core.inputs.extraction import extract_activations
from sde_core.inputs.layers import list_layers, resolve_layer
from sde_core.inputs.models import load_checkpoint, save_checkpoint
from sde_core.learning.diffusion import denoising_losses, edm_loss
from sde_core.learning.training import TrainConfig, train
from sde_core.learning.unlearning import UnlearnData, unlearn

TINY = {"in_channels": 1, "channels": [4, 8], "emb_dim": 8, "image_size": 8}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tiny(seed: int = 0) -> EDMDenoiser:
    torch.manual_seed(seed)
    model = build_model("edm_unet", **TINY)
    assert isinstance(model, EDMDenoiser)
    return model


def _images(n: int, seed: int = 0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 8, 8, generator=gen) * 2 - 1
    return TensorDataset(x, torch.zeros(n, dtype=torch.long))


def test_preconditioning_is_karras_table_1():
    model = _tiny()
    sigma = torch.tensor([0.002, 0.5, 80.0])
    c_skip, c_out, c_in, c_noise = model.preconditioning(sigma)
    for i, s in enumerate(sigma.tolist()):
        sd = 0.5
        assert c_skip[i].item() == pytest.approx(sd**2 / (s**2 + sd**2), rel=1e-6)
        assert c_out[i].item() == pytest.approx(s * sd / math.sqrt(s**2 + sd**2), rel=1e-6)
        assert c_in[i].item() == pytest.approx(1 / math.sqrt(s**2 + sd**2), rel=1e-6)
        assert c_noise[i].item() == pytest.approx(math.log(s) / 4, rel=1e-6)
    x = _images(3)[:][0]
    # σ → 0: c_skip → 1 and c_out → 0, so D is the identity whatever F_θ is
    assert torch.allclose(model(x, 1e-7), x, atol=1e-6)


def test_edm_loss_matches_its_definition():
    model = _tiny()
    y = _images(5)[:][0]
    torch.manual_seed(3)
    loss = edm_loss(model, y)
    torch.manual_seed(3)  # the same draws, in the same order, by hand
    sigma = (torch.randn(5) * 1.2 - 1.2).exp()
    n = torch.randn_like(y)
    lam = (sigma**2 + 0.25) / (sigma * 0.5) ** 2
    with torch.no_grad():
        err = ((model(y + n * sigma.view(-1, 1, 1, 1), sigma) - y) ** 2).mean(dim=(1, 2, 3))
    assert loss.item() == pytest.approx(float((lam * err).mean()), rel=1e-5)


def test_probe_noise_depends_only_on_the_image():
    x = _images(6)[:][0]
    noise = probe_noise(x)
    assert noise.shape == x.shape
    assert torch.equal(probe_noise(x.flip(0)), noise.flip(0))  # not on the order or batch
    assert torch.equal(probe_noise(x[2:3]), noise[2:3])
    assert not torch.equal(probe_noise(x, seed=1), noise)
    assert not torch.equal(noise[0], noise[1])
    big = probe_noise(torch.rand(200, 1, 8, 8))
    assert abs(big.mean().item()) < 0.05 and abs(big.std().item() - 1) < 0.05


@given(st.floats(min_value=1e-4, max_value=1e4, allow_nan=False))
@settings(max_examples=50, deadline=None)
def test_noise_layer_names_round_trip(level):
    base, parsed = parse_noise_layer(noise_layer_name("block2", level))
    assert base == "block2" and parsed == pytest.approx(level, rel=1e-5)


@pytest.mark.parametrize("name", ["denoised@", "denoised@abc", "denoised@-1", "x@0", "x@nan"])
def test_bad_noise_levels_are_refused(name):
    with pytest.raises(ActivationError, match="positive number"):
        parse_noise_layer(name)


def test_layers_need_a_noise_level_on_a_denoiser_only():
    model = _tiny()
    ref = resolve_layer(model, "denoised@0.5")
    assert (ref.module, ref.kind, ref.noise) == ("", "flat", 0.5)
    assert str(ref) == ":flat@0.5"
    assert resolve_layer(model, "block2@1").module == "enc2"
    assert resolve_layer(model, "enc2.conv1@2").module == "enc2.conv1"
    with pytest.raises(ActivationError, match="noise level"):
        resolve_layer(model, "denoised")
    with pytest.raises(ActivationError, match=r"valid names: denoised@0\.5"):
        resolve_layer(model, "output@0.5")
    with pytest.raises(ActivationError, match="only a denoiser"):
        resolve_layer(build_model("mlp"), "output@0.5")


def test_activations_are_the_probe_at_each_level_whatever_the_batching():
    model, data = _tiny(), _images(10)
    x = data[:][0]
    both = extract_activations(model, data, ["denoised@0.5", "block2@1", "denoised@1"])
    assert both["denoised@0.5"].shape == (10, 64) and both["block2@1"].shape == (10, 8)
    with torch.no_grad():
        expected = model(x + 0.5 * probe_noise(x), 0.5).flatten(1).numpy()
    np.testing.assert_allclose(both["denoised@0.5"], expected, atol=1e-6)
    alone = extract_activations(model, data, "denoised@1", batch_size=3, indices=range(9, -1, -1))
    np.testing.assert_allclose(alone["denoised@1"][::-1], both["denoised@1"], atol=1e-5)
    assert not np.allclose(both["denoised@1"], both["denoised@0.5"])


def test_list_layers_at_noise_levels():
    model = _tiny()
    infos = {i.name: i for i in list_layers(model, (1, 8, 8), (0.5, 2.0))}
    assert infos["denoised@0.5"].dim == 64 and infos["denoised@2"].dim == 64
    assert infos["denoised@2"].module_type == "alias of :flat"
    assert infos["block1@0.5"].dim == 4 and infos["block3@2"].dim == 8
    assert "enc2.conv1@0.5" in infos and "output@0.5" not in infos
    with pytest.raises(ActivationError, match="noise_levels"):
        list_layers(model, (1, 8, 8))


def test_checkpoints_load_from_metadata_and_from_a_bare_state_dict(tmp_path):
    model = _tiny()
    x = _images(4)[:][0]
    path = save_checkpoint(model, tmp_path / "d.safetensors", "edm_unet")
    loaded = load_checkpoint(path)
    with torch.no_grad():
        assert torch.equal(loaded(x, 0.3), model(x, 0.3))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(tmp_path / "bare.safetensors"))
    torch.save({"state_dict": state}, tmp_path / "bare.pth.tar")  # as training scripts save it
    hits = infer_architecture_from_shapes({k: tuple(v.shape) for k, v in state.items()})
    assert [name for name, _ in hits] == ["edm_unet"]
    bare = load_checkpoint(tmp_path / "bare.pth.tar", image_size=8)
    with torch.no_grad():
        assert torch.equal(bare(x, 0.3), model(x, 0.3))


def test_train_fits_a_denoiser_and_resumes_bit_identically(tmp_path):
    data = _images(32)
    cfg = TrainConfig(optimizer="adam", lr=3e-3, weight_decay=0.0, epochs=4, batch_size=8,
                      checkpoint_fractions=(1.0,))  # fmt: skip
    whole = train(_tiny(), data, cfg)
    assert whole.losses[-1] < whole.losses[0]
    train(_tiny(), data, cfg, tmp_path, stop_after_epoch=2)
    resumed = train(_tiny(), data, cfg, tmp_path)
    assert resumed.resumed_from_epoch == 2
    for a, b in zip(
        whole.model.state_dict().values(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)
    with pytest.raises(TrainingError, match="EDM loss"):
        train(_tiny(), data, cfg, loss_fn=torch.nn.functional.mse_loss)


def test_denoising_losses_match_a_direct_computation():
    model, data = _tiny(), _images(7)
    losses = denoising_losses(model, data, [6, 0, 3], (0.25, 1.0), batch_size=2)
    y = data[:][0][[6, 0, 3]]
    with torch.no_grad():
        direct = ((model(y + probe_noise(y), 1.0) - y) ** 2).mean(dim=(1, 2, 3)).numpy()
    np.testing.assert_allclose(losses[1.0], direct, rtol=1e-5)
    assert losses[0.25].shape == (3,)


@pytest.fixture(scope="module")
def memorised():
    """A tiny denoiser trained to memorise 16 images, and its unlearning data."""
    data = _images(24)
    forget, retain = np.arange(8), np.arange(8, 16)
    cfg = TrainConfig(optimizer="adam", lr=5e-3, weight_decay=0.0, epochs=40, batch_size=16,
                      checkpoint_fractions=(1.0,))  # fmt: skip
    model = train(_tiny(), Subset(data, list(range(16))), cfg).model
    unl = UnlearnData(data, forget, retain, train_config=cfg, model_factory=lambda: _tiny(1))
    return model, data, unl


def _loss(model, data, rows):
    return float(denoising_losses(model, data, rows, (0.5,))[0.5].mean())


def test_the_tiny_denoiser_memorises(memorised):
    model, data, _ = memorised
    assert _loss(model, data, np.arange(16)) < _loss(model, data, np.arange(16, 24))


def test_ga_and_neggrad_raise_the_forget_loss_and_ft_lowers_the_retain_loss(memorised):
    model, data, unl = memorised
    forget, retain = unl.forget_idx, unl.retain_idx
    before_f, before_r = _loss(model, data, forget), _loss(model, data, retain)
    ga = unlearn("ga", model, unl, lr=1e-2, epochs=3, batch_size=8).model
    assert _loss(ga, data, forget) > before_f
    ng = unlearn("neggrad_plus", model, unl, lr=1e-2, epochs=3, batch_size=8, beta=0.5).model
    assert _loss(ng, data, forget) - before_f > _loss(ng, data, retain) - before_r
    ft = unlearn("ft", model, unl, lr=1e-3, epochs=2, batch_size=8).model
    assert _loss(ft, data, retain) < before_r + 1e-3
    assert _loss(model, data, forget) == before_f  # the original is untouched


@pytest.mark.parametrize("method", ["rl", "salun", "unroll"])
def test_label_based_methods_refuse_a_denoiser(memorised, method):
    model, _, unl = memorised
    with pytest.raises(TrainingError, match="cannot unlearn a denoiser"):
        unlearn(method, model, unl)


def test_retrain_builds_a_fresh_denoiser_on_the_retained_set(memorised):
    model, _, unl = memorised
    result = unlearn("retrain", model, unl, epochs=1)
    assert isinstance(result.model, EDMDenoiser) and result.params.epochs == 1
    assert not torch.equal(result.model.stem.weight, model.stem.weight)
