"""The unlearning methods of method §7 (NegGrad+, §14; EU-k,
:mod:`sde_core.learning.layer_unlearning`), the language-model methods of
method §7.1 (:mod:`sde_core.learning.llm_unlearning`: ``llm_ga``, ``llm_gd``, ``llm_npo``,
``llm_retrain``) and a registry for user-defined ones.

Every method is a function ``fn(original, data, params) -> UnlearnResult`` that never modifies
``original``: it works on a deep copy. ``data`` is an :class:`UnlearnData` (the training set and
the forget/retain index arrays), ``params`` a frozen dataclass holding every hyper-parameter with
the method default. :func:`unlearn` dispatches by name and rejects unknown parameters;
:func:`register_method` adds a method::

    @dataclass(frozen=True)
    class MyParams:
        lr: float = 0.01

    def my_method(original, data, params):
        model = copy.deepcopy(original)
        ...
        return model  # or an UnlearnResult

    register_method("mine", my_method, MyParams)
    result = unlearn("mine", h_or, data, lr=0.05)

Optimiser for every iterative method: SGD, momentum 0.9, weight decay 5e-4 (parameters of the
params dataclass). The model is in train mode during updates (batch-norm statistics update).

Denoisers (method §14): Retrain, FT, GA, NegGrad+ and l1-Sparse use the model's own training
loss (:func:`~sde_core.learning.training.batch_objective`: the EDM denoising loss for a
denoiser, cross-entropy for a classifier) — FT fine-tunes on ``D_r``'s denoising loss, GA ascends
``D_f``'s; RL, SalUn and Unroll need class labels or a deterministic loss and refuse a denoiser.
"""

from __future__ import annotations

import copy
import dataclasses
import time
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, Subset

from sde_core.common.validation import as_index_vector, check_int, check_number
from sde_core.errors import TrainingError
from sde_core.families.registry import family_of
from sde_core.learning.layer_unlearning import relearn_last_layers
from sde_core.learning.llm_unlearning import (
    LMGAParams,
    LMGDParams,
    LMNPOParams,
    LMTrainParams,
    llm_gradient_ascent,
    llm_gradient_difference,
    llm_npo,
    llm_retrain,
)
from sde_core.learning.training import (
    TrainConfig,
    batch_objective,
    check_forward,
    make_loader,
    resolve_device,
    train,
)

__all__ = [
    "EPOCH_METHODS",
    "METHODS",
    "EUKParams",
    "FTParams",
    "GAParams",
    "L1SparseParams",
    "MethodSpec",
    "NegGradPlusParams",
    "RLParams",
    "RetrainParams",
    "SGDParams",
    "SalUnParams",
    "UnlearnData",
    "UnlearnResult",
    "UnrollParams",
    "exact_unlearning_k",
    "finetune",
    "gradient_ascent",
    "l1_sparse",
    "neggrad_plus",
    "parse_params",
    "random_label",
    "register_method",
    "retrain",
    "salun",
    "salun_mask",
    "unlearn",
    "unroll",
]


