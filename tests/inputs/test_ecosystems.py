"""Models from the field's ecosystems (issue 25), run with the recipes of
``docs/bring-your-own.md`` exactly as the page prints them (see :mod:`helpers.recipes`).

Every file is written by the ecosystem's own save call: a user's own class saved with
``torch.save(model.state_dict())`` and ``torch.save(model)``, Lightning's ``Trainer`` with a
``ModelCheckpoint`` (a torchvision ResNet-18 held as ``self.model``, a user's CNN held as
``self.net``), timm's ``CheckpointSaver`` and a plain timm state dict. Each model's head is fitted
by least squares on its trunk's features: to D_tr (the original memorises it) or without the
forgotten class (retrained), so the rows must differ.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from helpers.designs import FIXED_FLAGS
from helpers.recipes import Project, differ, new_project, write_cifar10
from torch import nn

MYNETS = textwrap.dedent(
    '''
    """A user's own model class (what a training script imports)."""
    from torch import nn


    class MyCNN(nn.Module):
        def __init__(self, num_classes=10, width=192):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()
            )
            self.head = nn.Linear(4 * width, num_classes)

        def forward(self, x):
            return self.head(self.features(x))
    '''
)


def fit_head(head: nn.Linear, features: torch.Tensor, labels: np.ndarray, ridge: float = 0.0):
    """Least-squares head on ``features`` to 10 × one-hot ``labels`` (memorises without ridge)."""
    x = torch.cat([features, torch.ones(len(features), 1)], 1).double()
    y = 10.0 * nn.functional.one_hot(torch.as_tensor(labels), head.out_features).double()
    if ridge:
        w = torch.linalg.solve(x.T @ x + ridge * torch.eye(x.shape[1], dtype=x.dtype), x.T @ y)
    else:
        w = torch.linalg.lstsq(x, y, driver="gelsd").solution
    with torch.no_grad():
        head.weight.copy_(w[:-1].T.float())
        head.bias.copy_(w[-1].float())


def head_input(model: nn.Module, head: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """What ``head`` receives when ``model`` runs on ``x`` (eval mode)."""
    seen: list[torch.Tensor] = []
    hook = head.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            model.eval()(x)
    finally:
        hook.remove()
    return seen[0]


def two_heads(
    model: nn.Module,
    head: nn.Linear,
    x: torch.Tensor,
    y: np.ndarray,
    keep: np.ndarray,
    ridge: float = 1e3,
):
    """Yield the model with a head memorising D_tr, then one fitted without the forget class
    (``ridge``: small enough that it still classifies D_r, which add-model checks)."""
    features = head_input(model, head, x)
    fit_head(head, features, y)
    yield "original"
    fit_head(head, features[keep], y[keep], ridge=ridge)
    yield "retrained"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A project with a tiny CIFAR-10 and the runs of the three recipes."""
    project = new_project(tmp_path_factory, "ecosystems")
    root = project.root
    images = write_cifar10(root / "data", np.random.default_rng(0))
    x = torch.from_numpy(images["x_train"]).float() / 255
    y = images["y_train"]
    keep = np.flatnonzero(y != 0)  # airplane is class 0
    torch.manual_seed(0)

    own = root / "runs" / "own"
    own.mkdir(parents=True)
    (own / "mynets.py").write_text(MYNETS, encoding="utf-8")
    namespace: dict = {}
    exec(compile(MYNETS, "mynets.py", "exec"), namespace)  # the class, without importing it
    cnn = namespace["MyCNN"]()
    for name in two_heads(cnn, cnn.head, x, y, keep):
        torch.save(cnn.state_dict(), own / f"{name}.pt")
    _save_whole_pickle(own, cnn)

    _lightning_runs(root / "runs" / "lit", x, y, keep, namespace["MyCNN"])
    _timm_runs(root / "runs" / "timm", x, y, keep)
    return project


def _save_whole_pickle(folder: Path, model: nn.Module) -> None:
    """``torch.save(model)`` of the user's class imported as ``mynets`` (as their script does)."""
    import importlib
    import sys

    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module("mynets")
        whole = module.MyCNN()
        whole.load_state_dict(model.state_dict())
        torch.save(whole, folder / "unlearned_full.pt")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("mynets", None)


def _lightning_runs(folder: Path, x: torch.Tensor, y: np.ndarray, keep: np.ndarray, cnn_class):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Frozen(L.LightningModule):
        """One optimiser step at lr 0 in eval mode: Lightning saves the weights as set."""

        def forward(self, batch):
            return self.inner()(batch)

        def training_step(self, batch, _index):
            self.eval()
            xb, yb = batch
            return nn.functional.cross_entropy(self(xb), yb)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class LitResNet(Frozen):
        def __init__(self, num_classes: int = 10, lr: float = 0.1):
            super().__init__()
            self.save_hyperparameters()
            self.model = torchvision.models.resnet18(num_classes=num_classes)

        def inner(self):
            return self.model

    class LitCNN(Frozen):
        def __init__(self, num_classes: int = 10, lr: float = 0.1):
            super().__init__()
            self.save_hyperparameters()
            self.net = cnn_class(num_classes=num_classes)

        def inner(self):
            return self.net

    data = torch.utils.data.TensorDataset(x[:4], torch.as_tensor(y[:4]))
    loader = torch.utils.data.DataLoader(data, batch_size=4)

    def save(module: L.LightningModule, name: str) -> L.Trainer:
        trainer = L.Trainer(
            max_steps=1, accelerator="cpu", logger=False, enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[ModelCheckpoint(dirpath=folder, filename=name)],
        )  # fmt: skip
        trainer.fit(module, loader)
        return trainer

    lit = LitResNet()
    heads = two_heads(lit.model, lit.model.fc, x, y, keep)
    trainer = save(lit, next(heads))  # the ModelCheckpoint callback writes original.ckpt
    trainer.save_checkpoint(folder / f"{next(heads)}.ckpt")  # the same format, saved directly
    lit_cnn = LitCNN()
    fit_head(lit_cnn.net.head, head_input(lit_cnn.net, lit_cnn.net.head, x), y)
    save(lit_cnn, "cnn")
    (folder / "cnn.py").write_text(MYNETS, encoding="utf-8")


def timm_train_args(model: str, num_classes: int) -> argparse.Namespace:
    """The ``args`` timm's ``train.py`` hands to ``CheckpointSaver``: its argument parser's kinds
    of values (text, numbers, None, flags, lists, nargs=3 sizes) and what the script sets later
    (device, world size), parsed from a command line as the script does."""
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--num-classes", type=int, default=None)
    parser.add_argument("--input-size", default=None, nargs=3, type=int)
    parser.add_argument("--mean", type=float, nargs="+", default=None)
    parser.add_argument("--std", type=float, nargs="+", default=None)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--decay-milestones", default=[30, 60], type=int, nargs="+")
    parser.add_argument("--scale", type=float, nargs="+", default=[0.08, 1.0])
    parser.add_argument("--pretrained", action="store_true", default=False)
    parser.add_argument("--opt", default="sgd")
    parser.add_argument("--aa", type=str, default=None)
    argv = ["data", "--model", model, "--num-classes", str(num_classes), "--input-size", "3",
            "32", "32", "--mean", "0.4914", "0.4822", "0.4465", "--lr", "0.1"]  # fmt: skip
    args = parser.parse_args(argv)
    args.device, args.distributed, args.world_size, args.rank = "cpu", False, 1, 0
    args.prefetcher = not getattr(args, "no_prefetcher", False)
    return args


def _timm_runs(folder: Path, x: torch.Tensor, y: np.ndarray, keep: np.ndarray) -> None:
    import timm
    from timm.utils import CheckpointSaver

    folder.mkdir(parents=True)
    model = timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    args = timm_train_args("mobilenetv3_small_100", 10)
    # mobilenetv3's untrained features are small: a ridge of 1e3 flattens the head to chance
    for name in two_heads(model, model.classifier, x, y, keep, ridge=1e-2):
        if name == "original":
            saver = CheckpointSaver(
                model, optimizer, args=args, checkpoint_dir=str(folder), max_history=1
            )
            saver.save_checkpoint(epoch=0, metric=1.0)
        else:
            torch.save(model.state_dict(), folder / "retrained.pth")


@pytest.mark.slow  # > 10 s on 2 cores (make test-slow, CI)
def test_own_class_by_file_and_a_whole_pickle(project: Project):
    steps = project.run("own-class")
    said = "\n".join(s.out for s in steps)
    assert "architecture (the pickled MyCNN object) with 10 outputs" in said
    assert "TorchScript" not in said
    ws = project.workspace("WS-own")
    entry = {m.name: m for m in ws.models}["original"]
    assert entry.arch == "file:" + str(project.root / "runs/own/mynets.py") + ":MyCNN"
    assert entry.trusted and entry.arch_sha256 and entry.arch_kwargs["num_classes"] == 10
    rows = project.results("own.json")
    assert set(rows) == {"original", "retrained", "full"}
    assert differ(rows["original"], rows["retrained"])
    assert rows["original"]["acc_r"] == 100.0  # the memorised head, read back exactly
    # the file changed after it was trusted: refused before any of it runs
    mynets = project.root / "runs/own/mynets.py"
    mynets.write_text(mynets.read_text() + "\nraise SystemExit('ran')\n", encoding="utf-8")
    step = project.command(["python", "-m", "sde_core", "evaluate", "WS-own", "--no-store"])
    assert step.code == 1 and "changed since it was trusted" in step.err
    assert "--trusted --replace" in step.err


@pytest.mark.slow  # > 10 s on 2 cores (make test-slow, CI)
def test_lightning_checkpoints(project: Project):
    steps = project.run("lightning")
    said = "\n".join(s.out for s in steps)
    assert "is a Lightning checkpoint (version" in said
    assert "starts with 'model.'" in said and "starts with 'net.'" in said
    kwargs = {m.name: m.arch_kwargs for m in project.workspace("WS-lit").models}
    assert kwargs["original"] == {"num_classes": 10}  # hyper_parameters: num_classes, not lr
    rows = project.results("lit.json")
    assert set(rows) == {"original", "retrained", "cnn"}
    assert differ(rows["original"], rows["retrained"])
    assert rows["original"]["acc_r"] == 100.0 and rows["cnn"]["acc_r"] == 100.0


@pytest.mark.slow  # > 10 s on 2 cores (make test-slow, CI)
def test_timm_checkpoints(project: Project):
    project.run("timm")
    archs = {m.name: m.arch for m in project.workspace("WS-timm").models}
    assert archs == {"original": "timm:mobilenetv3_small_100", "retrained": archs["retrained"]}
    rows = project.results("timm.json")
    assert differ(rows["original"], rows["retrained"])
    assert rows["original"]["acc_r"] == 100.0


# ------------------------------------------------------------------------- messages and init


def test_a_transformers_folder_names_its_route(tmp_path: Path, capsys):
    from safetensors.torch import save_file

    from sde_core.cli import main

    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x_train=x[:40], y_train=np.arange(40) % 2, x_test=x[40:],
             y_test=np.arange(20) % 2)  # fmt: skip
    np.save(tmp_path / "f.npy", np.arange(10))
    folder = tmp_path / "WS" / "hf" / "original"  # what trainer.save_model writes
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    save_file({"model.layers.0.self_attn.q_proj.weight": torch.zeros(4, 4)},
              str(folder / "model.safetensors"))  # fmt: skip
    (tmp_path / "WS" / "d.npz").write_bytes((tmp_path / "d.npz").read_bytes())
    (tmp_path / "WS" / "f.npy").write_bytes((tmp_path / "f.npy").read_bytes())
    capsys.readouterr()
    assert main(["workspace", "init", str(tmp_path / "WS"), "--dataset-kind", "npz",
                 "--dataset-root", "d.npz", "--forget", "f.npy"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "|D_te|/4 (null check" in out and "the null check is on" in out
    # The folder takes the language-model route; its config (a default 7-billion-parameter
    # LLaMA beside a 4x4 weights file) is refused before anything is allocated.
    assert main(["workspace", "add-model", str(tmp_path / "WS"), "--name", "lm",
                 "--checkpoint", str(folder)]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "config.json describes" in err and "GiB" in err, err
    # The weights file alone names the routes that work.
    assert main(["workspace", "add-model", str(tmp_path / "WS"), "--name", "lm",
                 "--checkpoint", str(folder / "model.safetensors")]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert "--arch hf" in err and "--activations" in err, err


def test_init_keeps_the_null_check_or_warns_before_the_run(tmp_path: Path):
    from sde_core.services.sizing import suggest_subset_size
    from sde_core.services.workspaces import create_workspace

    forget = np.arange(200)
    assert suggest_subset_size(2000, 400, forget) == 100  # |D_te|/4, not |D_te|/2 = 200
    rng = np.random.default_rng(1)
    x = rng.normal(size=(700, 3)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x_train=x[:600], y_train=np.arange(600) % 3, x_test=x[600:],
             y_test=np.arange(100) % 3)  # fmt: skip
    made = create_workspace(tmp_path, {"kind": "npz", "root": "d.npz"}, random_forget=0.2,
                            defaults={"subset_size": 40})  # fmt: skip
    assert any("switches the null check off" in n and "n ≤ 25" in n for n in made.notes)


def test_index_and_mask_arrays_beside_the_layer_are_metadata(tmp_path: Path):
    from sde_core.inputs.precomputed import load_precomputed
    from sde_core.services.workspaces import create_workspace

    rng = np.random.default_rng(2)
    split = np.array(["train"] * 80 + ["test"] * 40)
    forget_idx = np.arange(0, 80, 4)
    mask = np.zeros(120, dtype=bool)
    mask[forget_idx] = True
    for name, extra in (("mask", {"forget_mask": mask}), ("idx", {"forget_idx": forget_idx})):
        hidden = rng.normal(size=(120, 6)).astype(np.float32)
        np.savez(tmp_path / f"{name}.npz", hidden=hidden, split=split, label=np.arange(120) % 2,
                 retain_idx=np.arange(1, 80, 4), **extra)  # fmt: skip
        pre = load_precomputed(tmp_path / f"{name}.npz")
        assert pre.layers == ["hidden"]
        assert np.array_equal(np.flatnonzero(pre.forget_mask), forget_idx)
        made = create_workspace(tmp_path / name, {"kind": "activations",
                                                  "root": str(tmp_path / f"{name}.npz")},
                                roots=[tmp_path])  # fmt: skip
        assert made.n_forget == forget_idx.size
        assert any("marks as forget" in n for n in made.notes)


def test_one_models_bad_layer_is_reported_on_its_row(tmp_path: Path, capsys):
    import json

    from sde_core.cli import main

    rng = np.random.default_rng(3)
    split = np.array(["train"] * 120 + ["test"] * 60)
    forget = np.zeros(120, dtype=bool)
    forget[:30] = True
    base = {"split": split, "label": np.arange(180) % 2, "forget": forget}
    np.savez(tmp_path / "data.npz", hidden=rng.normal(size=(180, 4)).astype(np.float32), **base)
    for name, layer in (("orig", "hidden"), ("other", "pooled"), ("retrain", "hidden")):
        arrays = {layer: rng.normal(size=(180, 4)).astype(np.float32), "split": split}
        np.savez(tmp_path / f"{name}.npz", **arrays)
    ws = str(tmp_path / "WS")
    argv = ["workspace", "init", ws, "--dataset-kind", "activations", "--dataset-root"]
    assert main([*argv, str(tmp_path / "data.npz")]) == 1  # outside the roots: nothing written
    (tmp_path / "WS").mkdir()
    for name in ("data", "orig", "other", "retrain"):
        (tmp_path / "WS" / f"{name}.npz").write_bytes((tmp_path / f"{name}.npz").read_bytes())
    assert main([*argv, "data.npz"]) == 0  # the file's forget mask is the forget set
    assert "the 30 rows the activations file marks as forget" in capsys.readouterr().out
    for name in ("orig", "other", "retrain"):
        assert main(["workspace", "add-model", ws, "--name", name, "--activations",
                     str(tmp_path / "WS" / f"{name}.npz")]) == 0  # fmt: skip
    code = main(["evaluate", ws, "--layer", "hidden", "--no-store", "--json",
                 str(tmp_path / "r.json"), "--targets", "6", "--splits", "20",
                 "--baseline-targets", "0", *FIXED_FLAGS])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1
    assert "other: not evaluated — layer 'hidden' is not in" in out
    assert "error: model 'other' was not evaluated" in err and "pooled" in err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert set(doc["models"]) == {"orig", "retrain"} and set(doc["not_evaluated"]) == {"other"}


# ------------------------------------------------------------------------- loader units


def test_timm_arch_hint_is_checked_against_the_shapes(tmp_path: Path, monkeypatch):
    import sys

    import timm
    from timm.utils import CheckpointSaver

    from sde_core.errors import CheckpointError
    from sde_core.inputs.checkpoint_files import inspect_checkpoint
    from sde_core.inputs.external_archs import timm_builder
    from sde_core.inputs.models import load_checkpoint_details

    model = timm.create_model("resnet18", pretrained=False, num_classes=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    saver = CheckpointSaver(  # with args, as train.py saves: arch = args.model
        model, optimizer, args=timm_train_args("resnet18", 7), checkpoint_dir=str(tmp_path)
    )
    saver.save_checkpoint(epoch=3, metric=0.5)
    path = tmp_path / "last.pth.tar"
    info = inspect_checkpoint(path)  # the argparse.Namespace is plain data: no opt-in
    assert "argparse.Namespace" in info.objects and info.kind == "weights"
    loaded = load_checkpoint_details(path)  # not the registry's CIFAR resnet18: shapes decide
    assert loaded.arch == "timm:resnet18" and loaded.arch_kwargs["num_classes"] == 7
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(loaded.model(x), model.eval()(x), atol=1e-5)
    monkeypatch.setitem(sys.modules, "timm", None)  # the optional extra is not installed
    timm_builder.cache_clear()
    with pytest.raises(CheckpointError, match=r"pip install -e '\.\[timm\]'"):
        load_checkpoint_details(path, arch="timm:resnet34")  # not built in this process yet


def test_file_arch_runs_only_trusted_and_pinned(tmp_path: Path):
    from sde_core.errors import CheckpointError
    from sde_core.inputs.activations import checkpoint_layers
    from sde_core.inputs.external_archs import file_arch_string
    from sde_core.inputs.models import load_checkpoint, load_checkpoint_details

    marker = tmp_path / "ran"
    source = MYNETS + f"\nimport os\nopen({str(marker)!r}, 'a').write(f'{{os.getpid()}} ')\n"
    (tmp_path / "nets.py").write_text(source, encoding="utf-8")
    namespace: dict = {}
    exec(compile(MYNETS, "nets.py", "exec"), namespace)
    torch.save({"model." + k: v for k, v in namespace["MyCNN"](num_classes=3).state_dict().items()},
               tmp_path / "w.pt")  # fmt: skip
    arch = file_arch_string(tmp_path / "nets.py", "MyCNN")
    for call in (lambda: load_checkpoint(tmp_path / "w.pt", arch=arch),
                 lambda: checkpoint_layers(tmp_path / "w.pt", (3, 8, 8), arch=arch)):  # fmt: skip
        with pytest.raises(CheckpointError, match="runs only for a model you trusted"):
            call()
    assert not marker.exists()  # nothing of the file ran
    import hashlib

    pin = hashlib.sha256(source.encode()).hexdigest()
    layers = checkpoint_layers(
        tmp_path / "w.pt",
        (3, 8, 8),
        arch=file_arch_string(tmp_path / "nets.py", "MyCNN", pin),
        trusted=True,
    )  # fmt: skip: in the isolated child
    assert any(info.name == "head" for info in layers)
    ran_in = marker.read_text().split()
    assert ran_in and str(os.getpid()) not in ran_in  # it ran in the child process, not here
    loaded = load_checkpoint_details(tmp_path / "w.pt", arch=arch, trusted=True)
    assert loaded.arch_kwargs == {"num_classes": 3} and marker.exists()
    assert any("starts with 'model.'" in note for note in loaded.notes)
    marker.unlink()
    (tmp_path / "nets.py").write_text(source + "\n# edited\n", encoding="utf-8")
    with pytest.raises(CheckpointError, match="changed since it was trusted"):
        load_checkpoint(tmp_path / "w.pt", arch=file_arch_string(tmp_path / "nets.py", "MyCNN",
                                                                 pin), trusted=True)  # fmt: skip
    assert not marker.exists()


def test_a_file_module_that_runs_a_script_at_import_gets_the_main_guard_hint(tmp_path: Path):
    import hashlib

    from sde_core.errors import ActivationError
    from sde_core.inputs.activations import checkpoint_layers
    from sde_core.inputs.external_archs import file_arch_string

    source = MYNETS + "\nimport sys\nsys.exit(0)  # a training script's end, unguarded\n"
    (tmp_path / "train.py").write_text(source, encoding="utf-8")
    namespace: dict = {}
    exec(compile(MYNETS, "train.py", "exec"), namespace)
    torch.save(namespace["MyCNN"](num_classes=3).state_dict(), tmp_path / "w.pt")
    pin = hashlib.sha256(source.encode()).hexdigest()
    arch = file_arch_string(tmp_path / "train.py", "MyCNN", pin)
    with pytest.raises(ActivationError, match=r'if __name__ == "__main__":'):
        checkpoint_layers(tmp_path / "w.pt", (3, 8, 8), arch=arch, trusted=True)
