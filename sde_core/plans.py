"""Experiment plans: the paper's protocols (SPEC §8) as TOML files run headless and resumably.

A **plan** (``plans/<name>.toml``, read with :mod:`tomllib`) names one *experiment kind*, the
parameters of the protocol, and one or more **variants** (``default`` on mnist1d for two CPU
cores, ``fashion-mnist`` on real images, ``cifar10-resnet18`` for the paper's own setting). A
variant's tables are deep-merged over the plan's top-level tables; ``--override key=value``
(dotted keys, TOML values) is applied last, e.g. ``params.seeds=[0]`` or ``train.epochs=1``.

Plan file keys (top level; ``variants.<name>`` may repeat every key marked *)::

    name, experiment, title, paper, description, sweep     strings (experiment ∈ EXPERIMENTS)
    notes*      list of strings: reductions against the paper, caveats (shown in reports)
    device*     "cpu" | "auto" | "cuda" (training and activation extraction; not hashed)
    params*     experiment parameters (see the ``*Params`` dataclasses)
    eval*       EvalSettings fields except layer / sigma / subset_size / seed (set in params)
    dataset*    a DatasetSpec table; a relative ``root`` is resolved against the work folder
    model*      {arch = "...", kwargs = {...}}
    train*      TrainConfig fields except seed (params.seeds) and device

Experiment kinds:

- ``retrained`` (Table 1, Table 3, Fig. 3, Fig. 4, training sufficiency): for every seed and
  forget ratio R a model is trained on D_r = D_tr minus a random R·|D_tr| forget set, then every
  combination of ``checkpoints × layers × sigmas × subset_sizes`` is evaluated; the controlled
  F1 separates subsets of D_r (in-training) from subsets of D_f (out-of-training). With
  ``eval.baseline_targets > 0`` the MMD and Wasserstein-2 baselines are scored too (Table 3).
- ``methods`` (Table 4): an original model on D_tr, the retrained model and every unlearning
  method of ``params.methods`` (plus the randomly initialised weights), evaluated at each layer
  with Acc_r, Acc_f, Acc_te, MIA ASR, F1 (D_r vs D_te subsets, as the paper states) and OTR.
- ``histograms`` (Fig. 2): H(S_IT), H(S_OOT) and H(S_target ⊂ D_f) under h_or, h_rand, h_re.
- ``toy`` (App. A.4): synthetic binary task, one-hidden-layer MLP trained with fixed batch
  membership; H(same-batch subsets) vs H(cross-batch subsets) over training steps.

Jobs. :func:`build_jobs` turns a variant into self-contained :class:`Job` s (``train``,
``unlearn``, ``evaluate``, ``toy``) with explicit dependencies; :func:`run_job` executes one as a
pure function ``(job, context, dependency jobs) -> JobResult`` (table rows and arrays). Model
files are content-addressed artefacts ``<work>/artifacts/<kind>-<hash>/`` (the hash covers
everything that determines the weights), so plans that need the same model share it and a job
whose artefact exists returns at once. Only the driver (:func:`run_plan`) writes the
:class:`~sde_core.store.ResultsStore`: one *run* per (plan, variant, resolved configuration,
data fingerprint, :data:`~sde_core.evaluate.ALGORITHM_VERSION`) — ``workspace_hash =
"plan:<hash>"``, settings ``{"plan", "experiment", "variant", "config", "data", "algorithm"}``,
label ``"plan <name> [<variant>]"`` — and one store *unit* per
job (unit key = :attr:`Job.key`). A repeated run skips every stored unit; an interrupted run
keeps every finished job.

Store tables of a plan run (one row per record; the Sweeps page reads these):

``points`` — one row per evaluation (every experiment but ``toy``):
    plan, experiment, variant (str); param (the plan's ``sweep`` axis: subset_size, sigma,
    layer, checkpoint, forget_ratio, method or model), value (that axis' value as text), x
    (float: numeric position of the value — n, σ, fraction, R, or the index of a layer / method /
    model in the plan's list); seed (int), model (str: "retrained", "original", "random", or the
    method name), role ("retrained" | "original" | "unlearned" | "random"), method, forget_ratio,
    subset_size, layer, sigma_rule ("sqrt_dim", "median", "<f>*sqrt_dim" or a number), checkpoint
    (fraction of training; 0 = initial weights), dim (d of the layer), sigma (numeric σ used);
    paper's procedure: f1, f1_precision, f1_recall, otr, otr_lo, otr_hi (95% Wilson),
    references_valid, reference_p, dependence_score; calibrated evidence (SPEC §9):
    panel_valid, panel_p, calibrated_otr, calibrated_f1, null_split_fpr, null_calibrated_fpr,
    score_spread_corr; baselines: mmd_f1, w2_f1 (NaN when off); classic metrics: acc_r, acc_f,
    acc_te (%, NaN when not computed), asr (fraction, ``methods`` only); eval_seconds.
``models`` — one row per trained or unlearned model: plan, experiment, variant, job, model,
    role, method, seed, forget_ratio, epochs, final_loss, acc_train (% on the data it was
    trained on), acc_test (%), seconds (training / unlearning wall time), reused (bool: the
    artefact already existed), params (JSON text of the method's hyper-parameters).
``h_values`` — ``histograms`` only: plan, variant, seed, model, role, set ("S_IT", "S_OOT",
    "S_target"), split (int), h (float). The same values are stored as arrays
    ``"<job key>/<set>"`` of shape (K,).
``toy_steps`` — ``toy`` only, one row per (seed, layer, step): plan, variant, seed, layer, step,
    epoch, same_mean, cross_mean, same_sd, cross_sd (over subset scores), p_subset (one-sided
    Mann-Whitney U on the subset scores, same > cross), p_split (the paper's test: U on the
    pooled split values), train_acc (%), loss.
``toy_subsets`` — ``toy`` only: seed, layer, step, kind ("same" | "cross"), subset, score
    (mean H over the splits), spread (SPEC §9 spread control).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import json
import math
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sde_core.engine import Engine, LocalEngine, Resources
from sde_core.engine import Job as EngineJob
from sde_core.errors import PlanError, SDEError
from sde_core.hashing import stable_hash

__all__ = [
    "EXPERIMENTS",
    "PLAN_DIR",
    "HistogramParams",
    "Job",
    "JobContext",
    "JobResult",
    "MethodsParams",
    "Plan",
    "PlanRunReport",
    "PlanVariant",
    "RetrainedParams",
    "Setup",
    "ToyParams",
    "apply_overrides",
    "artifact_dir",
    "build_jobs",
    "check_layers",
    "forget_indices",
    "list_plans",
    "load_plan",
    "parse_override",
    "preflight",
    "resolve_plan_path",
    "run_job",
    "run_plan",
]

#: Experiment kinds a plan may name.
EXPERIMENTS = ("retrained", "methods", "histograms", "toy")

#: The plans shipped with the repository.
PLAN_DIR = Path(__file__).resolve().parent.parent / "plans"

_TOP_KEYS = (
    "name",
    "experiment",
    "title",
    "paper",
    "description",
    "sweep",
    "notes",
    "device",
    "params",
    "eval",
    "dataset",
    "model",
    "train",
    "resources",
    "variants",
)
_VARIANT_KEYS = ("notes", "device", "params", "eval", "dataset", "model", "train", "resources")
_DEVICES = ("cpu", "auto", "cuda")
_EVAL_FROM_PARAMS = ("layer", "sigma", "subset_size", "seed")
_REQUIRED = object()


# ============================================================================================
# Validation helpers
# ============================================================================================


def _fail(where: str, message: str) -> PlanError:
    """A :class:`PlanError` whose message starts with the offending field."""
    return PlanError(f"{where}: {message}")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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


def _check_number(where: str, v: object, f: _Field, integer: bool) -> Any:
    ok = _is_int(v) if integer else _is_num(v)
    if ok and f.lo is not None:
        ok = v > f.lo if f.lo_open else v >= f.lo  # type: ignore[operator]
    if ok and f.hi is not None:
        ok = v <= f.hi  # type: ignore[operator]
    if not ok:
        bounds = []
        if f.lo is not None:
            bounds.append(f"{'>' if f.lo_open else '≥'} {f.lo:g}")
        if f.hi is not None:
            bounds.append(f"≤ {f.hi:g}")
        what = ("an integer" if integer else "a number") + (
            " " + " and ".join(bounds) if bounds else ""
        )
        raise _fail(where, f"must be {what}; got {v!r} (e.g. {f.example or '1'})")
    return float(v) if not integer else int(v)  # type: ignore[arg-type]


def _check_sigma(where: str, v: object, example: str) -> str | float:
    """A σ entry: "sqrt_dim", "median", "<f>*sqrt_dim" or a positive number."""
    if _is_num(v) and v > 0:  # type: ignore[operator]
        return float(v)  # type: ignore[arg-type]
    if isinstance(v, str):
        if v in ("sqrt_dim", "median"):
            return v
        factor, sep, rule = v.partition("*")
        if sep and rule.strip() == "sqrt_dim":
            try:
                if float(factor) > 0:
                    return f"{float(factor):g}*sqrt_dim"
            except ValueError:
                pass
    raise _fail(
        where,
        f"must be 'sqrt_dim', 'median', '<factor>*sqrt_dim' or a positive number; got {v!r} "
        f"(e.g. {example})",
    )


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
_N = _Field("int", lo=4, example="1000")


@dataclass(frozen=True)
class RetrainedParams:
    """Controlled retrained models (Table 1, Table 3, Fig. 3, Fig. 4, training sufficiency).

    Attributes:
        seeds: model seeds (also the seed of the evaluation's subset draws).
        forget_ratios: R values; D_f is a random R·|D_tr| subset of D_tr.
        forget_seed: seed of the forget-set draw (the same D_f for every model seed).
        subset_sizes: n values (rows per subset).
        layers: layer aliases or module names.
        sigmas: σ entries ("sqrt_dim", "median", "<f>*sqrt_dim" or numbers).
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
        "subset_sizes": _Field("ints", lo=4, example="[400, 1000, 2000]"),
        "layers": _Field("strs", ("penultimate",), example='["penultimate", "output"]'),
        "sigmas": _Field("sigmas", ("sqrt_dim",), example='["sqrt_dim", "median", "0.5*sqrt_dim"]'),
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
        methods: unlearning method name -> hyper-parameter overrides (``{}`` = SPEC defaults).
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
        "sigma": _Field("sigma", "sqrt_dim", example='"sqrt_dim"'),
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
        "sigma": _Field("sigma", "sqrt_dim", example='"sqrt_dim"'),
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
        "splits": _Field("int", 200, lo=2, hi=100_000),
        "layers": _Field("strs", ("output",), example='["output", "hidden"]'),
        "sigma": _Field("sigma", "sqrt_dim", example='"sqrt_dim"'),
    }
    SWEEPS: ClassVar[tuple[str, ...]] = ("step",)