@dataclass
class UnlearnData:
    """The data an unlearning method may use.

    Attributes:
        train: the training set ``D_tr`` (a sized Dataset of ``(input, label)`` pairs).
        forget_idx: indices of ``D_f`` in ``train``, shape ``(n_f,)``, int64, unique.
        retain_idx: indices of ``D_r`` in ``train``, shape ``(n_r,)``, disjoint from ``forget_idx``.
        num_classes: number of classes; None infers it from the model's output width.
        train_config: the original model's training recipe (Retrain's recipe and Unroll's η, k).
        init_state: the original model's initial ``state_dict`` θ_0 (Unroll's gradient point).
        model_factory: builds a freshly initialised model of the original's architecture
            (Retrain); None re-initialises a copy of the original with ``reset_parameters``.
        device: torch device for the computation (``"cpu"``, ``"cuda"``, ``"auto"``).
        on_epoch: ``on_epoch(epoch, epochs, model)`` after each finished epoch (1-based) of an
            epoch-based method (:data:`EPOCH_METHODS`; e.g. to keep intermediate checkpoints);
            it must not modify ``model``. The other methods never call it.
    """

    train: Dataset
    forget_idx: np.ndarray
    retain_idx: np.ndarray
    num_classes: int | None = None
    train_config: TrainConfig | None = None
    init_state: Mapping[str, torch.Tensor] | None = None
    model_factory: Callable[[], nn.Module] | None = None
    device: str = "cpu"
    on_epoch: Callable[[int, int, nn.Module], None] | None = None

    def __post_init__(self) -> None:
        try:
            n = len(self.train)  # type: ignore[arg-type]
        except TypeError as exc:
            raise TrainingError(
                f"train must be a sized torch Dataset, got {type(self.train).__name__}"
            ) from exc
        self.forget_idx = as_index_vector(
            self.forget_idx, n, "forget_idx", allow_empty=True, unique=True, error=TrainingError
        )
        self.retain_idx = as_index_vector(
            self.retain_idx, n, "retain_idx", allow_empty=True, unique=True, error=TrainingError
        )
        if self.forget_idx.size == 0:
            raise TrainingError("the forget set is empty: give at least one index to forget")
        if self.retain_idx.size == 0:
            raise TrainingError("the retained set is empty: forget fewer samples")
        if np.intersect1d(self.forget_idx, self.retain_idx).size:
            raise TrainingError("forget_idx and retain_idx overlap: D_r must be D_tr minus D_f")
        if self.num_classes is not None and (
            not isinstance(self.num_classes, int) or self.num_classes < 2
        ):
            raise TrainingError(f"num_classes={self.num_classes!r} must be an integer >= 2")
        if self.train_config is not None and not isinstance(self.train_config, TrainConfig):
            raise TrainingError(
                "train_config must be a sde_core.learning.training.TrainConfig or None"
            )

    @classmethod
    def from_forget(cls, train: Dataset, forget_idx: object, **kwargs: Any) -> UnlearnData:
        """Build the splits from the forget indices; ``D_r`` is every other index of ``train``."""
        n = len(train)  # type: ignore[arg-type]
        forget = as_index_vector(
            forget_idx, n, "forget_idx", allow_empty=True, unique=True, error=TrainingError
        )
        retain = np.setdiff1d(np.arange(n, dtype=np.int64), forget)
        return cls(train=train, forget_idx=forget, retain_idx=retain, **kwargs)


@dataclass
class UnlearnResult:
    """Outcome of an unlearning method.

    Attributes:
        model: the unlearned model ``h_un`` (eval mode).
        method: registry name of the method.
        params: the fully resolved hyper-parameters (a params dataclass instance).
        seconds: wall-clock time of the method, in seconds.
        info: method-specific facts (e.g. SalUn's mask size, where Unroll took its gradient).
    """

    model: nn.Module
    method: str
    params: Any
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)

    def params_dict(self) -> dict[str, Any]:
        """The hyper-parameters as a plain dict (for ``workspace.toml``)."""
        return dataclasses.asdict(self.params)


def _check_number(name: str, value: object, *, minimum: float, strict: bool) -> None:
    if strict:
        check_number(value, name, gt=minimum, error=TrainingError)
    else:
        check_number(value, name, ge=minimum, error=TrainingError)


def _check_counts(params: object, minimums: Mapping[str, int]) -> None:
    """Check integer fields of a frozen dataclass and store them as Python ``int``."""
    for name, minimum in minimums.items():
        value = check_int(getattr(params, name), name, minimum=minimum, error=TrainingError)
        object.__setattr__(params, name, value)


@dataclass(frozen=True)
class SGDParams:
    """Shared settings of the iterative methods (SGD with momentum and weight decay).

    Attributes:
        lr: learning rate (> 0).
        epochs: passes over the method's data (>= 1).
        batch_size: mini-batch size (>= 1).
        momentum: SGD momentum in [0, 1).
        weight_decay: L2 weight decay (>= 0).
        seed: seed of the shuffles, random labels and dropout.
    """

    lr: float = 0.01
    epochs: int = 10
    batch_size: int = 128
    momentum: float = 0.9
    weight_decay: float = 5e-4
    seed: int = 0

    def __post_init__(self) -> None:
        _check_number("lr", self.lr, minimum=0.0, strict=True)
        _check_counts(self, {"epochs": 1, "batch_size": 1, "seed": 0})
        _check_number("weight_decay", self.weight_decay, minimum=0.0, strict=False)
        if not (isinstance(self.momentum, (int, float)) and 0.0 <= self.momentum < 1.0):
            raise TrainingError(f"momentum={self.momentum!r} must be in [0, 1), e.g. 0.9")


@dataclass(frozen=True)
class FTParams(SGDParams):
    """Fine-tuning: cross-entropy on ``D_r``, lr 0.01, 10 epochs."""


