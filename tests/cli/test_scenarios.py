"""Bring-your-own scenarios (issue 15) end to end: the recipes of ``docs/bring-your-own.md``,
run exactly as the page prints them.

A recipe is a fenced block after ``<!-- recipe: NAME -->`` (shell commands) or ``<!-- file: NAME
-->`` (a script a recipe runs). The fixtures build the files each recipe starts from with the
code bases' own save functions (:mod:`tests.artefacts`: SalUn's ``main_train``/``main_forget``
``.pth.tar`` checkpoints with NumPy scores, Unlearn-Sparse's pruned checkpoints with
``weight_orig``/``weight_mask``, torchvision state dicts from ``nn.DataParallel``, a TorchScript
archive, exported hidden states), on data in its real on-disk layout (CIFAR-10 python batches,
an ImageFolder of JPEGs, ``.npz``/``.parquet`` exports). ``helpers.recipes.Project`` then runs
the recipe line by line like a shell: ``export`` lines set the environment of later commands,
the page's scripts run as ``python script.py ...``, ``python -m sde_core ...`` runs in process,
and a comment ``# error: TEXT`` after a command means it must fail with that message. Only
``evaluate`` gets extra flags (``FAST``: fewer targets and splits, no baselines).

The models differ in ways the data fix: linear heads fitted by least squares on a shared trunk's
features, to D_tr (the original memorises it) or without D_f (unlearned/retrained models), so
each reported accuracy is checked against the accuracy the test computes itself from the same
weights, indices and preprocessing; the hidden-state exports carry a planted in-training signal.
"""

from __future__ import annotations

# Float tolerances in this file compare float32 activations computed twice in one process by
# the same torch kernels (through the hooks, and directly): they differ only by float32
# summation order, ~1e-6 relative. Results that cross machines are compared by
# sde_core.pipeline.reproduce (docs/method.md §13).
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import artefacts
import numpy as np
import pandas as pd
import pytest
import torch
import torchvision
from helpers.recipes import (
    FILES,
    PER_BATCH,
    RECIPES,
    Project,
    Step,
    commands,
    differ,
    new_project,
    same,
    sha256,
    write_cifar10,
)
from PIL import Image
from safetensors.torch import save_file
from torch import nn
from torchvision import transforms

from sde_core.errors import DataError
from sde_core.inputs.checkpoint_files import safe_globals
from sde_core.inputs.data import load_dataset
from sde_core.inputs.precomputed import load_precomputed
from sde_core.services.uploads import Upload, add_uploaded_model
from sde_core.services.workspace_models import ModelSpec


def test_the_page_recipes_are_all_run_here():
    tested = {"salun", "sparse", "torchvision", "hidden-states", "torchscript", "hf-folder"}
    tested |= {"own-class", "lightning", "timm"}  # tests/inputs/test_ecosystems.py
    assert set(RECIPES) == tested and set(FILES) == {"salun_indices.py", "export_hidden.py"}
    compile(FILES["export_hidden.py"], "export_hidden.py", "exec")  # needs a real LM to run
    for block in RECIPES.values():
        assert all(line.startswith(("python ", "export ")) for line, _ in commands(block))


# ------------------------------------------------------------------------------ models


def penultimate(model: nn.Module, x: torch.Tensor, head: str = "fc") -> torch.Tensor:
    """The input of ``model``'s head on ``x`` (eval mode): ``(len(x), features)``."""
    fc = getattr(model, head)
    setattr(model, head, nn.Identity())
    try:
        with torch.no_grad():
            return model.eval()(x)
    finally:
        setattr(model, head, fc)


def set_head(model: nn.Module, features: torch.Tensor, labels: np.ndarray, ridge: float = 0.0):
    """Fit ``model.fc`` by least squares to 10 × one-hot labels (ridge-regularised when
    ``ridge`` > 0): with more features than rows it interpolates, i.e. memorises the rows."""
    classes = model.fc.out_features
    x = torch.cat([features, torch.ones(len(features), 1)], 1).double()
    y = 10.0 * nn.functional.one_hot(torch.as_tensor(labels), classes).double()
    if ridge:
        w = torch.linalg.solve(x.T @ x + ridge * torch.eye(x.shape[1], dtype=x.dtype), x.T @ y)
    else:
        w = torch.linalg.lstsq(x, y, driver="gelsd").solution
    with torch.no_grad():
        model.fc.weight.copy_(w[:-1].T.float())
        model.fc.bias.copy_(w[-1].float())


