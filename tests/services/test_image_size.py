"""An ImageFolder workspace's image size against the size a model's file records (issue 40):
read from a Lightning checkpoint's hyper_parameters, timm train.py's args and a model folder's
config.json, without running code; a mismatch refused at add-model with both sizes and the
option, a match or no record said in a note."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sde_core.errors import DataError
from sde_core.inputs.architectures import build_model
from sde_core.services.image_size import recorded_image_size
from sde_core.services.workspace_models import ModelSpec, add_model
from sde_core.services.workspaces import create_workspace

KW = {"input_dim": 3 * 16 * 16, "hidden": [8], "num_classes": 2}


def _state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return build_model("mlp", **KW).state_dict()


def test_the_recorded_size_is_read_from_each_kind_of_record(tmp_path: Path):
    lightning = tmp_path / "a.ckpt"
    torch.save({"state_dict": _state(), "pytorch-lightning_version": "2.4.0",
                "hyper_parameters": {"lr": 0.1, "image_size": 32}}, lightning)  # fmt: skip
    timm_file = tmp_path / "last.pth.tar"
    args = argparse.Namespace(model="resnet18", img_size=None, input_size=[3, 48, 48], lr=0.1)
    torch.save({"epoch": 3, "state_dict": _state(), "args": args}, timm_file)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"image_size": 224}), encoding="utf-8")
    plain = tmp_path / "plain.pth"
    torch.save(_state(), plain)
    assert recorded_image_size(lightning) == (32, "hyper_parameters image_size")
    assert recorded_image_size(timm_file) == (48, "args input_size")
    assert recorded_image_size(folder) == (224, "config.json image_size")
    assert recorded_image_size(plain) is None


def _image_folder(root: Path) -> None:
    rng = np.random.default_rng(0)
    for split, count in (("train", 12), ("test", 8)):
        for label in ("cat", "dog"):
            d = root / split / label
            d.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(d / f"{i}.png")


def test_add_model_refuses_a_size_the_file_contradicts_and_says_the_others(tmp_path: Path):
    data = tmp_path / "data"
    _image_folder(data)
    ws = tmp_path / "ws"
    create_workspace(ws, {"kind": "imagefolder", "root": str(data),
                          "options": {"image_size": 16}}, random_forget=0.25,
                     roots=[tmp_path])  # fmt: skip
    wrong = tmp_path / "wrong.ckpt"
    torch.save({"state_dict": _state(), "pytorch-lightning_version": "2.4.0",
                "hyper_parameters": {"image_size": 32}}, wrong)  # fmt: skip
    spec = ModelSpec(name="u", role="unlearned", arch="mlp", arch_kwargs=KW)
    roots = [tmp_path]
    with pytest.raises(DataError) as err:
        add_model(ws, spec, checkpoint=wrong, roots=roots)
    text = str(err.value)
    assert "records training images of 32×32 px" in text and "resizes images to 16×16 px" in text
    assert f"workspace init {ws}" in text and "image_size=32" in text
    lenient = ModelSpec(name="u", role="unlearned", arch="mlp", arch_kwargs=KW,
                        check_accuracy=False)  # fmt: skip
    warned = add_model(ws, lenient, checkpoint=wrong, roots=roots)
    assert any(n.startswith("warning:") and "32×32" in n for n in warned.notes)
    right = tmp_path / "right.ckpt"
    torch.save({"state_dict": _state(), "pytorch-lightning_version": "2.4.0",
                "hyper_parameters": {"image_size": 16}}, right)  # fmt: skip
    added = add_model(ws, ModelSpec(name="v", role="unlearned", arch="mlp", arch_kwargs=KW),
                      checkpoint=right, roots=roots)  # fmt: skip
    assert "image size 16×16 px matches right.ckpt's hyper_parameters image_size" in added.notes