_PARAMS: dict[str, type] = {
    "retrained": RetrainedParams,
    "methods": MethodsParams,
    "histograms": HistogramParams,
    "toy": ToyParams,
}
Params = RetrainedParams | MethodsParams | HistogramParams | ToyParams


# ============================================================================================
# Plans and variants
# ============================================================================================


@dataclass(frozen=True)
class Setup:
    """Data, architecture and training recipe of the models of a variant.

    Attributes:
        dataset: a :class:`~sde_core.data.DatasetSpec` mapping (``root`` relative to the work
            folder unless absolute).
        arch, arch_kwargs: registry architecture and its keyword arguments.
        train: :class:`~sde_core.training.TrainConfig` fields without ``seed`` and ``device``.
    """

    dataset: dict[str, Any]
    arch: str
    arch_kwargs: dict[str, Any]
    train: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (part of every job spec that needs data or a model)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PlanVariant:
    """One variant of a plan, resolved (merged, overridden) and validated.

    Attributes:
        path: the plan file. name, experiment, title, paper, description, sweep: from the plan.
        variant: the variant's name. notes: reductions and caveats.
        params: the experiment's parameters. eval: EvalSettings fields shared by every evaluation.
        setup: data, model and recipe (None for ``toy``). device: runtime device (not hashed).
        config: the resolved configuration (what the plan hash covers).
        overrides: the ``key=value`` overrides applied, as given.
        resources: ``{job kind: {cpus, gpus, memory_mb}}`` scheduler requests (not hashed).
    """

    path: Path
    name: str
    experiment: str
    title: str
    paper: str
    description: str
    sweep: str
    variant: str
    notes: tuple[str, ...]
    params: Params
    eval: dict[str, Any]
    setup: Setup | None
    device: str
    config: dict[str, Any]
    overrides: tuple[str, ...] = ()
    resources: dict[str, dict[str, float]] = field(default_factory=dict)

    def plan_hash(self) -> str:
        """Hash of everything that determines the results (not notes, texts or the device)."""
        return stable_hash({"name": self.name, "experiment": self.experiment, **self.config})


@dataclass(frozen=True)
class Plan:
    """A plan file: its metadata and raw variant tables (validated by :func:`load_plan`)."""

    path: Path
    raw: dict[str, Any]

    @property
    def name(self) -> str:
        """The plan's ``name``."""
        return str(self.raw["name"])

    @property
    def experiment(self) -> str:
        """The plan's experiment kind."""
        return str(self.raw["experiment"])

    @property
    def variants(self) -> tuple[str, ...]:
        """Variant names, in file order."""
        return tuple(self.raw["variants"])

    def variant(self, name: str = "default", overrides: Sequence[str] = ()) -> PlanVariant:
        """The resolved, validated variant ``name`` with ``key=value`` overrides applied.

        Raises:
            PlanError: unknown variant, bad override or invalid resolved field.
        """
        if name not in self.raw["variants"]:
            raise _fail(
                f"{self.path.name}: --variant {name}",
                f"unknown variant; this plan has {', '.join(self.variants)}",
            )
        return _resolve_variant(self, name, tuple(overrides))


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``"a.b=value"`` into ``(["a", "b"], value)``; the value is parsed as a TOML value
    (``[0, 1]``, ``1e-3``, ``true``, ``"x"``) and kept as text when it is not one
    (``dataset.root=/data/cifar``).

    Raises:
        PlanError: no ``=`` or an empty key.
    """
    key, sep, value = text.partition("=")
    parts = [p.strip() for p in key.split(".")]
    if not sep or not all(parts):
        raise _fail(
            f"--override {text!r}",
            "must look like key=value, e.g. params.seeds=[0] or train.epochs=1",
        )
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return parts, parsed


def apply_overrides(config: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``config`` with every ``key=value`` override set (dotted keys create tables).

    Raises:
        PlanError: an unknown top-level key or a key below a non-table value.
    """
    out = copy.deepcopy(dict(config))
    for text in overrides:
        parts, value = parse_override(text)
        if parts[0] not in _VARIANT_KEYS:
            raise _fail(
                f"--override {text!r}",
                f"unknown key {parts[0]!r}; override one of {', '.join(_VARIANT_KEYS)} "
                "(e.g. params.seeds=[0], train.epochs=1, eval.splits=50)",
            )
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise _fail(f"--override {text!r}", f"{'.'.join(parts[: i + 1])} is not a table")
            node = child
        node[parts[-1]] = value
    return out


