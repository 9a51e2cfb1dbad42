"""Model zoo, layer presets and safe checkpoint round-trips."""

from __future__ import annotations

# Float tolerances in this file compare float32 activations computed twice in one process by
# the same torch kernels (through the hooks, and directly): they differ only by float32
# summation order, ~1e-6 relative. Results that cross machines are compared by
# sde_core.pipeline.reproduce (docs/method.md §13).
import pickle
from pathlib import Path

import artefacts
import numpy as np
import pytest
import torch

from sde_core.errors import CheckpointError, SDEError
from sde_core.inputs.architectures import (
    ARCHITECTURES,
    ArchSpec,
    LayerRef,
    build_model,
    get_arch,
    layer_presets,
    model_layer_refs,
    register_architecture,
)
from sde_core.inputs.checkpoint_files import (
    CHECKPOINT_SUFFIXES,
    checkpoint_suffix,
    has_checkpoint_suffix,
    inspect_checkpoint,
)
from sde_core.inputs.models import (
    infer_architecture,
    load_checkpoint,
    load_checkpoint_details,
    save_checkpoint,
)


def _same_outputs(a: torch.nn.Module, b: torch.nn.Module, x: torch.Tensor, atol: float = 0.0):
    with torch.no_grad():
        return torch.allclose(a.eval()(x), b.eval()(x), atol=atol)


@pytest.mark.parametrize(
    ("arch", "batch_shape", "classes"),
    [
        ("resnet18", (2, 3, 32, 32), 10),
        ("allcnn", (2, 3, 32, 32), 10),
        ("mlp", (2, 40), 10),
        ("cnn1d", (2, 40), 10),
        ("fmnist_cnn", (2, 1, 28, 28), 10),
    ],
)
def test_registered_architectures_build_and_run(arch, batch_shape, classes):
    torch.manual_seed(0)
    model = build_model(arch).eval()
    assert tuple(get_arch(arch).input_shape) == batch_shape[1:]
    assert model(torch.randn(batch_shape)).shape == (2, classes)
    presets = layer_presets(arch)
    assert LayerRef.parse(presets["output"]).kind == "softmax"
    assert LayerRef.parse(presets["penultimate"]).kind == "input"
    modules = dict(model.named_modules())
    assert all(LayerRef.parse(ref).module in modules for ref in presets.values())


def test_resnet18_is_cifar_variant_with_optional_normalize():
    model = build_model("resnet18", num_classes=100, normalize=True)
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert isinstance(model.maxpool, torch.nn.Identity)
    assert model.fc.out_features == 100
    assert {"normalize.mean", "normalize.std"} <= set(model.state_dict())
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(11.2e6, rel=0.01)


