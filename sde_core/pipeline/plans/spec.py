"""Plans and variants: reading a plan file, merging a variant and overrides, checking it."""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sde_core.common.hashing import stable_hash
from sde_core.common.validation import check_number
from sde_core.errors import PlanError, SDEError
from sde_core.pipeline.plans.params import (
    _PARAMS,
    HistogramParams,
    MethodsParams,
    Params,
    RetrainedParams,
    ToyParams,
    WorkspaceParams,
    _fail,
    _read_params,
)

#: Experiment kinds a plan may name.
EXPERIMENTS = ("retrained", "methods", "histograms", "toy", "workspace")

#: The plans shipped with the repository.
PLAN_DIR = Path(__file__).resolve().parent / "catalog"

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


#: Default resource request per job kind (CPU cores, GPUs when the device is CUDA).
DEFAULT_RESOURCES: dict[str, dict[str, float]] = {
    "train": {"cpus": 1.0, "gpus": 1.0},
    "unlearn": {"cpus": 1.0, "gpus": 1.0},
    "evaluate": {"cpus": 1.0, "gpus": 0.0},
    "toy": {"cpus": 1.0, "gpus": 0.0},
    "workspace": {"cpus": 1.0, "gpus": 0.0},
}


@dataclass(frozen=True)
class Setup:
    """Data, architecture and training recipe of the models of a variant.

    Attributes:
        dataset: a :class:`~sde_core.inputs.data.DatasetSpec` mapping (``root`` relative to the work
            folder unless absolute).
        arch, arch_kwargs: registry architecture and its keyword arguments.
        train: :class:`~sde_core.learning.training.TrainConfig` fields without ``seed`` and
        ``device``.
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
        out[kind] = {
            name: check_number(value, f"{where} resources.{kind}.{name}", ge=0, error=PlanError)
            for name, value in request.items()
        }
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
    if isinstance(params, ToyParams):
        extra = [k for k in ("dataset", "model", "train", "eval") if k in config]
        if extra:
            raise _fail(
                f"{where} {extra[0]}",
                "the toy experiment defines its data, model and training in params; remove it",
            )
        _check_toy(where, params)
    elif isinstance(params, WorkspaceParams):
        extra = [k for k in ("dataset", "model", "train") if k in config]
        if extra:
            raise _fail(f"{where} {extra[0]}", "a workspace plan's models and data are the "
                        "workspace's; remove it")  # fmt: skip
        bad = [p for p in params.poolings if p not in ("mean", "last")]
        if bad:
            raise _fail(f"{where} params.poolings", f"{bad[0]!r} is not 'mean' or 'last'")
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
    from sde_core.pipeline.settings import EvalSettings

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
    from sde_core.inputs.architectures import get_arch
    from sde_core.inputs.data import DatasetSpec
    from sde_core.learning.training import TrainConfig

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
    from sde_core.inputs.data import DATASET_KINDS

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
    from sde_core.learning.training import TrainConfig
    from sde_core.learning.unlearning import METHODS

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
    sweeps = _PARAMS[raw["experiment"]].SWEEPS
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
