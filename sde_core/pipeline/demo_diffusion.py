"""The diffusion demos (method §14): EDM denoisers on Fashion-MNIST, their unlearned models and
the σ × noise-level study of the paper's Figure 6.

The demos are the rows of one table, :data:`DIFFUSION_DEMOS`: ``fashion-mnist-edm`` (1,000
images, 60 epochs: little memorisation) and ``fashion-mnist-edm-mem`` (300 images at 16×16,
400 epochs: a denoiser that memorises). ``python -m sde_core demo build --dataset <name>``
builds ``assets/<folder>/`` with :func:`build_diffusion_demo`: the data (a seeded subset of
Debian's ``dataset-fashion-mnist``, pixels scaled to [−1, 1]), a random forget set, the models
original, retrained, FT, GA, NegGrad+ and random (the shared, resumable builder of
:mod:`sde_core.pipeline.demo`), a results store with the evaluation at the workspace's
``[defaults]``, the memorisation measures of :mod:`sde_core.pipeline.diffusion_memorisation`
(``denoising_loss.json``: each model's denoising loss on D_f, D_r and D_te at every noise level
with bootstrap intervals — the behaviour the SDE numbers are cross-checked against —, and
``copies.json``: the nearest-neighbour copy test of samples from the EDM sampler), and
``fig6_sweep.csv``: the Figure 6 sweep (:data:`FIG6_SIGMA_FACTORS` × √d and the median rule, at
every noise level of :data:`~sde_core.pipeline.settings.NOISE_LEVELS`) of the original and the
retrained model, the table :func:`~sde_core.pipeline.sweeps.run_sweep` returns with the
``algorithm`` version that computed it (a results store holding each point's H arrays would
take ~1 MB per point; the Sweeps page recomputes any point from the cached activations).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sde_core.common.fsio import atomic_write_text
from sde_core.common.sigma import MEDIAN, Sigma
from sde_core.common.validation import check_int
from sde_core.errors import SettingsError
from sde_core.inputs.denoisers import DENOISED, noise_layer_name
from sde_core.pipeline.demo import BuildReport, build_demo
from sde_core.pipeline.demo_recipes import DemoRecipe, demo_defaults
from sde_core.pipeline.diffusion_memorisation import (
    SWEEP_MODELS,
    CopyRow,
    DenoisingLossRow,
    copy_rows,
    memorisation_rows,
    write_copies,
    write_losses,
)
from sde_core.pipeline.evaluation.metric_table import (
    CALIBRATED_OTR,
    F1,
    NULL_CALIBRATED_FPR,
    OTR,
    PANEL_P,
    raw_column,
)
from sde_core.pipeline.settings import ALGORITHM_VERSION, NOISE_LEVELS
from sde_core.pipeline.workspace import Workspace
from sde_core.pipeline.workspace_load import load_workspace

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DIFFUSION_DEMOS",
    "DIFFUSION_MODELS",
    "FIG6_EXTRA_COLUMNS",
    "FIG6_SIGMA_FACTORS",
    "GPU_VARIANTS",
    "SWEEP_FILE",
    "DiffusionDemo",
    "build_diffusion_demo",
    "default_diffusion_folder",
    "diffusion_recipe",
    "fig6_sweep",
    "write_fig6_sweep",
]


@dataclass(frozen=True)
class DiffusionDemo:
    """What one diffusion demo is built from (its row of :data:`DIFFUSION_DEMOS`).

    Attributes:
        folder: its folder under ``assets/``.
        train_size, test_size: D_tr / D_te sizes (seeded subsets of Fashion-MNIST).
        image_size: side of the shipped images (28, or area-averaged down from 28).
        channels, emb_dim: the U-Net's widths and noise-embedding width.
        epochs, batch_size, lr: the original's (and Retrain's) Adam recipe.
        forget_fraction: |D_f| / |D_tr|.
        subset_size: ``[defaults]`` n.
        method_params: FT / GA / NegGrad+ parameters.
        checkpoint_fractions: the original's saved checkpoints.
        copy_samples: samples of the copy test (:mod:`sde_core.pipeline.diffusion_memorisation`).
        summary: the description's first sentence.
        max_draws: the ``[defaults]`` precision design's budget in draws (10 = the pilot only:
            what keeps the memorising demo's store within the assets budget).
    """

    folder: str
    train_size: int
    test_size: int
    image_size: int
    channels: tuple[int, int]
    emb_dim: int
    epochs: int
    batch_size: int
    lr: float
    forget_fraction: float
    subset_size: int
    method_params: Mapping[str, Mapping[str, Any]]
    checkpoint_fractions: tuple[float, ...] = (0.1, 0.2, 0.4, 0.8, 1.0)
    copy_samples: int = 300
    summary: str = ""
    max_draws: int = 60


DIFFUSION_DEMOS: dict[str, DiffusionDemo] = {
    "fashion-mnist-edm": DiffusionDemo(
        folder="demo-fashion-edm",
        train_size=1000,
        test_size=1000,
        image_size=28,
        channels=(16, 32),
        emb_dim=32,
        epochs=60,
        batch_size=64,
        lr=2e-3,
        forget_fraction=0.2,
        subset_size=100,
        method_params={
            "ft": {"epochs": 5, "lr": 1e-3, "batch_size": 64},
            "ga": {"epochs": 2, "lr": 5e-3, "batch_size": 64},
            "neggrad_plus": {"epochs": 2, "lr": 5e-3, "batch_size": 64, "beta": 0.9},
        },
        summary="Diffusion demo (method §14)",
    ),
    "fashion-mnist-edm-mem": DiffusionDemo(
        folder="demo-fashion-edm-mem",
        train_size=300,
        test_size=500,
        image_size=16,
        channels=(16, 32),
        emb_dim=32,
        epochs=400,
        batch_size=32,
        lr=2e-3,
        forget_fraction=1 / 3,
        subset_size=50,
        method_params={
            "ft": {"epochs": 20, "lr": 1e-3, "batch_size": 32},
            "ga": {"epochs": 2, "lr": 2e-4, "batch_size": 32},
            "neggrad_plus": {"epochs": 5, "lr": 1e-3, "batch_size": 32, "beta": 0.9},
        },
        checkpoint_fractions=(0.25, 1.0),
        summary="Memorising diffusion demo (method §14): few images, trained long",
        max_draws=10,
    ),
}
"""Name (``demo build --dataset``) -> recipe of each diffusion demo: the original 1,000-image
demo, which barely memorises, and a memorising one (300 images at 16×16, 400 epochs), sized to
build on one CPU core in about 15 CPU-minutes."""

GPU_VARIANTS: dict[str, dict[str, Any]] = {
    "fashion-mnist-edm-mem": {
        "train_size": 1000, "test_size": 1000, "image_size": 28, "channels": (64, 128),
        "emb_dim": 64, "epochs": 4000, "batch_size": 64, "forget_fraction": 0.2,
        "subset_size": 100,
    },
}  # fmt: skip
"""The recipe a GPU would build instead (``diffusion_recipe(name, gpu=True)``): full 28×28
images, 1,000 of them, a 64/128-channel U-Net (~2 M parameters) trained 4,000 epochs — about
4·10⁶ image-steps, ~3 h on one CPU core at the measured 8 ms per image-step of that network,
minutes on one GPU. Not built here (no GPU); its checkpoints would exceed the assets budget."""

DIFFUSION_MODELS = ("original", "retrained", "ft", "ga", "neggrad_plus", "random")
"""The models of the diffusion demo, in workspace order (the unlearning methods that apply to a
denoiser, method §14)."""

FIG6_SIGMA_FACTORS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
"""Kernel bandwidths of the Figure 6 sweep, as multiples of √d (plus the median rule)."""

FIG6_EXTRA_COLUMNS = (
    *(column for column in (F1.lo, F1.hi) if column is not None),
    raw_column(F1.key),
    raw_column(OTR.key),
    raw_column(CALIBRATED_OTR.key),
    PANEL_P.key,
    "null_split_fpr",
    NULL_CALIBRATED_FPR.key,
)
"""Columns of the Figure 6 sweep beyond the Sweeps page's: F1's interval, the numbers before the
gate (method §12) and the measured null rates, so a withheld point still says what the paper
would report."""

SWEEP_FILE = "fig6_sweep.csv"


def diffusion_recipe(
    name: str = "fashion-mnist-edm",
    *,
    seed: int = 0,
    train_size: int | None = None,
    test_size: int | None = None,
    epochs: int | None = None,
    method_epochs: int | None = None,
    subset_size: int | None = None,
    channels: tuple[int, int] | None = None,
    gpu: bool = False,
) -> DemoRecipe:
    """A diffusion demo's recipe (:data:`DIFFUSION_DEMOS`), with optional reductions (for tests
    and quick looks).

    Args:
        name: a key of :data:`DIFFUSION_DEMOS`.
        seed: base seed (subsets, forget set, original); retrained ``seed + 1``, random
            ``seed + 2``.
        train_size, test_size: D_tr / D_te sizes.
        epochs: the original's (and Retrain's) epochs.
        method_epochs: epochs of FT, GA and NegGrad+ (all three).
        subset_size: ``[defaults]`` subset size n.
        channels: widths of the U-Net's two levels.
        gpu: the demo's :data:`GPU_VARIANTS` recipe, trained on ``cuda``.

    Raises:
        SettingsError: an unknown name, a non-positive size, or ``gpu`` for a demo without a
            GPU variant.
    """
    from sde_core.learning.training import TrainConfig

    if name not in DIFFUSION_DEMOS:
        raise SettingsError(f"unknown diffusion demo {name!r}; use one of {list(DIFFUSION_DEMOS)}")
    spec = DIFFUSION_DEMOS[name]
    if gpu:
        if name not in GPU_VARIANTS:
            raise SettingsError(f"{name!r} has no GPU variant; use one of {list(GPU_VARIANTS)}")
        spec = dataclasses.replace(spec, **GPU_VARIANTS[name])
    for what, value in (
        ("train_size", train_size),
        ("test_size", test_size),
        ("epochs", epochs),
        ("method_epochs", method_epochs),
        ("subset_size", subset_size),
    ):
        if value is not None:
            check_int(value, what, minimum=1, error=SettingsError)
    n_epochs = epochs or spec.epochs
    config = TrainConfig(
        seed=seed, optimizer="adam", lr=spec.lr, weight_decay=0.0, epochs=n_epochs,
        batch_size=spec.batch_size, checkpoint_fractions=spec.checkpoint_fractions,
        device="cuda" if gpu else "cpu",
    )  # fmt: skip
    method_params: dict[str, dict[str, Any]] = {
        method: {**params, **({"epochs": method_epochs} if method_epochs else {})}
        for method, params in spec.method_params.items()
    }
    n_train, n_test = train_size or spec.train_size, test_size or spec.test_size
    c1, c2 = (int(c) for c in (channels or spec.channels))
    side = spec.image_size
    lr = f"{spec.lr:.0e}".replace("e-0", "e-")
    pixels = "" if side == 28 else f", area-averaged to {side}×{side}"
    description = (
        f"{spec.summary}: an EDM denoiser (U-Net {c1}/{c2} channels, Karras et al. "
        f"2022 preconditioning and loss) trained on {n_train:,} Fashion-MNIST images (pixels in "
        f"[−1, 1]{pixels}) with a random {spec.forget_fraction:.0%} forget set, {n_test:,} test "
        f"images; Adam lr {lr}, batch {spec.batch_size}, {n_epochs} epochs. Layers are "
        "probed at a noise level: 'denoised@0.5' is the denoised image of each sample plus "
        "fixed noise of level 0.5."
    )
    arch_kwargs: dict[str, Any] = {"channels": [c1, c2], "emb_dim": spec.emb_dim}
    if side != 28:
        arch_kwargs["image_size"] = side
    return DemoRecipe(
        name=spec.folder,
        dataset="fashion-mnist",
        description=description,
        train_size=n_train,
        test_size=n_test,
        forget_fraction=spec.forget_fraction,
        arch="edm_unet",
        arch_kwargs=arch_kwargs,
        train=config,
        method_params=method_params,
        defaults=dataclasses.replace(
            demo_defaults("denoised@0.5", subset_size or spec.subset_size),
            max_draws=spec.max_draws,
        ),
        seed=seed,
        retrain_seed=seed + 1,
        random_seed=seed + 2,
        models=DIFFUSION_MODELS,
        dataset_options={"normalize": [[0.5], [0.5]]},
        image_size=None if side == 28 else side,
    )


def default_diffusion_folder(name: str = "fashion-mnist-edm") -> Path:
    """``assets/<folder>`` of a diffusion demo in this checkout."""
    if name not in DIFFUSION_DEMOS:
        raise SettingsError(f"unknown diffusion demo {name!r}; use one of {list(DIFFUSION_DEMOS)}")
    return Path(__file__).resolve().parents[2] / "assets" / DIFFUSION_DEMOS[name].folder


def fig6_sweep(
    ws: Workspace,
    levels: Sequence[float] = NOISE_LEVELS,
    factors: Sequence[float] = FIG6_SIGMA_FACTORS,
    log: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """The Figure 6 sweep of the original and the retrained model: at every noise level, F1
    and OTR for σ = f·√d (f in ``factors``) and the median rule, each σ compared with σ = √d
    on the same draws when 1 is one of the factors (the paired columns of
    :func:`~sde_core.pipeline.sweeps.run_sweep`: whether another σ beats √d is decided by the
    paired difference, method §15).

    Returns:
        The rows of :func:`~sde_core.pipeline.sweeps.run_sweep` (param ``sigma``, with the
        :data:`FIG6_EXTRA_COLUMNS` and the paired columns) of every level, with a column
        ``noise_level`` (σ_t) and ``sigma_rule`` (the σ rule's canonical text,
        :mod:`sde_core.common.sigma`).
    """
    import pandas as pd

    from sde_core.pipeline.sweeps import run_sweep

    say = log or (lambda _line: None)
    models = [m for m in SWEEP_MODELS if any(e.name == m for e in ws.models)]
    parts = []
    for level in levels:
        settings = ws.defaults.with_overrides(layer=noise_layer_name(DENOISED, level))
        root = math.sqrt(_layer_dim(ws, settings.layer))
        values: list[Any] = [f * root for f in factors] + [MEDIAN]
        rules = [Sigma.times_sqrt_d(f).text() for f in factors] + [MEDIAN]
        t0 = time.perf_counter()
        table = run_sweep(
            ws, settings, "sigma", values, models=models, extra_columns=FIG6_EXTRA_COLUMNS,
            paired_base=root if 1.0 in factors else None,
        )  # fmt: skip
        table.insert(2, "noise_level", float(level))
        table.insert(3, "sigma_rule", np.repeat(rules, len(models)))  # rows: value-major
        parts.append(table)
        say(f"sweep σ at {settings.layer}: {time.perf_counter() - t0:.1f}s")
    return pd.concat(parts, ignore_index=True)


def _layer_dim(ws: Workspace, layer: str) -> int:
    from sde_core.pipeline.model_inputs import entry_layer_infos

    side = int(ws.original().arch_kwargs.get("image_size", 28))
    infos = entry_layer_infos(ws, ws.original(), (1, side, side))
    return next(i.dim for i in infos if i.name == layer)


def build_diffusion_demo(
    recipe: DemoRecipe,
    folder: str | Path,
    *,
    source: str | Path | None = None,
    store: bool = True,
    sweeps: bool = True,
    sweep_levels: Sequence[float] = NOISE_LEVELS,
    sweep_factors: Sequence[float] = FIG6_SIGMA_FACTORS,
    copy_samples: int = 0,
    log: Callable[[str], None] | None = None,
) -> tuple[BuildReport, list[DenoisingLossRow]]:
    """Build (or finish) the diffusion demo in ``folder``; see the module docstring.

    Args:
        recipe: :func:`diffusion_recipe`.
        folder: the workspace folder.
        source: the folder with the four Fashion-MNIST idx files (default: Debian's).
        store: evaluate every model at ``[defaults]`` into ``results.sqlite``.
        sweeps: also write the Figure 6 sweep (:func:`fig6_sweep`) to ``fig6_sweep.csv``.
        sweep_levels, sweep_factors: its noise levels and σ factors (reduced in tests).
        copy_samples: samples per model of the copy test written to ``copies.json``
            (:func:`~sde_core.pipeline.diffusion_memorisation.copy_rows`; 0: none).
        log: receives one line per finished step.

    Returns:
        The build report and the denoising losses (also written to ``denoising_loss.json``).
    """
    say = log or (lambda _line: None)
    t0 = time.perf_counter()
    report = build_demo(recipe, folder, source=source, store=store, log=say)
    ws = load_workspace(folder, validate=False)
    rows = memorisation_rows(ws)
    say(f"denoising losses: {write_losses(ws, rows)}")
    if copy_samples:
        copies: list[CopyRow] = copy_rows(ws, copy_samples, log=say)
        say(f"copy test: {write_copies(ws, copies)}")
    if sweeps:
        write_fig6_sweep(ws, sweep_levels, sweep_factors, say)
    report.total_seconds = time.perf_counter() - t0
    return report, rows


def write_fig6_sweep(
    ws: Workspace,
    levels: Sequence[float] = NOISE_LEVELS,
    factors: Sequence[float] = FIG6_SIGMA_FACTORS,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Run :func:`fig6_sweep` on a built diffusion demo and write it to its
    :data:`SWEEP_FILE` (with the algorithm version; what the Sweeps page shows and the
    reproduction quotes). Returns the file."""
    say = log or (lambda _line: None)
    table = fig6_sweep(ws, levels, factors, say)
    table = table.drop(columns=["from_store"]).assign(algorithm=ALGORITHM_VERSION)
    csv = table.to_csv(index=False, float_format="%.6g")
    path = ws.path(SWEEP_FILE)
    atomic_write_text(path, csv)
    say(f"Figure 6 sweep: {path} ({len(table)} points)")
    return Path(path)