def test_allcnn_and_fmnist_cnn_structure():
    allcnn = build_model("allcnn")
    convs = [m for m in allcnn.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [96, 96, 192, 192, 192, 192, 192, 192]
    assert [c.stride[0] for c in convs] == [1, 1, 2, 1, 1, 2, 1, 1]
    assert convs[-1].kernel_size == (1, 1)
    small = build_model("fmnist_cnn", hidden=32, head_pool=3)
    assert small.classifier[0].in_features == 64 * 9 and small.classifier[0].out_features == 32
    assert build_model("mlp").head.in_features == 256


def test_torchvision_models_by_name_never_download():
    model = build_model("torchvision:resnet18", num_classes=7)
    assert model.fc.out_features == 7
    assert layer_presets("torchvision:resnet18")["penultimate"] == "fc:input"
    with pytest.raises(CheckpointError, match="without pretrained weights"):
        build_model("torchvision:resnet18", weights="DEFAULT")
    with pytest.raises(CheckpointError, match="no classification model"):
        build_model("torchvision:not_a_model")


def test_unknown_architecture_and_bad_kwargs_raise_sde_errors():
    with pytest.raises(CheckpointError, match=r"unknown architecture 'nope'.*resnet18"):
        build_model("nope")
    with pytest.raises(CheckpointError, match="cannot build 'mlp'"):
        build_model("mlp", wrong_kwarg=3)
    with pytest.raises(SDEError):
        layer_presets("nope")


def test_register_architecture_adds_and_validates():
    spec = ArchSpec(
        name="tiny_test_arch",
        builder=lambda width=4: torch.nn.Sequential(torch.nn.Linear(3, width)),
        default_kwargs={"width": 4},
        input_shape=(3,),
        layer_presets={"logits": "0", "output": "0:softmax"},
        description="test",
    )
    register_architecture(spec)
    try:
        assert build_model("tiny_test_arch", width=5)(torch.zeros(1, 3)).shape == (1, 5)
    finally:
        ARCHITECTURES.pop("tiny_test_arch")
    with pytest.raises(CheckpointError, match="reserved"):
        register_architecture(ArchSpec("torchvision:x", spec.builder, {}, (3,), {}, ""))


# ------------------------------------------------------------------ checkpoint round-trips


@pytest.fixture
def resnet() -> torch.nn.Module:
    torch.manual_seed(1)
    model = build_model("resnet18", num_classes=10)
    with torch.no_grad():  # non-trivial BN statistics so buffers matter
        model.train()(torch.randn(4, 3, 32, 32))
    return model.eval()


def test_pt_plain_state_dict_infers_architecture(tmp_path: Path, resnet):
    path = tmp_path / "plain.pt"
    torch.save(resnet.state_dict(), path)
    loaded = load_checkpoint(path)
    assert not loaded.training and loaded.sde_arch == "resnet18"
    assert _same_outputs(resnet, loaded, torch.randn(2, 3, 32, 32))


def test_pt_under_state_dict_key_with_module_prefix(tmp_path: Path, resnet):
    path = tmp_path / "wrapped.pth"
    state = {f"module.{k}": v for k, v in resnet.state_dict().items()}
    torch.save({"state_dict": state, "epoch": 3}, path)
    assert _same_outputs(resnet, load_checkpoint(path, arch="resnet18"), torch.randn(2, 3, 32, 32))


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_save_checkpoint_full_precision_round_trip(tmp_path: Path, suffix: str):
    torch.manual_seed(2)
    model = build_model("mlp", input_dim=12, hidden=(16,), num_classes=3)
    path = save_checkpoint(model, tmp_path / f"m{suffix}", "mlp", metadata={"epoch": 5})
    loaded = load_checkpoint(path)  # no arch needed: it is stored in the file
    assert loaded.sde_arch_kwargs == {"input_dim": 12, "hidden": [16], "num_classes": 3}
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key])
    assert not list(tmp_path.glob("*.tmp"))


def test_half_checkpoint_is_small_and_loads_as_float32(tmp_path: Path, resnet):
    full = save_checkpoint(resnet, tmp_path / "full.safetensors", "resnet18")
    half = save_checkpoint(resnet, tmp_path / "half.safetensors", "resnet18", half=True)
    assert half.stat().st_size < 0.55 * full.stat().st_size
    loaded = load_checkpoint(half)
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    x = torch.randn(2, 3, 32, 32)
    assert _same_outputs(resnet, loaded, x, atol=5e-2)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace")
def test_torchscript_archive_round_trip(tmp_path: Path):
    torch.manual_seed(3)
    model = build_model("fmnist_cnn", hidden=16, head_pool=2).eval()
    x = torch.randn(2, 1, 28, 28)
    path = tmp_path / "scripted.pt"
    torch.jit.trace(model, x).save(str(path))
    with pytest.raises(CheckpointError, match="TorchScript archive"):
        load_checkpoint(path)  # a program: loads only with the trusted opt-in
    assert _same_outputs(model, load_checkpoint(path, trusted=True), x, atol=1e-6)


def test_ambiguous_or_unknown_keys_ask_for_arch(tmp_path: Path):
    path = tmp_path / "odd.pt"
    torch.save({"encoder.weight": torch.zeros(3, 3)}, path)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    text = str(err.value)
    assert "arch=" not in text  # the CLI's words, with the command of every route that works
    for route in ("--arch ARCH", "torchvision:NAME", "timm:NAME", "--arch file:PATH.py:CLASS",
                  "--checkpoint model.pt --trusted", "--activations FILE.npz"):  # fmt: skip
        assert route in text, route


