"""The bundled demo workspaces (method §11): deterministic, resumable builders and their checks.

Two demos are rebuilt from scratch by :func:`build_demo` (CLI: ``python -m sde_core demo build``,
through the one table of demos, :data:`sde_core.pipeline.demos.DEMOS`):

- ``assets/demo/`` (``dataset="fashion-mnist"``): 6,000 Fashion-MNIST training images, 4,000 test
  images, a random 20% forget set, the demo CNN ``fmnist_cnn`` trained with Adam.
- ``assets/demo-mnist1d/`` (``dataset="mnist1d"``): mnist1d (generated offline by the ``mnist1d``
  package), 6,000 / 4,000 samples, a heavily overfit MLP 40→256→256→10.

Each demo ships its data as a compressed ``data.npz`` (dataset kind ``npz``, written byte-for-byte
deterministically), ``forget.npy``, ``LICENSE-data.txt``, nine half-precision safetensors models
(original with its initial weights and the checkpoints at 10/20/40/80% of training, retrained,
FT, GA, RL, SalUn, l1-Sparse, Unroll, random) and a results store ``results.sqlite`` holding the
evaluation at the workspace's ``[defaults]``, from which Compare, Report and ``verify`` answer
without computing (Explore's first open of a model still computes its views).

Determinism: every random draw is seeded from :attr:`DemoRecipe.seed`; every model after the
original is produced from the original's saved (half-precision) checkpoint, so a resumed build and
an uninterrupted one give the same files. Resumption: each checkpoint carries a *build key* (a
hash of the data, the recipe and, for unlearned models, the original's checkpoint) in its
safetensors metadata; a model whose entry, file, recorded SHA-256 and build key all match is
skipped, and the original's training resumes from its ``resume.pt``.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import sys
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sde_core.common.fsio import atomic_write_bytes
from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.common.sigma import SQRT_DIM
from sde_core.common.validation import check_int
from sde_core.errors import DataError, SDEError, SettingsError
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import (
    CACHE_FOLDER,
    CheckpointRef,
    ModelEntry,
    Workspace,
    check_workspace,
    load_workspace,
    relative_to_workspace,
    workspace_hash,
    write_workspace,
)

if TYPE_CHECKING:  # torch, pandas and the training stack load lazily: the CLI starts fast
    import pandas as pd
    import torch

    from sde_core.learning.training import TrainConfig
    from sde_core.learning.unlearning import UnlearnData

__all__ = [
    "DEMO_DATASETS",
    "DEMO_FOLDERS",
    "FASHION_SOURCE",
    "MODEL_NAMES",
    "UNLEARNING_MODELS",
    "AcceptanceCheck",
    "BuildReport",
    "DemoRecipe",
    "acceptance_checks",
    "build_demo",
    "default_demo_folder",
    "demo_defaults",
    "demo_recipe",
    "npz_bytes",
]

DEMO_DATASETS = ("fashion-mnist", "mnist1d")
"""Datasets a demo can be built from (the first is the default demo)."""

DEMO_FOLDERS = {"fashion-mnist": "demo", "mnist1d": "demo-mnist1d"}
"""Folder name under ``assets/`` of each demo."""

FASHION_SOURCE = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package puts the four raw idx files."""

UNLEARNING_MODELS = ("ft", "ga", "rl", "salun", "l1_sparse", "unroll")
"""Unlearned models of a demo; each is named after its :data:`sde_core.learning.unlearning.METHODS`
key."""

MODEL_NAMES = ("original", "retrained", *UNLEARNING_MODELS, "random")
"""Every model of a demo, in workspace order."""

DATA_FILE = "data.npz"
FORGET_FILE = "forget.npy"
LICENSE_FILE = "LICENSE-data.txt"
STORE_FILE = "results.sqlite"
_BUILD_DIR = ".build"
_BUILD_KEY = "sde_demo_build"
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_ORIGINAL_DIR = "models/original"
_ITERATIVE = ("ft", "rl", "salun", "l1_sparse")