def predict(model: nn.Module, x: torch.Tensor) -> np.ndarray:
    """Predicted labels ``(len(x),)`` of ``model`` (eval mode) on inputs ``x``."""
    with torch.no_grad():
        return model.eval()(x).argmax(1).numpy()


def head_predictions(model: nn.Module, features: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Predicted labels per split from the head alone, on the trunk's ``features``."""
    with torch.no_grad():
        return {s: model.fc(f).argmax(1).numpy() for s, f in features.items()}


def accuracy(pred: np.ndarray, labels: np.ndarray, rows: np.ndarray) -> float:
    """Top-1 accuracy in % on ``rows``."""
    return float(100.0 * np.mean(pred[rows] == labels[rows]))


# ------------------------------------------------------------------------------ CIFAR-10

SEED, FORGET_CLASS = 2, 0  # the recipes' --seed and --class_to_replace


@dataclass
class SalunSplit:
    """The rows of a SalUn run, computed as its ``dataset.py`` does (independent reference)."""

    marked: np.ndarray  # positions (in the 50,000) of the run's training set, in its order
    trained: np.ndarray  # positions of main_train.py's training set
    forget_images: np.ndarray  # positions of the run's forget images
    train: np.ndarray  # the audit's D_tr: positions in both training sets, in order
    forget: np.ndarray  # D_f as rows of D_tr
    test: np.ndarray  # D_te: test positions


def salun_split(
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    seed: int,
    class_to_replace: int,
    num_indexes_to_replace: int | None,
) -> SalunSplit:
    """``cifar10_dataloaders`` and ``replace_class`` of SalUn's ``dataset.py``, transcribed: the
    validation draw, ``list(set(range(N)) - set(valid_idx))``, the forget draw with
    ``RandomState(seed - 1)``, and the test set without a wholly forgotten class."""

    def kept(seed: int) -> np.ndarray:
        rng = np.random.RandomState(seed)
        valid_idx = []
        for i in range(max(train_labels) + 1):
            class_idx = np.where(train_labels == i)[0]
            valid_idx.append(rng.choice(class_idx, int(0.1 * len(class_idx)), replace=False))
        return np.array(list(set(range(len(train_labels))) - set(np.hstack(valid_idx))))

    marked, trained = kept(seed), kept(1)
    targets = train_labels[marked]
    if class_to_replace == -1:
        indexes = np.flatnonzero(np.ones_like(targets))
    else:
        indexes = np.flatnonzero(targets == class_to_replace)
    if num_indexes_to_replace is not None:
        rng = np.random.RandomState(seed - 1)
        indexes = rng.choice(indexes, size=num_indexes_to_replace, replace=False)
    forget_images = marked[indexes]
    in_trained = set(trained.tolist())
    train = np.array([p for p in marked if p in in_trained])
    forget = np.array([i for i, p in enumerate(train) if p in set(forget_images.tolist())])
    whole = num_indexes_to_replace is None or num_indexes_to_replace == 4500
    test = np.arange(len(test_labels))
    if class_to_replace != -1 and whole:
        test = test[test_labels != class_to_replace]
    return SalunSplit(marked, trained, forget_images, train, forget, test)


class _Exported(nn.Module):
    """A CIFAR classifier exported as TorchScript whose ``forward`` also writes ``marker``
    (``torch.from_file(..., shared=True)`` creates and maps it writable)."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.marker = marker
        self.fc = nn.Linear(3072, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ran = torch.from_file(self.marker, shared=True, size=1, dtype=torch.uint8)
        return self.fc(x.flatten(1)) + ran.fill_(1)[0].float() * 0.0


@dataclass
class Cifar:
    """The CIFAR project: images, the SalUn split, the expected predictions per model file."""

    project: Project
    images: dict[str, np.ndarray]
    split: SalunSplit
    predictions: dict[str, dict[str, np.ndarray]]  # model name -> split -> predicted labels
    marker: Path  # the file the TorchScript model's forward writes


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> Cifar:
    """A project folder with a tiny CIFAR-10, SalUn's checkpoints (original, SalUn, retrain),
    Unlearn-Sparse's pruned ones (IMP round 1, FT from it) and a TorchScript export."""
    project = new_project(tmp_path_factory, "cifar")
    root = project.root
    images = write_cifar10(root / "data", np.random.default_rng(0))
    x = {s: torch.from_numpy(images[f"x_{s}"]).float() / 255 for s in ("train", "test")}
    split = salun_split(images["y_train"], images["y_test"], SEED, FORGET_CLASS, None)
    retain = np.setdiff1d(split.marked, split.forget_images)  # what the unlearning runs train on
    y = images["y_train"]
    predictions: dict[str, dict[str, np.ndarray]] = {}

    # SalUn: the original memorises main_train.py's training set; SalUn and retrain do not
    # see the forget images (head-only stand-ins for the runs, saved as the runs save)
    resnet = artefacts.reference_cifar_resnet18()
    artefacts.set_batchnorm_statistics(resnet, (3, 32, 32))
    features = {s: penultimate(resnet, x[s]) for s in x}
    set_head(resnet, features["train"][split.trained], y[split.trained])
    predictions["original"] = head_predictions(resnet, features)
    artefacts.save_salun_main_train(resnet, root / "runs" / "origin")
    set_head(resnet, features["train"][retain], y[retain])
    predictions["salun"] = head_predictions(resnet, features)
    scores = artefacts.salun_evaluation_result(0)
    artefacts.save_unlearn_checkpoint(resnet, scores, root / "runs" / "salun", "RL")
    set_head(resnet, features["train"][retain], y[retain], ridge=1e3)
    predictions["retrain"] = head_predictions(resnet, features)
    scores = artefacts.salun_evaluation_result(1)
    parallel = nn.DataParallel(resnet)  # a run on several GPUs: every key gets "module."
    artefacts.save_unlearn_checkpoint(parallel, scores, root / "runs" / "retrain", "retrain")

    # Unlearn-Sparse: a resnet20s pruned by global L1 (50%), then FT without the forget images
    sparse = artefacts.reference_resnet_s(20)
    artefacts.set_batchnorm_statistics(sparse, (3, 32, 32))
    artefacts.prune_conv_weights_l1(sparse, 0.5)
    features = {s: penultimate(sparse, x[s]) for s in x}
    set_head(sparse, features["train"][split.trained], y[split.trained])
    predictions["imp"] = head_predictions(sparse, features)
    artefacts.save_sparse_main_imp(sparse, root / "runs" / "imp", state=1)
    set_head(sparse, features["train"][retain], y[retain])
    predictions["imp-ft"] = head_predictions(sparse, features)
    scores = artefacts.salun_evaluation_result(2)
    artefacts.save_unlearn_checkpoint(sparse, scores, root / "runs" / "imp-ft", "FT")

    # TorchScript: saving does not run forward; the marker must not exist before the recipe
    marker = root / "runs" / "exported" / "ran"
    marker.parent.mkdir(parents=True)
    marker.write_bytes(b"\0")  # torch.from_file needs the file while scripting
    exported = _Exported(str(marker))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(exported).save(str(marker.parent / "model.pt"))
    marker.unlink()
    predictions["exported"] = {s: predict(exported, x[s]) for s in x}
    marker.unlink()  # forward ran here, in the test
    return Cifar(project, images, split, predictions, marker)


def _expected_accuracies(c: Cifar, name: str) -> dict[str, float]:
    """Acc_r, Acc_f, Acc_te (%) of a model file from the test's own predictions and split."""
    s = c.split
    pred, y = c.predictions[name], c.images["y_train"]
    d_tr = s.train
    retain_rows = np.setdiff1d(np.arange(d_tr.size), s.forget)
    return {
        "acc_r": accuracy(pred["train"], y, d_tr[retain_rows]),
        "acc_f": accuracy(pred["train"], y, d_tr[s.forget]),
        "acc_te": accuracy(pred["test"], c.images["y_test"], s.test),
    }


@pytest.fixture(scope="module")
def salun_run(cifar: Cifar) -> list[Step]:
    """The SalUn recipe, run once (its workspace ``WS`` is continued by the TorchScript one)."""
    return cifar.project.run("salun")


def test_salun_indices_follow_the_loaders(cifar: Cifar, salun_run: list[Step]):
    ws, s = cifar.project.root / "WS", cifar.split
    assert np.array_equal(np.load(ws / "salun_train.npy"), s.train)
    assert np.array_equal(np.load(ws / "forget.npy"), s.forget)
    assert np.array_equal(np.load(ws / "salun_test.npy"), s.test)
    unseen = np.setdiff1d(s.forget_images, s.trained).size
    assert unseen > 0  # seed 2 ≠ 1: some forget images were main_train.py validation images
    assert (
        f"D_tr: {s.train.size} images, D_f: {s.forget.size} of the run's "
        f"{s.forget_images.size} forget images ({unseen} left out" in salun_run[0].out
    )
    # random forgetting (--num_indexes_to_replace) draws from every class with seed - 1
    argv = ["python", "salun_indices.py", "--data", "data", "--seed", "3",
            "--num_indexes_to_replace", "30", "--out", "random"]  # fmt: skip
    assert cifar.project.command(argv).code == 0
    ref = salun_split(cifar.images["y_train"], cifar.images["y_test"], 3, -1, 30)
    folder = cifar.project.root / "random"
    assert np.array_equal(np.load(folder / "salun_train.npy"), ref.train)
    assert np.array_equal(np.load(folder / "forget.npy"), ref.forget)
    assert np.array_equal(np.load(folder / "salun_test.npy"), np.arange(PER_BATCH))


def test_salun_checkpoints_end_to_end(cifar: Cifar, salun_run: list[Step]):
    root = cifar.project.root
    init, *adds, _ = salun_run[1:]
    s = cifar.split
    assert f"|D_tr| = {s.train.size}, |D_f| = {s.forget.size}, |D_te| = {s.test.size}" in init.out
    for step in adds:
        assert "architecture resnet18 with 10 outputs" in step.out
    ws = cifar.project.workspace("WS")
    files = {"original": "origin/0model_SA_best.pth.tar", "retrain": "retrain/retraincheckpoint"
             ".pth.tar", "salun": "salun/RLcheckpoint.pth.tar"}  # fmt: skip
    with safe_globals():
        retrain = torch.load(root / "runs" / files["retrain"], weights_only=True)
    assert all(k.startswith("module.") for k in retrain["state_dict"])
    for name, file in files.items():
        entry = ws.model(name)
        assert (entry.arch, entry.arch_kwargs["normalize"]) == ("resnet18", True)
        assert entry.sha256 == sha256(root / "runs" / file) and not entry.trusted
    assert [m.role for m in ws.models] == ["original", "retrained", "unlearned"]
    scores = ["python", "-m", "sde_core", "workspace", "add-model", "WS", "--name", "scores",
              "--checkpoint", "runs/salun/RLeval_result.pth.tar"]  # fmt: skip
    refused = cifar.project.command(scores)
    assert refused.code == 1 and "RLeval_result.pth.tar is not a model checkpoint" in refused.err
    rows = cifar.project.results("results.json")
    assert list(rows) == ["original", "retrain", "salun"]
    for name, row in rows.items():  # the test's own accuracies, from the same weights and rows
        for key, value in _expected_accuracies(cifar, name).items():
            assert row[key] == pytest.approx(value), (name, key)
    original, salun, retrain = rows["original"], rows["salun"], rows["retrain"]
    assert original["acc_f"] > salun["acc_f"] and original["acc_f"] > retrain["acc_f"]
    assert differ(original, salun) and differ(original, retrain) and differ(salun, retrain)


def test_unlearn_sparse_pruned_checkpoints_end_to_end(cifar: Cifar):
    steps = cifar.project.run("sparse")
    root = cifar.project.root
    files = ("runs/imp/1checkpoint.pth.tar", "runs/imp-ft/FTcheckpoint.pth.tar")
    for step, file in zip(steps[-3:-1], files, strict=True):
        with safe_globals():  # FTcheckpoint holds SalUn's NumPy scores
            state = torch.load(root / file, weights_only=True)["state_dict"]
        masks = [v for k, v in state.items() if k.endswith("weight_mask")]
        zeros = sum(int((m == 0).sum()) for m in masks) / sum(m.numel() for m in masks)
        assert "architecture resnet20s with 10 outputs" in step.out
        assert (
            f"{Path(file).name} is a pruned model (torch.nn.utils.prune): folded {len(masks)} "
            f"mask(s) into the weights (weight = weight_orig × weight_mask); {zeros:.1%} of "
            "those weights are zero" in step.out
        )
    ws = cifar.project.workspace("WS-sparse")
    assert [(m.name, m.arch) for m in ws.models] == [("imp", "resnet20s"), ("imp-ft", "resnet20s")]
    rows = cifar.project.results("sparse.json")
    for name, row in rows.items():
        for key, value in _expected_accuracies(cifar, name).items():
            assert row[key] == pytest.approx(value), (name, key)
    assert rows["imp"]["acc_f"] > rows["imp-ft"]["acc_f"]
    assert differ(rows["imp"], rows["imp-ft"])
    # the Workspace page's "Add a model" (the same service) shows the note too
    upload = Upload("1checkpoint.pth.tar", (root / files[0]).read_bytes())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SDE_DATA_ROOTS", cifar.project.env["SDE_DATA_ROOTS"])
        added = add_uploaded_model(root / "WS-sparse", upload, ModelSpec("page", role="unlearned"))
    assert added.saved and any("page: 1checkpoint.pth.tar is a pruned model" in n
                               for n in added.notes)  # fmt: skip


def test_torchscript_runs_only_when_trusted(
    cifar: Cifar, salun_run: list[Step], monkeypatch: pytest.MonkeyPatch
):
    project, marker = cifar.project, cifar.marker
    toml = project.root / "WS" / "workspace.toml"
    before = toml.read_bytes()
    steps = project.steps("torchscript")

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a TorchScript archive was loaded without the opt-in")

    monkeypatch.setattr(torch.jit, "load", never)
    refused = next(steps)
    assert len(refused.err.strip().splitlines()) == 1  # one line, no traceback
    assert not marker.exists() and toml.read_bytes() == before  # nothing ran, nothing changed
    monkeypatch.undo()
    next(steps)  # --trusted
    assert marker.exists()  # its code ran, now that the user vouched for the file
    assert project.workspace("WS").model("exported").trusted
    assert [m.trusted for m in project.workspace("WS").models].count(True) == 1
    next(steps)  # evaluate (the other models come from the results store)
    assert next(steps, None) is None
    rows = project.results("results.json")
    assert list(rows) == ["original", "retrain", "salun", "exported"]
    for key, value in _expected_accuracies(cifar, "exported").items():
        assert rows["exported"][key] == pytest.approx(value), key
    assert differ(rows["exported"], rows["original"])


# ------------------------------------------------------------------------------ torchvision

PET_CLASSES = ("beagle", "boxer", "pug", "tabby")
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@dataclass
class Pets:
    """The ImageFolder project: inputs as torchvision preprocesses them, labels, predictions."""

    project: Project
    inputs: dict[str, torch.Tensor]
    labels: dict[str, np.ndarray]
    predictions: dict[str, dict[str, np.ndarray]]


@pytest.fixture(scope="module")
def pets(tmp_path_factory: pytest.TempPathFactory) -> Pets:
    """An ImageFolder of JPEGs in 4 class folders; torchvision ResNet-18 (num_classes=4) state
    dicts: the original from ``nn.DataParallel``, one fitted without the forgotten class, and
    that one re-saved as safetensors. Predictions use torchvision's own preprocessing."""
    project = new_project(tmp_path_factory, "pets")
    root, rng = project.root, np.random.default_rng(1)
    files: dict[str, list[Path]] = {"train": [], "test": []}
    labels: dict[str, list[int]] = {"train": [], "test": []}
    for split, count in (("train", 6), ("test", 3)):
        for label, name in enumerate(PET_CLASSES):
            folder = root / "data" / "pets" / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                path = folder / f"{name}_{i}.jpg"
                Image.fromarray(rng.integers(0, 256, (36, 44, 3), dtype=np.uint8)).save(path)
                files[split].append(path)
                labels[split].append(label)
    preprocess = transforms.Compose(
        [transforms.Resize((224, 224)), transforms.ToTensor(), transforms.Normalize(*IMAGENET)]
    )
    x = {s: torch.stack([preprocess(Image.open(p).convert("RGB")) for p in files[s]])
         for s in files}  # fmt: skip
    y = {s: np.array(v) for s, v in labels.items()}
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=len(PET_CLASSES))
    artefacts.set_batchnorm_statistics(model, (3, 64, 64))
    features = penultimate(model, x["train"])
    runs = root / "runs" / "pets"
    runs.mkdir(parents=True)
    predictions = {}
    set_head(model, features, y["train"])
    predictions["original"] = {s: predict(model, x[s]) for s in x}
    artefacts.save_dataparallel_state_dict(model, runs / "original.pth")
    retain = np.flatnonzero(y["train"] != 0)
    set_head(model, features[retain], y["train"][retain])
    predictions["retrained"] = {s: predict(model, x[s]) for s in x}
    torch.save(model.state_dict(), runs / "retrained.pth")
    save_file(model.state_dict(), str(runs / "retrained.safetensors"))
    return Pets(project, x, y, predictions)


