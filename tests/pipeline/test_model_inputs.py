"""How a workspace model is built and read: arch_kwargs, trusted, per-model activations files,
activation-cache keys shared with the dashboard's extraction, malformed checkpoint metadata."""

from __future__ import annotations

# Float tolerances in this file compare float32 activations computed twice in one process by
# the same torch kernels (through the hooks, and directly): they differ only by float32
# summation order, ~1e-6 relative. Results that cross machines are compared by
# sde_core.pipeline.reproduce (docs/method.md §13).
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.workspaces import MLP_KWARGS, N_TRAIN, make_workspace
from safetensors.torch import save_file

from sde_core.errors import ActivationError, CheckpointError, WorkspaceError
from sde_core.inputs import activations
from sde_core.inputs.activation_cache import ActivationCache
from sde_core.inputs.activations import get_activations
from sde_core.inputs.architectures import build_model
from sde_core.inputs.data import load_dataset
from sde_core.pipeline.local_trust import trust_model
from sde_core.pipeline.model_inputs import (
    entry_activations,
    entry_layer_infos,
    load_entry_model,
)
from sde_core.pipeline.workspace import PRECOMPUTED, ModelEntry, Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path)


@pytest.fixture
def extractions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    rows: list[int] = []
    real = activations.extract_activations

    def counting(model, dataset, layers, **kwargs):
        out = real(model, dataset, layers, **kwargs)
        rows.append(next(iter(out.values())).shape[0])
        return out

    monkeypatch.setattr(activations, "extract_activations", counting)
    return rows


def test_cache_is_shared_with_get_activations_when_kwargs_match_the_file(ws, extractions):
    bundle = load_dataset(ws.dataset_spec())
    cache = ActivationCache(ws.root / ".sde-cache" / "activations")
    entry = ws.original()  # its arch_kwargs are those recorded in the safetensors header
    mine = entry_activations(ws, entry, bundle, "train", "output", cache)["output"]
    theirs = get_activations(ws.path(entry.checkpoint), bundle, "train", "output", cache,
                             arch=entry.arch)["output"]  # fmt: skip
    assert extractions == [N_TRAIN] and np.array_equal(mine, theirs)


def test_kwargs_that_change_the_build_get_their_own_cache_entry(ws, extractions, tmp_path):
    torch.manual_seed(0)
    model = build_model("mlp", input_dim=4, hidden=[8], num_classes=3)
    torch.save(model.state_dict(), ws.root / "plain.pth")  # no metadata: kwargs are inferred
    entry = ModelEntry("plain", "unlearned", "mlp", "plain.pth", arch_kwargs=MLP_KWARGS)
    bundle = load_dataset(ws.dataset_spec())
    cache = ActivationCache(tmp_path / "cache")
    first = entry_activations(ws, entry, bundle, "test", ["output", "penultimate"], cache)
    again = entry_activations(ws, entry, bundle, "test", ["output", "penultimate"], cache)
    assert extractions == [20] and all(np.array_equal(first[k], again[k]) for k in first)
    with torch.inference_mode():
        x, _ = bundle.test.get_batch(np.arange(20))
        expected = torch.softmax(model.eval()(x), dim=1).numpy()
    assert np.allclose(first["output"], expected, atol=1e-6)


def test_precomputed_entries_read_their_own_file_aligned_to_a_subset(ws):
    rng = np.random.default_rng(0)
    train, test = rng.normal(size=(N_TRAIN, 3)), rng.normal(size=(20, 3))
    np.savez(ws.root / "acts.npz", train_h=train, test_h=test)
    ws.dataset["train_size"] = 30  # a random subset: rows are picked by source index
    bundle = load_dataset(ws.dataset_spec())
    entry = ModelEntry("pre", "unlearned", PRECOMPUTED, activations="acts.npz")
    got = entry_activations(ws, entry, bundle, "train", "h", None)["h"]
    assert np.allclose(got, train[bundle.source_indices["train"]].astype(np.float32))
    assert [i.name for i in entry_layer_infos(ws, entry, bundle.input_shape)] == ["h"]
    with pytest.raises(ActivationError, match="layer 'output' is not in"):
        entry_activations(ws, entry, bundle, "train", "output", None)
    np.savez(ws.root / "short.npz", train_h=train[:10], test_h=test)
    entry.activations = "short.npz"
    with pytest.raises(ActivationError, match="10 train rows but the dataset has 30"):
        entry_activations(ws, entry, bundle, "train", "h", None)


@pytest.mark.parametrize("meta", ["[1, 2]", "7", '"text"', "null", "{not json"])
def test_malformed_arch_kwargs_metadata_is_a_checkpoint_error(ws, meta):
    state = build_model("mlp", **MLP_KWARGS).state_dict()
    path = ws.root / "models" / "odd.safetensors"
    save_file(state, str(path), metadata={"arch": "mlp", "arch_kwargs": meta})
    entry = ModelEntry("odd", "unlearned", "", "models/odd.safetensors")
    with pytest.raises(CheckpointError, match=r"arch_kwargs|corrupt"):
        load_entry_model(ws, entry)


def test_trusted_code_is_read_only_in_the_child(ws, monkeypatch):
    """A weights file loads here (no code can run, trusted or not); a trusted code file only in
    the isolated child, which sends back its weights (issue 20)."""
    seen = {}

    def loader(path, arch=None, trusted=False, **kwargs):
        seen.update(trusted=trusted, kwargs=kwargs, arch=arch)
        return build_model("mlp", **MLP_KWARGS)

    def child(path, *, arch=None, arch_kwargs=None, time_limit=None):
        seen.update(child=(Path(path).name, arch, arch_kwargs, time_limit))
        return build_model("mlp", **MLP_KWARGS)

    monkeypatch.setattr("sde_core.inputs.models.load_checkpoint", loader)
    monkeypatch.setattr("sde_core.inputs.trusted_probing.trusted_weights", child)
    entry = ws.original()
    entry.trusted = True
    load_entry_model(ws, entry)
    assert seen == {"trusted": False, "kwargs": MLP_KWARGS, "arch": "mlp"}
    torch.save(build_model("mlp", **MLP_KWARGS), ws.root / "models" / "full.pt")  # a full pickle
    entry.checkpoint = "models/full.pt"
    with pytest.raises(WorkspaceError, match="not trusted on this machine"):
        load_entry_model(ws, entry)  # trusted = true alone: the workspace cannot trust itself
    trust_model(ws, entry)  # the local opt-in (`workspace trust`)
    load_entry_model(ws, entry, time_limit=5.0)
    assert seen["child"] == ("full.pt", "mlp", MLP_KWARGS, 5.0)
    assert json.dumps(seen["kwargs"])  # plain, serialisable kwargs