def _check_resources(where: str, table: object) -> dict[str, dict[str, float]]:
    """``[resources.<kind>]`` tables: ``cpus``, ``gpus``, ``memory_mb`` (≥ 0) per job kind."""
    if not isinstance(table, dict):
        raise _fail(f"{where} resources", "must be a table of job kinds")
    out: dict[str, dict[str, float]] = {}
    for kind, request in table.items():
        if kind not in DEFAULT_RESOURCES:
            raise _fail(
                f"{where} resources.{kind}", f"unknown job kind; use {list(DEFAULT_RESOURCES)}"
            )
        if not isinstance(request, dict) or set(request) - {"cpus", "gpus", "memory_mb"}:
            raise _fail(f"{where} resources.{kind}", "a table with cpus, gpus and/or memory_mb")
        for name, value in request.items():
            if not _is_num(value) or value < 0:
                raise _fail(
                    f"{where} resources.{kind}.{name}", f"must be a number ≥ 0; got {value!r}"
                )
        out[kind] = {k: float(v) for k, v in request.items()}
    return out


def _resolve_variant(plan: Plan, variant: str, overrides: tuple[str, ...]) -> PlanVariant:
    raw = plan.raw
    where = f"{plan.path.name} [variant {variant}]"
    base = {k: raw[k] for k in _VARIANT_KEYS if k in raw}
    merged = _deep_merge(base, raw["variants"][variant])
    config = apply_overrides(merged, overrides)
    experiment = plan.experiment
    notes = config.pop("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise _fail(f"{where} notes", "must be a list of strings")
    resources = _check_resources(where, config.pop("resources", {}))
    device = config.pop("device", "cpu")
    if device not in _DEVICES:
        raise _fail(f"{where} device", f"must be one of {', '.join(_DEVICES)}; got {device!r}")
    for key in ("params", "eval", "dataset", "model", "train"):
        if key in config and not isinstance(config[key], dict):
            raise _fail(f"{where} {key}", f"must be a table; got {config[key]!r}")
    cls = _PARAMS[experiment]
    params = cls(**_read_params(f"{where} params", config.get("params", {}), cls.SCHEMA))
    eval_table = _check_eval(f"{where} eval", config.get("eval", {}))
    setup = None
    if experiment == "toy":
        extra = [k for k in ("dataset", "model", "train", "eval") if k in config]
        if extra:
            raise _fail(
                f"{where} {extra[0]}",
                "the toy experiment defines its data, model and training in params; remove it",
            )
        _check_toy(where, params)  # type: ignore[arg-type]
    else:
        setup = _check_setup(where, config)
        _check_experiment(where, params, setup)
    return PlanVariant(
        path=plan.path,
        name=plan.name,
        experiment=experiment,
        title=str(raw.get("title", plan.name)),
        paper=str(raw.get("paper", "")),
        description=str(raw.get("description", "")),
        sweep=str(raw["sweep"]),
        variant=variant,
        notes=tuple(notes),
        params=params,
        eval=eval_table,
        setup=setup,
        device=device,
        config=config,
        overrides=overrides,
        resources=resources,
    )


def _check_toy(where: str, p: ToyParams) -> None:
    """Choices and sizes of the toy that a single field's schema cannot express."""
    if p.optimizer not in ("adam", "sgd"):
        raise _fail(f"{where} params.optimizer", "must be 'adam' or 'sgd'")
    bad = [x for x in p.layers if x not in ("hidden", "logits", "output")]
    if bad:
        raise _fail(f"{where} params.layers", f"{bad[0]!r} is not 'hidden', 'logits' or 'output'")
    full = p.n_points // p.batch_size
    if full < max(p.n_subsets, p.batch_size):
        raise _fail(
            f"{where} params.n_points",
            f"{full} full batches cannot give {p.n_subsets} same-batch subsets and cross-batch "
            f"subsets drawn from {p.batch_size} distinct batches; raise n_points or lower "
            "batch_size / n_subsets",
        )
    steps = math.ceil(p.n_points / p.batch_size) * p.epochs
    late = [s for s in p.eval_steps if s > steps]
    if late:
        raise _fail(
            f"{where} params.eval_steps",
            f"step {late[0]} is after the last training step ({steps}); use steps ≤ {steps}",
        )


def _check_eval(where: str, table: Mapping[str, Any]) -> dict[str, Any]:
    from sde_core.evaluate import EvalSettings

    for key in _EVAL_FROM_PARAMS:
        if key in table:
            raise _fail(
                f"{where}.{key}",
                "is set per evaluation from params (layers, sigmas, subset_sizes, seeds); move it",
            )
    if "device" in table:
        raise _fail(f"{where}.device", "set the device at the top of the variant or with --device")
    try:
        EvalSettings.from_mapping(dict(table))
    except SDEError as exc:
        raise _fail(where, str(exc)) from None
    return dict(table)


def _check_setup(where: str, config: Mapping[str, Any]) -> Setup:
    from sde_core.data import DatasetSpec
    from sde_core.models import get_arch
    from sde_core.training import TrainConfig

    for key, example in (
        ("dataset", '{ kind = "mnist1d", root = "data/mnist1d" }'),
        ("model", '{ arch = "mlp", kwargs = {} }'),
        ("train", '{ optimizer = "adam", lr = 1e-3, epochs = 60, batch_size = 64 }'),
    ):
        if key not in config:
            raise _fail(f"{where} {key}", f"is required (e.g. {key} = {example})")
    dataset = dict(config["dataset"])
    try:
        DatasetSpec.from_dict(dataset)
    except (SDEError, TypeError) as exc:
        raise _fail(f"{where} dataset", str(exc)) from None
    from sde_core.data import DATASET_KINDS

    if dataset["kind"] not in DATASET_KINDS or dataset["kind"] == "activations":
        kinds = [k for k in DATASET_KINDS if k != "activations"]
        raise _fail(f"{where} dataset.kind", f"must be one of {', '.join(kinds)}")
    model = dict(config["model"])
    unknown = sorted(set(model) - {"arch", "kwargs"})
    if unknown:
        raise _fail(f"{where} model.{unknown[0]}", "unknown key; a model has arch and kwargs")
    if not isinstance(model.get("arch"), str):
        raise _fail(f"{where} model.arch", 'is required, e.g. arch = "resnet18"')
    try:
        get_arch(model["arch"])
    except SDEError as exc:
        raise _fail(f"{where} model.arch", str(exc)) from None
    kwargs = model.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise _fail(f"{where} model.kwargs", f"must be a table; got {kwargs!r}")
    train = dict(config["train"])
    for key in ("seed", "device"):
        if key in train:
            raise _fail(
                f"{where} train.{key}",
                "is not part of the recipe here: seeds come from params.seeds, the device from "
                "the variant's device or --device",
            )
    try:
        TrainConfig.from_dict(train)
    except (SDEError, TypeError) as exc:
        raise _fail(f"{where} train", str(exc)) from None
    return Setup(dataset=dataset, arch=model["arch"], arch_kwargs=dict(kwargs), train=train)


def _check_experiment(where: str, params: Params, setup: Setup) -> None:
    from sde_core.training import TrainConfig
    from sde_core.unlearning import METHODS

    if isinstance(params, RetrainedParams):
        saved = set(TrainConfig.from_dict(setup.train).checkpoint_fractions) | {0.0, 1.0}
        missing = [c for c in params.checkpoints if not any(math.isclose(c, s) for s in saved)]
        if missing:
            raise _fail(
                f"{where} params.checkpoints",
                f"{missing[0]:g} is not saved by train.checkpoint_fractions "
                f"({sorted(saved)}); add it there or choose a saved fraction",
            )
    if isinstance(params, MethodsParams):
        for method in params.methods:
            if method == "retrain":
                raise _fail(
                    f"{where} params.methods.retrain",
                    "Retrain is always included (the original recipe on D_r); remove it",
                )
            if method not in METHODS:
                raise _fail(
                    f"{where} params.methods.{method}",
                    "unknown method; registered: "
                    + ", ".join(m for m in METHODS if m != "retrain"),
                )
            valid = [f.name for f in dataclasses.fields(METHODS[method].params_cls)]
            bad = sorted(set(params.methods[method]) - set(valid))
            if bad:
                raise _fail(
                    f"{where} params.methods.{method}.{bad[0]}",
                    f"unknown parameter; valid: {', '.join(valid)}",
                )
    if isinstance(params, HistogramParams):
        bad = [m for m in params.models if m not in ("original", "random", "retrained")]
        if bad:
            raise _fail(
                f"{where} params.models", f"{bad[0]!r} is not 'original', 'random' or 'retrained'"
            )


def resolve_plan_path(plan: str | Path) -> Path:
    """A plan file from a path, or a name of a file under ``plans/`` (``table1``).

    Raises:
        PlanError: no such file (the message lists the shipped plans).
    """
    path = Path(plan)
    candidates = [path, PLAN_DIR / path, PLAN_DIR / f"{path}.toml", Path("plans") / f"{path}.toml"]
    for cand in candidates:
        if cand.is_file():
            return cand
    names = ", ".join(p.stem for p in list_plans()) or "none"
    raise _fail(f"plan {plan}", f"no such plan file; give a path or one of: {names}")


def list_plans(folder: str | Path = PLAN_DIR) -> list[Path]:
    """The ``*.toml`` plan files of ``folder``, sorted."""
    return sorted(Path(folder).glob("*.toml"))


def load_plan(plan: str | Path) -> Plan:
    """Read and validate a plan file (every variant is resolved once to check it).

    Raises:
        PlanError: unreadable TOML, unknown or missing keys, invalid values, no ``default``
            variant; the message names the file, the variant and the field.
    """
    path = resolve_plan_path(plan)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _fail(path.name, f"is not valid TOML ({exc}); fix the syntax") from None
    unknown = sorted(set(raw) - set(_TOP_KEYS))
    if unknown:
        raise _fail(f"{path.name} {unknown[0]}", f"unknown key; valid keys: {', '.join(_TOP_KEYS)}")
    for key in ("name", "experiment", "sweep"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _fail(f"{path.name} {key}", "is required and must be a non-empty string")
    for key in ("title", "paper", "description"):
        if key in raw and not isinstance(raw[key], str):
            raise _fail(f"{path.name} {key}", "must be a string")
    if raw["experiment"] not in EXPERIMENTS:
        raise _fail(
            f"{path.name} experiment",
            f"unknown experiment {raw['experiment']!r}; use one of {', '.join(EXPERIMENTS)}",
        )
    sweeps = _PARAMS[raw["experiment"]].SWEEPS  # type: ignore[attr-defined]
    if raw["sweep"] not in sweeps:
        raise _fail(
            f"{path.name} sweep",
            f"{raw['sweep']!r} is not an axis of a {raw['experiment']} plan; "
            f"use {', '.join(sweeps)}",
        )
    variants = raw.get("variants")
    if not isinstance(variants, dict) or "default" not in variants:
        raise _fail(
            f"{path.name} variants",
            "needs at least [variants.default] (the CPU-sized variant run by default)",
        )
    for name, table in variants.items():
        if not isinstance(table, dict):
            raise _fail(f"{path.name} variants.{name}", "must be a table")
        bad = sorted(set(table) - set(_VARIANT_KEYS))
        if bad:
            raise _fail(
                f"{path.name} variants.{name}.{bad[0]}",
                f"unknown key; a variant may set {', '.join(_VARIANT_KEYS)}",
            )
    result = Plan(path=path, raw=raw)
    for name in variants:
        result.variant(name)
    return result


# ============================================================================================
# Jobs
# ============================================================================================


@dataclass(frozen=True)
class Job:
    """One self-contained unit of work.

    Attributes:
        key: unique key within the plan run (the store's unit key), e.g.
            ``"eval/R=0.1/seed=0/ckpt=0.8/layer=output/sigma=sqrt_dim/n=120"``.
        kind: ``"train"``, ``"unlearn"``, ``"evaluate"`` or ``"toy"``.
        spec: JSON-able description of everything that determines the result.
        labels: JSON-able annotations copied into the result rows (plan, variant, model, ...).
        deps: keys of the jobs whose artefacts this job reads.
    """

    key: str
    kind: str
    spec: dict[str, Any]
    labels: dict[str, Any] = field(default_factory=dict)
    deps: tuple[str, ...] = ()

    def digest(self) -> str:
        """Content hash of ``(kind, spec)``: names the job's artefact folder."""
        return stable_hash({"kind": self.kind, "spec": self.spec})


@dataclass(frozen=True)
class JobContext:
    """Where and how jobs run: the work folder (artefacts, data, activation cache) and device."""

    work: Path
    device: str = "cpu"


@dataclass
class JobResult:
    """What a job returns: store tables (name -> row dicts) and named arrays."""

    tables: dict[str, list[dict[str, Any]]]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def artifact_dir(job: Job, work: Path) -> Path:
    """The content-addressed artefact folder of a ``train`` or ``unlearn`` job."""
    return Path(work) / "artifacts" / f"{job.kind}-{job.digest()[:16]}"


def forget_indices(n_train: int, ratio: float, seed: int) -> np.ndarray:
    """A random forget set: ``round(ratio · n_train)`` sorted int64 indices of D_tr."""
    k = max(1, round(ratio * n_train))
    rng = np.random.default_rng([int(seed), 0x5DE])
    return np.sort(rng.choice(n_train, size=k, replace=False)).astype(np.int64)


def _r(x: float) -> str:
    return f"{x:g}"


def _base_labels(v: PlanVariant) -> dict[str, Any]:
    return {"plan": v.name, "experiment": v.experiment, "variant": v.variant}


def _train_job(v: PlanVariant, seed: int, forget: dict[str, Any] | None) -> Job:
    assert v.setup is not None
    role = "original" if forget is None else "retrained"
    key = f"train/{role}/seed={seed}" + ("" if forget is None else f"/R={_r(forget['ratio'])}")
    spec = {"setup": v.setup.to_dict(), "seed": seed, "forget": forget}
    labels = {
        **_base_labels(v),
        "model": role,
        "role": role,
        "method": "train",
        "seed": seed,
        "forget_ratio": forget["ratio"] if forget else float("nan"),
    }
    return Job(key=key, kind="train", spec=spec, labels=labels)


@dataclass(frozen=True)
class _Point:
    """One evaluation of a plan: a model (its producing job and checkpoint) at one setting.

    ``value`` / ``x`` are the point's position on the plan's sweep axis (``points`` table).
    """

    model: str
    role: str
    method: str
    source: Job
    checkpoint: float
    forget: dict[str, Any]
    seed: int
    layer: str
    sigma: str | float
    subset_size: int
    value: str
    x: float


def _eval_job(
    v: PlanVariant, pt: _Point, key: str, f1_negatives: str, classic: str, histogram: bool
) -> Job:
    """The ``evaluate`` job of a point: ``f1_negatives`` is ``"forget"`` (D_f, retrained
    models of §4.1) or ``"test"`` (D_te, §4.3); ``classic`` is ``"accuracy"`` or ``"asr"``
    (accuracies plus the MIA attack)."""
    assert v.setup is not None
    labels = {
        **_base_labels(v),
        "param": v.sweep,
        "value": pt.value,
        "x": pt.x,
        "seed": pt.seed,
        "model": pt.model,
        "role": pt.role,
        "method": pt.method,
        "forget_ratio": pt.forget["ratio"],
        "subset_size": pt.subset_size,
        "layer": pt.layer,
        "sigma_rule": str(pt.sigma),
        "checkpoint": pt.checkpoint,
    }
    spec = {
        "source": {"kind": pt.source.kind, "digest": pt.source.digest()},
        "dataset": v.setup.dataset,
        "arch": v.setup.arch,
        "forget": pt.forget,
        "checkpoint": pt.checkpoint,
        "layer": pt.layer,
        "sigma": pt.sigma,
        "subset_size": pt.subset_size,
        "seed": pt.seed,
        "eval": v.eval,
        "f1_negatives": f1_negatives,
        "classic": classic,
        "histogram": histogram,
    }
    return Job(key=key, kind="evaluate", spec=spec, labels=labels, deps=(pt.source.key,))


def _has_seed(method: str) -> bool:
    """Whether an unlearning method takes a ``seed`` (its shuffles follow the model seed)."""
    from sde_core.unlearning import METHODS

    return any(f.name == "seed" for f in dataclasses.fields(METHODS[method].params_cls))


def _toy_jobs(v: PlanVariant, p: ToyParams) -> list[Job]:
    spec = {k: getattr(p, k) for k in p.SCHEMA if k != "seeds"}
    return [
        Job(
            key=f"toy/seed={seed}",
            kind="toy",
            spec={**spec, "seed": seed},
            labels={**_base_labels(v), "seed": seed},
        )
        for seed in p.seeds
    ]


def _retrained_jobs(v: PlanVariant, p: RetrainedParams) -> list[Job]:
    """Per (R, seed): train on D_r, then evaluate every checkpoint × layer × σ × n."""
    jobs: list[Job] = []
    for ratio, seed in itertools.product(p.forget_ratios, p.seeds):
        forget = {"ratio": ratio, "seed": p.forget_seed}
        train = _train_job(v, seed, forget)
        jobs.append(train)
        grid = itertools.product(p.checkpoints, enumerate(p.layers), p.sigmas, p.subset_sizes)
        for ckpt, (li, layer), sigma, n in grid:
            value, x = {
                "subset_size": (n, n),
                "forget_ratio": (ratio, ratio),
                "layer": (layer, li),
                "sigma": (sigma, math.nan),  # x becomes the numeric σ once it is known
                "checkpoint": (ckpt, ckpt),
            }[v.sweep]
            pt = _Point(
                "retrained",
                "retrained",
                "retrain",
                train,
                ckpt,
                forget,
                seed,
                layer,
                sigma,
                n,
                str(value),
                float(x),
            )
            key = (
                f"eval/R={_r(ratio)}/seed={seed}/ckpt={_r(ckpt)}/layer={layer}/sigma={sigma}/n={n}"
            )
            jobs.append(_eval_job(v, pt, key, "forget", "accuracy", False))
    return jobs


def _model_jobs(v: PlanVariant, p: MethodsParams | HistogramParams) -> list[Job]:
    """Per seed: h_or on D_tr, h_re on D_r, the unlearned models (``methods``), then one
    evaluation per model and layer."""
    jobs: list[Job] = []
    forget = {"ratio": p.forget_ratio, "seed": p.forget_seed}
    for seed in p.seeds:
        original = _train_job(v, seed, None)
        retrained = _train_job(v, seed, forget)
        jobs += [original, retrained]
        # (model name, role, method, producing job, checkpoint fraction; 0 = initial weights)
        known = {
            "original": ("original", "original", "train", original, 1.0),
            "random": ("random", "random", "init", original, 0.0),
            "retrained": ("retrained", "retrained", "retrain", retrained, 1.0),
        }
        if isinstance(p, HistogramParams):
            models = [known[m] for m in p.models]
            layers, classic = (p.layer,), "accuracy"
        else:
            models = [known["original"]] if p.include_original else []
            models.append(known["retrained"])
            for method, overrides in p.methods.items():
                seeded = {"seed": seed} if _has_seed(method) else {}
                unl = Job(
                    key=f"unlearn/{method}/seed={seed}",
                    kind="unlearn",
                    spec={
                        "original": original.spec,
                        "forget": forget,
                        "method": method,
                        "params": {**seeded, **overrides},
                    },
                    labels={
                        **_base_labels(v),
                        "model": method,
                        "role": "unlearned",
                        "method": method,
                        "seed": seed,
                        "forget_ratio": p.forget_ratio,
                    },
                    deps=(original.key,),
                )
                jobs.append(unl)
                models.append((method, "unlearned", method, unl, 1.0))
            if p.include_random:
                models.append(known["random"])
            layers, classic = p.layers, "asr"
        for mi, (name, role, method, source, ckpt) in enumerate(models):
            for layer in layers:
                pt = _Point(
                    name,
                    role,
                    method,
                    source,
                    ckpt,
                    forget,
                    seed,
                    layer,
                    p.sigma,
                    p.subset_size,
                    name,
                    float(mi),
                )
                key = f"eval/{name}/seed={seed}/layer={layer}"
                jobs.append(_eval_job(v, pt, key, "test", classic, isinstance(p, HistogramParams)))
    return jobs


def build_jobs(v: PlanVariant) -> list[Job]:
    """Every job of a variant, dependencies first.

    Sweep labels: every evaluation's ``param`` is the plan's ``sweep`` and ``value``/``x`` its
    value there (see the module docstring).
    """
    p = v.params
    if isinstance(p, ToyParams):
        return _toy_jobs(v, p)
    if isinstance(p, RetrainedParams):
        return _retrained_jobs(v, p)
    return _model_jobs(v, p)


# ============================================================================================
# Job execution (pure functions of the job, its dependencies' artefacts and the context)
# ============================================================================================


@functools.lru_cache(maxsize=4)
def _bundle_cached(spec_json: str, work: str) -> Any:
    from sde_core.data import DatasetSpec, load_dataset

    spec = json.loads(spec_json)
    return load_dataset(DatasetSpec.from_dict(spec, base_dir=work))


def _bundle(dataset: Mapping[str, Any], work: Path) -> Any:
    """The loaded dataset of a job (relative roots resolved against ``work``; cached)."""
    return _bundle_cached(json.dumps(dataset, sort_keys=True), str(Path(work).resolve()))


def _forget_of(spec: Mapping[str, Any] | None, n_train: int) -> np.ndarray | None:
    return None if spec is None else forget_indices(n_train, spec["ratio"], spec["seed"])


def _manifest(job: Job, work: Path) -> dict[str, Any] | None:
    path = artifact_dir(job, work) / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _write_manifest(job: Job, work: Path, info: Mapping[str, Any]) -> None:
    folder = artifact_dir(job, work)
    tmp = folder / "manifest.json.tmp"
    tmp.write_text(
        json.dumps({"job": job.key, "kind": job.kind, "spec": job.spec, **info}, indent=1)
    )
    tmp.replace(folder / "manifest.json")


def _accuracy(model: Any, dataset: Any, device: str) -> float:
    from sde_core.metrics import accuracy_from_probs, predict_probs

    probs, labels = predict_probs(model, dataset, device=device)
    return accuracy_from_probs(probs, labels)


def _run_train(job: Job, ctx: JobContext) -> JobResult:
    """Train h_or (on D_tr) or h_re (on D_r) with checkpoints; reuse a finished artefact."""
    import torch
    from torch.utils.data import Subset

    from sde_core.models import build_model
    from sde_core.training import TrainConfig, train

    info = _manifest(job, ctx.work)
    reused = info is not None
    if info is None:
        s = Setup(**job.spec["setup"])
        bundle = _bundle(s.dataset, ctx.work)
        forget = _forget_of(job.spec["forget"], len(bundle.train))
        data = bundle.train
        if forget is not None:
            data = Subset(bundle.train, np.setdiff1d(np.arange(len(bundle.train)), forget).tolist())
        config = TrainConfig.from_dict({**s.train, "seed": job.spec["seed"], "device": ctx.device})
        torch.manual_seed(config.seed)
        model = build_model(s.arch, **s.arch_kwargs)
        out = artifact_dir(job, ctx.work)
        result = train(model, data, config, out, arch=s.arch, arch_kwargs=s.arch_kwargs)
        info = {
            "seconds": result.seconds,
            "final_loss": result.losses[-1],
            "epochs": config.epochs,
            "acc_train": _accuracy(result.model, data, ctx.device),
            "acc_test": _accuracy(result.model, bundle.test, ctx.device),
            "checkpoints": {repr(f): p.name for f, p in result.checkpoints.items()},
            "init": result.init_path.name if result.init_path else None,
        }
        _write_manifest(job, ctx.work, info)
    row = {
        **job.labels,
        "job": job.key,
        **{k: info[k] for k in ("epochs", "final_loss", "acc_train", "acc_test", "seconds")},
        "reused": reused,
        "params": json.dumps(job.spec["setup"]["train"], sort_keys=True),
    }
    return JobResult(tables={"models": [row]})


def _checkpoint_file(job: Job, work: Path, fraction: float) -> Path:
    """The weights file of a ``train`` (fraction of training; 0 = initial) or ``unlearn`` job."""
    info = _manifest(job, work)
    if info is None:
        raise PlanError(f"job {job.key}: its artefact is missing in {work}; run the job first")
    folder = artifact_dir(job, work)
    if job.kind == "unlearn":
        return folder / info["model"]
    if math.isclose(fraction, 0.0):
        return folder / info["init"]
    for frac, name in info["checkpoints"].items():
        if math.isclose(float(frac), fraction):
            return folder / name
    raise PlanError(f"job {job.key} saved no checkpoint at fraction {fraction:g}")


def _run_unlearn(job: Job, ctx: JobContext, original: Job) -> JobResult:
    """Apply an unlearning method to the original model's final checkpoint."""
    from sde_core.models import build_model, load_checkpoint
    from sde_core.training import TrainConfig, save_weights
    from sde_core.unlearning import UnlearnData, unlearn

    info = _manifest(job, ctx.work)
    reused = info is not None
    if info is None:
        s = Setup(**original.spec["setup"])
        bundle = _bundle(s.dataset, ctx.work)
        forget = _forget_of(job.spec["forget"], len(bundle.train))
        model = load_checkpoint(_checkpoint_file(original, ctx.work, 1.0), arch=s.arch)
        init = load_checkpoint(_checkpoint_file(original, ctx.work, 0.0), arch=s.arch)
        data = UnlearnData.from_forget(
            bundle.train,
            forget,
            num_classes=bundle.num_classes or None,
            train_config=TrainConfig.from_dict(
                {**s.train, "seed": original.spec["seed"], "device": ctx.device}
            ),
            init_state=init.state_dict(),
            model_factory=lambda: build_model(s.arch, **s.arch_kwargs),
            device=ctx.device,
        )
        result = unlearn(job.spec["method"], model, data, **job.spec["params"])
        folder = artifact_dir(job, ctx.work)
        save_weights(
            result.model.cpu(), folder / "model.safetensors", arch=s.arch, arch_kwargs=s.arch_kwargs
        )
        info = {
            "seconds": result.seconds,
            "model": "model.safetensors",
            "params": result.params_dict(),
        }
        _write_manifest(job, ctx.work, info)
    nan = float("nan")
    row = {
        **job.labels,
        "job": job.key,
        "epochs": info["params"].get("epochs") or 0,
        "final_loss": nan,
        "acc_train": nan,
        "acc_test": nan,
        "seconds": info["seconds"],
        "reused": reused,
        "params": json.dumps(info["params"], sort_keys=True),
    }
    return JobResult(tables={"models": [row]})


_POINT_COLUMNS = (
    "dim",
    "sigma",
    "f1",
    "f1_precision",
    "f1_recall",
    "otr",
    "otr_lo",
    "otr_hi",
    "references_valid",
    "reference_p",
    "dependence_score",
    "panel_valid",
    "panel_p",
    "calibrated_otr",
    "calibrated_f1",
    "null_split_fpr",
    "null_calibrated_fpr",
    "score_spread_corr",
    "mmd_f1",
    "w2_f1",
    "acc_r",
    "acc_f",
    "acc_te",
    "asr",
    "eval_seconds",
)


def _resolve_sigma_entry(entry: str | float, dim: int) -> str | float:
    """``"<f>*sqrt_dim"`` -> f·√d; other entries unchanged (EvalSettings resolves them)."""
    if isinstance(entry, str) and entry.endswith("*sqrt_dim"):
        return float(entry.split("*")[0]) * math.sqrt(dim)
    return entry


def _run_evaluate(job: Job, ctx: JobContext, source: Job) -> JobResult:
    """Evaluate one model at one setting (:func:`sde_core.evaluate.evaluate_arrays`)."""
    from sde_core.activations import ActivationCache, get_activations
    from sde_core.evaluate import EvalSettings, ModelInputs, draw_subsets, evaluate_arrays
    from sde_core.metrics import accuracy_from_probs

    sp = job.spec
    bundle = _bundle(sp["dataset"], ctx.work)
    n_train, n_test = len(bundle.train), len(bundle.test)
    forget = _forget_of(sp["forget"], n_train)
    assert forget is not None
    retain = np.setdiff1d(np.arange(n_train), forget)
    ckpt = _checkpoint_file(source, ctx.work, sp["checkpoint"])
    layers = list(dict.fromkeys([sp["layer"], "output"]))
    cache = ActivationCache(Path(ctx.work) / "activations")
    acts = {
        split: get_activations(
            ckpt, bundle, split, layers, cache, arch=sp["arch"], device=ctx.device
        )
        for split in ("train", "test")
    }
    train_acts = np.asarray(acts["train"][sp["layer"]], dtype=np.float64)
    test_acts = np.asarray(acts["test"][sp["layer"]], dtype=np.float64)
    settings = EvalSettings.from_mapping(
        {
            **sp["eval"],
            "layer": sp["layer"],
            "subset_size": sp["subset_size"],
            "seed": sp["seed"],
            "sigma": _resolve_sigma_entry(sp["sigma"], train_acts.shape[1]),
        }
    )
    plan = draw_subsets(n_train, n_test, forget, settings)
    with_asr = sp["classic"] == "asr"
    inputs = ModelInputs(
        name=job.labels["model"],
        # the F1 negatives: D_f for "retrained" (SPEC §5, §4.1), D_te for every other role
        role="retrained" if sp["f1_negatives"] == "forget" else "unlearned",
        train_acts=train_acts,
        test_acts=test_acts,
        train_probs=acts["train"]["output"] if with_asr else None,
        test_probs=acts["test"]["output"] if with_asr else None,
        train_labels=bundle.train_labels if with_asr else None,
        test_labels=bundle.test_labels if with_asr else None,
    )
    ev = evaluate_arrays(inputs, plan, settings)
    row = {**job.labels, **{k: ev.summary[k] for k in _POINT_COLUMNS}}
    if not with_asr:
        p_tr, p_te = acts["train"]["output"], acts["test"]["output"]
        row["acc_r"] = accuracy_from_probs(p_tr[retain], bundle.train_labels[retain])
        row["acc_f"] = accuracy_from_probs(p_tr[forget], bundle.train_labels[forget])
        row["acc_te"] = accuracy_from_probs(p_te, bundle.test_labels)
    if job.labels.get("param") == "sigma":
        row["x"] = row["sigma"]
    tables: dict[str, list[dict[str, Any]]] = {"points": [row]}
    arrays: dict[str, np.ndarray] = {}
    if sp["histogram"]:
        sets = {
            "S_IT": ev.arrays["it_h"],
            "S_OOT": ev.arrays["oot_h"],
            "S_target": ev.arrays["targets_h"][0],
        }
        keep = ("plan", "variant", "seed", "model", "role")
        tables["h_values"] = [
            {**{k: job.labels[k] for k in keep}, "set": name, "split": i, "h": float(h)}
            for name, values in sets.items()
            for i, h in enumerate(values)
        ]
        arrays = {f"{job.key}/{name}": np.asarray(values) for name, values in sets.items()}
    return JobResult(tables=tables, arrays=arrays)


def _run_toy(job: Job, ctx: JobContext) -> JobResult:
    """App. A.4: H of same-batch vs cross-batch subsets over training steps (fixed batches)."""
    import torch
    from scipy import stats
    from torch import nn

    from sde_core.hsic import kernel_spread, resolve_sigma, split_half_hsic_batch

    sp = job.spec
    seed, n, dim, bs = sp["seed"], sp["n_points"], sp["dim"], sp["batch_size"]
    rng = np.random.default_rng([seed, 0xA4])
    x = rng.standard_normal((n, dim))
    w = rng.standard_normal(dim)
    y = (x @ w / math.sqrt(dim) + sp["noise"] * rng.standard_normal(n) > 0).astype(np.int64)
    perm = rng.permutation(n)
    batches = [perm[i : i + bs] for i in range(0, n, bs)]
    full = [b for b in batches if len(b) == bs]
    same = np.stack([full[i] for i in rng.choice(len(full), sp["n_subsets"], replace=False)])
    cross = np.stack(
        [
            np.array([full[b][rng.integers(bs)] for b in rng.choice(len(full), bs, replace=False)])
            for _ in range(sp["n_subsets"])
        ]
    )
    subsets = np.concatenate([same, cross])

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(dim, sp["hidden"]), nn.ReLU(), nn.Linear(sp["hidden"], 2))
    opt = (
        torch.optim.Adam(model.parameters(), lr=sp["lr"])
        if sp["optimizer"] == "adam"
        else torch.optim.SGD(model.parameters(), lr=sp["lr"], momentum=0.9)
    )
    xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y)
    order_gen = np.random.default_rng([seed, 0xB7])
    steps_rows: list[dict[str, Any]] = []
    subset_rows: list[dict[str, Any]] = []
    keep = {k: job.labels[k] for k in ("plan", "variant")}

    def layer_acts(layer: str) -> np.ndarray:
        with torch.no_grad():
            hidden = model[1](model[0](xt))
            logits = model[2](hidden)
        out = {"hidden": hidden, "logits": logits, "output": torch.softmax(logits, 1)}[layer]
        return out.double().numpy()

    def measure(step: int, epoch: int, loss: float) -> None:
        with torch.no_grad():
            acc = float((model(xt).argmax(1) == yt).float().mean()) * 100
        for layer in sp["layers"]:
            a = layer_acts(layer)
            sigma = resolve_sigma(_resolve_sigma_entry(sp["sigma"], a.shape[1]), a[subsets.ravel()])
            h = split_half_hsic_batch(a, subsets, n_splits=sp["splits"], sigma=sigma, seed=seed)
            spread = kernel_spread(a, subsets, sigma)
            scores = h.mean(axis=1)
            k = sp["n_subsets"]
            for i, (score, spr) in enumerate(zip(scores, spread, strict=True)):
                subset_rows.append(
                    {
                        **keep,
                        "seed": seed,
                        "layer": layer,
                        "step": step,
                        "kind": "same" if i < k else "cross",
                        "subset": i % k,
                        "score": float(score),
                        "spread": float(spr),
                    }
                )
            p_sub = stats.mannwhitneyu(scores[:k], scores[k:], alternative="greater").pvalue
            p_split = stats.mannwhitneyu(h[:k].ravel(), h[k:].ravel(), alternative="greater").pvalue
            steps_rows.append(
                {
                    **keep,
                    "seed": seed,
                    "layer": layer,
                    "step": step,
                    "epoch": epoch,
                    "same_mean": float(scores[:k].mean()),
                    "cross_mean": float(scores[k:].mean()),
                    "same_sd": float(scores[:k].std(ddof=1)),
                    "cross_sd": float(scores[k:].std(ddof=1)),
                    "p_subset": float(p_sub),
                    "p_split": float(p_split),
                    "train_acc": acc,
                    "loss": loss,
                    "sigma": float(sigma),
                }
            )

    wanted = set(sp["eval_steps"])
    step, loss = 0, float("nan")
    if 0 in wanted:
        measure(0, 0, loss)
    for epoch in range(1, sp["epochs"] + 1):
        model.train()
        for b in order_gen.permutation(len(batches)):
            idx = torch.as_tensor(batches[b])
            opt.zero_grad()
            out = nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            out.backward()
            opt.step()
            step += 1
            loss = float(out.detach())
            if step in wanted:
                model.eval()
                measure(step, epoch, loss)
                model.train()
    return JobResult(tables={"toy_steps": steps_rows, "toy_subsets": subset_rows})