_FASHION_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_FASHION_LICENSE = """\
Fashion-MNIST (subset shipped in data.npz)
Copyright (c) 2017 Zalando SE, https://tech.zalando.com
Source: https://github.com/zalandoresearch/fashion-mnist (read offline from Debian's
dataset-fashion-mnist package). data.npz holds {train} of the 60,000 training images and {test}
of the 10,000 test images; their positions in the original files are the arrays
source_train_indices and source_test_indices.

The MIT License (MIT)

Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""
_MNIST1D_HEADER = """\
mnist1d (data generated offline by the mnist1d package {version}, shipped in data.npz)
Copyright (c) Sam Greydanus and the mnist1d contributors, https://github.com/greydanus/mnist1d
Generation settings: {settings}. data.npz holds {train} training and {test} test samples; their
positions in the generated arrays are source_train_indices and source_test_indices.
Licensed under the Apache License, Version 2.0; the licence text of the package follows.

"""


# ----------------------------------------------------------------------------- recipes


@dataclass(frozen=True)
class DemoRecipe:
    """Everything that defines one demo workspace.

    Attributes:
        name: workspace name (``"demo"``, ``"demo-mnist1d"``).
        dataset: ``"fashion-mnist"`` or ``"mnist1d"``.
        description: one paragraph for the workspace file and the dashboard.
        train_size: D_tr size (a seeded subset of the source training split; None keeps it all).
        test_size: D_te size (a seeded subset of the source test split; None keeps it all).
        forget_fraction: |D_f| / |D_tr| of the random forget set.
        arch: registry architecture of every model.
        arch_kwargs: builder kwargs of ``arch``.
        train: the original's training recipe (also Retrain's, with ``retrain_seed``).
        method_params: per unlearning method, the parameters overriding method §7's defaults.
        defaults: the workspace's evaluation ``[defaults]``.
        seed: seed of the subsets, the forget set and the original's initial weights.
        retrain_seed: seed of the retrained model (its initial weights and shuffles).
        random_seed: seed of the randomly initialised model.
        source_options: mnist1d generation settings (``num_samples``, ``train_split``,
            ``data_seed``); empty for Fashion-MNIST.
        models: the models to build, in workspace order (``original`` first); every name other
            than ``original``, ``retrained`` and ``random`` is an unlearning method of
            ``method_params``.
        dataset_options: ``options`` of the workspace's ``npz`` dataset (e.g. ``normalize``).
    """

    name: str
    dataset: str
    description: str
    train_size: int | None
    test_size: int | None
    forget_fraction: float
    arch: str
    arch_kwargs: Mapping[str, Any]
    train: TrainConfig
    method_params: Mapping[str, Mapping[str, Any]]
    defaults: EvalSettings
    seed: int = 0
    retrain_seed: int = 1
    random_seed: int = 2
    source_options: Mapping[str, Any] = field(default_factory=dict)
    models: tuple[str, ...] = MODEL_NAMES
    dataset_options: Mapping[str, Any] = field(default_factory=dict)


def demo_defaults(layer: str, subset_size: int) -> EvalSettings:
    """The ``[defaults]`` of a bundled demo workspace: the given layer and n, every other setting
    pinned here (σ = √d, T = 100, K = 200, seed 0, 30 bins, R = 20, α = 0.01, the precision
    design W = 0.1 with a pilot of 10 draws of 20 targets and a budget of 60, method §15) so
    that a change of the library's defaults never silently changes a demo's shipped numbers."""
    return EvalSettings(
        layer=layer,
        sigma=SQRT_DIM,
        subset_size=subset_size,
        targets=100,
        splits=200,
        seed=0,
        bins=30,
        panel_size=20,
        alpha=0.01,
        draws=5,
        precision=0.1,
        pilot_draws=10,
        max_draws=60,
    )


def demo_recipe(
    dataset: str = "fashion-mnist",
    *,
    seed: int = 0,
    train_size: int | None = None,
    test_size: int | None = None,
    epochs: int | None = None,
    method_epochs: int | None = None,
    source_samples: int | None = None,
    subset_size: int = 400,
) -> DemoRecipe:
    """The method §11 recipe of a demo, with optional reductions (for tests and quick looks).

    Args:
        dataset: ``"fashion-mnist"`` (default demo) or ``"mnist1d"``.
        seed: base seed (subsets, forget set, original); the retrained model uses ``seed + 1``
            and the random model ``seed + 2``.
        train_size, test_size: override the D_tr / D_te sizes (6,000 / 4,000).
        epochs: override the original's (and Retrain's) epochs (30 Fashion-MNIST, 100 mnist1d).
        method_epochs: override the epochs of FT, RL, SalUn and l1-Sparse (method default: 10; the
            Fashion-MNIST demo uses 5 to keep its CPU build to minutes) and of GA (method
            default: 5; it gets ``min(5, method_epochs)``).
        source_samples: mnist1d only: samples to generate (10,000; 60% train, 40% test).
        subset_size: ``[defaults]`` subset size n (default: 400); at most |D_f| for an evaluation.

    Raises:
        SettingsError: an unknown dataset or a non-positive size.
    """
    from sde_core.learning.training import TrainConfig

    if dataset not in DEMO_DATASETS:
        raise SettingsError(f"unknown demo dataset {dataset!r}; use one of {list(DEMO_DATASETS)}")
    for name, value in (
        ("train_size", train_size),
        ("test_size", test_size),
        ("epochs", epochs),
        ("method_epochs", method_epochs),
        ("source_samples", source_samples),
        ("subset_size", subset_size),
    ):
        if value is not None:
            check_int(value, name, minimum=1, error=SettingsError)
    fractions = (0.1, 0.2, 0.4, 0.8, 1.0)
    if dataset == "fashion-mnist":
        config = TrainConfig(
            seed=seed, optimizer="adam", lr=1e-3, weight_decay=0.0, epochs=epochs or 30,
            batch_size=128, checkpoint_fractions=fractions,
        )  # fmt: skip
        n_train: int | None = train_size or 6000
        n_test: int | None = test_size or 4000
        arch = "fmnist_cnn"
        arch_kwargs: dict[str, Any] = {"hidden": 32}
        source: dict[str, Any] = {}
        description = (
            "Fashion-MNIST demo (method §11): 6,000 training images with a random 20% forget set, "
            "4,000 test images; CNN conv32-BN-ReLU-pool, conv64-BN-ReLU-pool, linear 32, "
            "linear 10, Adam lr 1e-3, batch 128, 30 epochs."
        )
    else:
        config = TrainConfig(
            seed=seed, optimizer="adam", lr=1e-3, weight_decay=0.0, epochs=epochs or 100,
            batch_size=64, checkpoint_fractions=fractions,
        )  # fmt: skip
        source = {"num_samples": source_samples or 10_000, "train_split": 0.6, "data_seed": 42}
        n_train, n_test = train_size, test_size
        arch = "mlp"
        arch_kwargs = {"input_dim": 40, "hidden": [256, 256], "num_classes": 10}
        description = (
            "mnist1d demo (method §11, fast): 6,000 training samples with a random 20% forget set, "
            "4,000 test samples; MLP 40→256→256→10, Adam lr 1e-3, batch 64, 100 epochs "
            "(heavily overfit)."
        )
    if method_epochs is None and dataset == "fashion-mnist":
        method_epochs = 5  # CPU time: half of method §7's 10 epochs (recorded with each model)
    iterative = {"epochs": method_epochs} if method_epochs is not None else {}
    method_params: dict[str, dict[str, Any]] = {m: dict(iterative) for m in _ITERATIVE}
    method_params["ga"] = {"epochs": min(5, method_epochs)} if method_epochs is not None else {}
    method_params["unroll"] = {}
    if dataset == "fashion-mnist":
        # method §7's RL/SalUn rates (0.01/0.013, tuned for SGD-trained CIFAR ResNet-18) collapse
        # this Adam-trained CNN to chance accuracy; 1e-3 (measured: Acc_f 92%, Acc_te 86%)
        # forgets partially and keeps the model usable. Recorded with each model.
        for method in ("rl", "salun"):
            method_params[method]["lr"] = 1e-3
    name = DEMO_FOLDERS[dataset]
    return DemoRecipe(
        name=name,
        dataset=dataset,
        description=description,
        train_size=n_train,
        test_size=n_test,
        forget_fraction=0.2,
        arch=arch,
        arch_kwargs=arch_kwargs,
        train=config,
        method_params=method_params,
        defaults=demo_defaults("output", subset_size),
        seed=seed,
        retrain_seed=seed + 1,
        random_seed=seed + 2,
        source_options=source,
    )


def default_demo_folder(dataset: str = "fashion-mnist") -> Path:
    """``assets/demo`` or ``assets/demo-mnist1d`` of this checkout."""
    if dataset not in DEMO_FOLDERS:
        raise SettingsError(f"unknown demo dataset {dataset!r}; use one of {list(DEMO_DATASETS)}")
    return Path(__file__).resolve().parents[2] / "assets" / DEMO_FOLDERS[dataset]


# ----------------------------------------------------------------------------- data


def _seeded_subset(n: int, size: int | None, seed: int, stream: int, what: str) -> np.ndarray:
    """Sorted indices of a seeded random subset of ``range(n)`` (all of it for ``size=None``)."""
    if size is None:
        return np.arange(n, dtype=np.int64)
    if size > n:
        raise SettingsError(f"{what} size {size} exceeds the {n} samples available")
    rng = np.random.default_rng([seed, stream])
    return np.sort(rng.choice(n, size=size, replace=False)).astype(np.int64)


def _source_arrays(recipe: DemoRecipe, source: Path | None) -> tuple[dict[str, np.ndarray], str]:
    """The full source splits (``x_train, y_train, x_test, y_test``) and the licence text."""
    from sde_core.inputs.data import ArrayDataset, DatasetSpec, load_dataset, read_idx

    if recipe.dataset == "fashion-mnist":
        root = source or FASHION_SOURCE
        arrays = {}
        for key, stem in _FASHION_FILES.items():
            found = [
                root / f"{stem}{ext}" for ext in (".gz", "") if (root / f"{stem}{ext}").is_file()
            ]
            if not found:
                raise DataError(
                    f"{root} has no {stem}(.gz): install Debian's dataset-fashion-mnist package "
                    f"(files in {FASHION_SOURCE}) or pass --source with the four idx files"
                )
            arrays[key] = read_idx(found[0])
        return arrays, _FASHION_LICENSE
    cache = source or (Path(os.environ.get("TMPDIR", "/tmp")) / "sde-demo-mnist1d")
    options = dict(recipe.source_options)
    bundle = load_dataset(DatasetSpec(kind="mnist1d", root=cache, options=options))
    train, test = bundle.train, bundle.test
    assert isinstance(train, ArrayDataset) and isinstance(test, ArrayDataset)  # mnist1d: in memory
    arrays = {
        "x_train": np.asarray(train.x, dtype=np.float32),
        "y_train": bundle.train_labels,
        "x_test": np.asarray(test.x, dtype=np.float32),
        "y_test": bundle.test_labels,
    }
    licence = _MNIST1D_HEADER.replace("{version}", importlib_metadata.version("mnist1d")).replace(
        "{settings}", ", ".join(f"{k}={v}" for k, v in options.items())
    )
    licence_files = importlib_metadata.files("mnist1d") or []
    text = next((f.read_text() for f in licence_files if f.name == "LICENSE"), None)
    if text is None:
        raise DataError("the mnist1d package ships no LICENSE file; reinstall mnist1d")
    return arrays, licence + text


def _demo_arrays(recipe: DemoRecipe, source: Path | None) -> tuple[dict[str, np.ndarray], str]:
    """The shipped arrays (seeded subsets, compact dtypes, source indices) and the licence."""
    full, licence = _source_arrays(recipe, source)
    tr = _seeded_subset(len(full["y_train"]), recipe.train_size, recipe.seed, 0, "D_tr")
    te = _seeded_subset(len(full["y_test"]), recipe.test_size, recipe.seed, 1, "D_te")
    x_dtype = np.uint8 if recipe.dataset == "fashion-mnist" else np.float32
    arrays = {
        "x_train": np.ascontiguousarray(full["x_train"][tr], dtype=x_dtype),
        "y_train": full["y_train"][tr].astype(np.uint8),
        "x_test": np.ascontiguousarray(full["x_test"][te], dtype=x_dtype),
        "y_test": full["y_test"][te].astype(np.uint8),
        "source_train_indices": tr.astype(np.int32),
        "source_test_indices": te.astype(np.int32),
    }
    licence = licence.replace("{train}", f"{tr.size:,}").replace("{test}", f"{te.size:,}")
    return arrays, licence


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """A compressed ``.npz`` whose bytes depend only on the arrays (fixed zip timestamps)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for key in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, member.getvalue(), zipfile.ZIP_DEFLATED, 9)
    return buffer.getvalue()


