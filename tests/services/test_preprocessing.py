"""The accuracy check that catches preprocessing unlike the training's (issue 40)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sde_core.errors import CheckpointError, DataError
from sde_core.inputs.architectures import build_model
from sde_core.inputs.data import DatasetSpec, load_dataset
from sde_core.services.preprocessing import accuracy_sample, check_accuracy, preprocessing_text
from sde_core.services.uploads import Upload, add_uploaded_model
from sde_core.services.workspace_models import ModelSpec, add_model
from sde_core.services.workspaces import create_workspace


@pytest.fixture
def images(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    labels = np.arange(400) % 4
    colours = rng.integers(0, 256, (4, 1, 1, 3))
    x = np.clip(colours[labels] + rng.normal(0, 30, (400, 8, 8, 3)), 0, 255).astype(np.uint8)
    np.savez(tmp_path / "images.npz", x_train=x[:300], y_train=labels[:300],
             x_test=x[300:], y_test=labels[300:])  # fmt: skip
    return tmp_path / "images.npz"


def test_chance_accuracy_is_refused_with_the_numbers_and_the_options(images: Path):
    norm = [[0.5, 0.5, 0.5], [0.25, 0.25, 0.25]]
    bundle = load_dataset(DatasetSpec("npz", images, options={"normalize": norm}))
    x, y = accuracy_sample(bundle, np.arange(10))
    assert x.shape == (200, 3, 8, 8) and len(y) == 200  # of the 290 rows of D_r
    said = preprocessing_text(bundle)
    assert "3×8×8 RGB images" in said and "mean [0.5, 0.5, 0.5]" in said
    right = np.eye(4)[y] * 5.0
    assert "200 of 200 rows of D_r (100.0%)" in check_accuracy(right, y, bundle, images, images)
    constant = np.tile(np.eye(4)[0], (len(y), 1))  # the commonest class at best
    with pytest.raises(DataError) as err:
        check_accuracy(constant, y, bundle, Path("runs/model.pt"), Path("/data/WS-x"))
    text = str(err.value)
    assert "runs/model.pt classifies only" in text and "binomial p = " in text
    assert "workspace init /data/WS-x" in text and "--no-accuracy-check" in text
    assert "normalisation" in text and "image size" in text and "channel order" in text


@pytest.mark.slow  # > 10 s on 2 cores (make test-slow, CI)
def test_add_model_refuses_a_model_fed_unlike_its_training_and_names_the_users_paths(
    images: Path, tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("SDE_DATA_ROOTS", str(tmp_path))  # the dashboard's upload path
    ws = tmp_path / "ws"
    made = create_workspace(ws, {"kind": "npz", "root": str(images)}, random_forget=0.1,
                            roots=[tmp_path])  # fmt: skip
    assert any(n.startswith("models get 3×8×8 RGB images") and "no normalisation" in n
               for n in made.notes)  # fmt: skip
    bundle = load_dataset(DatasetSpec("npz", images))
    x, y = bundle.train.get_batch(np.arange(300))
    torch.manual_seed(0)
    model = build_model("mlp", input_dim=192, hidden=(32,), num_classes=4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    normed = (x - 0.5) / 0.05  # trained on inputs the workspace does not give it
    for _ in range(200):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(normed.flatten(1)), y).backward()
        opt.step()
    path = tmp_path / "original.pt"
    torch.save(model.state_dict(), path)
    spec = ModelSpec(name="original", arch="mlp", arch_kwargs={"input_dim": 192, "hidden": [32]})
    with pytest.raises(DataError, match="not significantly better than chance"):
        add_model(ws, spec, checkpoint=path, roots=[tmp_path])
    page = add_uploaded_model(ws, Upload("original.pt", path.read_bytes()), spec)  # dashboard
    assert not page.saved
    assert any("not significantly better than chance" in p.message for p in page.problems), [
        str(p) for p in page.problems
    ]
    spec.check_accuracy = False
    assert add_model(ws, spec, checkpoint=path, roots=[tmp_path]).entry.name == "original"
    unknown = tmp_path / "mine.pt"
    torch.save({"blob.weight": torch.zeros(4, 192)}, unknown)
    with pytest.raises(CheckpointError) as err:
        add_model(ws, ModelSpec(name="mine"), checkpoint=unknown, roots=[tmp_path])
    assert f"add-model {ws} --name mine --checkpoint {unknown}" in str(err.value)
    assert "add-model WS" not in str(err.value)
