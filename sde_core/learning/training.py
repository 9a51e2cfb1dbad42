"""Reproducible, resumable training of a classifier or a denoiser (the original model ``h_or``).

A classifier trains with cross-entropy; an EDM denoiser (architecture ``edm_unet``) with the EDM
loss of :func:`sde_core.learning.diffusion.edm_loss` (its labels are ignored); see
:func:`batch_objective`.

:func:`train` runs mini-batch training with a seeded recipe (:class:`TrainConfig`), saves the
initial weights (``init.safetensors``) and checkpoints at fractions of training
(``ckpt_010.safetensors`` ... ``ckpt_100.safetensors``, the last one being the final model) and,
after every epoch, a resume file ``resume.pt`` (weights, optimiser, schedule position, RNG states;
loadable with ``torch.load(weights_only=True)``). A run interrupted after epoch ``e`` and restarted
with ``resume=True`` continues at epoch ``e + 1`` and ends with bit-identical weights to an
uninterrupted run on the same device.

Determinism: ``torch.manual_seed(config.seed)`` at the start, a dedicated seeded
:class:`torch.Generator` for the data-loader shuffles and another for augmentation,
``num_workers=0``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn
from torch.utils.data import DataLoader, Dataset

from sde_core.common.fsio import atomic_write
from sde_core.common.hashing import stable_hash
from sde_core.common.validation import check_int, check_number
from sde_core.errors import TrainingError
from sde_core.families.registry import family_of
from sde_core.inputs.models import save_checkpoint
from sde_core.learning.diffusion import edm_loss

__all__ = [
    "AUGMENTATIONS",
    "OPTIMIZERS",
    "SCHEDULES",
    "ProgressFn",
    "TrainConfig",
    "TrainResult",
    "augment_batch",
    "batch_objective",
    "check_forward",
    "checkpoint_epochs",
    "checkpoint_name",
    "make_loader",
    "make_optimizer",
    "resolve_device",
    "save_weights",
    "train",
]

OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("constant", "cosine", "step")
AUGMENTATIONS = ("none", "flip_crop")

INIT_NAME = "init.safetensors"
RESUME_NAME = "resume.pt"

Objective = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
"""``objective(model, x, y) -> scalar loss`` of one mini-batch."""

ProgressFn = Callable[[int, int, float], None]
"""``progress(epoch, total_epochs, mean_loss)``, called after each epoch (epoch is 1-based)."""


@dataclass(frozen=True)
class TrainConfig:
    """A complete, explicit training recipe.

    Attributes:
        seed: seed of the parameter RNG, the shuffles and the augmentation.
        optimizer: ``"sgd"`` (with ``momentum``) or ``"adam"``.
        lr: initial learning rate (> 0).
        momentum: SGD momentum in [0, 1) (ignored by Adam).
        weight_decay: L2 weight decay (>= 0), as the optimiser's ``weight_decay``.
        schedule: ``"constant"``, ``"cosine"`` (per-epoch cosine annealing to 0) or ``"step"``
            (lr multiplied by ``step_gamma`` at each fraction of ``step_milestones``).
        step_milestones: fractions of the epochs in (0, 1) where the ``"step"`` schedule decays.
        step_gamma: decay factor of the ``"step"`` schedule, in (0, 1].
        epochs: number of passes over the training set (>= 1).
        batch_size: mini-batch size (>= 1); the last partial batch is kept.
        augmentation: ``"none"`` or ``"flip_crop"`` (random horizontal flip and random crop with
            4-pixel zero padding; images only, i.e. inputs of shape ``(C, H, W)``).
        checkpoint_fractions: fractions of training in (0, 1] at which to save a checkpoint; a
            fraction f is saved after epoch ``max(1, round(f * epochs))``.
        device: torch device string (``"cpu"``, ``"cuda"``, ``"cuda:0"``, ``"auto"``).
    """

    seed: int = 0
    optimizer: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    schedule: str = "constant"
    step_milestones: tuple[float, ...] = (0.5, 0.75)
    step_gamma: float = 0.1
    epochs: int = 10
    batch_size: int = 128
    augmentation: str = "none"
    checkpoint_fractions: tuple[float, ...] = (0.1, 0.2, 0.4, 0.8, 1.0)
    device: str = "cpu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_milestones", tuple(float(v) for v in self.step_milestones))
        object.__setattr__(
            self, "checkpoint_fractions", tuple(float(v) for v in self.checkpoint_fractions)
        )
        _check_choice("optimizer", self.optimizer, OPTIMIZERS)
        _check_choice("schedule", self.schedule, SCHEDULES)
        _check_choice("augmentation", self.augmentation, AUGMENTATIONS)
        for name, minimum in (("seed", 0), ("epochs", 1), ("batch_size", 1)):
            value = check_int(getattr(self, name), name, minimum=minimum, error=TrainingError)
            object.__setattr__(self, name, value)
        check_number(self.lr, "lr", gt=0.0, error=TrainingError)
        if not 0.0 <= float(self.momentum) < 1.0:
            raise TrainingError(f"momentum={self.momentum} is outside [0, 1): use e.g. 0.9")
        if not float(self.weight_decay) >= 0.0:
            raise TrainingError(f"weight_decay={self.weight_decay} is negative: use 0 or e.g. 5e-4")
        if not 0.0 < float(self.step_gamma) <= 1.0:
            raise TrainingError(f"step_gamma={self.step_gamma} is outside (0, 1]: use e.g. 0.1")
        if any(not 0.0 < f < 1.0 for f in self.step_milestones):
            raise TrainingError(
                f"step_milestones={self.step_milestones} must be fractions in (0, 1), "
                "e.g. (0.5, 0.75)"
            )
        if not self.checkpoint_fractions or any(
            not 0.0 < f <= 1.0 for f in self.checkpoint_fractions
        ):
            raise TrainingError(
                f"checkpoint_fractions={self.checkpoint_fractions} must be a non-empty list of "
                "fractions in (0, 1], e.g. (0.1, 0.2, 0.4, 0.8, 1.0)"
            )

    def to_dict(self) -> dict[str, Any]:
        """The recipe as a plain dict (tuples become lists), e.g. for ``workspace.toml``."""
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """Build a config from a dict, rejecting unknown keys with a :class:`TrainingError`."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise TrainingError(
                f"unknown training setting(s) {unknown}; valid settings: {sorted(names)}"
            )
        return cls(**dict(values))

    def recipe_hash(self) -> str:
        """Hash of everything that changes the trained weights (not the device)."""
        recipe = self.to_dict()
        recipe.pop("device")
        return stable_hash(recipe)