def _write_if_changed(path: Path, content: bytes) -> None:
    """Write ``content`` atomically unless the file already holds exactly these bytes."""
    if path.is_file() and path.read_bytes() == content:
        return
    atomic_write_bytes(path, content)


# ----------------------------------------------------------------------------- models


@dataclass
class BuildReport:
    """What :func:`build_demo` did.

    Attributes:
        folder: the workspace folder.
        built: models produced by this run, in order.
        skipped: models whose files were already complete (resumed build).
        seconds: wall-clock seconds of each model produced by this run.
        workspace_hash: the content hash of the finished workspace.
        store: the results store written, or None when it was not requested.
        evaluation_seconds: time to fill the results store (0 when it was already complete).
        total_seconds: wall-clock time of the whole build.
    """

    folder: Path
    built: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    workspace_hash: str = ""
    store: Path | None = None
    evaluation_seconds: float = 0.0
    total_seconds: float = 0.0


def _build_key(path: Path) -> str | None:
    """The build key stored in a demo checkpoint's metadata (None when absent or unreadable)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            return (fh.metadata() or {}).get(_BUILD_KEY)
    except Exception:  # any unreadable file simply means "rebuild"
        return None


def _reusable(old: Workspace | None, name: str, key: str) -> ModelEntry | None:
    """The previous run's entry of ``name`` when every file it names exists with this build key."""
    if old is None:
        return None
    entry = next((m for m in old.models if m.name == name), None)
    if entry is None or entry.sha256 is None:
        return None
    main = old.path(entry.checkpoint)
    if not main.is_file() or file_sha256(main) != entry.sha256:
        return None
    files = [main] + [old.path(r.path) for r in entry.checkpoints]
    if entry.init_checkpoint is not None:
        files.append(old.path(entry.init_checkpoint))
    if all(f.is_file() and _build_key(f) == key for f in files):
        return entry
    return None