@dataclass(frozen=True)
class GAParams(SGDParams):
    """Gradient ascent: minimise −CE on ``D_f``, lr 1e-4, 5 epochs, gradient-norm clip 100."""

    lr: float = 1e-4
    epochs: int = 5
    clip_grad_norm: float = 100.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_number("clip_grad_norm", self.clip_grad_norm, minimum=0.0, strict=True)


@dataclass(frozen=True)
class NegGradPlusParams(SGDParams):
    """NegGrad+: per D_f batch, minimise β·L(D_r batch) − (1 − β)·L(D_f batch); lr 0.01,
    5 epochs over D_f, β 0.9, gradient-norm clip 100."""

    epochs: int = 5
    beta: float = 0.9
    clip_grad_norm: float = 100.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.beta, (int, float)) and 0.0 <= self.beta <= 1.0):
            raise TrainingError(f"beta={self.beta!r} must be in [0, 1], e.g. 0.9")
        _check_number("clip_grad_norm", self.clip_grad_norm, minimum=0.0, strict=True)


@dataclass(frozen=True)
class RLParams(SGDParams):
    """Random-label: per epoch one pass over ``D_f`` with uniform random labels, then ``D_r``."""


@dataclass(frozen=True)
class SalUnParams(SGDParams):
    """SalUn: RL restricted to the ``mask_ratio`` most forget-salient parameters, lr 0.013."""

    lr: float = 0.013
    mask_ratio: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.mask_ratio, (int, float)) and 0.0 < self.mask_ratio <= 1.0):
            raise TrainingError(f"mask_ratio={self.mask_ratio!r} must be in (0, 1], e.g. 0.5")


@dataclass(frozen=True)
class L1SparseParams(SGDParams):
    """l1-Sparse: FT on ``D_r`` with loss CE + α(1 − e/E)·‖θ‖₁, α = 1e-4."""

    alpha: float = 1e-4

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_number("alpha", self.alpha, minimum=0.0, strict=False)


@dataclass(frozen=True)
class UnrollParams:
    """Unroll: ``θ_un = θ_or + lr·epochs_seen·∇θ mean CE(θ_0; D_f)``.

    Attributes:
        lr: the original training learning rate η; None takes ``data.train_config.lr``.
        epochs_seen: k, epochs ``D_f`` was seen; None takes ``data.train_config.epochs``.
        batch_size: batch size of the gradient computation (does not change the result).
    """

    lr: float | None = None
    epochs_seen: int | None = None
    batch_size: int = 256

    def __post_init__(self) -> None:
        if self.lr is not None:
            _check_number("lr", self.lr, minimum=0.0, strict=True)
        _check_counts(self, {"batch_size": 1})
        if self.epochs_seen is not None:
            _check_counts(self, {"epochs_seen": 1})


@dataclass(frozen=True)
class RetrainParams:
    """Retrain from scratch on ``D_r``; None fields take the original's ``data.train_config``.

    The fields are those of :class:`~sde_core.learning.training.TrainConfig` that define the recipe.
    """

    epochs: int | None = None
    batch_size: int | None = None
    optimizer: str | None = None
    lr: float | None = None
    momentum: float | None = None
    weight_decay: float | None = None
    schedule: str | None = None
    augmentation: str | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        # the recipe fields only (a subclass adds its own), each with TrainConfig's messages
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(RetrainParams)}
        TrainConfig(**{k: v for k, v in given.items() if v is not None})


@dataclass(frozen=True)
class EUKParams(RetrainParams):
    """EU-k (:mod:`sde_core.learning.layer_unlearning`): ``k``, how many of the last weight
    layers are re-learnt from scratch on ``D_r`` (>= 1); the other fields override the
    original's recipe as in :class:`RetrainParams`."""

    k: int = 1

    def __post_init__(self) -> None:
        _check_counts(self, {"k": 1})
        super().__post_init__()  # the recipe fields, as Retrain's


