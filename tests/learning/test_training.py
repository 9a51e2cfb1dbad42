"""Tests of sde_core.learning.training: checkpoints, progress, determinism and exact resumption."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import TensorDataset

from sde_core.errors import TrainingError
from sde_core.learning.training import (
    TrainConfig,
    augment_batch,
    checkpoint_epochs,
    checkpoint_name,
    train,
)


def blobs(n: int = 240, d: int = 6, classes: int = 3, seed: int = 0) -> TensorDataset:
    """Gaussian blobs: ``n`` points in ``d`` dimensions around ``classes`` random centres."""
    g = torch.Generator().manual_seed(seed)
    centres = 3.0 * torch.randn(classes, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return TensorDataset(centres[y] + torch.randn(n, d, generator=g), y)


def mlp(seed: int = 0, d: int = 6, classes: int = 3) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, classes))


def images(n: int = 64, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.rand(n, 1, 8, 8, generator=g) + y.view(n, 1, 1, 1).float()
    return TensorDataset(x, y)


def cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(256, 2)
    )


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_checkpoints_progress_and_loss(tmp_path):
    config = TrainConfig(epochs=10, batch_size=32, lr=0.05, seed=3)
    model = mlp()
    init = {k: v.clone() for k, v in model.state_dict().items()}
    calls = []
    result = train(
        model, blobs(), config, tmp_path, progress=lambda e, t, loss: calls.append((e, t, loss))
    )
    assert [c[:2] for c in calls] == [(e, 10) for e in range(1, 11)]
    assert [c[2] for c in calls] == result.losses
    assert result.losses[-1] < 0.3 * result.losses[0]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "ckpt_010.safetensors",
        "ckpt_020.safetensors",
        "ckpt_040.safetensors",
        "ckpt_080.safetensors",
        "ckpt_100.safetensors",
        "init.safetensors",
    ]
    saved_init = load_file(tmp_path / "init.safetensors")
    assert all(torch.equal(saved_init[k], init[k]) for k in init)
    final = load_file(result.final_path)
    assert all(torch.equal(final[k], v) for k, v in model.state_dict().items())
    assert not torch.equal(load_file(result.checkpoints[0.4])["0.weight"], final["0.weight"])
    assert result.seconds > 0 and result.resumed_from_epoch == 0
    assert not (tmp_path / "resume.pt").exists()


def test_checkpoint_epoch_mapping():
    assert checkpoint_epochs((0.1, 0.2, 0.4, 0.8, 1.0), 10) == {
        0.1: 1,
        0.2: 2,
        0.4: 4,
        0.8: 8,
        1.0: 10,
    }
    assert checkpoint_epochs((0.1, 0.5, 1.0), 3) == {0.1: 1, 0.5: 2, 1.0: 3}
    assert checkpoint_name(0.1) == "ckpt_010.safetensors"
    assert checkpoint_name(1.0) == "ckpt_100.safetensors"


def test_same_seed_same_weights():
    config = TrainConfig(epochs=3, batch_size=16, lr=0.05, seed=1)
    a, b = mlp(), mlp()
    train(a, blobs(), config)
    train(b, blobs(), config)
    assert same_weights(a, b)
    c = mlp()
    train(c, blobs(), TrainConfig(epochs=3, batch_size=16, lr=0.05, seed=2))
    assert not same_weights(a, c)


class Interrupt(Exception):
    pass


def _interrupt_after(epoch: int):
    def progress(e: int, total: int, loss: float) -> None:
        if e == epoch:
            raise Interrupt

    return progress


@pytest.mark.parametrize(
    ("config", "make_model", "make_data"),
    [
        (TrainConfig(epochs=6, batch_size=16, lr=0.05, schedule="cosine", seed=4), mlp, blobs),
        (
            TrainConfig(
                epochs=5,
                batch_size=16,
                optimizer="adam",
                lr=1e-2,
                schedule="step",
                augmentation="flip_crop",
                seed=5,
            ),
            cnn,
            images,
        ),
    ],
)
def test_resumed_run_equals_uninterrupted(tmp_path, config, make_model, make_data):
    reference = make_model()
    train(reference, make_data(), config, tmp_path / "a")

    with pytest.raises(Interrupt):
        train(make_model(), make_data(), config, tmp_path / "b", progress=_interrupt_after(2))
    state = torch.load(tmp_path / "b" / "resume.pt", weights_only=True)
    assert state["epoch"] == 2
    torch.manual_seed(999)  # the interrupted process's RNG is gone; resumption must not need it
    resumed_model = make_model(seed=123)  # a different init: weights must come from resume.pt
    resumed = train(resumed_model, make_data(), config, tmp_path / "b")
    assert resumed.resumed_from_epoch == 2
    assert len(resumed.losses) == config.epochs
    assert same_weights(reference, resumed_model)
    for frac in config.checkpoint_fractions:
        a = load_file(tmp_path / "a" / checkpoint_name(frac))
        b = load_file(tmp_path / "b" / checkpoint_name(frac))
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_with_other_recipe_is_refused(tmp_path):
    config = TrainConfig(epochs=4, batch_size=16, lr=0.05)
    train(mlp(), blobs(), config, tmp_path, stop_after_epoch=1)
    with pytest.raises(TrainingError, match="different training recipe"):
        train(mlp(), blobs(), TrainConfig(epochs=4, batch_size=16, lr=0.1), tmp_path)
    fresh = train(
        mlp(), blobs(), TrainConfig(epochs=4, batch_size=16, lr=0.1), tmp_path, resume=False
    )
    assert fresh.resumed_from_epoch == 0 and fresh.final_path is not None


def test_registry_arch_checkpoints_load(tmp_path):
    from sde_core.inputs.architectures import build_model
    from sde_core.inputs.models import load_checkpoint

    torch.manual_seed(0)
    model = build_model("mlp", input_dim=6, hidden=[8], num_classes=3)
    result = train(
        model,
        blobs(),
        TrainConfig(epochs=2, batch_size=32),
        tmp_path,
        arch="mlp",
        arch_kwargs={"input_dim": 6, "hidden": [8], "num_classes": 3},
    )
    loaded = load_checkpoint(result.final_path)
    assert same_weights(loaded, model)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"optimizer": "rmsprop"}, "optimizer"),
        ({"epochs": 0}, "epochs"),
        ({"lr": -1.0}, "lr"),
        ({"momentum": 1.0}, "momentum"),
        ({"schedule": "linear"}, "schedule"),
        ({"augmentation": "mixup"}, "augmentation"),
        ({"checkpoint_fractions": (0.0, 1.0)}, "checkpoint_fractions"),
        ({"batch_size": 2.5}, "batch_size"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(TrainingError, match=match):
        TrainConfig(**kwargs)


def test_config_dict_round_trip_and_unknown_key():
    config = TrainConfig(epochs=3, schedule="step", checkpoint_fractions=(0.5, 1.0))
    assert TrainConfig.from_dict(config.to_dict()) == config
    with pytest.raises(TrainingError, match="unknown training setting"):
        TrainConfig.from_dict({"epoch": 3})


def test_bad_inputs():
    with pytest.raises(TrainingError, match="Module"):
        train("model", blobs(), TrainConfig())
    with pytest.raises(TrainingError, match="empty"):
        train(
            mlp(), TensorDataset(torch.zeros(0, 6), torch.zeros(0, dtype=torch.long)), TrainConfig()
        )
    with pytest.raises(TrainingError, match=r"cannot process inputs of shape \(6,\)"):
        train(nn.Linear(5, 3), blobs(), TrainConfig(epochs=1))
    with pytest.raises(TrainingError, match="class scores"):
        train(nn.Linear(6, 1), blobs(), TrainConfig(epochs=1))
    with pytest.raises(TrainingError, match="image batches"):
        train(mlp(), blobs(), TrainConfig(epochs=1, augmentation="flip_crop"))


def test_augment_batch_flips_and_crops():
    x = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).view(2, 1, 4, 4) + 1
    out = augment_batch(x, torch.Generator().manual_seed(0), padding=1)
    assert out.shape == x.shape
    for i in range(2):  # every output is a shifted (and maybe flipped) window of the padded input
        padded = nn.functional.pad(x[i : i + 1], (1, 1, 1, 1))[0]
        candidates = [
            src[:, dy : dy + 4, dx : dx + 4]
            for src in (padded, nn.functional.pad(x[i : i + 1].flip(3), (1, 1, 1, 1))[0])
            for dy in range(3)
            for dx in range(3)
        ]
        assert any(torch.equal(out[i], c) for c in candidates)