def _arch_kwargs(model: torch.nn.Module) -> dict[str, Any]:
    """The architecture arguments ``build_model`` recorded on ``model`` (``sde_arch_kwargs``)."""
    return dict(vars(model)["sde_arch_kwargs"])


def _save_half(model: torch.nn.Module, path: Path, recipe: DemoRecipe, key: str) -> str:
    """Save ``model`` as float16 safetensors tagged with ``key``; return the file's SHA-256."""
    from sde_core.inputs.models import save_checkpoint

    save_checkpoint(model, path, recipe.arch, half=True, metadata={_BUILD_KEY: key})
    return file_sha256(path)


def _epoch_bar(desc: str, total: int) -> tuple[Callable[[int, int, float], None], Any]:
    """A tqdm bar over epochs and the ``progress(epoch, total, loss)`` callback that drives it."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, leave=False, file=sys.stderr)

    def progress(epoch: int, _total: int, loss: float) -> None:
        bar.n = epoch
        bar.set_postfix(loss=f"{loss:.4f}", refresh=True)

    return progress, bar


def _train_original(
    ws: Workspace, recipe: DemoRecipe, bundle: Any, key: str, scratch: Path
) -> ModelEntry:
    """Train h_or (resumable), then store its initial weights and checkpoints in float16."""
    import torch

    from sde_core.inputs.architectures import build_model
    from sde_core.inputs.models import load_checkpoint
    from sde_core.learning.training import checkpoint_name, train

    torch.manual_seed(recipe.seed)
    model = build_model(recipe.arch, **recipe.arch_kwargs)
    progress, bar = _epoch_bar("train original", recipe.train.epochs)
    try:
        result = train(
            model, bundle.train, recipe.train, scratch, progress=progress, resume=True,
            arch=recipe.arch,
        )  # fmt: skip
    finally:
        bar.close()
    assert result.init_path is not None and result.final_path is not None
    folder = ws.path(_ORIGINAL_DIR)
    refs = []
    for fraction, path in sorted(result.checkpoints.items()):
        target = folder / checkpoint_name(fraction)
        digest = _save_half(load_checkpoint(path), target, recipe, key)
        if fraction < 1.0:
            refs.append(CheckpointRef(fraction, relative_to_workspace(ws, target)))
    init = folder / "init.safetensors"
    _save_half(load_checkpoint(result.init_path), init, recipe, key)
    recipe_dict = recipe.train.to_dict()
    recipe_dict.pop("device")
    return ModelEntry(
        name="original", role="original", arch=recipe.arch,
        checkpoint=relative_to_workspace(ws, folder / checkpoint_name(1.0)), method="train",
        arch_kwargs=_arch_kwargs(model), hyperparameters=recipe_dict, seed=recipe.train.seed,
        seconds=round(result.seconds, 3), sha256=digest,
        init_checkpoint=relative_to_workspace(ws, init), checkpoints=refs,
    )  # fmt: skip


def _random_model(ws: Workspace, recipe: DemoRecipe, key: str) -> ModelEntry:
    """The negative control h_rand: a freshly initialised model (seed ``random_seed``)."""
    import torch

    from sde_core.inputs.architectures import build_model

    t0 = time.perf_counter()
    torch.manual_seed(recipe.random_seed)
    model = build_model(recipe.arch, **recipe.arch_kwargs)
    path = ws.path("models/random.safetensors")
    digest = _save_half(model, path, recipe, key)
    return ModelEntry(
        name="random", role="random", arch=recipe.arch,
        checkpoint=relative_to_workspace(ws, path), method="init",
        arch_kwargs=_arch_kwargs(model), hyperparameters={"init_seed": recipe.random_seed},
        seed=recipe.random_seed, seconds=round(time.perf_counter() - t0, 3), sha256=digest,
    )  # fmt: skip


def _unlearned_model(
    ws: Workspace, recipe: DemoRecipe, name: str, data: UnlearnData, original: Any, key: str
) -> ModelEntry:
    """Retrain (``name="retrained"``) or one unlearning method applied to the saved h_or."""
    from sde_core.learning.unlearning import unlearn

    method = "retrain" if name == "retrained" else name
    params = (
        {"seed": recipe.retrain_seed} if method == "retrain" else dict(recipe.method_params[name])
    )
    result = unlearn(method, original, data, **params)
    path = ws.path(f"models/{name}.safetensors")
    digest = _save_half(result.model.cpu(), path, recipe, key)
    hyper = result.params_dict()
    return ModelEntry(
        name=name, role="retrained" if method == "retrain" else "unlearned", arch=recipe.arch,
        checkpoint=relative_to_workspace(ws, path), method=method,
        arch_kwargs=_arch_kwargs(original), hyperparameters=hyper,
        seed=int(hyper.get("seed", recipe.seed)), seconds=round(result.seconds, 3),
        sha256=digest,
    )  # fmt: skip


# ----------------------------------------------------------------------------- build


def _write_data(recipe: DemoRecipe, folder: Path, source: Path | None) -> None:
    """``data.npz``, ``LICENSE-data.txt`` and the seeded random ``forget.npy``."""
    from sde_core.inputs.indices import save_index_file

    arrays, licence = _demo_arrays(recipe, source)
    _write_if_changed(folder / DATA_FILE, npz_bytes(arrays))
    _write_if_changed(folder / LICENSE_FILE, licence.encode())
    n = len(arrays["y_train"])
    rng = np.random.default_rng([recipe.seed, 2])
    k = max(1, round(recipe.forget_fraction * n))
    save_index_file(folder / FORGET_FILE, np.sort(rng.choice(n, size=k, replace=False)))


def _previous(folder: Path) -> Workspace | None:
    """The workspace of an earlier (possibly interrupted) build, when one is readable."""
    try:
        return load_workspace(folder, validate=False)
    except SDEError:
        return None


def _model_keys(recipe: DemoRecipe, data_key: str) -> dict[str, str]:
    """Build keys of the models that do not depend on the original's weights."""
    common = {"data": data_key, "arch": recipe.arch, "arch_kwargs": dict(recipe.arch_kwargs)}
    recipe_hash = recipe.train.recipe_hash()
    return {
        "original": stable_hash({**common, "train": recipe_hash, "init_seed": recipe.seed}),
        "retrained": stable_hash({**common, "train": recipe_hash, "seed": recipe.retrain_seed}),
        "random": stable_hash({**common, "init_seed": recipe.random_seed}),
    }