def test_wrong_architecture_lists_missing_unexpected_and_shapes(tmp_path: Path):
    path = tmp_path / "mlp.pt"
    torch.save(build_model("mlp").state_dict(), path)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, arch="cnn1d")
    text = str(err.value)
    assert "missing keys: conv1.bias, conv1.weight" in text
    assert "unexpected keys: body.0.bias" in text
    with pytest.raises(
        CheckpointError, match=r"shape mismatches: body.2.bias \(256,\) vs expected"
    ):
        load_checkpoint(path, arch="mlp", hidden=(256, 128))


class _Exploit:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.write_text, (self.target, "pwned"))


@pytest.mark.parametrize("use_torch_save", [True, False])
def test_malicious_pickle_is_never_executed(tmp_path: Path, use_torch_save: bool):
    target = tmp_path / "pwned.txt"
    path = tmp_path / "evil.pt"
    payload = {"state_dict": _Exploit(target)}
    if use_torch_save:
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(CheckpointError, match=r"Nothing in it was run"):
        load_checkpoint(path)
    assert not target.exists()


@pytest.mark.parametrize("kind", ["truncated", "random", "empty", "missing", "not_a_checkpoint"])
def test_bad_files_raise_checkpoint_error(tmp_path: Path, kind: str):
    good = tmp_path / "good.pt"
    torch.save(build_model("mlp").state_dict(), good)
    path = tmp_path / "bad.pt"
    if kind == "truncated":
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "random":
        path.write_bytes(torch.randint(0, 256, (4096,), dtype=torch.uint8).numpy().tobytes())
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "not_a_checkpoint":
        torch.save({"lr": 0.1, "epochs": [1, 2]}, path)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


def test_truncated_safetensors_raises(tmp_path: Path):
    path = save_checkpoint(build_model("mlp"), tmp_path / "m.safetensors", "mlp")
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(path)


def test_trusted_full_pickle_of_a_module(tmp_path: Path):
    model = build_model("mlp").eval()
    path = tmp_path / "full.pt"
    torch.save(model, path)
    with pytest.raises(CheckpointError, match="trust it yourself"):
        load_checkpoint(path)
    assert _same_outputs(model, load_checkpoint(path, trusted=True), torch.randn(2, 40))


# --------------------------------------------------------- checkpoints as the field saves them


def _logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(x)


@pytest.fixture
def cifar_batch() -> torch.Tensor:
    return torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(5))


def test_salun_main_train_checkpoint_matches_salun_resnet18(tmp_path: Path, cifar_batch):
    reference = artefacts.reference_cifar_resnet18(num_classes=10)
    artefacts.set_batchnorm_statistics(reference, (3, 32, 32))
    best = artefacts.save_salun_main_train(reference, tmp_path / "origin")
    assert best.name == "0model_SA_best.pth.tar" and has_checkpoint_suffix(best)
    assert inspect_checkpoint(best).kind == "weights"
    details = load_checkpoint_details(best)
    assert details.arch == "resnet18" and details.arch_kwargs["normalize"] is True
    torch.testing.assert_close(_logits(details.model, cifar_batch), _logits(reference, cifar_batch))


@pytest.mark.parametrize("depth", [20, 56])
def test_salun_main_forget_checkpoint_with_numpy_scores_loads_without_opt_in(
    tmp_path: Path, cifar_batch, depth: int
):
    reference = artefacts.reference_resnet_s(depth)
    artefacts.set_batchnorm_statistics(reference, (3, 32, 32))
    result = artefacts.salun_evaluation_result()
    assert type(result["SVC_MIA_forget_efficacy"]["prob"]) is np.float64
    path = artefacts.save_unlearn_checkpoint(reference, result, tmp_path / "RL", "RL")
    assert path.name == "RLcheckpoint.pth.tar"
    details = load_checkpoint_details(path)  # no trusted opt-in: NumPy values are data
    assert details.arch == f"resnet{depth}s" and details.notes == ()
    assert details.arch_kwargs == {"num_classes": 10, "in_channels": 3, "normalize": True,
                                   "head": "fc"}  # fmt: skip
    torch.testing.assert_close(_logits(details.model, cifar_batch), _logits(reference, cifar_batch))
    with pytest.raises(CheckpointError, match="not a model checkpoint"):
        load_checkpoint(tmp_path / "RL" / "RLeval_result.pth.tar")


