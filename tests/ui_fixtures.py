"""A tiny, fast image workspace for the dashboard tests (AppTest and the real-browser test).

The data are 8×8 grey uint8 images (so the dashboard shows thumbnails) of ten classes: a class
template plus noise. An MLP original is trained to memorise D_tr, a second one is retrained on
D_r, a fine-tuned copy stands in for an unlearned model and a freshly initialised one is the
negative control. Building takes a few seconds on two CPU cores.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from helpers.designs import fixed_settings
from streamlit.components.v2.component_manager import BidiComponentManager
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

from sde_core.inputs.architectures import build_model
from sde_core.inputs.data import load_dataset
from sde_core.inputs.indices import save_index_file
from sde_core.inputs.models import save_checkpoint
from sde_core.pipeline.workspace import CheckpointRef, ModelEntry, Workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace

#: Evaluation defaults small enough for sub-second evaluations of one model.
TINY_DEFAULTS = fixed_settings(
    layer="output", sigma="sqrt_dim", subset_size=40, targets=10, splits=20, panel_size=20
)
ARCH = "mlp"
ARCH_KWARGS = {"input_dim": 64, "hidden": [128], "num_classes": 10}
N_TRAIN, N_TEST, N_FORGET = 600, 400, 120
STEPS = 150
NOISE = 160.0
FRACTIONS = (0.1, 0.2, 0.4, 0.8, 1.0)


def _images(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    templates = np.random.default_rng(123).uniform(0, 255, (10, 8, 8))
    y = rng.integers(0, 10, n)
    x = templates[y] + rng.normal(0, NOISE, (n, 8, 8))
    return np.clip(x, 0, 255).astype(np.uint8), y.astype(np.int64)


def build_tiny_workspace(folder: str | Path) -> Path:
    """Create a complete image workspace in ``folder`` (data, forget set, four models).

    Returns:
        The workspace folder.
    """
    root = Path(folder)
    rng = np.random.default_rng(0)
    x_train, y_train = _images(rng, N_TRAIN)
    x_test, y_test = _images(rng, N_TEST)
    root.mkdir(parents=True, exist_ok=True)
    np.savez(root / "data.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    forget = np.sort(rng.choice(N_TRAIN, N_FORGET, replace=False))
    save_index_file(root / "forget.npy", forget)
    ws = Workspace(
        root.resolve(),
        {"kind": "npz", "root": "data.npz"},
        "forget.npy",
        name="tiny",
        description="8×8 synthetic images for the dashboard tests",
        defaults=TINY_DEFAULTS,
    )
    write_workspace(ws)
    bundle = load_dataset(ws.dataset_spec())
    x_all, y_all = bundle.train.get_batch(np.arange(N_TRAIN))
    retain = np.setdiff1d(np.arange(N_TRAIN), forget)
    models = root / "models"
    common = {"arch": ARCH, "arch_kwargs": dict(ARCH_KWARGS)}

    def fit(folder: str, rows: np.ndarray, steps: int, fractions: tuple[float, ...]) -> float:
        """Full-batch Adam on ``rows``; save ``init`` and a checkpoint at each fraction."""
        torch.manual_seed(0)
        model = build_model(ARCH, **ARCH_KWARGS)
        save_checkpoint(model, models / folder / "init.safetensors", ARCH)
        opt = torch.optim.Adam(model.parameters(), lr=5e-3)
        xb, yb = x_all[rows], y_all[rows]
        t0 = time.perf_counter()
        for step in range(1, steps + 1):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            for f in fractions:
                if step == round(f * steps):
                    save_checkpoint(model, models / folder / _ckpt(f), ARCH)
        return time.perf_counter() - t0

    seconds = fit("original", np.arange(N_TRAIN), STEPS, FRACTIONS)
    ws.add_model(
        ModelEntry(
            name="original",
            role="original",
            method="train",
            checkpoint=f"models/original/{_ckpt(1.0)}",
            init_checkpoint="models/original/init.safetensors",
            checkpoints=[
                CheckpointRef(f, f"models/original/{_ckpt(f)}") for f in FRACTIONS if f < 1.0
            ],
            seconds=seconds,
            hyperparameters={"optimizer": "adam", "lr": 5e-3, "steps": STEPS},
            **common,
        )
    )
    for name, role, steps in (("retrained", "retrained", STEPS), ("FT", "unlearned", 5)):
        seconds = fit(name, retain, steps, (1.0,))
        ws.add_model(
            ModelEntry(
                name=name,
                role=role,
                method="retrain" if role == "retrained" else "FT",
                checkpoint=f"models/{name}/{_ckpt(1.0)}",
                seconds=seconds,
                **common,
            )
        )
    torch.manual_seed(1)
    save_checkpoint(build_model(ARCH, **ARCH_KWARGS), models / "random.safetensors", ARCH)
    ws.add_model(
        ModelEntry(
            name="random",
            role="random",
            method="init",
            checkpoint="models/random.safetensors",
            seconds=0.0,
            **common,
        )
    )
    write_workspace(ws)
    return root


#: The bundled mnist1d demo, whose shipped results the store-filled fixtures copy.
DEMO = Path(__file__).resolve().parents[1] / "assets" / "demo-mnist1d"


def demo_workspace(folder: Path, n_models: int) -> Path:
    """A copy of the demo in ``folder`` with its first ``n_models`` models and no results store
    or caches (fill its store with :func:`helpers.many_models.store_copies`)."""
    shutil.copytree(DEMO, folder, ignore=shutil.ignore_patterns(".sde-cache", "results.sqlite*"))
    copy = load_workspace(folder)
    write_workspace(dataclasses.replace(copy, models=copy.models[:n_models]))
    return folder


@functools.cache
def _components() -> BidiComponentManager:
    manager = BidiComponentManager()
    manager.discover_and_register_components(start_file_watching=False)
    return manager


def app_test(script: Path, timeout: float) -> AppTest:
    """``AppTest.from_file(script)``, sharing one registry of installed Streamlit components
    between instances: AppTest would scan the metadata of every installed distribution (~450)
    for each new instance, which took half of a typical page test's time."""
    at = AppTest.from_file(str(script), default_timeout=timeout)
    at._bidi_component_manager = _components()
    return at