@dataclass
class TrainResult:
    """Outcome of :func:`train`.

    Attributes:
        model: the trained model (in eval mode, on ``config.device``).
        config: the recipe used.
        losses: mean training loss of each epoch (length ``config.epochs``).
        seconds: wall-clock training time summed over all (resumed) sessions, in seconds.
        init_path: path of the saved initial weights, or None when no ``out_dir`` was given.
        checkpoints: ``{fraction: path}`` of the saved checkpoints (empty without ``out_dir``).
        final_path: path of the final checkpoint (fraction 1.0), or None.
        resumed_from_epoch: number of epochs loaded from the resume file (0 for a fresh run).
    """

    model: nn.Module
    config: TrainConfig
    losses: list[float]
    seconds: float
    init_path: Path | None = None
    checkpoints: dict[float, Path] = field(default_factory=dict)
    final_path: Path | None = None
    resumed_from_epoch: int = 0


def _check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise TrainingError(f"{name}={value!r} is not supported; choose one of {list(choices)}")


def resolve_device(device: str) -> torch.device:
    """Turn ``"auto"``/``"cpu"``/``"cuda[:i]"`` into a checked :class:`torch.device`."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise TrainingError(
            f"device={device!r} is not a torch device: use 'cpu' or 'cuda'"
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TrainingError(f"device={device!r} requested but CUDA is not available: use 'cpu'")
    return dev


def checkpoint_name(fraction: float) -> str:
    """File name of the checkpoint at ``fraction`` of training: 0.1 -> ``ckpt_010.safetensors``."""
    return f"ckpt_{round(fraction * 100):03d}.safetensors"


def checkpoint_epochs(fractions: Sequence[float], epochs: int) -> dict[float, int]:
    """Map each checkpoint fraction to the 1-based epoch after which it is saved.

    A fraction f maps to ``max(1, round(f * epochs))`` (so with 10 epochs the defaults give
    epochs 1, 2, 4, 8, 10); with few epochs several fractions may share an epoch.
    """
    return {float(f): max(1, min(epochs, round(f * epochs))) for f in fractions}


def make_optimizer(params: Any, config: TrainConfig) -> torch.optim.Optimizer:
    """The optimiser of ``config`` over ``params``."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
    return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)