def run_job(job: Job, ctx: JobContext, deps: Mapping[str, Job]) -> JobResult:
    """Execute one job. A pure function of the job, the artefacts of its dependencies (found
    from their specs under ``ctx.work``) and the context; it writes only its own artefact folder
    and the shared activation cache, never the results store.

    Raises:
        PlanError: a dependency's artefact is missing. Other :class:`~sde_core.errors.SDEError` s
            from the library (data, training, settings) pass through.
    """
    if job.kind == "train":
        return _run_train(job, ctx)
    if job.kind == "toy":
        return _run_toy(job, ctx)
    (source,) = (deps[k] for k in job.deps)
    if job.kind == "unlearn":
        return _run_unlearn(job, ctx, source)
    if job.kind == "evaluate":
        return _run_evaluate(job, ctx, source)
    raise PlanError(f"job {job.key}: unknown kind {job.kind!r}")


# ============================================================================================
# Driver
# ============================================================================================


@dataclass
class PlanRunReport:
    """Outcome of :func:`run_plan`.

    Attributes:
        variant: the resolved variant. run_id: the store run. store_path: the store file.
        jobs: number of jobs. ran: keys of the jobs executed now. skipped: keys read from the
            store. seconds: wall time of this call. data_sizes: ``{"train": N, "test": N}``.
    """

    variant: PlanVariant
    run_id: int
    store_path: Path
    jobs: int
    ran: list[str]
    skipped: list[str]
    seconds: float
    data_sizes: dict[str, int]


