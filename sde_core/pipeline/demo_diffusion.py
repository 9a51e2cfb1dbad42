"""The diffusion demo (method §14): an EDM denoiser on Fashion-MNIST, its unlearned models and
the σ × noise-level study of the paper's Figure 6.

``python -m sde_core demo build --dataset fashion-mnist-edm`` builds ``assets/demo-fashion-edm/``
with :func:`build_diffusion_demo`: the data (a seeded subset of Debian's
``dataset-fashion-mnist``, pixels scaled to [−1, 1]), a random 20% forget set, the models
original, retrained, FT, GA, NegGrad+ and random (the shared, resumable builder of
:mod:`sde_core.pipeline.demo`), a results store with the evaluation at the workspace's
``[defaults]``, ``denoising_loss.json``: each model's denoising loss on D_f, D_r and D_te at
every noise level — the behaviour the SDE numbers are cross-checked against (a denoiser that
memorised D_f denoises it better than unseen images) — and ``fig6_sweep.csv``: the Figure 6
sweep (:data:`FIG6_SIGMA_FACTORS` × √d and the median rule, at every noise level of
:data:`~sde_core.pipeline.settings.NOISE_LEVELS`) of the original and the retrained model, the
table :func:`~sde_core.pipeline.sweeps.run_sweep` returns (a results store holding each point's
H arrays would take ~1 MB per point; the Sweeps page recomputes any point from the cached
activations).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
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
from sde_core.pipeline.evaluation.metric_table import (
    CALIBRATED_OTR,
    F1,
    NULL_CALIBRATED_FPR,
    OTR,
    PANEL_P,
    raw_column,
)
from sde_core.pipeline.settings import NOISE_LEVELS
from sde_core.pipeline.workspace import Workspace
from sde_core.pipeline.workspace_load import load_workspace

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DIFFUSION_DEMOS",
    "DIFFUSION_MODELS",
    "FIG6_EXTRA_COLUMNS",
    "FIG6_SIGMA_FACTORS",
    "LOSS_FILE",
    "SWEEP_FILE",
    "DenoisingLossRow",
    "build_diffusion_demo",
    "default_diffusion_folder",
    "diffusion_recipe",
    "fig6_sweep",
    "memorisation_rows",
]

DIFFUSION_DEMOS = {"fashion-mnist-edm": "demo-fashion-edm"}
"""Name (``demo build --dataset``) -> folder under ``assets/`` of each diffusion demo."""

DIFFUSION_MODELS = ("original", "retrained", "ft", "ga", "neggrad_plus", "random")
"""The models of the diffusion demo, in workspace order (the unlearning methods that apply to a
denoiser, method §14)."""

FIG6_SIGMA_FACTORS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
"""Kernel bandwidths of the Figure 6 sweep, as multiples of √d (plus the median rule)."""

FIG6_EXTRA_COLUMNS = (
    raw_column(F1.key),
    raw_column(OTR.key),
    raw_column(CALIBRATED_OTR.key),
    PANEL_P.key,
    "null_split_fpr",
    NULL_CALIBRATED_FPR.key,
)
"""Columns of the Figure 6 sweep beyond the Sweeps page's: the numbers before the gate (method
§12) and the measured null rates, so a withheld point still says what the paper would report."""

LOSS_FILE = "denoising_loss.json"
SWEEP_FILE = "fig6_sweep.csv"
_SWEEP_MODELS = ("original", "retrained")


def diffusion_recipe(
    name: str = "fashion-mnist-edm",
    *,
    seed: int = 0,
    train_size: int | None = None,
    test_size: int | None = None,
    epochs: int | None = None,
    method_epochs: int | None = None,
    subset_size: int = 100,
    channels: tuple[int, int] = (16, 32),
) -> DemoRecipe:
    """The diffusion demo's recipe, with optional reductions (for tests and quick looks).

    Args:
        name: a key of :data:`DIFFUSION_DEMOS`.
        seed: base seed (subsets, forget set, original); retrained ``seed + 1``, random
            ``seed + 2``.
        train_size, test_size: D_tr / D_te sizes (default 1,000 / 1,000).
        epochs: the original's (and Retrain's) epochs (default 60).
        method_epochs: epochs of FT (default 5), GA and NegGrad+ (default 2).
        subset_size: ``[defaults]`` subset size n.
        channels: widths of the U-Net's two levels.

    Raises:
        SettingsError: an unknown name or a non-positive size.
    """
    from sde_core.learning.training import TrainConfig

    if name not in DIFFUSION_DEMOS:
        raise SettingsError(f"unknown diffusion demo {name!r}; use one of {list(DIFFUSION_DEMOS)}")
    for what, value in (
        ("train_size", train_size),
        ("test_size", test_size),
        ("epochs", epochs),
        ("method_epochs", method_epochs),
        ("subset_size", subset_size),
    ):
        if value is not None:
            check_int(value, what, minimum=1, error=SettingsError)
    n_epochs = epochs or 60
    config = TrainConfig(
        seed=seed, optimizer="adam", lr=2e-3, weight_decay=0.0, epochs=n_epochs, batch_size=64,
        checkpoint_fractions=(0.1, 0.2, 0.4, 0.8, 1.0),
    )  # fmt: skip
    ft_epochs = method_epochs or 5
    ga_epochs = method_epochs or 2
    method_params: dict[str, dict[str, Any]] = {
        "ft": {"epochs": ft_epochs, "lr": 1e-3, "batch_size": 64},
        "ga": {"epochs": ga_epochs, "lr": 5e-3, "batch_size": 64},
        "neggrad_plus": {"epochs": ga_epochs, "lr": 5e-3, "batch_size": 64, "beta": 0.9},
    }
    n_train, n_test = train_size or 1000, test_size or 1000
    c1, c2 = (int(c) for c in channels)
    description = (
        f"Diffusion demo (method §14): an EDM denoiser (U-Net {c1}/{c2} channels, Karras et al. "
        f"2022 preconditioning and loss) trained on {n_train:,} Fashion-MNIST images (pixels in "
        f"[−1, 1]) with a random 20% forget set, {n_test:,} test images; Adam lr 2e-3, batch 64, "
        f"{n_epochs} epochs. Layers are probed at a noise level: 'denoised@0.5' is the denoised "
        "image of each sample plus fixed noise of level 0.5."
    )
    return DemoRecipe(
        name=DIFFUSION_DEMOS[name],
        dataset="fashion-mnist",
        description=description,
        train_size=n_train,
        test_size=n_test,
        forget_fraction=0.2,
        arch="edm_unet",
        arch_kwargs={"channels": [c1, c2], "emb_dim": 32},
        train=config,
        method_params=method_params,
        defaults=demo_defaults("denoised@0.5", subset_size),
        seed=seed,
        retrain_seed=seed + 1,
        random_seed=seed + 2,
        models=DIFFUSION_MODELS,
        dataset_options={"normalize": [[0.5], [0.5]]},
    )


def default_diffusion_folder(name: str = "fashion-mnist-edm") -> Path:
    """``assets/<folder>`` of a diffusion demo in this checkout."""
    if name not in DIFFUSION_DEMOS:
        raise SettingsError(f"unknown diffusion demo {name!r}; use one of {list(DIFFUSION_DEMOS)}")
    return Path(__file__).resolve().parents[2] / "assets" / DIFFUSION_DEMOS[name]


@dataclass(frozen=True)
class DenoisingLossRow:
    """One model's mean denoising loss at one noise level (method §14).

    Attributes:
        model: workspace model name.
        noise_level: σ_t.
        forget, retain, test: mean per-sample loss on D_f, on D_r and on D_te.
        gap: ``(test − forget) / test``: how much better D_f is denoised than unseen images
            (0: not at all; the memorisation the SDE numbers are cross-checked against). D_f
            and D_te hold different images, so image difficulty adds noise to it.
        paired_forget, paired_forget_se: the paired comparison with the retrained model (which
            never saw D_f), image by image: ``mean(L_re − L) / mean(L_re)`` over D_f and its
            standard error; positive when this model denoises the forget images better.
        paired_test, paired_test_se: the same over D_te (unseen by both models: what two
            trainings differ by without memorisation). ``paired_forget − paired_test`` is the
            memorisation of D_f that this model shows beyond a model that never saw it.
            All four are NaN without a retrained model (0 for the retrained model itself).
    """

    model: str
    noise_level: float
    forget: float
    retain: float
    test: float
    gap: float
    paired_forget: float = math.nan
    paired_forget_se: float = math.nan
    paired_test: float = math.nan
    paired_test_se: float = math.nan


def _paired(reference: np.ndarray, losses: np.ndarray) -> tuple[float, float]:
    """``mean(reference − losses) / mean(reference)`` and its standard error (per-image pairs)."""
    diff = (reference - losses) / float(reference.mean())
    se = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else math.nan
    return float(diff.mean()), se


def memorisation_rows(
    ws: Workspace, levels: Sequence[float] = NOISE_LEVELS
) -> list[DenoisingLossRow]:
    """Every model's denoising loss on D_f, D_r and D_te at each of ``levels``, and its paired
    comparison with the retrained model (see :class:`DenoisingLossRow`)."""
    from sde_core.inputs.data import load_dataset
    from sde_core.inputs.indices import load_index_file
    from sde_core.learning.diffusion import denoising_losses
    from sde_core.pipeline.model_inputs import load_entry_model

    bundle = load_dataset(ws.dataset_spec())
    n_train = len(bundle.train_labels)
    forget = load_index_file(ws.path(ws.forget_indices), n_train)
    retain = np.setdiff1d(np.arange(n_train), forget)
    losses = {}
    for entry in ws.models:
        model = load_entry_model(ws, entry)
        losses[entry.name] = (
            denoising_losses(model, bundle.train, np.arange(n_train), levels),
            denoising_losses(model, bundle.test, np.arange(len(bundle.test_labels)), levels),
        )
    reference = next((m.name for m in ws.models if m.role == "retrained"), None)
    rows = []
    for name, (train, test) in losses.items():
        for level in train:
            f, r, t = (float(train[level][forget].mean()), float(train[level][retain].mean()),
                       float(test[level].mean()))  # fmt: skip
            paired: tuple[float, ...] = ()
            if reference is not None:
                ref_train, ref_test = losses[reference]
                paired = (*_paired(ref_train[level][forget], train[level][forget]),
                          *_paired(ref_test[level], test[level]))  # fmt: skip
            rows.append(DenoisingLossRow(name, level, f, r, t, (t - f) / t, *paired))
    return rows


def _write_losses(ws: Workspace, rows: Sequence[DenoisingLossRow]) -> Path:
    path = ws.path(LOSS_FILE)
    document = {
        "what": "mean per-sample denoising loss mean_pixels (D(y + s*eps(y); s) - y)^2 on D_f, "
        "D_r and D_te, with the fixed probe noise eps(y) of method §14; gap = (test - forget) "
        "/ test; paired_* = mean(L_retrained - L) / mean(L_retrained) image by image on D_f "
        "and on D_te, with standard errors",
        "rows": [vars(r) for r in rows],
    }
    atomic_write_text(path, json.dumps(document, indent=1) + "\n")
    return path


def fig6_sweep(
    ws: Workspace,
    levels: Sequence[float] = NOISE_LEVELS,
    factors: Sequence[float] = FIG6_SIGMA_FACTORS,
    log: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """The Figure 6 sweep of the original and the retrained model: at every noise level, F1
    and OTR for σ = f·√d (f in ``factors``) and the median rule.

    Returns:
        The rows of :func:`~sde_core.pipeline.sweeps.run_sweep` (param ``sigma``, with the
        :data:`FIG6_EXTRA_COLUMNS`) of every level, with a column ``noise_level`` (σ_t) and
        ``sigma_rule`` (the σ rule's canonical text, :mod:`sde_core.common.sigma`).
    """
    import pandas as pd

    from sde_core.pipeline.sweeps import run_sweep

    say = log or (lambda _line: None)
    models = [m for m in _SWEEP_MODELS if any(e.name == m for e in ws.models)]
    parts = []
    for level in levels:
        settings = ws.defaults.with_overrides(layer=noise_layer_name(DENOISED, level))
        root = math.sqrt(_layer_dim(ws, settings.layer))
        values: list[Any] = [f * root for f in factors] + [MEDIAN]
        rules = [Sigma.times_sqrt_d(f).text() for f in factors] + [MEDIAN]
        t0 = time.perf_counter()
        table = run_sweep(
            ws, settings, "sigma", values, models=models, extra_columns=FIG6_EXTRA_COLUMNS
        )
        table.insert(2, "noise_level", float(level))
        table.insert(3, "sigma_rule", np.repeat(rules, len(models)))  # rows: value-major
        parts.append(table)
        say(f"sweep σ at {settings.layer}: {time.perf_counter() - t0:.1f}s")
    return pd.concat(parts, ignore_index=True)


def _layer_dim(ws: Workspace, layer: str) -> int:
    from sde_core.pipeline.model_inputs import entry_layer_infos

    infos = entry_layer_infos(ws, ws.original(), (1, 28, 28))
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
        log: receives one line per finished step.

    Returns:
        The build report and the denoising losses (also written to ``denoising_loss.json``).
    """
    say = log or (lambda _line: None)
    t0 = time.perf_counter()
    report = build_demo(recipe, folder, source=source, store=store, log=say)
    ws = load_workspace(folder, validate=False)
    rows = memorisation_rows(ws)
    say(f"denoising losses: {_write_losses(ws, rows)}")
    if sweeps:
        table = fig6_sweep(ws, sweep_levels, sweep_factors, say)
        csv = table.drop(columns=["from_store"]).to_csv(index=False, float_format="%.6g")
        atomic_write_text(ws.path(SWEEP_FILE), csv)
        say(f"Figure 6 sweep: {ws.path(SWEEP_FILE)} ({len(table)} points)")
    report.total_seconds = time.perf_counter() - t0
    return report, rows
