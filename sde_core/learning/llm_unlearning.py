"""Language-model training and unlearning (method §7.1): gradient ascent, gradient difference,
NPO and retraining on the retained set, on a Hugging Face model folder's causal LM.

Every function takes an :class:`~sde_core.inputs.hf_models.HFHiddenStates` (what a model folder
loads as) and a text dataset (:class:`~sde_core.inputs.text_data.TextDataset`: rows of token ids
and attention masks). The loss of a text is its next-token negative log-likelihood (NLL) summed
over its real tokens; a batch's language-modelling loss is the mean per-token NLL. The methods are
registered in :mod:`sde_core.learning.unlearning` as ``llm_ga``, ``llm_gd``, ``llm_npo`` and
``llm_retrain`` and follow the common signature ``fn(original, data, params)`` (returning the
new model, which :func:`~sde_core.learning.unlearning.unlearn` times); they never modify
``original``. Optimiser: AdamW (weight decay ``weight_decay``), constant learning rate.

Defaults are the published ones for fine-tuned LLMs (TOFU: AdamW, learning rate 1e-5, batch 32,
5 epochs, weight decay 0.01; NPO: β = 0.1; gradient difference and NPO weigh the retained-set NLL
by 1, as the OpenUnlearning trainers do); a small model trained from scratch needs a larger
learning rate (the demo's recipe says which it uses).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from sde_core.common.validation import check_int, check_number
from sde_core.errors import TrainingError
from sde_core.inputs.hf_models import HFHiddenStates
from sde_core.learning.training import resolve_device

__all__ = [
    "LMGAParams",
    "LMGDParams",
    "LMNPOParams",
    "LMTrainParams",
    "causal_lm_losses",
    "llm_gradient_ascent",
    "llm_gradient_difference",
    "llm_npo",
    "llm_retrain",
    "train_causal_lm",
]

#: ``progress(epoch, epochs, mean loss)`` after each epoch.
EpochProgress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class LMTrainParams:
    """Language-model training: AdamW on the mean per-token NLL (TOFU's fine-tuning recipe).

    Attributes:
        lr: learning rate. epochs: passes over the rows. batch_size: texts per step.
        weight_decay: AdamW's decoupled weight decay. seed: shuffling (and re-initialisation).
    """

    lr: float = 1e-5
    epochs: int = 5
    batch_size: int = 32
    weight_decay: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        check_number(self.lr, "lr", gt=0.0, error=TrainingError)
        check_number(self.weight_decay, "weight_decay", ge=0.0, error=TrainingError)
        check_int(self.epochs, "epochs", minimum=1, maximum=100_000, error=TrainingError)
        check_int(self.batch_size, "batch_size", minimum=1, maximum=1_000_000, error=TrainingError)
        check_int(self.seed, "seed", minimum=0, error=TrainingError)


@dataclass(frozen=True)
class LMGAParams(LMTrainParams):
    """Gradient ascent on D_f (TOFU's defaults)."""


@dataclass(frozen=True)
class LMGDParams(LMTrainParams):
    """Gradient difference: ascent on D_f plus ``retain_weight`` × descent on D_r."""

    retain_weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number(self.retain_weight, "retain_weight", ge=0.0, error=TrainingError)


@dataclass(frozen=True)
class LMNPOParams(LMTrainParams):
    """Negative preference optimisation (β = 0.1) plus ``retain_weight`` × the D_r NLL."""

    beta: float = 0.1
    retain_weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number(self.beta, "beta", gt=0.0, error=TrainingError)
        check_number(self.retain_weight, "retain_weight", ge=0.0, error=TrainingError)


def _check(model: object, dataset: object) -> None:
    if not isinstance(model, HFHiddenStates):
        raise TrainingError(
            f"the language-model methods work on a Hugging Face model folder (arch 'hf'), got "
            f"{type(model).__name__}; use the vision methods for classifiers"
        )
    if not hasattr(dataset, "get_batch"):
        raise TrainingError("the language-model methods need a text dataset (kind = 'text')")


def _batches(
    indices: np.ndarray, batch_size: int, generator: np.random.Generator
) -> Iterator[np.ndarray]:
    order = generator.permutation(indices)
    for start in range(0, order.size, batch_size):
        yield order[start : start + batch_size]


def _sequence_nll(
    model: HFHiddenStates, dataset: Any, rows: np.ndarray, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed NLL ``(k,)`` and predicted-token counts ``(k,)`` of the texts ``rows``."""
    x, _ = dataset.get_batch(rows)
    summed, counts = model.token_losses(x.to(device))
    return summed, counts


def _mean_token_nll(summed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    return summed.sum() / counts.sum().clamp(min=1)


def causal_lm_losses(
    model: HFHiddenStates,
    dataset: Any,
    indices: np.ndarray | None = None,
    *,
    batch_size: int = 64,
    device: str = "cpu",
) -> np.ndarray:
    """Mean next-token NLL per text (nats per token), float64 ``(k,)``, in eval mode.

    Raises:
        TrainingError: not a language-model folder or not a text dataset.
    """
    _check(model, dataset)
    dev = resolve_device(device)
    rows = np.arange(len(dataset)) if indices is None else np.asarray(indices, dtype=np.int64)
    model.to(dev).eval()
    out = []
    with torch.inference_mode():
        for start in range(0, rows.size, batch_size):
            summed, counts = _sequence_nll(model, dataset, rows[start : start + batch_size], dev)
            out.append((summed / counts.clamp(min=1)).double().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def _optimizer(model: nn.Module, p: LMTrainParams) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)


def train_causal_lm(
    model: HFHiddenStates,
    dataset: Any,
    indices: np.ndarray,
    params: LMTrainParams,
    *,
    device: str = "cpu",
    progress: EpochProgress | None = None,
) -> float:
    """Train ``model`` in place on the texts ``indices`` (mean per-token NLL, AdamW).

    Returns:
        The last epoch's mean loss (nats per token).

    Raises:
        TrainingError: a model or dataset the methods cannot use, or an empty row set.
    """
    _check(model, dataset)
    rows = np.asarray(indices, dtype=np.int64)
    if rows.size == 0:
        raise TrainingError("no rows to train on")
    dev = resolve_device(device)
    model.to(dev).train()
    generator = np.random.default_rng(params.seed)
    torch.manual_seed(params.seed)
    optimizer = _optimizer(model, params)
    loss_value = float("nan")
    for epoch in range(params.epochs):
        total, count = 0.0, 0
        for batch in _batches(rows, params.batch_size, generator):
            summed, counts = _sequence_nll(model, dataset, batch, dev)
            loss = _mean_token_nll(summed, counts)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * batch.size
            count += batch.size
        loss_value = total / count
        if progress is not None:
            progress(epoch + 1, params.epochs, loss_value)
    model.eval()
    return loss_value


def _retain_batches(
    retain: np.ndarray, batch_size: int, generator: np.random.Generator
) -> Iterator[np.ndarray]:
    """An endless stream of shuffled D_r batches (a new permutation after each pass)."""
    while True:
        yield from _batches(retain, batch_size, generator)


def _forget_loop(
    original: nn.Module,
    data: Any,
    params: LMTrainParams,
    loss_fn: Callable[[HFHiddenStates, np.ndarray, np.ndarray, torch.device], torch.Tensor],
) -> HFHiddenStates:
    """The shared loop: epochs over shuffled D_f batches, each paired with a D_r batch."""
    _check(original, data.train)
    model = copy.deepcopy(original)
    assert isinstance(model, HFHiddenStates)
    dev = resolve_device(data.device)
    model.to(dev).train()
    generator = np.random.default_rng(params.seed)
    torch.manual_seed(params.seed)
    optimizer = _optimizer(model, params)
    retain = _retain_batches(np.asarray(data.retain_idx), params.batch_size, generator)
    for _ in range(params.epochs):
        for batch in _batches(np.asarray(data.forget_idx), params.batch_size, generator):
            loss = loss_fn(model, batch, next(retain), dev)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return model.eval()


def llm_gradient_ascent(original: nn.Module, data: Any, params: LMGAParams) -> HFHiddenStates:
    """Gradient ascent: maximise the D_f NLL (minimise its negative)."""

    def loss(m: HFHiddenStates, forget: np.ndarray, _r: np.ndarray, dev: torch.device) -> Any:
        return -_mean_token_nll(*_sequence_nll(m, data.train, forget, dev))

    return _forget_loop(original, data, params, loss)


def llm_gradient_difference(original: nn.Module, data: Any, params: LMGDParams) -> HFHiddenStates:
    """Gradient difference: ascent on D_f plus ``retain_weight`` × descent on D_r."""

    def loss(m: HFHiddenStates, forget: np.ndarray, retain: np.ndarray, dev: torch.device) -> Any:
        forget_nll = _mean_token_nll(*_sequence_nll(m, data.train, forget, dev))
        retain_nll = _mean_token_nll(*_sequence_nll(m, data.train, retain, dev))
        return -forget_nll + params.retain_weight * retain_nll

    return _forget_loop(original, data, params, loss)


def llm_npo(original: nn.Module, data: Any, params: LMNPOParams) -> HFHiddenStates:
    """NPO: ``(2/β)·mean softplus(β·(log π_θ(x) − log π_ref(x)))`` over D_f texts (log π the
    text's summed token log-likelihood, π_ref the original) plus ``retain_weight`` × D_r NLL."""
    _check(original, data.train)
    assert isinstance(original, HFHiddenStates)
    reference = copy.deepcopy(original).eval()
    dev = resolve_device(data.device)
    reference.to(dev)

    def loss(m: HFHiddenStates, forget: np.ndarray, retain: np.ndarray, dev: torch.device) -> Any:
        nll, _ = _sequence_nll(m, data.train, forget, dev)
        with torch.no_grad():
            ref_nll, _ = _sequence_nll(reference, data.train, forget, dev)
        log_ratio = -nll + ref_nll  # log π_θ − log π_ref
        npo = (2.0 / params.beta) * nn.functional.softplus(params.beta * log_ratio).mean()
        retain_nll = _mean_token_nll(*_sequence_nll(m, data.train, retain, dev))
        return npo + params.retain_weight * retain_nll

    return _forget_loop(original, data, params, loss)


def llm_retrain(original: nn.Module, data: Any, params: LMTrainParams) -> HFHiddenStates:
    """Retraining on D_r from the original's initial weights (``data.init_state``; without them
    a fresh initialisation of the same configuration, seeded by ``params.seed``)."""
    _check(original, data.train)
    assert isinstance(original, HFHiddenStates)
    model = copy.deepcopy(original)
    assert isinstance(model, HFHiddenStates)
    if data.init_state is not None:
        model.load_state_dict(dict(data.init_state))
    else:
        torch.manual_seed(params.seed)
        init = getattr(model.lm, "init_weights", None) or getattr(model.lm, "post_init", None)
        if init is None:
            raise TrainingError("this model cannot re-initialise itself: pass init_state")
        init()
    train_causal_lm(model, data.train, data.retain_idx, params, device=data.device)
    return model
