"""Property-based tests of checkpoint loading: damaged or hostile files and arbitrary
architecture kwargs give a model or a clean :class:`~sde_core.errors.CheckpointError`, and a
file that is code is never executed without the trusted opt-in."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sde_core.errors import CheckpointError
from sde_core.inputs.architectures import build_model
from sde_core.inputs.checkpoint_files import inspect_checkpoint
from sde_core.inputs.models import load_checkpoint, save_checkpoint

FAST = settings(
    derandomize=True,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
KINDS = ("safetensors", "torch-zip", "torch-legacy", "torchscript", "salun")


class _Files(dict):
    """Checkpoint bytes by kind (short repr for Hypothesis' failure reports)."""

    def __repr__(self) -> str:
        return f"<checkpoints: {', '.join(self)}>"


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """One small checkpoint of each on-disk form, as bytes."""
    root = tmp_path_factory.mktemp("originals")
    torch.manual_seed(0)
    model = build_model("mlp", input_dim=6, hidden=(5,), num_classes=3).eval()
    files = {
        "safetensors": save_checkpoint(model, root / "m.safetensors", "mlp"),
        "torch-zip": root / "m.pt",
        "torch-legacy": root / "legacy.pt",
        "torchscript": root / "script.pt",
        "salun": root / "RLcheckpoint.pth.tar",
    }
    torch.save(model.state_dict(), files["torch-zip"])
    torch.save(model.state_dict(), files["torch-legacy"], _use_new_zipfile_serialization=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(model, torch.zeros(1, 6)).save(str(files["torchscript"]))
    scores = {"prob": np.mean([0.5, 0.25]), "curve": np.arange(3.0)}
    torch.save({"state_dict": model.state_dict(), "evaluation_result": scores}, files["salun"])
    return _Files({kind: Path(path).read_bytes() for kind, path in files.items()})


mutation = st.tuples(
    st.sampled_from(["flip", "truncate", "insert", "overwrite"]),
    st.floats(0, 1),
    st.binary(min_size=1, max_size=24),
)


def _mutate(raw: bytes, kind: str, where: float, payload: bytes) -> bytes:
    if not raw:
        return payload
    at = int(where * (len(raw) - 1))
    if kind == "flip":
        return raw[:at] + bytes([raw[at] ^ (payload[0] or 1)]) + raw[at + 1 :]
    if kind == "truncate":
        return raw[:at]
    if kind == "insert":
        return raw[:at] + payload + raw[at:]
    return raw[:at] + payload + raw[at + len(payload) :]


def _never_run(*args, **kwargs):
    raise AssertionError("code from a checkpoint ran without the trusted opt-in")


@settings(FAST, max_examples=200)
@given(kind=st.sampled_from(KINDS), mutations=st.lists(mutation, min_size=1, max_size=3))
def test_damaged_checkpoints_load_or_raise_checkpoint_error(originals, tmp_path, kind, mutations):
    raw = originals[kind]
    for m in mutations:
        raw = _mutate(raw, *m)
    path = tmp_path / ("m.safetensors" if kind == "safetensors" else "m.pth.tar")
    path.write_bytes(raw)
    with mock.patch.object(torch.jit, "load", _never_run):
        try:
            info = inspect_checkpoint(path)
        except CheckpointError as exc:
            assert "\x1b" not in str(exc) and "\n" not in str(exc)
            info = None
        try:
            model = load_checkpoint(path)
        except CheckpointError as exc:
            assert "\x1b" not in str(exc) and "\n" not in str(exc)
        else:
            assert info is not None and not info.is_code
            assert model(torch.zeros(2, 6)).shape == (2, 3)


KWARG_NAMES = ("num_classes", "hidden", "input_dim", "width", "channels", "depth", "head",
               "normalize", "bogus")  # fmt: skip
arch_kwargs = st.dictionaries(
    st.sampled_from(KWARG_NAMES),
    st.one_of(
        st.integers(-3, 10**12),
        st.lists(st.integers(-2, 10**6), max_size=3),
        st.none(),
        st.text(max_size=4),
        st.booleans(),
        st.floats(width=64),
    ),
    max_size=3,
)


@FAST
@given(
    arch=st.sampled_from(["mlp", "resnet20s", "cnn1d", "torchvision:resnet18", "nope", None]),
    kwargs=arch_kwargs,
    stored=st.one_of(st.none(), arch_kwargs),
)
def test_any_architecture_kwargs_build_or_raise_checkpoint_error(
    originals, tmp_path, arch, kwargs, stored
):
    path = tmp_path / "m.safetensors"
    if stored is None:
        path.write_bytes(originals["safetensors"])
    else:  # the file's own metadata claims other kwargs (e.g. hidden=[20000, 20000])
        from safetensors.torch import load_file, save_file

        source = tmp_path / "source.safetensors"
        source.write_bytes(originals["safetensors"])
        save_file(load_file(source), str(path), {"arch": "mlp", "arch_kwargs": json.dumps(stored)})
    try:
        model = load_checkpoint(path, arch=arch, **kwargs)
    except CheckpointError as exc:
        assert "\x1b" not in str(exc)
    else:
        assert sum(p.numel() for p in model.parameters()) == 53  # the file's weights, no more
