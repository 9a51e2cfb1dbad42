"""Validation of plan tables: typed fields with one readable error per problem."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from sde_core.common.sigma import MEDIAN, SQRT_DIM, parse_sigma
from sde_core.common.validation import check_int, check_number
from sde_core.errors import PlanError
from sde_core.pipeline.settings import setting

_REQUIRED = object()


def _fail(where: str, message: str) -> PlanError:
    """A :class:`PlanError` whose message starts with the offending field."""
    return PlanError(f"{where}: {message}")


@dataclass(frozen=True)
class _Field:
    """Schema of one parameter.

    Attributes:
        kind: ``int``, ``float``, ``str``, ``bool``, ``ints``, ``floats``, ``strs``, ``sigma``,
            ``sigmas`` or ``table`` (a table of tables, e.g. method -> hyper-parameters).
        default: the default (``_REQUIRED`` when the key must be given).
        lo, hi: inclusive numeric bounds (``lo_open``: exclusive lower bound).
        example: a valid value shown in the error message.
    """

    kind: str
    default: Any = _REQUIRED
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    example: str = ""


def _check_number(where: str, v: object, f: _Field, integer: bool) -> int | float:
    """An ``int``/``float`` field within the schema's bounds (:mod:`sde_core.common.validation`)."""
    lo_open = f.lo_open and f.lo is not None
    try:
        if integer:
            return check_int(
                v,
                where,
                minimum=None if f.lo is None else math.floor(f.lo) + int(lo_open),
                maximum=None if f.hi is None else math.floor(f.hi),
                error=PlanError,
            )
        return check_number(
            v,
            where,
            gt=f.lo if lo_open else None,
            ge=None if lo_open else f.lo,
            le=f.hi,
            error=PlanError,
        )
    except PlanError as exc:
        raise PlanError(f"{exc} (e.g. {f.example or '1'})") from None


def _check_sigma(where: str, v: object, example: str) -> str | float:
    """A σ entry in the one σ syntax (:mod:`sde_core.common.sigma`): a rule's canonical text or
    the number itself."""
    try:
        return parse_sigma(v, "σ", error=PlanError).setting()
    except PlanError as exc:
        raise _fail(where, f"{exc} (e.g. {example})") from None


def _setting_field(name: str, kind: str, example: str, default: Any = _REQUIRED) -> _Field:
    """A parameter that takes the values of the evaluation setting ``name``: its bounds come
    from :data:`~sde_core.pipeline.settings.SETTINGS` (``kind`` ``int``/``ints`` for integer
    settings, ``sigma``/``sigmas`` for σ)."""
    entry = setting(name)
    return _Field(kind, default, lo=entry.minimum, hi=entry.maximum, example=example)


def _check_field(where: str, v: object, f: _Field) -> Any:
    ex = f.example
    if f.kind == "int":
        return _check_number(where, v, f, True)
    if f.kind == "float":
        return _check_number(where, v, f, False)
    if f.kind == "str":
        if not isinstance(v, str) or not v:
            raise _fail(where, f"must be a non-empty string; got {v!r} (e.g. {ex})")
        return v
    if f.kind == "bool":
        if not isinstance(v, bool):
            raise _fail(where, f"must be true or false; got {v!r}")
        return v
    if f.kind == "sigma":
        return _check_sigma(where, v, ex)
    if f.kind in ("ints", "floats", "strs", "sigmas"):
        if not isinstance(v, list) or not v:
            raise _fail(where, f"must be a non-empty list; got {v!r} (e.g. {ex})")
        inner = _Field(
            {"ints": "int", "floats": "float", "strs": "str", "sigmas": "sigma"}[f.kind],
            lo=f.lo,
            hi=f.hi,
            lo_open=f.lo_open,
            example=ex,
        )
        items = [_check_field(f"{where}[{i}]", item, inner) for i, item in enumerate(v)]
        if len({json.dumps(i) for i in items}) != len(items):
            raise _fail(where, f"has repeated entries {v!r}: list each value once")
        return tuple(items)
    if f.kind == "table":
        if not isinstance(v, dict):
            raise _fail(where, f"must be a table; got {v!r} (e.g. {ex})")
        for key, sub in v.items():
            if not isinstance(sub, dict):
                raise _fail(f"{where}.{key}", f"must be a table of parameters; got {sub!r}")
        return {k: dict(sub) for k, sub in v.items()}
    raise AssertionError(f"unknown field kind {f.kind}")