def build_demo(
    recipe: DemoRecipe,
    folder: str | Path,
    *,
    source: str | Path | None = None,
    store: bool = True,
    log: Callable[[str], None] | None = None,
) -> BuildReport:
    """Build (or finish building) a demo workspace in ``folder``; see the module docstring.

    Args:
        recipe: the demo recipe (:func:`demo_recipe`).
        folder: the workspace folder (created when missing).
        source: Fashion-MNIST: the folder with the four idx files (default
            :data:`FASHION_SOURCE`); mnist1d: the folder or ``.npz`` caching the generated data
            (default: a folder in the temporary directory).
        store: also evaluate every model at the workspace's ``[defaults]`` into
            ``folder/results.sqlite`` (compacted; only that run is kept).
        log: receives one line per finished step (default: nothing).

    Raises:
        SDEError: missing source data, bad recipe values, or an invalid result.
    """
    from tqdm import tqdm

    from sde_core.inputs.data import FASHION_CLASS_NAMES, load_dataset

    t_start = time.perf_counter()
    say = log or (lambda _line: None)
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    report = BuildReport(folder=root.resolve())
    _write_data(recipe, root, Path(source) if source is not None else None)
    old = _previous(root)
    dataset: dict[str, Any] = {"kind": "npz", "root": DATA_FILE}
    options = dict(recipe.dataset_options)
    if recipe.dataset == "fashion-mnist":  # data.npz holds labels only; the names are these
        options.setdefault("class_names", list(FASHION_CLASS_NAMES))
    if options:
        dataset["options"] = options
    ws = Workspace(
        root=root.resolve(), dataset=dataset,
        forget_indices=FORGET_FILE, defaults=recipe.defaults, name=recipe.name,
        description=recipe.description,
    )  # fmt: skip
    bundle = load_dataset(ws.dataset_spec())
    forget = np.load(ws.path(FORGET_FILE))
    data_key = stable_hash([file_sha256(ws.path(DATA_FILE)), file_sha256(ws.path(FORGET_FILE))])
    keys = _model_keys(recipe, data_key)
    scratch = root / _BUILD_DIR / f"original-{keys['original'][:12]}"
    bar = tqdm(total=len(recipe.models), desc=f"build {recipe.name}", file=sys.stderr)
    original_model, data = None, None
    try:
        for name in recipe.models:
            bar.set_postfix(model=name, refresh=True)
            if name not in keys:  # unlearned models depend on the saved original's bytes
                keys[name] = stable_hash(
                    {"original": ws.original().sha256, "data": data_key,
                     "params": dict(recipe.method_params[name])}
                )  # fmt: skip
            entry = _reusable(old, name, keys[name])
            if entry is not None:
                report.skipped.append(name)
            else:
                t0 = time.perf_counter()
                if name == "original":
                    entry = _train_original(ws, recipe, bundle, keys[name], scratch)
                elif name == "random":
                    entry = _random_model(ws, recipe, keys[name])
                else:
                    if original_model is None:
                        original_model, data = _unlearn_inputs(ws, recipe, bundle, forget)
                    assert data is not None
                    entry = _unlearned_model(ws, recipe, name, data, original_model, keys[name])
                report.built.append(name)
                report.seconds[name] = time.perf_counter() - t0
                say(f"{name}: {entry.method} in {report.seconds[name]:.1f}s ({entry.checkpoint})")
            ws.add_model(entry, replace=True)
            write_workspace(ws)
            bar.update(1)
    finally:
        bar.close()
    shutil.rmtree(root / _BUILD_DIR, ignore_errors=True)
    ws = load_workspace(root, validate=False)  # hash and evaluate what the files say
    check_workspace(ws, check_data=True)
    report.workspace_hash = workspace_hash(ws, data_fingerprint=bundle.fingerprint)
    if store:
        t0 = time.perf_counter()
        report.store = fill_store(ws, root / STORE_FILE)
        report.evaluation_seconds = time.perf_counter() - t0
        say(f"results store {report.store} ({report.store.stat().st_size / 1e6:.2f} MB)")
    report.total_seconds = time.perf_counter() - t_start
    return report


