"""Layer listing, extraction against manual forwards, and the activation cache."""

from __future__ import annotations

# Float tolerances in this file compare float32 activations computed twice in one process by
# the same torch kernels (through the hooks, and directly): they differ only by float32
# summation order, ~1e-6 relative. Results that cross machines are compared by
# sde_core.pipeline.reproduce (docs/method.md §13).
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from sde_core.errors import ActivationError
from sde_core.inputs.activation_cache import ActivationCache
from sde_core.inputs.activations import get_activations
from sde_core.inputs.architectures import LayerRef, build_model
from sde_core.inputs.data import DatasetSpec, load_dataset
from sde_core.inputs.extraction import extract_activations
from sde_core.inputs.layers import list_layers, resolve_layer
from sde_core.inputs.models import save_checkpoint


@pytest.fixture
def resnet() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("resnet18").eval()


@pytest.fixture
def images() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    return TensorDataset(torch.rand(6, 3, 32, 32, generator=gen), torch.arange(6))


def test_list_layers_resnet18(resnet):
    layers = {info.name: info for info in list_layers(resnet, (3, 32, 32))}
    assert layers["penultimate"].output_shape == (512,) and layers["penultimate"].dim == 512
    assert layers["logits"].output_shape == (10,) and layers["output"].dim == 10
    assert layers["block1"].output_shape == (64, 32, 32) and layers["block1"].dim == 64
    assert layers["layer4"].output_shape == (512, 4, 4)
    assert layers["fc"].module_type == "Linear" and layers["fc"].n_params == 5130
    assert resnet.training is False and not resnet._forward_hooks


def test_list_layers_allcnn():
    layers = {i.name: i for i in list_layers(build_model("allcnn"), (3, 32, 32))}
    assert layers["features.2"].output_shape == (192, 16, 16)
    assert layers["features.9"].output_shape == (192, 8, 8)
    assert layers["penultimate"].output_shape == (192,)
    assert layers["block4"].dim == 192


def test_extraction_matches_manual_forward(resnet, images):
    x = images.tensors[0]
    got = extract_activations(
        resnet, images, ["output", "logits", "penultimate", "layer1"], batch_size=4
    )
    with torch.no_grad():
        logits = resnet(x)
        feats = resnet.layer4(
            resnet.layer3(resnet.layer2(resnet.layer1(resnet.relu(resnet.bn1(resnet.conv1(x))))))
        )
        pooled = resnet.avgpool(feats).flatten(1)
        block1 = resnet.layer1(resnet.relu(resnet.bn1(resnet.conv1(x)))).mean(dim=(2, 3))
    assert all(a.dtype == np.float32 for a in got.values())
    assert np.allclose(got["output"].sum(axis=1), 1.0, atol=1e-5)
    assert np.allclose(got["logits"], logits.numpy(), atol=1e-5)
    assert np.allclose(got["output"], torch.softmax(logits, 1).numpy(), atol=1e-6)
    assert np.allclose(got["penultimate"], pooled.numpy(), atol=1e-5)
    assert np.allclose(got["layer1"], block1.numpy(), atol=1e-5)


def test_extraction_unpooled_indices_and_progress(images):
    torch.manual_seed(0)
    model = build_model("allcnn", width=0.25).eval()
    calls = []
    got = extract_activations(
        model, images, "features.9", pool=False, indices=[4, 1, 2], batch_size=2,
        progress=lambda done, total: calls.append((done, total)),
    )  # fmt: skip
    assert got["features.9"].shape == (3, 48 * 8 * 8)
    with torch.no_grad():
        ref = model.features[:10](images.tensors[0][[4, 1, 2]]).flatten(1)
    assert np.allclose(got["features.9"], ref.numpy(), atol=1e-5)
    assert calls == [(2, 3), (3, 3)]


def test_inplace_relu_does_not_corrupt_captured_bn(images):
    torch.manual_seed(0)
    model = build_model("allcnn", width=0.25).eval()
    got = extract_activations(model, images, ["features.0.1"], pool=False)
    with torch.no_grad():
        bn = model.features[0][1](model.features[0][0](images.tensors[0]))
    assert (got["features.0.1"] < 0).any()
    assert np.allclose(got["features.0.1"], bn.flatten(1).numpy(), atol=1e-5)


def test_conv1d_maps_are_pooled():
    model = build_model("cnn1d", channels=8).eval()
    data = TensorDataset(torch.randn(5, 40), torch.zeros(5))
    assert extract_activations(model, data, ["block2", "penultimate"])["block2"].shape == (5, 8)


def test_unknown_layer_lists_valid_names(resnet, images):
    with pytest.raises(ActivationError, match=r"unknown layer 'layer9'.*output, logits.*layer4"):
        extract_activations(resnet, images, ["layer9"])
    with pytest.raises(ActivationError, match="batch_size"):
        extract_activations(resnet, images, ["output"], batch_size=0)
    with pytest.raises(ActivationError, match=r"outside \[0, 6\)"):
        extract_activations(resnet, images, ["output"], indices=[9])
    assert resolve_layer(resnet, "fc:input") == LayerRef("fc", "input")