MethodFn = Callable[[nn.Module, UnlearnData, Any], UnlearnResult | nn.Module]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its function, its params dataclass and a one-line description."""

    name: str
    fn: MethodFn
    params_cls: type
    description: str


METHODS: dict[str, MethodSpec] = {}


def register_method(
    name: str,
    fn: MethodFn,
    params_cls: type,
    *,
    description: str = "",
    replace: bool = False,
) -> MethodSpec:
    """Register an unlearning method under ``name``.

    Args:
        name: registry key (non-empty, no spaces), e.g. ``"ft"``.
        fn: ``fn(original, data, params) -> UnlearnResult | nn.Module``; must not modify
            ``original``. A returned module is wrapped in an :class:`UnlearnResult` timed by
            :func:`unlearn`.
        params_cls: a dataclass whose fields (all with defaults) are the hyper-parameters.
        description: one line shown by the CLI and the dashboard.
        replace: allow overwriting an existing registration.
    """
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise TrainingError(f"method name {name!r} must be a non-empty string without spaces")
    if not callable(fn):
        raise TrainingError(f"method {name!r}: fn must be callable")
    if not dataclasses.is_dataclass(params_cls) or not isinstance(params_cls, type):
        raise TrainingError(f"method {name!r}: params_cls must be a dataclass type")
    missing = [
        f.name
        for f in dataclasses.fields(params_cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise TrainingError(f"method {name!r}: params {missing} need default values")
    if name in METHODS and not replace:
        raise TrainingError(f"method {name!r} is already registered: pass replace=True")
    spec = MethodSpec(
        name, fn, params_cls, description or (fn.__doc__ or "").strip().split("\n")[0]
    )
    METHODS[name] = spec
    return spec


def _method(name: str) -> MethodSpec:
    if name not in METHODS:
        raise TrainingError(f"unknown unlearning method {name!r}; registered: {sorted(METHODS)}")
    return METHODS[name]


def unlearn(method: str, original: nn.Module, data: UnlearnData, **params: Any) -> UnlearnResult:
    """Run the registered ``method`` on ``original`` with ``params`` overriding its defaults.

    Raises:
        TrainingError: unknown method, unknown parameter (the message lists the valid ones) or an
            invalid value.
    """
    spec = _method(method)
    valid = [f.name for f in dataclasses.fields(spec.params_cls)]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise TrainingError(
            f"unknown parameter(s) {unknown} for method {method!r}; valid parameters: {valid}"
        )
    if not isinstance(original, nn.Module):
        raise TrainingError(f"original must be a torch.nn.Module, got {type(original).__name__}")
    if not isinstance(data, UnlearnData):
        raise TrainingError(f"data must be an UnlearnData, got {type(data).__name__}")
    try:
        p = spec.params_cls(**params)
    except TypeError as exc:
        raise TrainingError(f"invalid parameters for method {method!r}: {exc}") from exc
    t0 = time.perf_counter()
    out = spec.fn(original, data, p)
    if isinstance(out, nn.Module):
        out.eval()
        return UnlearnResult(out, method, p, time.perf_counter() - t0)
    if not isinstance(out, UnlearnResult):
        raise TrainingError(
            f"method {method!r} returned {type(out).__name__}: return a model or an UnlearnResult"
        )
    return out


def _coerce(name: str, text: str, hint: Any) -> Any:
    """Convert a CLI string to the annotated type ``hint`` (int, float, bool, str, X | None)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else ()
    if options:
        if text.lower() in ("none", "null") and type(None) in options:
            return None
        hint = next(o for o in options if o is not type(None))
    try:
        if hint is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("true", "1", "yes")
        if hint in (int, float, str):
            return hint(text)
    except ValueError as exc:
        raise TrainingError(f"parameter {name}={text!r} is not a valid {hint.__name__}") from exc
    raise TrainingError(f"parameter {name} has type {hint}, which cannot be set from text")


def parse_params(method: str, pairs: Mapping[str, str]) -> dict[str, Any]:
    """Convert ``{"lr": "0.1", ...}`` from the CLI/UI to typed values for ``method``'s params."""
    spec = _method(method)
    hints = typing.get_type_hints(spec.params_cls)
    unknown = sorted(set(pairs) - set(hints))
    if unknown:
        raise TrainingError(
            f"unknown parameter(s) {unknown} for method {method!r}; valid parameters: "
            f"{[f.name for f in dataclasses.fields(spec.params_cls)]}"
        )
    return {k: _coerce(k, v, hints[k]) for k, v in pairs.items()}


# ----------------------------------------------------------------------------- helpers


def _check_params(params: object, cls: type) -> None:
    if not isinstance(params, cls):
        raise TrainingError(f"params must be a {cls.__name__}, got {type(params).__name__}")