def _unlearn_inputs(
    ws: Workspace, recipe: DemoRecipe, bundle: Any, forget: np.ndarray
) -> tuple[torch.nn.Module, UnlearnData]:
    """h_or and its initial weights as saved (float16 → float32), and the unlearning data."""
    from sde_core.inputs.architectures import build_model
    from sde_core.inputs.models import load_checkpoint
    from sde_core.learning.unlearning import UnlearnData

    entry = ws.original()
    original = load_checkpoint(ws.path(entry.checkpoint), arch=recipe.arch)
    assert entry.init_checkpoint is not None
    init_state = load_checkpoint(ws.path(entry.init_checkpoint), arch=recipe.arch).state_dict()
    data = UnlearnData.from_forget(
        bundle.train, forget, num_classes=bundle.num_classes, train_config=recipe.train,
        init_state=init_state,
        model_factory=lambda: build_model(recipe.arch, **recipe.arch_kwargs),
    )  # fmt: skip
    return original, data


#: Draws per model whose H arrays a shipped store keeps (:mod:`~sde_core.pipeline.shipped_store`;
#: every draw's numbers are kept): 3 draws (60 targets, 120 panel members at the demos' T/B = 20,
#: R = 20) for the histograms, so the four demos' stores fit the assets/ budget
#: (tests/pipeline/test_demo.py) at the precision design's 10–60 draws per model.
SHIPPED_ARRAY_DRAWS = 3