@pytest.mark.filterwarnings("ignore:`torch.jit.script")
def test_torchscript_exposes_only_output(tmp_path: Path, images):
    model = build_model("mlp", input_dim=3 * 32 * 32, hidden=(8,)).eval()
    scripted = torch.jit.script(model)
    got = extract_activations(scripted, images, ["output", "logits"])
    assert np.allclose(got["output"].sum(1), 1, atol=1e-5)
    with pytest.raises(ActivationError, match="TorchScript"):
        extract_activations(scripted, images, ["penultimate"])


# ------------------------------------------------------------------------------------ cache


@pytest.fixture
def setup(tmp_path: Path, fashion_root: Path):
    torch.manual_seed(0)
    model = build_model("fmnist_cnn", hidden=16, head_pool=2)
    ckpt = save_checkpoint(model, tmp_path / "m.safetensors", "fmnist_cnn")
    bundle = load_dataset(DatasetSpec("fashion-mnist", fashion_root, train_size=12, test_size=6))
    return ckpt, bundle, ActivationCache(tmp_path / "cache")


def _count_forwards(monkeypatch) -> list[int]:
    calls: list[int] = []
    import sde_core.inputs.layers as acts

    original = acts._Capture.run

    def counting(self, model, x):
        calls.append(x.shape[0])
        return original(self, model, x)

    monkeypatch.setattr(acts._Capture, "run", counting)
    return calls


def test_cache_miss_then_hit_without_forward(setup, monkeypatch):
    ckpt, bundle, cache = setup
    calls = _count_forwards(monkeypatch)
    first = get_activations(ckpt, bundle, "train", ["output", "penultimate"], cache, batch_size=5)
    assert sum(calls) == 12 and len(calls) == 3  # one pass for both layers
    assert cache.stats.misses == 2 and cache.stats.stored == 2
    calls.clear()
    second = get_activations(ckpt, bundle, "train", ["penultimate", "output"], cache)
    assert calls == [] and cache.stats.hits == 2
    assert all(np.array_equal(first[k], second[k]) for k in first)
    subset = get_activations(ckpt, bundle, "train", "output", cache, indices=[3, 0])
    assert calls == [] and np.array_equal(subset["output"], first["output"][[3, 0]])


def test_only_missing_layers_are_computed(setup, monkeypatch):
    ckpt, bundle, cache = setup
    get_activations(ckpt, bundle, "test", "output", cache)
    stored = cache.stats.stored
    calls = _count_forwards(monkeypatch)
    out = get_activations(ckpt, bundle, "test", ["output", "block2"], cache)
    assert sum(calls) == 6 and cache.stats.stored == stored + 1
    assert out["block2"].shape == (6, 64)


@pytest.mark.parametrize("damage", ["truncate", "flip", "sidecar"])
def test_corrupt_entry_is_detected_deleted_and_rebuilt(setup, monkeypatch, damage):
    ckpt, bundle, cache = setup
    good = get_activations(ckpt, bundle, "train", "logits", cache)["logits"]
    npy = next(cache.root.glob("*/*.npy"))
    if damage == "truncate":
        npy.write_bytes(npy.read_bytes()[:100])
    elif damage == "flip":
        raw = bytearray(npy.read_bytes())
        raw[-1] ^= 0xFF
        npy.write_bytes(bytes(raw))
    else:
        npy.with_suffix(".json").write_text("{not json")
    calls = _count_forwards(monkeypatch)
    again = get_activations(ckpt, bundle, "train", "logits", cache)["logits"]
    assert cache.stats.rebuilt == 1 and sum(calls) == 12
    assert np.array_equal(again, good)
    assert get_activations(ckpt, bundle, "train", "logits", cache)["logits"] is not None
    assert cache.stats.hits == 1


def test_cache_key_separates_settings(setup):
    ckpt, bundle, cache = setup
    pooled = get_activations(ckpt, bundle, "train", "block1", cache)["block1"]
    flat = get_activations(ckpt, bundle, "train", "block1", cache, pool=False)["block1"]
    assert pooled.shape == (12, 32) and flat.shape == (12, 32 * 14 * 14)
    assert len(list(cache.root.glob("*/*.npy"))) == 2  # two entries, one per setting


def test_precomputed_activation_files_bypass_models(tmp_path: Path):
    rng = np.random.default_rng(0)
    arrays = {"train_output": rng.random((8, 3)), "test_output": rng.random((4, 3)),
              "y_train": np.arange(8) % 3, "y_test": np.arange(4) % 3}  # fmt: skip
    np.savez(tmp_path / "acts.npz", **arrays)
    bundle = load_dataset(DatasetSpec("activations", tmp_path / "acts.npz"))
    got = get_activations(tmp_path / "acts.npz", bundle, "test", ["output"], None)
    assert np.allclose(got["output"], arrays["test_output"])
    with pytest.raises(ActivationError, match="holds output"):
        get_activations(tmp_path / "acts.npz", bundle, "test", ["penultimate"], None)