def _prepare(original: nn.Module, data: UnlearnData) -> tuple[nn.Module, torch.device]:
    """A deep copy of ``original`` on ``data.device``."""
    if not isinstance(original, nn.Module):
        raise TrainingError(f"original must be a torch.nn.Module, got {type(original).__name__}")
    if not isinstance(data, UnlearnData):
        raise TrainingError(f"data must be an UnlearnData, got {type(data).__name__}")
    device = resolve_device(data.device)
    model = copy.deepcopy(original).to(device)
    check_forward(model, data.train, device, int(data.retain_idx[0]))  # Retrain must not see D_f
    return model, device


def _num_classes(model: nn.Module, data: UnlearnData, device: torch.device) -> int:
    if data.num_classes is not None:
        return data.num_classes
    return check_forward(model, data.train, device, int(data.forget_idx[0]))


class _Relabeled(Dataset):
    """``dataset[indices[i]]`` with its label replaced by ``labels[i]``."""

    def __init__(self, dataset: Dataset, indices: np.ndarray, labels: torch.Tensor) -> None:
        self.dataset, self.indices, self.labels = dataset, indices, labels

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[Any, torch.Tensor]:
        x, _ = self.dataset[int(self.indices[i])]
        return x, self.labels[i]


def _sgd(model: nn.Module, p: SGDParams, *, weight_decay: float | None = None) -> torch.optim.SGD:
    wd = p.weight_decay if weight_decay is None else weight_decay
    return torch.optim.SGD(model.parameters(), lr=p.lr, momentum=p.momentum, weight_decay=wd)


LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def _ce(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The model's own training loss: cross-entropy, or the EDM loss of a denoiser."""
    return batch_objective(model)(model, x, y)


def _refuse_family(model: nn.Module, method: str, key: str) -> None:
    """Refuse ``method`` (registry name ``key``) for a model whose family declares it does not
    apply (:attr:`sde_core.families.base.Family.refusals`)."""
    family = family_of(model)
    why = family.refusals.get(key)
    if why is not None:
        raise TrainingError(
            f"{method} cannot unlearn a {family.label} ({why}); {family.advice['refused_method']}"
        )


def _run_epoch(
    model: nn.Module,
    dataset: Dataset,
    optimizer: torch.optim.Optimizer,
    p: SGDParams,
    generator: torch.Generator,
    device: torch.device,
    loss_fn: LossFn = _ce,
    *,
    clip: float | None = None,
    grad_hook: Callable[[], None] | None = None,
) -> float:
    """One shuffled pass over ``dataset`` in train mode; returns the mean loss."""
    model.train()
    total, count = 0.0, 0
    for x, y in make_loader(dataset, p.batch_size, generator):
        x, y = x.to(device), torch.as_tensor(y).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, x, y)
        if not torch.isfinite(loss):
            raise TrainingError(f"unlearning diverged (loss {loss.item()}): lower lr")
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        if grad_hook is not None:
            grad_hook()
        optimizer.step()
        total += float(loss.detach()) * len(y)
        count += len(y)
    return total / count


def _epoch_done(data: UnlearnData, epoch: int, epochs: int, model: nn.Module) -> None:
    """Tell ``data.on_epoch`` that ``epoch`` (0-based here) of ``epochs`` finished."""
    if data.on_epoch is not None:
        was_training = model.training
        model.eval()
        data.on_epoch(epoch + 1, epochs, model)
        model.train(was_training)


def _result(method: str, model: nn.Module, params: Any, t0: float, **info: Any) -> UnlearnResult:
    model.eval()
    return UnlearnResult(model, method, params, time.perf_counter() - t0, info)


def _random_label_epochs(
    model: nn.Module,
    data: UnlearnData,
    p: SGDParams,
    device: torch.device,
    optimizer: torch.optim.Optimizer,
    grad_hook: Callable[[], None] | None,
) -> None:
    """RL's loop: per epoch a pass over D_f with fresh uniform random labels, then over D_r."""
    classes = _num_classes(model, data, device)
    torch.manual_seed(p.seed)
    gen = torch.Generator().manual_seed(p.seed)
    label_gen = torch.Generator().manual_seed(p.seed + 1)
    retain = Subset(data.train, data.retain_idx.tolist())
    for epoch in range(p.epochs):
        labels = torch.randint(0, classes, (data.forget_idx.size,), generator=label_gen)
        forget = _Relabeled(data.train, data.forget_idx, labels)
        _run_epoch(model, forget, optimizer, p, gen, device, grad_hook=grad_hook)
        _run_epoch(model, retain, optimizer, p, gen, device, grad_hook=grad_hook)
        _epoch_done(data, epoch, p.epochs, model)


# ----------------------------------------------------------------------------- methods