def fill_store(ws: Workspace, path: Path) -> Path:
    """Evaluate every model of a demo at ``[defaults]`` into a full results store (every H
    array; ``.sde-cache/full-results.sqlite``, which a resumed build reuses), then ship that
    run to ``path``: every number of every draw, the H arrays of the first
    :data:`SHIPPED_ARRAY_DRAWS` draws (:func:`~sde_core.pipeline.shipped_store.ship_run`), so
    the four demos fit ``assets/`` at the precision design's 10–60 draws per model."""
    from sde_core.pipeline.shipped_store import ship_run
    from sde_core.pipeline.store import ResultsStore

    full = Path(ws.root) / CACHE_FOLDER / "full-results.sqlite"
    full.parent.mkdir(parents=True, exist_ok=True)
    run_id = _fill_full_store(ws, full)
    with ResultsStore(full, read_only=True) as st:
        run = st.get_run(run_id)
    ship_run(full, path, run.workspace_hash, run.settings, SHIPPED_ARRAY_DRAWS)
    return path


def _fill_full_store(ws: Workspace, path: Path) -> int:
    """Evaluate every model at ``[defaults]`` into ``path`` (keeping only that run); its id."""
    from tqdm import tqdm

    from sde_core.pipeline.evaluation.workspace_run import evaluate_workspace
    from sde_core.pipeline.store import ResultsStore

    settings = ws.defaults
    bar = tqdm(total=len(ws.models), desc="evaluate", leave=False, file=sys.stderr)

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "models":
            bar.n = done
            bar.refresh()

    try:
        with ResultsStore(path) as st:
            result = evaluate_workspace(ws, settings, store=st, progress=progress)
            for run_id in st.list_runs()["id"]:
                if int(run_id) != result.run_id:
                    st.delete_run(int(run_id))
    finally:
        bar.close()
    assert result.run_id is not None
    return result.run_id