@pytest.mark.slow  # > 10 s on 2 cores (make test-slow, CI)
def test_torchvision_classifier_on_an_imagefolder(pets: Pets):
    project = pets.project
    steps = project.run("torchvision")
    assert "|D_tr| = 24, |D_f| = 6, |D_te| = 12" in steps[0].out
    for step in steps[1:3]:
        assert "architecture torchvision:resnet18 with 4 outputs" in step.out
    ws = project.workspace("WS-pets")
    for m in ws.models:  # inferred from the file (original) or named (retrained): the same
        assert (m.arch, m.arch_kwargs) == ("torchvision:resnet18", {"num_classes": 4})
    bundle = load_dataset(ws.dataset_spec())  # the docs' claim: torchvision's very tensors
    for split, x in pets.inputs.items():
        got, labels = bundle.split(split).get_batch(np.arange(len(x)))
        torch.testing.assert_close(got, x, rtol=0, atol=1e-6)
        assert np.array_equal(labels.numpy(), pets.labels[split])
    rows = project.results("pets.json")
    forget, retain = np.arange(6), np.arange(6, 24)  # class folders in name order: beagle first
    for name, row in rows.items():  # torchvision's preprocessing gives the reported accuracies
        pred = pets.predictions[name]
        expected = {
            "acc_f": accuracy(pred["train"], pets.labels["train"], forget),
            "acc_r": accuracy(pred["train"], pets.labels["train"], retain),
            "acc_te": accuracy(pred["test"], pets.labels["test"], np.arange(12)),
        }
        for key, value in expected.items():
            assert row[key] == pytest.approx(value), (name, key)
    assert rows["original"]["acc_f"] > rows["retrained"]["acc_f"]
    assert differ(rows["original"], rows["retrained"])

    # the same weights re-saved as safetensors (no metadata: inferred) give the same row
    add = ["workspace", "add-model", "WS-pets", "--name", "resaved", "--role", "retrained",
           "--checkpoint", "runs/pets/retrained.safetensors"]  # fmt: skip
    assert project.command(["python", "-m", "sde_core", *add]).code == 0
    evaluate = ["python", "-m", "sde_core", "evaluate", "WS-pets", "--json", "resaved.json",
                "--models", "resaved"]  # fmt: skip
    assert project.command(evaluate).code == 0
    assert same(project.results("resaved.json")["resaved"], rows["retrained"])

    # without its kwargs a torchvision model keeps 1,000 classes: refused, naming the head
    plain = ["workspace", "add-model", "WS-pets", "--name", "plain", "--checkpoint",
             "runs/pets/retrained.pth", "--arch", "torchvision:resnet18"]  # fmt: skip
    step = project.command(["python", "-m", "sde_core", *plain])
    assert step.code == 1 and "fc.weight (4, 512) vs expected (1000, 512)" in step.err