def _check_sizes(v: PlanVariant, n_train: int, n_test: int) -> None:
    """Every subset must fit in D_f, D_r and D_te (the fix: smaller n or a larger R)."""
    p = v.params
    if isinstance(p, ToyParams):
        return
    ratios = p.forget_ratios if isinstance(p, RetrainedParams) else (p.forget_ratio,)
    sizes = p.subset_sizes if isinstance(p, RetrainedParams) else (p.subset_size,)
    field_name = "subset_sizes" if isinstance(p, RetrainedParams) else "subset_size"
    for ratio in ratios:
        n_f = max(1, round(ratio * n_train))
        pools = {"D_f": n_f, "D_r": n_train - n_f, "D_te": n_test}
        limit = min(pools.values())
        too_big = [n for n in sizes if n > limit]
        if too_big:
            raise _fail(
                f"{v.path.name} [variant {v.variant}] params.{field_name}",
                f"n = {too_big[0]} exceeds a pool at R = {ratio:g} ({pools}); use n ≤ {limit} "
                "(record the reduction in the variant's notes) or a larger forget ratio",
            )


def check_layers(v: PlanVariant) -> None:
    """Every layer of the plan resolves on the architecture (checked before any training)."""
    from sde_core.activations import resolve_layer
    from sde_core.models import build_model

    p = v.params
    if v.setup is None or isinstance(p, ToyParams):
        return
    layers = p.layers if isinstance(p, (RetrainedParams, MethodsParams)) else (p.layer,)
    model = build_model(v.setup.arch, **v.setup.arch_kwargs)
    for layer in layers:
        try:
            resolve_layer(model, layer)
        except SDEError as exc:
            raise _fail(f"{v.path.name} [variant {v.variant}] params.layers", str(exc)) from None