def test_original_cifar_resnet_layout_with_linear_head(tmp_path: Path, cifar_batch):
    reference = artefacts.reference_resnet_s(32, num_classes=100, head="linear", normalize=False)
    artefacts.set_batchnorm_statistics(reference, (3, 32, 32))
    path = tmp_path / "resnet32.th"
    torch.save({"state_dict": reference.state_dict(), "best_prec1": 70.1}, path)
    model = load_checkpoint(path)
    assert model.sde_arch == "resnet32s" and model.linear.out_features == 100
    torch.testing.assert_close(_logits(model, cifar_batch), _logits(reference, cifar_batch))
    refs = model_layer_refs(model)
    assert str(refs["penultimate"]) == "linear:input" and str(refs["block3"]) == "layer3"


def test_unlearn_sparse_pruned_checkpoints_are_folded_with_a_note(tmp_path: Path, cifar_batch):
    reference = artefacts.reference_resnet_s(20)
    artefacts.set_batchnorm_statistics(reference, (3, 32, 32))
    artefacts.prune_conv_weights_l1(reference, 0.5)
    state = reference.state_dict()
    assert "conv1.weight_orig" in state and "layer3.2.conv2.weight_mask" in state
    imp = artefacts.save_sparse_main_imp(reference, tmp_path / "imp", state=1)
    forget = artefacts.save_unlearn_checkpoint(
        reference, artefacts.salun_evaluation_result(1), tmp_path / "forget", "FT"
    )
    for path in (imp, forget):
        details = load_checkpoint_details(path)
        assert details.arch == "resnet20s"
        (note,) = details.notes
        assert (
            "pruned" in note and "19 mask(s)" in note and "50.0% of those weights are zero" in note
        )
        assert details.model.sde_load_notes == [note]
        torch.testing.assert_close(
            _logits(details.model, cifar_batch), _logits(reference, cifar_batch)
        )


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_torchvision_state_dicts_are_inferred_with_num_classes(tmp_path: Path, name: str):
    path = tmp_path / f"{name}.pth"
    reference = artefacts.save_torchvision_state_dict(name, 7, path)
    assert infer_architecture(path) == (f"torchvision:{name}", {"num_classes": 7})
    model = load_checkpoint(path)
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_logits(model, x), _logits(reference, x))
    parallel = tmp_path / f"{name}_dp.pth.tar"
    artefacts.save_dataparallel_state_dict(reference, parallel)
    torch.testing.assert_close(_logits(load_checkpoint(parallel), x), _logits(reference, x))


def test_cifar_resnet_family_sizes_and_presets():
    sizes = {d: sum(p.numel() for p in build_model(f"resnet{d}s").parameters()) for d in (20, 56)}
    assert sizes[20] == pytest.approx(0.27e6, rel=0.01) and sizes[56] == pytest.approx(
        0.85e6, rel=0.01
    )
    presets = layer_presets("resnet20s")
    assert presets["penultimate"] == "fc:input" and presets["block3"] == "layer3"
    with pytest.raises(CheckpointError, match="head must be 'fc' or 'linear'"):
        build_model("resnet20s", head="classifier")


def test_checkpoint_suffixes_include_pth_tar():
    assert checkpoint_suffix("runs/0model_SA_best.PTH.TAR") == ".pth.tar"
    assert {".pth.tar", ".pt", ".pth", ".safetensors"} <= set(CHECKPOINT_SUFFIXES)
    assert not has_checkpoint_suffix("forget.npy")


def test_arch_kwargs_are_honoured_by_get_activations(tmp_path: Path, fashion_root: Path):
    from sde_core.inputs.activations import get_activations
    from sde_core.inputs.data import DatasetSpec, load_dataset

    torch.manual_seed(0)
    model = build_model("fmnist_cnn", hidden=16, head_pool=2)
    path = tmp_path / "plain.pt"
    torch.save(model.state_dict(), path)  # no metadata: the head_pool must come from kwargs
    bundle = load_dataset(DatasetSpec("fashion-mnist", fashion_root, train_size=12, test_size=6))
    got = get_activations(path, bundle, "test", "logits", None, arch="fmnist_cnn",
                          arch_kwargs={"hidden": 16, "head_pool": 2})["logits"]  # fmt: skip
    x = torch.stack([bundle.test[i][0] for i in range(6)])
    np.testing.assert_allclose(got, _logits(model, x).numpy(), rtol=1e-5, atol=1e-6)