# ------------------------------------------------------------------------------ hidden states

N_TR, N_TE, N_F, DIM = 600, 400, 150, 768


def hidden_states(signal: bool, remembers: bool, forget: np.ndarray, seed: int) -> np.ndarray:
    """One model's ``(N_TR + N_TE, DIM)`` pooled hidden states. The planted in-training signal
    (``signal``): training rows spread wider than unseen rows; D_f rows like training rows iff
    ``remembers``. Without the signal every row looks alike (a collapsed model)."""
    rng = np.random.default_rng(seed)
    acts = rng.normal(size=(N_TR + N_TE, DIM))
    if signal:
        acts[:N_TR] *= 1.8
        if not remembers:
            acts[forget] = rng.normal(size=(forget.size, DIM))
    return acts.astype(np.float32)


@pytest.fixture(scope="module")
def language_model(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """Three models' 768-d hidden states in three layouts: ``split`` rows (the original, which
    remembers D_f), rows stored in another order with ``split``, ``train_idx`` and ``test_idx``
    (retrained: D_f looks unseen) and a parquet list column (an NPO run that collapsed the
    model: no in-training signal left)."""
    project = new_project(tmp_path_factory, "lm")
    exports = project.root / "exports"
    exports.mkdir()
    rng = np.random.default_rng(0)
    forget = np.sort(rng.choice(N_TR, N_F, replace=False))
    np.save(exports / "forget.npy", forget)
    split = np.array(["train"] * N_TR + ["test"] * N_TE)
    label = np.arange(N_TR + N_TE) % 3
    original = hidden_states(True, True, forget, seed=1)
    np.savez(exports / "original.npz", hidden_states=original, split=split, label=label)
    retrained = hidden_states(True, False, forget, seed=2)
    order = rng.permutation(N_TR + N_TE)  # file row r holds dataset row order[r]
    where = np.argsort(order)  # dataset row i is file row where[i]
    np.savez(exports / "retrained.npz", hidden_states=retrained[order], split=split[order],
             train_idx=where[:N_TR], test_idx=where[N_TR:])  # fmt: skip
    frame = pd.DataFrame({"split": split, "label": label})
    frame["hidden_states"] = list(hidden_states(False, False, forget, seed=3))
    frame.to_parquet(exports / "npo.parquet")
    return project


def test_hidden_states_of_three_models_in_three_layouts(language_model: Project):
    steps = language_model.run("hidden-states")
    assert "default layer 'hidden_states'" in steps[0].out
    for step in steps[1:4]:
        assert "activations of layer(s) hidden_states" in step.out
    ws = language_model.workspace("WS-lm")
    assert [(m.arch, bool(m.checkpoint)) for m in ws.models] == [("precomputed", False)] * 3
    rows = language_model.results("lm.json")
    original, retrained, npo = rows["original"], rows["retrained"], rows["npo"]
    assert differ(original, retrained) and differ(original, npo) and differ(retrained, npo)
    assert all(r["layer"] == "hidden_states" and r["acc_r"] is None for r in rows.values())
    # the planted signal: D_f looks like training data only to the model that remembers it
    # (found for the retrained file only if its rows are put back in the dataset's order)
    assert original["references_valid"] and retrained["references_valid"]
    assert original["otr"] < retrained["otr"]
    # no in-training signal: inconclusive, said so (the calibrated panel gate; the paper's
    # split-level reference test alone is not reliable here: on these pure-noise rows its p is
    # 1e-8 for some seeds at n = 100 and ~1 for others)
    assert not npo["panel_valid"] and npo["inconclusive_reason"]


# ------------------------------------------------------------------------------ HF folders


def _fit_lm(model: Any, tokenizer: Any, texts: list[str], steps: int, lr: float) -> Any:
    """A few steps of causal-LM training as a transformers user writes it (labels = ids, the
    padding ignored); a negative ``lr`` ascends (a crude unlearning run)."""
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=abs(lr))
    model.train()
    for _ in range(steps):
        loss = model(**enc, labels=labels).loss
        opt.zero_grad()
        (loss if lr > 0 else -loss).backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def tofu(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """OpenUnlearning-style model folders (save_pretrained, a Trainer's training_args.bin, one
    folder with pickled pytorch_model.bin weights only) and TOFU's JSON-lines files."""
    pytest.importorskip("transformers")  # the optional [llm] extra
    import llm_artefacts as lm

    project = new_project(tmp_path_factory, "tofu")
    data, saves = project.root / "data", project.root / "saves"
    full, holdout = lm.qa_records(40), lm.qa_records(24, offset=40)
    forget = full[::5]
    for name, rows in (("full", full), ("holdout10", holdout), ("forget10", forget)):
        lm.write_jsonl(data / f"{name}.json", rows)
    texts = [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in full]
    tokenizer = lm.tokenizer_for(texts + [f"{r['question']} {r['answer']}" for r in holdout])
    retain = [t for i, t in enumerate(texts) if i % 5]
    original = _fit_lm(lm.tiny_gpt2(tokenizer, seed=0), tokenizer, texts, 12, 3e-2)
    lm.save_model_folder(original, tokenizer, saves / "finetune" / "tofu_gpt2")
    (saves / "finetune" / "tofu_gpt2" / "training_args.bin").write_bytes(b"\x80\x04N.")
    retained = _fit_lm(lm.tiny_gpt2(tokenizer, seed=0), tokenizer, retain, 12, 3e-2)
    lm.save_model_folder(retained, tokenizer, saves / "finetune" / "tofu_gpt2_retain90")
    npo = _fit_lm(original, tokenizer, [texts[i] for i in range(0, 40, 5)], 3, -1e-3)
    lm.save_model_folder(npo, tokenizer, saves / "unlearn" / "tofu_gpt2_NPO")
    old = saves / "unlearn" / "old_bin"
    lm.save_model_folder(npo, tokenizer, old)
    (old / "model.safetensors").unlink()
    torch.save(npo.state_dict(), old / "pytorch_model.bin")
    return project


def test_hugging_face_folders_and_a_tofu_forget_split(tofu: Project):
    steps = tofu.run("hf-folder")
    assert "|D_tr| = 40, |D_f| = 8, |D_te| = 24" in steps[0].out
    assert all("architecture hf" in step.out for step in steps[1:4])
    ws = tofu.workspace("WS-tofu")
    assert [m.arch for m in ws.models] == ["hf"] * 3
    assert load_dataset(ws.dataset_spec()).texts("train", [0]) == [
        "Question: Where was author 0 born?\nAnswer: Author 0 was born in Varnholt."
    ]
    np.testing.assert_array_equal(np.load(ws.path(ws.forget_indices)), np.arange(0, 40, 5))
    rows = tofu.results("tofu.json")
    assert set(rows) == {"original", "retain90", "npo"}
    assert all(r["layer"] == "layer.1" and r["acc_r"] is None for r in rows.values())
    assert differ(rows["original"], rows["retain90"])


def test_index_arrays_next_to_a_split_array(tmp_path: Path):
    rng = np.random.default_rng(4)
    rows = rng.normal(size=(7, 3)).astype(np.float32)
    split = np.array(["test", "train", "train", "test", "train", "train", "train"])
    train_idx, test_idx = np.array([4, 1, 6, 2, 5]), np.array([3, 0])
    np.savez(tmp_path / "a.npz", h=rows, split=split, train_idx=train_idx, test_idx=test_idx)
    pre = load_precomputed(tmp_path / "a.npz")
    assert np.array_equal(pre.get("train", "h"), rows[train_idx])
    assert np.array_equal(pre.get("test", "h"), rows[test_idx])
    np.savez(tmp_path / "b.npz", h=rows, split=split, train_idx=train_idx)  # test rows: 'split'
    assert np.array_equal(load_precomputed(tmp_path / "b.npz").get("test", "h"), rows[[0, 3]])
    np.savez(tmp_path / "c.npz", h=rows, split=split, train_idx=[4, 1, 0], test_idx=test_idx)
    with pytest.raises(DataError, match="'train_idx' selects rows whose 'split' is not 'train'"):
        load_precomputed(tmp_path / "c.npz")