# ----------------------------------------------------------------------------- acceptance


@dataclass(frozen=True)
class AcceptanceCheck:
    """One method §11 acceptance criterion measured on a demo evaluation."""

    model: str
    quantity: str
    value: float
    requirement: str
    passed: bool

    def __str__(self) -> str:
        mark = "ok  " if self.passed else "FAIL"
        return (
            f"{mark} {self.model:<10} {self.quantity:<17} {self.value:8.4g}  ({self.requirement})"
        )


def acceptance_checks(models: pd.DataFrame) -> list[AcceptanceCheck]:
    """method §11 acceptance on an evaluation's ``models`` table (one row per model).

    Under the original and the retrained model the references are valid — the paper's
    split-level test (median p over the draws < α) and the calibrated panel test that gates every
    headline number (method §12); the original's OTR ≤ 0.2 and the retrained model's ≥ 0.8;
    controlled F1 ≥ 0.9 for both. A withheld (NaN) number fails.

    Raises:
        SettingsError: the table lacks a model with role ``original`` or ``retrained``.
    """
    checks = []
    for role, otr_ok, otr_text in (
        ("original", lambda v: v <= 0.2, "OTR ≤ 0.2"),
        ("retrained", lambda v: v >= 0.8, "OTR ≥ 0.8"),
    ):
        rows = models[models["role"] == role]
        if rows.empty:
            raise SettingsError(f"the evaluation has no {role} model; acceptance needs one")
        row = rows.iloc[0]
        name = str(row["name"])
        p, otr, f1 = float(row["reference_p"]), float(row["otr"]), float(row["f1"])
        checks += [
            AcceptanceCheck(
                name, "reference p", p, "references valid", bool(row["references_valid"])
            ),
            AcceptanceCheck(
                name,
                "panel p",
                float(row["panel_p"]),
                "panels separate (the gate)",
                bool(row["panel_valid"]),
            ),
            AcceptanceCheck(name, "OTR", otr, otr_text, not math.isnan(otr) and otr_ok(otr)),
            AcceptanceCheck(
                name, "controlled F1", f1, "F1 ≥ 0.9", not math.isnan(f1) and f1 >= 0.9
            ),
        ]
    return checks