def _recipe(
    fields: Mapping[str, Any], data: UnlearnData, who: str, required: tuple[str, ...]
) -> TrainConfig:
    """The training recipe of Retrain or EU-k: the original's (``data.train_config``) with the
    given (non-None) ``fields`` over it; each of ``required`` must come from one of the two."""
    given = {k: v for k, v in fields.items() if v is not None}
    base = data.train_config.to_dict() if data.train_config is not None else {}
    missing = [k for k in required if k not in given and k not in base]
    if missing:
        raise TrainingError(
            f"{who} needs the original's recipe: pass {missing} or set UnlearnData.train_config"
        )
    return TrainConfig.from_dict({**base, **given, "device": data.device})


def retrain(
    original: nn.Module, data: UnlearnData, params: RetrainParams = RetrainParams()
) -> UnlearnResult:
    """Retrain: a fresh model trained on ``D_r`` only with the original's recipe (gold standard)."""
    _check_params(params, RetrainParams)
    t0 = time.perf_counter()
    fields = dataclasses.asdict(params)
    config = _recipe(fields, data, "Retrain", required=tuple(fields))
    resolved = RetrainParams(**{k: getattr(config, k) for k in dataclasses.asdict(params)})
    device = resolve_device(data.device)
    torch.manual_seed(config.seed)
    if data.model_factory is not None:
        model = data.model_factory()
    else:
        model, _ = _prepare(original, data)
        for module in model.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
    model.to(device)
    retain = Subset(data.train, data.retain_idx.tolist())
    out = train(model, retain, config)
    return _result("retrain", out.model, resolved, t0, final_loss=out.losses[-1])


def _seeded_sgd(model: nn.Module, params: SGDParams) -> tuple[torch.Generator, torch.optim.SGD]:
    """Seed torch with ``params.seed``; return the batch-order generator and the SGD optimiser."""
    torch.manual_seed(params.seed)
    return torch.Generator().manual_seed(params.seed), _sgd(model, params)


def finetune(
    original: nn.Module, data: UnlearnData, params: FTParams = FTParams()
) -> UnlearnResult:
    """FT: continue training with cross-entropy (a denoiser: its denoising loss) on ``D_r`` only."""
    _check_params(params, FTParams)
    t0 = time.perf_counter()
    model, device = _prepare(original, data)
    gen, optimizer = _seeded_sgd(model, params)
    retain = Subset(data.train, data.retain_idx.tolist())
    for epoch in range(params.epochs):
        _run_epoch(model, retain, optimizer, params, gen, device)
        _epoch_done(data, epoch, params.epochs, model)
    return _result("ft", model, params, t0)


