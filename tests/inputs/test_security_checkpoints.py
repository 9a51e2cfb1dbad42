"""Checkpoints that are code never run without the per-file trusted opt-in; trusted ones run in a
child process under a time limit; small files cannot make the library allocate gigabytes.

The attack files are REAL TorchScript archives (``torch.jit.script(...).save``) whose
``__setstate__`` or ``forward`` writes a file (``torch.from_file(..., shared=True)`` maps it
writable), reads ``/etc/hostname``, or loops forever.
"""

from __future__ import annotations

# Float tolerances in this file compare float32 activations computed twice in one process by
# the same torch kernels (through the hooks, and directly): they differ only by float32
# summation order, ~1e-6 relative. Results that cross machines are compared by
# sde_core.pipeline.reproduce (docs/method.md §13).
import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import sde_core.inputs.architectures as architectures
from sde_core.errors import ActivationError, CheckpointError
from sde_core.inputs.activations import checkpoint_layers, get_activations
from sde_core.inputs.architectures import build_model
from sde_core.inputs.checkpoint_files import inspect_checkpoint
from sde_core.inputs.data import DatasetSpec, load_dataset
from sde_core.inputs.extraction import extract_activations
from sde_core.inputs.models import infer_architecture, load_checkpoint, load_checkpoint_details

VICTIM_TEXT = "precious results\n"


class _ForwardWriter(nn.Module):
    """``forward`` overwrites ``target`` (shared mapping of the file) and returns logits."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target
        self.weight = nn.Parameter(torch.zeros(784, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stolen = torch.from_file(self.target, shared=True, size=5, dtype=torch.uint8)
        # use the write's result, or TorchScript's dead-code elimination drops it
        return x.flatten(1) @ self.weight + stolen.fill_(80)[0].float() * 0.0


class _SetstateWriter(nn.Module):
    """Loading runs ``__setstate__``, which overwrites ``target``."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target
        self.weight = torch.zeros(784, 10)

    @torch.jit.export
    def __getstate__(self) -> tuple[str, torch.Tensor, bool]:
        return (self.target, self.weight, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[str, torch.Tensor, bool]) -> None:
        self.target = state[0]
        self.training = state[2]
        stolen = torch.from_file(self.target, shared=True, size=5, dtype=torch.uint8)
        self.weight = state[1] + stolen.fill_(81)[0].float() * 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.weight


class _HostnameReader(nn.Module):
    """``forward`` returns the bytes of /etc/hostname as its outputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        leaked = torch.from_file("/etc/hostname", shared=False, size=4, dtype=torch.uint8)
        return leaked.float()[None, :].repeat(x.shape[0], 1)


class _Loop(nn.Module):
    """``forward`` never returns."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = 0
        while n >= 0:
            n = n + 1
        return x.flatten(1)[:, :10] * float(n)


class _Honest(nn.Module):
    """A small well-behaved classifier (flatten, linear)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(784, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


def _script(module: nn.Module, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(module).save(str(path))
    return path


@pytest.fixture(scope="module")
def attack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The attack archives, the victim file they target and a file they would create."""
    root = tmp_path_factory.mktemp("attack")
    victim, created = root / "victim.txt", root / "created.txt"
    victim.write_text(VICTIM_TEXT)
    created.write_text("x")  # torch.from_file needs the file to exist while scripting saves
    files = {
        "forward_writer": _script(_ForwardWriter(str(victim)), root / "forward_writer.pt"),
        "setstate_writer": _script(_SetstateWriter(str(created)), root / "setstate.pth.tar"),
        "hostname_reader": _script(_HostnameReader(), root / "hostname.pt"),
        "loop": _script(_Loop(), root / "loop.pt"),
        "honest": _script(_Honest(), root / "honest.pt"),
    }
    created.unlink()
    assert victim.read_text() == VICTIM_TEXT  # saving did not run the code either
    return {**files, "victim": victim, "created": created}


@pytest.fixture
def bundle(fashion_root: Path):
    return load_dataset(DatasetSpec("fashion-mnist", fashion_root, train_size=12, test_size=6))


def _untouched(attack: dict[str, Path]) -> bool:
    return attack["victim"].read_text() == VICTIM_TEXT and not attack["created"].exists()