def _read_params(where: str, table: Mapping[str, Any], schema: Mapping[str, _Field]) -> dict:
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise _fail(
            f"{where}.{unknown[0]}", f"unknown parameter; valid parameters: {', '.join(schema)}"
        )
    out = {}
    for key, f in schema.items():
        if key not in table:
            if f.default is _REQUIRED:
                raise _fail(f"{where}.{key}", f"is required (e.g. {key} = {f.example})")
            out[key] = f.default
        else:
            out[key] = _check_field(f"{where}.{key}", table[key], f)
    return out


_SEEDS = _Field("ints", lo=0, example="[0, 1, 2, 3, 4]")
_RATIO = _Field("float", lo=0, hi=1, lo_open=True, example="0.1")
_N = _setting_field("subset_size", "int", example="1000")
#: The default σ of every plan: the library's (:class:`~sde_core.pipeline.settings.EvalSettings`).
_SIGMA = _setting_field("sigma", "sigma", f'"{SQRT_DIM}"', default=setting("sigma").default)


@dataclass(frozen=True)
class RetrainedParams:
    """Controlled retrained models (Table 1, Table 3, Fig. 3, Fig. 4, training sufficiency).

    Attributes:
        seeds: model seeds (also the seed of the evaluation's subset draws).
        forget_ratios: R values; D_f is a random R·|D_tr| subset of D_tr.
        forget_seed: seed of the forget-set draw (the same D_f for every model seed).
        subset_sizes: n values (rows per subset).
        layers: layer aliases or module names.
        sigmas: σ entries in the one σ syntax (:mod:`sde_core.common.sigma`).
        checkpoints: fractions of training whose checkpoints are evaluated (each must be in
            ``train.checkpoint_fractions``, or 1.0 = final, 0.0 = initial weights).
    """

    seeds: tuple[int, ...]
    forget_ratios: tuple[float, ...]
    forget_seed: int
    subset_sizes: tuple[int, ...]
    layers: tuple[str, ...]
    sigmas: tuple[str | float, ...]
    checkpoints: tuple[float, ...]

    SCHEMA: ClassVar[dict[str, _Field]] = {
        "seeds": _SEEDS,
        "forget_ratios": _Field("floats", lo=0, hi=1, lo_open=True, example="[0.05, 0.1, 0.2]"),
        "forget_seed": _Field("int", 0, lo=0),
        "subset_sizes": _setting_field("subset_size", "ints", example="[400, 1000, 2000]"),
        "layers": _Field("strs", ("penultimate",), example='["penultimate", "output"]'),
        "sigmas": _setting_field(
            "sigma", "sigmas", f'["{SQRT_DIM}", "{MEDIAN}", "0.5*{SQRT_DIM}"]', (_SIGMA.default,)
        ),
        "checkpoints": _Field("floats", (1.0,), lo=0, hi=1, example="[0.1, 0.2, 0.4, 0.8]"),
    }
    SWEEPS: ClassVar[tuple[str, ...]] = (
        "subset_size",
        "forget_ratio",
        "layer",
        "sigma",
        "checkpoint",
    )


@dataclass(frozen=True)
class MethodsParams:
    """Unlearned models (Table 4).

    Attributes:
        seeds: seeds of the original model (each gets its own unlearned models).
        forget_ratio: R of the random forget set. forget_seed: its draw's seed.
        subset_size: n. layers: evaluated layers (the paper: ``output`` and ``penultimate``).
        sigma: σ entry.
        methods: unlearning method name -> hyper-parameter overrides (``{}`` = the method defaults).
            Retrain is always included (trained from scratch on D_r with the original recipe).
        include_original, include_random: also evaluate h_or and its initial weights (h_rand).
    """

    seeds: tuple[int, ...]
    forget_ratio: float
    forget_seed: int
    subset_size: int
    layers: tuple[str, ...]
    sigma: str | float
    methods: dict[str, dict[str, Any]]
    include_original: bool
    include_random: bool

    SCHEMA: ClassVar[dict[str, _Field]] = {
        "seeds": _SEEDS,
        "forget_ratio": _RATIO,
        "forget_seed": _Field("int", 0, lo=0),
        "subset_size": _N,
        "layers": _Field("strs", ("output", "penultimate"), example='["output", "penultimate"]'),
        "sigma": _SIGMA,
        "methods": _Field("table", example="{ ft = {}, ga = { lr = 1e-4 } }"),
        "include_original": _Field("bool", True),
        "include_random": _Field("bool", True),
    }
    SWEEPS: ClassVar[tuple[str, ...]] = ("method",)