def gradient_ascent(
    original: nn.Module, data: UnlearnData, params: GAParams = GAParams()
) -> UnlearnResult:
    """GA: minimise −CE on ``D_f`` (gradient ascent on the forget loss; a denoiser's: its
    denoising loss), clipped gradients."""
    _check_params(params, GAParams)
    t0 = time.perf_counter()
    model, device = _prepare(original, data)
    gen, optimizer = _seeded_sgd(model, params)
    forget = Subset(data.train, data.forget_idx.tolist())

    def neg_ce(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return -_ce(m, x, y)

    for epoch in range(params.epochs):
        _run_epoch(
            model, forget, optimizer, params, gen, device, neg_ce, clip=params.clip_grad_norm
        )
        _epoch_done(data, epoch, params.epochs, model)
    return _result("ga", model, params, t0)


def random_label(
    original: nn.Module, data: UnlearnData, params: RLParams = RLParams()
) -> UnlearnResult:
    """RL: each epoch one pass over ``D_f`` with uniform random labels, then one over ``D_r``."""
    _check_params(params, RLParams)
    _refuse_family(original, "RL", "rl")
    t0 = time.perf_counter()
    model, device = _prepare(original, data)
    _random_label_epochs(model, data, params, device, _sgd(model, params), None)
    return _result("rl", model, params, t0)


def salun_mask(
    model: nn.Module, data: UnlearnData, mask_ratio: float = 0.5, batch_size: int = 128
) -> dict[str, torch.Tensor]:
    """SalUn's saliency mask over the parameters of ``model`` (not modified).

    The saliency of a weight is ``|Σ_batches ∇ −CE(batch mean)|`` over ``D_f`` in eval mode; the
    ``floor(mask_ratio · N)`` most salient of all N weights (global ranking) get mask 1.

    Returns:
        ``{parameter name: float mask of the parameter's shape}`` with entries 0 or 1.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    model.zero_grad(set_to_none=True)
    forget = Subset(data.train, data.forget_idx.tolist())
    for x, y in make_loader(forget, batch_size, None, shuffle=False):
        x, y = x.to(device), torch.as_tensor(y).to(device)
        (-nn.functional.cross_entropy(model(x), y)).backward()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    scores = torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).abs().flatten() for _, p in named]
    )
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    k = int(scores.numel() * mask_ratio)
    flat = torch.zeros_like(scores)
    flat[torch.topk(scores, k).indices] = 1.0
    masks, offset = {}, 0
    for name, p in named:
        masks[name] = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    return masks


def salun(
    original: nn.Module, data: UnlearnData, params: SalUnParams = SalUnParams()
) -> UnlearnResult:
    """SalUn: RL where every gradient (weight decay included) is multiplied by the saliency mask.

    Weight decay is added to the gradient before masking and the optimiser runs without its own
    decay, so masked-out weights (and their momentum buffers) never move: they stay bit-identical
    to ``h_or``. Batch-norm running statistics (buffers, not weights) still update.
    """
    _check_params(params, SalUnParams)
    _refuse_family(original, "SalUn", "salun")
    t0 = time.perf_counter()
    model, device = _prepare(original, data)
    masks = salun_mask(model, data, params.mask_ratio, params.batch_size)
    masked = [(p, masks[n]) for n, p in model.named_parameters() if n in masks]

    def mask_grads() -> None:
        for p, m in masked:
            if p.grad is not None:
                p.grad.add_(p.detach(), alpha=params.weight_decay).mul_(m)

    optimizer = _sgd(model, params, weight_decay=0.0)
    _random_label_epochs(model, data, params, device, optimizer, mask_grads)
    kept = int(sum(int(m.sum()) for _, m in masked))
    total = sum(m.numel() for _, m in masked)
    return _result("salun", model, params, t0, masked_in=kept, parameters=total)


def l1_sparse(
    original: nn.Module, data: UnlearnData, params: L1SparseParams = L1SparseParams()
) -> UnlearnResult:
    """l1-Sparse: FT on ``D_r`` with loss CE + α_e·‖θ‖₁, α_e = α·(1 − e/E) at epoch e = 0..E−1."""
    _check_params(params, L1SparseParams)
    t0 = time.perf_counter()
    model, device = _prepare(original, data)
    gen, optimizer = _seeded_sgd(model, params)
    retain = Subset(data.train, data.retain_idx.tolist())
    for epoch in range(params.epochs):
        alpha_e = params.alpha * (1.0 - epoch / params.epochs)

        def loss_fn(
            m: nn.Module, x: torch.Tensor, y: torch.Tensor, a: float = alpha_e
        ) -> torch.Tensor:
            l1 = sum(p.abs().sum() for p in m.parameters())
            return _ce(m, x, y) + a * l1

        _run_epoch(model, retain, optimizer, params, gen, device, loss_fn)
        _epoch_done(data, epoch, params.epochs, model)
    return _result("l1_sparse", model, params, t0)


def unroll(
    original: nn.Module, data: UnlearnData, params: UnrollParams = UnrollParams()
) -> UnlearnResult:
    """Unroll (Thudi et al. 2022): ``θ_un = θ_or + η·k·∇θ mean CE(θ_0; D_f)``.

    The gradient is the exact mean over ``D_f`` at θ_0 = ``data.init_state`` (else θ_or), in
    eval mode; only parameters change (buffers keep h_or's values).
    """
    _check_params(params, UnrollParams)
    _refuse_family(original, "Unroll", "unroll")
    t0 = time.perf_counter()
    cfg = data.train_config
    lr = params.lr if params.lr is not None else (cfg.lr if cfg is not None else None)
    k = params.epochs_seen if params.epochs_seen is not None else (cfg.epochs if cfg else None)
    if lr is None or k is None:
        raise TrainingError(
            "Unroll needs the original's training lr and epoch count: pass lr=... and "
            "epochs_seen=... or set UnlearnData.train_config"
        )
    resolved = UnrollParams(lr=lr, epochs_seen=k, batch_size=params.batch_size)
    model, device = _prepare(original, data)
    at_init = copy.deepcopy(model)
    if data.init_state is not None:
        try:
            at_init.load_state_dict(dict(data.init_state))
        except RuntimeError as exc:
            raise TrainingError(
                f"init_state does not fit the original model ({exc}): give the initial "
                "checkpoint of this model"
            ) from exc
    at_init.eval()
    n_f = data.forget_idx.size
    forget = Subset(data.train, data.forget_idx.tolist())
    for x, y in make_loader(forget, params.batch_size, None, shuffle=False):
        x, y = x.to(device), torch.as_tensor(y).to(device)
        (nn.functional.cross_entropy(at_init(x), y, reduction="sum") / n_f).backward()
    grads = dict(at_init.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            g = grads[name].grad
            if g is not None:
                p.add_(g, alpha=lr * k)
    where = "init" if data.init_state is not None else "original"
    return _result("unroll", model, resolved, t0, gradient_at=where)


def exact_unlearning_k(
    original: nn.Module, data: UnlearnData, params: EUKParams = EUKParams()
) -> UnlearnResult:
    """EU-k: re-learn the last k layers from scratch on ``D_r``, the layers below frozen."""
    _check_params(params, EUKParams)
    t0 = time.perf_counter()
    fields = {f: v for f, v in dataclasses.asdict(params).items() if f != "k"}
    config = _recipe(fields, data, "EU-k", required=("epochs", "batch_size", "optimizer", "lr"))
    model, _ = _prepare(original, data)
    retain = Subset(data.train, data.retain_idx.tolist())
    model, layers, loss = relearn_last_layers(model, retain, config, params.k)
    return _result("eu_k", model, params, t0, layers=layers, final_loss=loss)


def neggrad_plus(
    original: nn.Module, data: UnlearnData, params: NegGradPlusParams = NegGradPlusParams()
) -> UnlearnResult:
    """NegGrad+ (Kurmanji et al. 2023): gradient ascent on ``D_f`` balanced by descent on ``D_r``.

    Each step takes the next shuffled batch of ``D_f`` and the next of a shuffled, cycled ``D_r``
    and minimises ``β·L(D_r batch) − (1 − β)·L(D_f batch)``, with L the model's own training loss
    (cross-entropy, or a denoiser's EDM loss: the diffusion-unlearning baseline "GA with a
    retain term"); gradients are clipped to norm ``clip_grad_norm``.
    """
    _check_params(params, NegGradPlusParams)
    t0 = time.perf_counter()
    model, device = _prepare(original, data)
    gen, optimizer = _seeded_sgd(model, params)
    forget = Subset(data.train, data.forget_idx.tolist())
    retain = Subset(data.train, data.retain_idx.tolist())
    retain_batches = iter(make_loader(retain, params.batch_size, gen))
    model.train()
    for epoch in range(params.epochs):
        for xf, yf in make_loader(forget, params.batch_size, gen):
            try:
                xr, yr = next(retain_batches)
            except StopIteration:
                retain_batches = iter(make_loader(retain, params.batch_size, gen))
                xr, yr = next(retain_batches)
            xf, yf = xf.to(device), torch.as_tensor(yf).to(device)
            xr, yr = xr.to(device), torch.as_tensor(yr).to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = params.beta * _ce(model, xr, yr) - (1.0 - params.beta) * _ce(model, xf, yf)
            if not torch.isfinite(loss):
                raise TrainingError(f"unlearning diverged (loss {loss.item()}): lower lr")
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), params.clip_grad_norm)
            optimizer.step()
        _epoch_done(data, epoch, params.epochs, model)
    return _result("neggrad_plus", model, params, t0)


#: The methods that call :attr:`UnlearnData.on_epoch` after each epoch (``unlearn --save-every``).
EPOCH_METHODS = frozenset({"ft", "ga", "rl", "salun", "l1_sparse", "neggrad_plus"})

register_method("retrain", retrain, RetrainParams)
register_method("ft", finetune, FTParams)
register_method("ga", gradient_ascent, GAParams)
register_method("rl", random_label, RLParams)
register_method("salun", salun, SalUnParams)
register_method("l1_sparse", l1_sparse, L1SparseParams)
register_method("unroll", unroll, UnrollParams)
register_method("neggrad_plus", neggrad_plus, NegGradPlusParams)
register_method("eu_k", exact_unlearning_k, EUKParams)
# language models (method §7.1): Hugging Face model folders and text datasets
register_method("llm_retrain", llm_retrain, LMTrainParams)
register_method("llm_ga", llm_gradient_ascent, LMGAParams)
register_method("llm_gd", llm_gradient_difference, LMGDParams)
register_method("llm_npo", llm_npo, LMNPOParams)