def _lr_factor(config: TrainConfig, epoch: int) -> float:
    """Multiplier of ``config.lr`` during 0-based ``epoch``."""
    if config.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * epoch / config.epochs))
    if config.schedule == "step":
        passed = sum(1 for m in config.step_milestones if epoch >= round(m * config.epochs))
        return config.step_gamma**passed
    return 1.0


def make_loader(
    dataset: Dataset, batch_size: int, generator: torch.Generator | None, *, shuffle: bool = True
) -> DataLoader:
    """A single-process data loader whose shuffles are drawn from ``generator``."""
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=shuffle, generator=generator, num_workers=0
    )


def augment_batch(x: torch.Tensor, generator: torch.Generator, padding: int = 4) -> torch.Tensor:
    """Random horizontal flip and random crop (zero padding) of an image batch.

    Args:
        x: images of shape ``(B, C, H, W)``.
        generator: CPU generator the random flips and offsets are drawn from.
        padding: pixels of zero padding on each side before cropping back to ``(H, W)``.

    Returns:
        A new tensor of shape ``(B, C, H, W)``.
    """
    if x.dim() != 4:
        raise TrainingError(
            f"augmentation 'flip_crop' needs image batches of shape (B, C, H, W), got "
            f"{tuple(x.shape)}: use augmentation='none' for non-image data"
        )
    b, _, h, w = x.shape
    flip = torch.rand(b, generator=generator) < 0.5
    offsets = torch.randint(0, 2 * padding + 1, (b, 2), generator=generator)
    x = torch.where(flip.view(b, 1, 1, 1).to(x.device), x.flip(3), x)
    padded = nn.functional.pad(x, (padding, padding, padding, padding))
    out = torch.empty_like(x)
    for i in range(b):
        dy, dx = int(offsets[i, 0]), int(offsets[i, 1])
        out[i] = padded[i, :, dy : dy + h, dx : dx + w]
    return out


def _cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}