#: Streamlit's own ``PagesManager.__init__`` (before :func:`warm_server` wraps it).
_COLD_INIT = PagesManager.__init__


@contextmanager
def warm_server() -> Iterator[None]:
    """Run AppTest's scripts as a warm server runs them: through ``app.py``'s navigation.

    AppTest starts every run as a new server process would (it resets Streamlit's process-wide
    legacy-multipage flag), while the switch out of that mode (``pages/__init__.py``) runs once
    per process, at its first import. Inside this context each run starts with the mode off, as
    on a server whose first request has been served; :func:`fresh_server` and the browser tests
    check the first request of a fresh server itself.
    """

    def warm_init(self: PagesManager, *args: Any, **kwargs: Any) -> None:
        _COLD_INIT(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    PagesManager.__init__ = warm_init  # type: ignore[method-assign]
    try:
        yield
    finally:
        PagesManager.__init__ = _COLD_INIT  # type: ignore[method-assign]


@contextmanager
def page_on(folder: Path, page: str, monkeypatch: Any, timeout: float = 180) -> Iterator[AppTest]:
    """An AppTest of ``page`` (e.g. ``"pages/compare.py"``, through ``app.py``'s navigation on a
    warm server, :func:`warm_server`) on the workspace in ``folder`` (``$SDE_WORKSPACE``, its
    parent the allowed data root), run once and checked to have raised nothing."""
    monkeypatch.setenv("SDE_WORKSPACE", str(folder))
    monkeypatch.setenv("SDE_DATA_ROOTS", str(folder.parent))
    with warm_server():
        at = app_test(Path(__file__).resolve().parents[1] / "app.py", timeout)
        at.switch_page(page)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        yield at


@contextmanager
def fresh_server() -> Iterator[None]:
    """Run AppTest's next script run as the first request of a new server process: legacy
    multipage mode on and the ``pages`` package not imported yet."""
    patched = PagesManager.__init__
    PagesManager.__init__ = _COLD_INIT  # type: ignore[method-assign]
    for name in [n for n in sys.modules if n == "pages" or n.startswith("pages.")]:
        del sys.modules[name]
    try:
        yield
    finally:
        PagesManager.__init__ = patched  # type: ignore[method-assign]


def _ckpt(fraction: float) -> str:
    return f"ckpt_{round(fraction * 100):03d}.safetensors"


if __name__ == "__main__":  # python tests/ui_fixtures.py FOLDER — e.g. to try the dashboard
    print(build_tiny_workspace(sys.argv[1]))
