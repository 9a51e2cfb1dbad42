"""The bundled demo workspaces (method §11): deterministic, resumable builders and their checks.

Two demos are rebuilt from scratch by :func:`build_demo` (CLI: ``python -m sde_core demo build``,
through the one table of demos, :data:`sde_core.pipeline.demos.DEMOS`), from their recipes and
acceptance checks in :mod:`sde_core.pipeline.demo_recipes` and their data written by
:mod:`sde_core.pipeline.demo_data`:

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

import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.errors import SDEError
from sde_core.pipeline.demo_data import _write_data
from sde_core.pipeline.demo_recipes import DATA_FILE, FORGET_FILE, STORE_FILE, DemoRecipe
from sde_core.pipeline.workspace import (
    CACHE_FOLDER,
    CheckpointRef,
    ModelEntry,
    Workspace,
    workspace_hash,
)
from sde_core.pipeline.workspace_checks import check_workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import relative_to_workspace, write_workspace

if TYPE_CHECKING:  # torch, pandas and the training stack load lazily: the CLI starts fast
    import torch

    from sde_core.learning.unlearning import UnlearnData

__all__ = [
    "BuildReport",
    "build_demo",
]


_BUILD_DIR = ".build"
_BUILD_KEY = "sde_demo_build"
_ORIGINAL_DIR = "models/original"


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

    from sde_core.inputs.data import load_dataset
    from sde_core.inputs.dataset_readers import FASHION_CLASS_NAMES

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
