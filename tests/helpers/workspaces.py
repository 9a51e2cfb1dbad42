"""A tiny valid workspace on disk (an npz dataset, an MLP original with its initial weights and a
checkpoint, a random model), for the workspace, model-input, path-policy and page tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from helpers.designs import fixed_settings
from sde_core.inputs.architectures import build_model
from sde_core.learning.training import save_weights
from sde_core.pipeline.workspace import CheckpointRef, ModelEntry, Workspace
from sde_core.pipeline.workspace_write import rehash_models, write_workspace

__all__ = ["MLP_KWARGS", "N_TRAIN", "make_workspace"]

N_TRAIN = 50
MLP_KWARGS = {"input_dim": 4, "hidden": [8], "num_classes": 3}


def make_workspace(root: Path) -> Workspace:
    """A valid workspace on a tiny npz dataset: an original (with init/checkpoints), a random."""
    rng = np.random.default_rng(0)
    np.savez(
        root / "data.npz",
        x_train=rng.normal(size=(N_TRAIN, 4)).astype(np.float32),
        y_train=rng.integers(0, 3, N_TRAIN),
        x_test=rng.normal(size=(20, 4)).astype(np.float32),
        y_test=rng.integers(0, 3, 20),
    )
    np.save(root / "forget.npy", np.arange(10))
    ws = Workspace(root.resolve(), {"kind": "npz", "root": "data.npz"}, "forget.npy", name="tiny")
    write_workspace(ws)
    for name in ("init", "ckpt_050", "final", "random"):
        torch.manual_seed(len(name))
        save_weights(
            build_model("mlp", **MLP_KWARGS), root / "models" / f"{name}.safetensors", arch="mlp"
        )
    ws.add_model(
        ModelEntry(
            name="original",
            role="original",
            arch="mlp",
            checkpoint="models/final.safetensors",
            method="train",
            arch_kwargs=MLP_KWARGS,
            hyperparameters={"lr": 0.1, "epochs": 4},
            seed=0,
            seconds=1.5,
            init_checkpoint="models/init.safetensors",
            checkpoints=[CheckpointRef(0.5, "models/ckpt_050.safetensors")],
        )
    )
    ws.add_model(
        ModelEntry(name="rand", role="random", arch="mlp", checkpoint="models/random.safetensors")
    )
    ws.defaults = fixed_settings(subset_size=20, sigma=2.5, targets=5)
    rehash_models(ws)
    write_workspace(ws)
    return ws