def preflight(v: PlanVariant, work: Path) -> dict[str, int]:
    """Checks that need the data or the model: layers resolve, subsets fit their pools.

    Returns:
        ``{"train": |D_tr|, "test": |D_te|}`` (empty for the toy, which makes its own data).

    Raises:
        PlanError: a layer does not exist or a subset size exceeds a pool.
        DataError: the dataset is missing (the message says which files to place where).
    """
    check_layers(v)
    if v.setup is None:
        return {}
    bundle = _bundle(v.setup.dataset, work)
    _check_sizes(v, len(bundle.train), len(bundle.test))
    return {"train": len(bundle.train), "test": len(bundle.test)}


def execute_plan_job(
    job: Job,
    ctx: JobContext,
    dep_jobs: Mapping[str, Job],
    threads: int = 1,
    deps: Mapping[str, Any] | None = None,
) -> JobResult:
    """Engine entry point of one plan job: :func:`run_job` on the dependency *specs*.

    Dependencies hand over content-addressed artefacts on the shared work folder, not their
    results, so the engine's ``deps`` (the dependencies' results) only orders the jobs. The job
    uses exactly ``threads`` torch and BLAS threads (its CPU request), wherever it runs, so a
    local and a Ray run produce bit-identical rows.
    """
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            return run_job(job, ctx, dep_jobs)
    finally:
        torch.set_num_threads(before)