@dataclass(frozen=True)
class HistogramParams:
    """H distributions under h_or, h_rand and h_re (Fig. 2).

    Attributes:
        seeds, forget_ratio, forget_seed, subset_size, sigma: as in :class:`MethodsParams`.
        layer: the evaluated layer.
        models: which of "original", "random", "retrained" to show.
    """

    seeds: tuple[int, ...]
    forget_ratio: float
    forget_seed: int
    subset_size: int
    layer: str
    sigma: str | float
    models: tuple[str, ...]

    SCHEMA: ClassVar[dict[str, _Field]] = {
        "seeds": _SEEDS,
        "forget_ratio": _RATIO,
        "forget_seed": _Field("int", 0, lo=0),
        "subset_size": _N,
        "layer": _Field("str", "output", example='"output"'),
        "sigma": _SIGMA,
        "models": _Field(
            "strs",
            ("original", "random", "retrained"),
            example='["original", "random", "retrained"]',
        ),
    }
    SWEEPS: ClassVar[tuple[str, ...]] = ("model",)


@dataclass(frozen=True)
class ToyParams:
    """Fixed-batch toy of App. A.4.

    Data: ``n_points`` points x ~ N(0, I_dim); label 1 iff ``x·w/√dim + noise·ε > 0`` (w, ε
    standard normal), so part of the labels must be memorised. Model: Linear(dim, hidden), ReLU,
    Linear(hidden, 2). Batches of ``batch_size`` are fixed once (a seeded permutation); each epoch
    visits them in a new order. At each step of ``eval_steps`` the activations of ``layers``
    ("hidden", "logits" or "output" = softmax) give H for ``n_subsets`` same-batch subsets (one
    whole batch each) and ``n_subsets`` cross-batch subsets (one point from each of
    ``batch_size`` distinct batches), ``splits`` splits each.
    """

    seeds: tuple[int, ...]
    n_points: int
    dim: int
    hidden: int
    batch_size: int
    epochs: int
    optimizer: str
    lr: float
    noise: float
    eval_steps: tuple[int, ...]
    n_subsets: int
    splits: int
    layers: tuple[str, ...]
    sigma: str | float

    SCHEMA: ClassVar[dict[str, _Field]] = {
        "seeds": _SEEDS,
        "n_points": _Field("int", 10_000, lo=8),
        "dim": _Field("int", 10, lo=1),
        "hidden": _Field("int", 128, lo=1),
        "batch_size": _Field("int", 64, lo=4, example="64"),
        "epochs": _Field("int", 20, lo=1),
        "optimizer": _Field("str", "adam", example='"adam" or "sgd"'),
        "lr": _Field("float", 1e-3, lo=0, lo_open=True, example="1e-3"),
        "noise": _Field("float", 0.5, lo=0),
        "eval_steps": _Field("ints", lo=0, example="[0, 100, 1000, 3000]"),
        "n_subsets": _Field("int", 20, lo=2),
        "splits": _setting_field("splits", "int", "200", default=setting("splits").default),
        "layers": _Field("strs", ("output",), example='["output", "hidden"]'),
        "sigma": _SIGMA,
    }
    SWEEPS: ClassVar[tuple[str, ...]] = ("step",)


@dataclass(frozen=True)
class WorkspaceParams:
    """An existing workspace's models evaluated at every layer × pooling × seed (issue 35).

    Attributes:
        workspace: the workspace folder (relative: against the folder the plan is run from).
        layers: its models' layers. poolings: ``"mean"`` / ``"last"`` (the setting ``pool``).
        seeds: evaluation seeds (the subset draws); n, T, K, B and σ are the workspace's
            ``[defaults]``, overridden by the plan's ``eval`` table.
    """

    workspace: str
    layers: tuple[str, ...]
    poolings: tuple[str, ...]
    seeds: tuple[int, ...]

    SCHEMA: ClassVar[dict[str, _Field]] = {
        "workspace": _Field("str", example='"assets/demo-facts"'),
        "layers": _Field("strs", example='["layer.3", "answer_logprob"]'),
        "poolings": _Field("strs", ("mean",), example='["mean", "last"]'),
        "seeds": _Field("ints", (0,), lo=0, example="[0]"),
    }
    SWEEPS: ClassVar[tuple[str, ...]] = ("layer",)


_PARAMS: dict[str, type[Params]] = {
    "retrained": RetrainedParams,
    "methods": MethodsParams,
    "histograms": HistogramParams,
    "toy": ToyParams,
    "workspace": WorkspaceParams,
}
Params = RetrainedParams | MethodsParams | HistogramParams | ToyParams | WorkspaceParams