def save_weights(
    model: nn.Module,
    path: str | Path,
    *,
    arch: str | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Save ``model`` as a safetensors checkpoint, atomically.

    With ``arch`` the file is written by :func:`sde_core.inputs.models.save_checkpoint`
    (architecture
    metadata included, so :func:`sde_core.inputs.models.load_checkpoint` can rebuild the model);
    without, it holds the bare ``state_dict`` plus ``metadata``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if arch is not None:  # save_checkpoint writes atomically itself
        return save_checkpoint(
            model, path, arch, arch_kwargs=arch_kwargs, metadata=dict(metadata or {})
        )
    state, header = _cpu_state(model), dict(metadata or {})
    return atomic_write(path, lambda tmp: save_file(state, str(tmp), metadata=header))


def _rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: Mapping[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _load_resume(path: Path, config: TrainConfig) -> dict[str, Any] | None:
    """The resume state at ``path`` when it exists and matches ``config``'s recipe."""
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise TrainingError(
            f"resume file {path} is unreadable ({exc}): delete it or pass resume=False"
        ) from exc
    if state.get("recipe_hash") != config.recipe_hash():
        raise TrainingError(
            f"resume file {path} was written with a different training recipe: use the same "
            "settings, another output folder, or resume=False to start over"
        )
    return state


def batch_objective(
    model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
) -> Objective:
    """The mini-batch loss ``objective(model, x, y)`` that trains ``model``: the EDM loss for a
    denoiser (labels ignored), else ``loss_fn(model(x), y)`` (default mean cross-entropy).

    Raises:
        TrainingError: a ``loss_fn`` for a denoiser (it trains with the EDM loss only).
    """
    if family_of(model).objective == "edm":
        if loss_fn is not None:
            raise TrainingError("a denoiser trains with the EDM loss: do not pass loss_fn")
        return lambda m, x, _y: edm_loss(m, x)
    fn = loss_fn or nn.functional.cross_entropy
    return lambda m, x, y: fn(m(x), y)


def check_forward(model: nn.Module, dataset: Dataset, device: torch.device, index: int = 0) -> int:
    """Run ``model`` (eval mode, no grad) on sample ``index``; return the output width (classes),
    or 0 for a denoiser (which must return an image of its input's shape at σ = 1).

    Raises:
        TrainingError: the model cannot process the data's inputs (e.g. wrong ``input_dim``) or
            does not output a ``(1, C)`` score vector (a denoiser: its input's shape).
    """
    x, _ = dataset[index]
    x = torch.as_tensor(x).unsqueeze(0).to(device)
    family = family_of(model)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(x, 1.0) if family.probes_at_noise_levels else model(x)
    except RuntimeError as exc:
        first = str(exc).strip().split("\n")[0]
        raise TrainingError(
            f"the model cannot process inputs of shape {tuple(x.shape[1:])} ({first}): build it "
            "with architecture kwargs that match the dataset (e.g. input_dim, in_channels)"
        ) from exc
    finally:
        model.train(was_training)
    if family.probes_at_noise_levels:
        if not isinstance(out, torch.Tensor) or out.shape != x.shape:
            raise TrainingError(
                f"the denoiser must return images of its input's shape {tuple(x.shape[1:])}: "
                "build it with in_channels and image_size that match the dataset"
            )
        return 0
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[1] < 2:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise TrainingError(f"the model must output class scores of shape (N, C>=2), got {shape}")
    return int(out.shape[1])


def _check_model_and_data(model: object, dataset: object) -> None:
    if not isinstance(model, nn.Module):
        raise TrainingError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not any(p.requires_grad for p in model.parameters()):
        raise TrainingError("model has no trainable parameters: nothing to train")
    try:
        n = len(dataset)  # type: ignore[arg-type]
    except TypeError as exc:
        raise TrainingError(
            f"training data must be a sized torch Dataset, got {type(dataset).__name__}"
        ) from exc
    if n == 0:
        raise TrainingError("training set is empty: give at least one (input, label) sample")


def train(
    model: nn.Module,
    train_dataset: Dataset,
    config: TrainConfig,
    out_dir: str | Path | None = None,
    *,
    progress: ProgressFn | None = None,
    resume: bool = True,
    arch: str | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    stop_after_epoch: int | None = None,
) -> TrainResult:
    """Train ``model`` in place on ``train_dataset`` following ``config``: cross-entropy for a
    classifier, the EDM loss for a denoiser (:func:`batch_objective`).

    Args:
        model: a freshly initialised classifier or denoiser; it is moved to ``config.device``.
        train_dataset: a sized Dataset of ``(input, integer label)`` pairs.
        config: the recipe.
        out_dir: folder for ``init.safetensors``, the checkpoints and ``resume.pt``; None keeps
            everything in memory (no checkpoints, no resume).
        progress: optional callback ``progress(epoch, total_epochs, mean_loss)``.
        resume: continue from ``out_dir/resume.pt`` when it exists (it must have been written with
            the same recipe); False starts over and overwrites the files.
        arch, arch_kwargs: registry architecture of ``model``; when given, checkpoints carry it
            (see :func:`save_weights`).
        loss_fn: ``loss_fn(logits, labels) -> scalar``; default mean cross-entropy (classifiers
            only: a denoiser always trains with the EDM loss).
        stop_after_epoch: stop (as if interrupted) after this 1-based epoch, leaving the resume
            file in place; used to split long runs and to test resumption.

    Returns:
        A :class:`TrainResult`. The resume file is removed once all epochs are done.
    """
    if not isinstance(config, TrainConfig):
        raise TrainingError(f"config must be a TrainConfig, got {type(config).__name__}")
    _check_model_and_data(model, train_dataset)
    if stop_after_epoch is not None:
        check_int(stop_after_epoch, "stop_after_epoch", minimum=1, error=TrainingError)
    device = resolve_device(config.device)
    objective = batch_objective(model, loss_fn)
    out = Path(out_dir) if out_dir is not None else None
    model.to(device)
    check_forward(model, train_dataset, device)

    torch.manual_seed(config.seed)
    shuffle_gen = torch.Generator().manual_seed(config.seed)
    augment_gen = torch.Generator().manual_seed(config.seed + 1)
    optimizer = make_optimizer(model.parameters(), config)
    losses: list[float] = []
    seconds = 0.0
    start_epoch = 0
    meta = {"recipe": config.recipe_hash(), "epochs": str(config.epochs)}

    init_path = out / INIT_NAME if out is not None else None
    resume_path = out / RESUME_NAME if out is not None else None
    state = _load_resume(resume_path, config) if (resume and resume_path is not None) else None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        shuffle_gen.set_state(state["shuffle_rng"])
        augment_gen.set_state(state["augment_rng"])
        _set_rng_state(state["rng"], device)
        losses = [float(v) for v in state["losses"]]
        seconds = float(state["seconds"])
        start_epoch = int(state["epoch"])
    elif init_path is not None:
        save_weights(
            model, init_path, arch=arch, arch_kwargs=arch_kwargs, metadata={**meta, "fraction": "0"}
        )

    ckpt_at = checkpoint_epochs(config.checkpoint_fractions, config.epochs)
    loader = make_loader(train_dataset, config.batch_size, shuffle_gen)
    last_epoch = config.epochs if stop_after_epoch is None else min(config.epochs, stop_after_epoch)
    for epoch in range(start_epoch, last_epoch):
        t0 = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = config.lr * _lr_factor(config, epoch)
        model.train()
        total, count = 0.0, 0
        for x, y in loader:
            if config.augmentation == "flip_crop":
                x = augment_batch(x, augment_gen)
            x, y = x.to(device), torch.as_tensor(y).to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = objective(model, x, y)
            if not torch.isfinite(loss):
                raise TrainingError(
                    f"training diverged at epoch {epoch + 1} (loss {loss.item()}): lower lr"
                )
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(y)
            count += len(y)
        losses.append(total / count)
        seconds += time.perf_counter() - t0
        if out is not None:
            for frac, at in ckpt_at.items():
                if at == epoch + 1:
                    save_weights(
                        model,
                        out / checkpoint_name(frac),
                        arch=arch,
                        arch_kwargs=arch_kwargs,
                        metadata={**meta, "fraction": repr(frac), "epoch": str(epoch + 1)},
                    )
            _save_resume(
                resume_path,  # type: ignore[arg-type]
                {
                    "recipe_hash": config.recipe_hash(),
                    "epoch": epoch + 1,
                    "model": _cpu_state(model),
                    "optimizer": optimizer.state_dict(),
                    "shuffle_rng": shuffle_gen.get_state(),
                    "augment_rng": augment_gen.get_state(),
                    "rng": _rng_state(device),
                    "losses": losses,
                    "seconds": seconds,
                },
            )
        if progress is not None:
            progress(epoch + 1, config.epochs, losses[-1])

    model.eval()
    done = len(losses) == config.epochs
    if done and resume_path is not None and resume_path.exists():
        resume_path.unlink()
    checkpoints = (
        {f: out / checkpoint_name(f) for f, at in ckpt_at.items() if at <= len(losses)}
        if out is not None
        else {}
    )
    final = checkpoints.get(1.0) if done else None
    if done and out is not None and final is None:
        final = save_weights(
            model,
            out / checkpoint_name(1.0),
            arch=arch,
            arch_kwargs=arch_kwargs,
            metadata={**meta, "fraction": "1.0", "epoch": str(config.epochs)},
        )
        checkpoints[1.0] = final
    return TrainResult(
        model=model,
        config=config,
        losses=losses,
        seconds=seconds,
        init_path=init_path,
        checkpoints=checkpoints,
        final_path=final,
        resumed_from_epoch=start_epoch,
    )


def _save_resume(path: Path, state: dict[str, Any]) -> None:
    atomic_write(path, lambda tmp: torch.save(state, tmp))