@pytest.fixture
def no_jit_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything calls torch.jit.load or an unrestricted torch.load."""

    def refuse(*args, **kwargs):
        raise AssertionError("a code checkpoint was loaded without the trusted opt-in")

    real_load = torch.load

    def guarded_load(*args, **kwargs):
        if kwargs.get("weights_only") is False:
            refuse()
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch.jit, "load", refuse)
    monkeypatch.setattr(torch, "load", guarded_load)


@pytest.mark.parametrize(
    "name", ["forward_writer", "setstate_writer", "hostname_reader", "loop", "honest"]
)
def test_torchscript_is_code_and_refused_without_the_opt_in(attack, bundle, no_jit_load, name):
    path = attack[name]
    info = inspect_checkpoint(path)
    assert info.format == "torchscript" and info.is_code and info.kind == "torchscript"
    for call in (
        lambda: load_checkpoint(path),
        lambda: load_checkpoint(path, arch="mlp"),
        lambda: load_checkpoint_details(path),
        lambda: infer_architecture(path),
        lambda: get_activations(path, bundle, "train", ["output"], None),
        lambda: checkpoint_layers(path, (1, 28, 28)),
    ):
        with pytest.raises(CheckpointError) as err:
            call()
        message = str(err.value)
        assert "\x1b" not in message and "\n" not in message
        assert "TorchScript" in message or "its own code" in message
    assert _untouched(attack)


def test_refusal_message_is_in_the_users_words(attack):
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(attack["setstate_writer"])
    text = str(err.value)
    assert text.startswith("setstate.pth.tar was not loaded: it is a TorchScript archive")
    assert "Nothing in it was run" in text
    for way in ("workspace trust", "--trusted", "'trusted' box"):
        assert way in text
    assert "trusted=True" not in text and "\x1b[" not in text


def test_trusted_model_runs_in_a_child_process_with_identical_activations(attack, bundle):
    path = attack["honest"]
    isolated = get_activations(
        path, bundle, "train", ["output", "logits"], None, trusted=True, batch_size=5
    )
    model = load_checkpoint(path, trusted=True)
    in_process = extract_activations(model, bundle.split("train"), ["output", "logits"])
    for key in ("output", "logits"):
        assert isolated[key].shape == (12, 10)
        np.testing.assert_allclose(isolated[key], in_process[key], rtol=1e-6, atol=1e-7)
    layers = checkpoint_layers(path, (1, 28, 28), trusted=True)
    assert [info.name for info in layers] == ["output", "logits"]


def test_the_attacks_are_real_once_trusted(attack, bundle):
    """With the opt-in the files' code does run (that is what trusting means), in the child:
    proof that the refusals above prevent real effects."""
    try:
        get_activations(attack["setstate_writer"], bundle, "test", "output", None, trusted=True)
        assert attack["created"].read_bytes()[:5] == b"QQQQQ"
        get_activations(attack["forward_writer"], bundle, "test", "output", None, trusted=True)
        assert attack["victim"].read_text().startswith("PPPPP")
        hostname = Path("/etc/hostname")
        if hostname.is_file() and hostname.stat().st_size >= 4:
            leak = get_activations(
                attack["hostname_reader"], bundle, "test", "logits", None, trusted=True
            )["logits"]
            assert leak[0].tolist() == list(hostname.read_bytes()[:4])
    finally:
        attack["victim"].write_text(VICTIM_TEXT)
        attack["created"].unlink(missing_ok=True)


def test_a_model_that_loops_forever_is_stopped_by_the_time_limit(attack, bundle):
    start = time.monotonic()
    with pytest.raises(ActivationError, match=r"did not finish a forward pass .* within 2 s"):
        get_activations(attack["loop"], bundle, "test", "output", None, trusted=True, time_limit=2)
    assert time.monotonic() - start < 60
    with pytest.raises(ActivationError, match="time_limit"):
        get_activations(attack["loop"], bundle, "test", "output", None, trusted=True, time_limit=0)


class _NamespaceSubclass(argparse.Namespace):
    """A subclass is another class: it could define ``__setstate__``, so it stays code."""


def test_full_pickles_need_the_opt_in_and_plain_values_do_not(tmp_path: Path):
    model = build_model("mlp", input_dim=6, hidden=(5,), num_classes=3)
    with_args = tmp_path / "with_args.pth.tar"  # what timm's CheckpointSaver stores as args
    args = argparse.Namespace(lr=0.1, model="mlp", mean=[0.5, 0.5], input_size=None)
    torch.save({"state_dict": model.state_dict(), "args": args}, with_args)
    info = inspect_checkpoint(with_args)
    assert info.kind == "weights" and "argparse.Namespace" in info.objects
    assert load_checkpoint(with_args).head.out_features == 3  # no opt-in needed
    for name, value in [
        ("subclass", _NamespaceSubclass(lr=0.1)),
        ("holds_code", argparse.Namespace(loss=nn.CrossEntropyLoss())),  # an object inside
    ]:
        path = tmp_path / f"{name}.pth.tar"
        torch.save({"state_dict": model.state_dict(), "args": value}, path)
        assert inspect_checkpoint(path).kind == "full-pickle"
        with pytest.raises(CheckpointError, match="trust it yourself"):
            load_checkpoint(path)
    assert load_checkpoint(path, trusted=True).head.out_features == 3  # the opt-in still works
    with_numpy = tmp_path / "with_numpy.pth.tar"
    torch.save({"state_dict": model.state_dict(), "score": np.float64(0.5),
                "curve": np.arange(3.0), "kind": np.dtype("float32")}, with_numpy)  # fmt: skip
    assert inspect_checkpoint(with_numpy).kind == "weights"
    assert load_checkpoint(with_numpy).head.out_features == 3  # no opt-in needed


def test_object_arrays_still_need_the_opt_in(tmp_path: Path):
    model = build_model("mlp", input_dim=6, hidden=(5,), num_classes=3)
    path = tmp_path / "objects.pt"
    torch.save({"state_dict": model.state_dict(), "notes": np.array([{"a": 1}], object)}, path)
    with pytest.raises(CheckpointError, match="trust it yourself") as err:
        load_checkpoint(path)
    assert "\x1b" not in str(err.value)


# ------------------------------------------------------------------------- resource exhaustion


def _count_real_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    real = architectures._construct
    built: list[str] = []

    def counting(spec, arch, full, meta):
        if not meta and torch.get_default_device().type != "meta":
            built.append(arch)
        return real(spec, arch, full, meta)

    monkeypatch.setattr(architectures, "_construct", counting)
    return built


def test_declared_shapes_are_checked_before_anything_is_allocated(tmp_path, monkeypatch):
    """A 316 KB safetensors file whose metadata declares hidden=[20000, 20000] (1.6 GB)."""
    small = build_model("mlp", input_dim=40, hidden=(1000,), num_classes=10)  # 0.17 MB of weights
    path = tmp_path / "bomb.safetensors"
    meta = {"arch": "mlp", "arch_kwargs": json.dumps({"hidden": [20000, 20000]})}
    save_file({k: v.contiguous() for k, v in small.state_dict().items()}, str(path), meta)
    assert path.stat().st_size < 400_000
    built = _count_real_builds(monkeypatch)
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=r"does not fit architecture 'mlp'.*shape mismatch"):
        load_checkpoint(path)
    assert built == [] and time.monotonic() - start < 5


def test_models_over_the_memory_budget_are_refused_unbuilt(monkeypatch):
    built = _count_real_builds(monkeypatch)
    with pytest.raises(CheckpointError, match=r"GiB of weights, more than the .* budget"):
        build_model("mlp", input_dim=40, hidden=(60000, 60000), num_classes=10)
    assert built == []


def test_zero_stride_tensors_are_not_materialised(tmp_path, monkeypatch):
    path = tmp_path / "expanded.pt"
    torch.save(
        {"head.weight": torch.zeros(1).expand(10, 10**8), "head.bias": torch.zeros(10)}, path
    )
    assert path.stat().st_size < 10_000
    built = _count_real_builds(monkeypatch)
    with pytest.raises(CheckpointError, match="describes 3815 MiB of weights"):
        load_checkpoint(path, arch="mlp", hidden=[], input_dim=10**8)
    assert built == []