#: Default resource request per job kind (CPU cores, GPUs when the device is CUDA).
DEFAULT_RESOURCES: dict[str, dict[str, float]] = {
    "train": {"cpus": 1.0, "gpus": 1.0},
    "unlearn": {"cpus": 1.0, "gpus": 1.0},
    "evaluate": {"cpus": 1.0, "gpus": 0.0},
    "toy": {"cpus": 1.0, "gpus": 0.0},
}


def job_resources(v: PlanVariant, kind: str, device: str) -> Resources:
    """The scheduler request of a job kind: the plan's ``[resources.<kind>]`` table (keys
    ``cpus``, ``gpus``, ``memory_mb``) over :data:`DEFAULT_RESOURCES`; no GPU on a CPU device."""
    table = {**DEFAULT_RESOURCES.get(kind, {}), **v.resources.get(kind, {})}
    gpus = table.get("gpus", 0.0) if device.startswith("cuda") else 0.0
    return Resources(
        cpus=table.get("cpus", 1.0), gpus=gpus, memory_mb=int(table.get("memory_mb", 0))
    )


def run_plan(
    v: PlanVariant,
    work: str | Path,
    store: Any,
    *,
    device: str | None = None,
    progress: bool = True,
    engine: Engine | None = None,
) -> PlanRunReport:
    """Run (or resume) every job of a variant on an engine; only this driver writes the store.

    Args:
        v: the resolved variant (:meth:`Plan.variant`).
        work: work folder for artefacts, generated data and the activation cache (storage every
            worker can read and write when the engine is a cluster).
        store: an open :class:`~sde_core.store.ResultsStore`.
        device: overrides the variant's device (``"cpu"``, ``"cuda"``, ``"auto"``).
        progress: draw a tqdm bar with the job counts on stderr.
        engine: where jobs run (default :class:`~sde_core.engine.LocalEngine`; a
            :class:`~sde_core.engine.RayEngine` gives identical rows).

    Raises:
        PlanError, DataError, TrainingError, SettingsError, EngineError: bad plan, data,
            settings, or a job that failed for good (finished jobs stay in the store).
    """
    from tqdm import tqdm

    from sde_core.evaluate import ALGORITHM_VERSION
    from sde_core.training import resolve_device

    t0 = time.perf_counter()
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    dev = device or v.device
    dev = str(resolve_device(dev)) if dev == "auto" else dev
    sizes = preflight(v, work)
    fingerprint = _bundle(v.setup.dataset, work).fingerprint if v.setup else None
    settings = {
        "plan": v.name,
        "experiment": v.experiment,
        "variant": v.variant,
        "config": v.config,
        "data": fingerprint,
        "algorithm": ALGORITHM_VERSION,
    }
    key = {"plan": v.plan_hash(), "data": fingerprint, "algorithm": ALGORITHM_VERSION}
    run = store.open_run(
        f"plan:{stable_hash(key)}",
        settings,
        label=f"plan {v.name} [{v.variant}]",
    )
    finished = store.finished_units(run.id)
    jobs = build_jobs(v)
    by_key = {j.key: j for j in jobs}
    ctx = JobContext(work=work, device=dev)
    # A stored job counts as done unless a later job needs its artefact and this work folder
    # lacks it (e.g. another --out): then it runs again (its store unit is not rewritten).
    done = {
        k: None
        for k in finished
        if k in by_key
        and not (by_key[k].kind in ("train", "unlearn") and _manifest(by_key[k], work) is None)
    }
    skipped = sorted(set(done))
    ran: list[str] = []
    engine_jobs = [
        EngineJob(
            key=j.key,
            fn=execute_plan_job,
            kwargs={
                "job": j,
                "ctx": ctx,
                "dep_jobs": {d: by_key[d] for d in j.deps},
                "threads": max(1, int(job_resources(v, j.kind, dev).cpus)),
            },
            deps=j.deps,
            resources=job_resources(v, j.kind, dev),
            label=f"{j.kind} {j.key}",
        )
        for j in jobs
    ]
    bar = tqdm(total=len(jobs) - len(done), desc=f"{v.name} [{v.variant}]", unit="job",
               disable=not progress)  # fmt: skip

    def on_result(job: EngineJob, result: JobResult) -> None:
        if store.put_unit(run.id, job.key, result.tables, result.arrays):
            ran.append(job.key)
        bar.set_postfix_str(job.key[-40:], refresh=False)
        bar.update(1)

    try:
        (engine or LocalEngine()).run(engine_jobs, done=done, on_result=on_result)
    finally:
        bar.close()
    store.mark_complete(run.id)
    return PlanRunReport(
        variant=v,
        run_id=run.id,
        store_path=Path(store.path),
        jobs=len(jobs),
        ran=ran,
        skipped=skipped,
        seconds=time.perf_counter() - t0,
        data_sizes=sizes,
    )
