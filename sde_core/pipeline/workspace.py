"""Workspaces: a folder with a ``workspace.toml`` naming the data, the forget set and the models.

Layout of ``workspace.toml`` (paths are relative to the workspace folder unless absolute)::

    version = 1
    name = "demo"
    forget_indices = "forget.npy"          # .npy, .txt or .json indices into the training split

    [dataset]                              # the fields of sde_core.inputs.data.DatasetSpec
    kind = "fashion-mnist"
    root = "data"
    train_size = 6000
    [dataset.options]

    [defaults]                             # optional evaluation defaults (CLI flags override)
    layer = "output"
    sigma = "sqrt_dim"
    subset_size = 400

    [[models]]
    name = "original"
    role = "original"                      # original | retrained | unlearned | random
    method = "train"
    arch = "fmnist_cnn"
    checkpoint = "models/original/ckpt_100.safetensors"
    sha256 = "..."                         # of the checkpoint; a mismatch is a warning
    seed = 0
    seconds = 91.2
    init_checkpoint = "models/original/init.safetensors"
    checkpoints = [{ fraction = 0.1, path = "models/original/ckpt_010.safetensors" }]
    [models.arch_kwargs]
    [models.hyperparameters]               # the training recipe or the method's parameters

:func:`load_workspace` parses and type-checks the file (raising :class:`WorkspaceError`),
:func:`validate_workspace` lists every semantic problem (:class:`Problem`), :func:`write_workspace`
writes atomically and :func:`workspace_hash` gives a content-based cache key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from sde_core.common.fsio import atomic_write_text
from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.errors import SDEError, WorkspaceError
from sde_core.pipeline.settings import EvalSettings

__all__ = [
    "ROLES",
    "SIGMA_RULES",
    "WORKSPACE_FILE",
    "CheckpointRef",
    "EvalDefaults",
    "ModelEntry",
    "Problem",
    "Workspace",
    "check_workspace",
    "init_workspace",
    "load_workspace",
    "rehash_models",
    "relative_to_workspace",
    "validate_workspace",
    "workspace_hash",
    "write_workspace",
]

WORKSPACE_FILE = "workspace.toml"
ROLES = ("original", "retrained", "unlearned", "random")
SIGMA_RULES = ("sqrt_dim", "median")
_VERSION = 1
_DATASET_PATH_KEYS = ("root", "train_indices", "test_indices")


@dataclass(frozen=True)
class CheckpointRef:
    """A checkpoint at ``fraction`` (in (0, 1]) of the original's training, ``path`` relative."""

    fraction: float
    path: str


@dataclass
class ModelEntry:
    """One ``[[models]]`` entry.

    Attributes:
        name: unique name (dictionary key in results).
        role: one of :data:`ROLES`.
        arch: architecture name known to :func:`sde_core.inputs.models.get_arch`.
        checkpoint: checkpoint path (relative to the workspace folder).
        method: how it was produced (``"train"``, ``"init"``, or an unlearning method name).
        arch_kwargs: builder keyword arguments of the architecture.
        hyperparameters: the training recipe or the unlearning method's parameters.
        seed: seed used to produce the model.
        seconds: wall-clock time taken to produce it, in seconds.
        sha256: SHA-256 of the checkpoint file when it was recorded.
        init_checkpoint: the initial weights θ_0 of a trained model.
        checkpoints: intermediate checkpoints at fractions of training.
    """

    name: str
    role: str
    arch: str
    checkpoint: str
    method: str = ""
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    seconds: float | None = None
    sha256: str | None = None
    init_checkpoint: str | None = None
    checkpoints: list[CheckpointRef] = field(default_factory=list)


#: The evaluation engine's defaults: the single source of the workspace defaults below.
_ENGINE = EvalSettings()


@dataclass
class EvalDefaults:
    """Evaluation defaults of a workspace (method defaults; CLI flags and widgets override).

    Attributes:
        layer: layer name or alias (``"output"``, ``"logits"``, ``"penultimate"``, a module).
        sigma: ``"sqrt_dim"``, ``"median"`` or a positive bandwidth.
        subset_size: target/reference subset size n (>= 4).
        targets: number of target subsets T (>= 2).
        splits: number of random splits K (>= 2).
        seed: seed of the evaluation.
        bins: histogram bins of the JSD decision (>= 2).
        panel_size: reference subsets per side R of the calibrated test (>= 3, and large
            enough that 1/(R+1) < the engine's calibrated alpha).
        alpha: significance level of the reference check, in (0, 1).
        alpha_calibrated: level of the calibrated verdict, in (0, 1).
        estimator: ``"biased"`` (paper) or ``"unbiased"`` HSIC.
        null_pairs: pairs of the null-calibration diagnostic (>= 1).
        baseline_targets: controlled subsets scored by the MMD/W2 baselines (0 = off).
    """

    layer: str = _ENGINE.layer
    sigma: str | float = _ENGINE.sigma
    subset_size: int = _ENGINE.subset_size
    targets: int = _ENGINE.targets
    splits: int = _ENGINE.splits
    seed: int = _ENGINE.seed
    bins: int = _ENGINE.bins
    panel_size: int = _ENGINE.panel_size
    alpha: float = _ENGINE.alpha
    alpha_calibrated: float = _ENGINE.alpha_calibrated
    estimator: str = _ENGINE.estimator
    null_pairs: int = _ENGINE.null_pairs
    baseline_targets: int = _ENGINE.baseline_targets


@dataclass(frozen=True)
class Problem:
    """A validation finding: ``field`` (e.g. ``"models[2].checkpoint"``), message, severity."""

    field: str
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass
class Workspace:
    """A loaded workspace.

    Attributes:
        root: the workspace folder (paths in the file are relative to it).
        dataset: the ``[dataset]`` table (fields of :class:`sde_core.inputs.data.DatasetSpec`).
        forget_indices: path of the forget index file.
        models: the ``[[models]]`` entries, in file order.
        defaults: evaluation defaults.
        name, description: free text.
    """

    root: Path
    dataset: dict[str, Any]
    forget_indices: str
    models: list[ModelEntry] = field(default_factory=list)
    defaults: EvalDefaults = field(default_factory=EvalDefaults)
    name: str = ""
    description: str = ""

    def path(self, relative: str | Path) -> Path:
        """Absolute path of a path written in the file."""
        p = Path(relative)
        return p if p.is_absolute() else self.root / p

    def model(self, name: str) -> ModelEntry:
        """The entry called ``name``; raises :class:`WorkspaceError` listing the names."""
        for entry in self.models:
            if entry.name == name:
                return entry
        raise WorkspaceError(
            f"workspace has no model {name!r}; models: {[m.name for m in self.models]}"
        )

    def original(self) -> ModelEntry:
        """The entry with role ``original``; raises :class:`WorkspaceError` when there is none."""
        found = [m for m in self.models if m.role == "original"]
        if not found:
            raise WorkspaceError(
                "workspace has no model with role 'original': train one with "
                "`python -m sde_core train WORKSPACE --name original --arch ...`"
            )
        return found[0]

    def dataset_spec(self) -> Any:
        """The :class:`sde_core.inputs.data.DatasetSpec` of ``[dataset]`` with paths resolved."""
        from sde_core.inputs.data import DatasetSpec

        return DatasetSpec.from_dict(self.dataset, base_dir=self.root)

    def add_model(self, entry: ModelEntry, *, replace: bool = False) -> None:
        """Append ``entry`` (or replace the entry of the same name when ``replace``)."""
        names = [m.name for m in self.models]
        if entry.name in names:
            if not replace:
                raise WorkspaceError(
                    f"a model named {entry.name!r} already exists: "
                    "choose another name or replace it"
                )
            self.models[names.index(entry.name)] = entry
        else:
            self.models.append(entry)


# ----------------------------------------------------------------------------- parsing


def _type_name(value: object) -> str:
    return type(value).__name__


def _expect(where: str, value: object, types: tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and bool not in types:
        raise WorkspaceError(f"{where}: expected {what}, got a boolean")
    if not isinstance(value, types):
        raise WorkspaceError(f"{where}: expected {what}, got {_type_name(value)} {value!r}")
    return value


def _check_keys(where: str, table: Mapping[str, Any], cls: type, required: tuple[str, ...]) -> None:
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise WorkspaceError(f"{where}: unknown key(s) {unknown}; allowed keys: {sorted(allowed)}")
    missing = [k for k in required if k not in table]
    if missing:
        raise WorkspaceError(f"{where}: missing required key(s) {missing}")


def _parse_model(i: int, table: object) -> ModelEntry:
    where = f"models[{i}]"
    _expect(where, table, (dict,), "a table")
    assert isinstance(table, dict)
    _check_keys(where, table, ModelEntry, ("name", "role", "arch", "checkpoint"))
    values = dict(table)
    for key in ("name", "role", "arch", "checkpoint", "method"):
        if key in values:
            _expect(f"{where}.{key}", values[key], (str,), "a string")
    for key in ("arch_kwargs", "hyperparameters"):
        if key in values:
            _expect(f"{where}.{key}", values[key], (dict,), "a table")
    if "seed" in values:
        _expect(f"{where}.seed", values["seed"], (int,), "an integer")
    if "seconds" in values:
        values["seconds"] = float(
            _expect(f"{where}.seconds", values["seconds"], (int, float), "a number")
        )
    for key in ("sha256", "init_checkpoint"):
        if key in values:
            _expect(f"{where}.{key}", values[key], (str,), "a string")
    refs = []
    for j, ref in enumerate(
        _expect(
            f"{where}.checkpoints", values.get("checkpoints", []), (list,), "an array of tables"
        )
    ):
        rw = f"{where}.checkpoints[{j}]"
        _expect(rw, ref, (dict,), "a table with fraction and path")
        _check_keys(rw, ref, CheckpointRef, ("fraction", "path"))
        frac = _expect(f"{rw}.fraction", ref["fraction"], (int, float), "a number in (0, 1]")
        refs.append(
            CheckpointRef(float(frac), _expect(f"{rw}.path", ref["path"], (str,), "a string"))
        )
    values["checkpoints"] = refs
    return ModelEntry(**values)


def _parse_defaults(table: object) -> EvalDefaults:
    _expect("defaults", table, (dict,), "a table")
    assert isinstance(table, dict)
    _check_keys("defaults", table, EvalDefaults, ())
    kinds = {
        "layer": ((str,), "a string"),
        "sigma": ((str, int, float), "'sqrt_dim', 'median' or a positive number"),
        "alpha": ((int, float), "a number"),
        "alpha_calibrated": ((int, float), "a number"),
        "estimator": ((str,), "'biased' or 'unbiased'"),
    }
    values = {}
    for key, value in table.items():
        types, what = kinds.get(key, ((int,), "an integer"))
        values[key] = _expect(f"defaults.{key}", value, types, what)
    if isinstance(values.get("sigma"), int):
        values["sigma"] = float(values["sigma"])
    for key in ("alpha", "alpha_calibrated"):
        if key in values:
            values[key] = float(values[key])
    return EvalDefaults(**values)


def _toml_file(path: str | Path) -> Path:
    p = Path(path)
    return p / WORKSPACE_FILE if p.is_dir() or p.suffix != ".toml" else p


def load_workspace(path: str | Path, *, validate: bool = True) -> Workspace:
    """Read a workspace folder (or its ``workspace.toml``).

    Args:
        path: the folder or the ``.toml`` file.
        validate: also run :func:`check_workspace` (raise on the first semantic errors).

    Raises:
        WorkspaceError: missing/unreadable file, TOML syntax error, unknown or mistyped keys, and
            (with ``validate``) every error :func:`validate_workspace` finds.
    """
    file = _toml_file(path)
    if not file.is_file():
        raise WorkspaceError(
            f"{file} does not exist: create a workspace with `python -m sde_core workspace init`"
        )
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise WorkspaceError(f"{file} is not valid TOML ({exc}): fix the syntax") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkspaceError(f"cannot read {file} ({exc})") from exc
    allowed = {"version", "name", "description", "dataset", "forget_indices", "models", "defaults"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise WorkspaceError(
            f"{file}: unknown top-level key(s) {unknown}; allowed: {sorted(allowed)}"
        )
    version = raw.get("version", _VERSION)
    if version != _VERSION:
        raise WorkspaceError(
            f"{file}: version {version!r} is not supported (this library reads {_VERSION})"
        )
    if "dataset" not in raw or "forget_indices" not in raw:
        raise WorkspaceError(f"{file}: needs a [dataset] table and a forget_indices path")
    models = _expect("models", raw.get("models", []), (list,), "an array of [[models]] tables")
    ws = Workspace(
        root=file.parent.resolve(),
        dataset=dict(_expect("dataset", raw["dataset"], (dict,), "a table")),
        forget_indices=_expect("forget_indices", raw["forget_indices"], (str,), "a path string"),
        models=[_parse_model(i, m) for i, m in enumerate(models)],
        defaults=_parse_defaults(raw.get("defaults", {})),
        name=_expect("name", raw.get("name", ""), (str,), "a string"),
        description=_expect("description", raw.get("description", ""), (str,), "a string"),
    )
    if validate:
        check_workspace(ws)
    return ws


# ----------------------------------------------------------------------------- validation


def _defaults_problems(d: EvalDefaults) -> list[Problem]:
    """Per-field checks, then the evaluation engine's own (cross-field) validation."""
    out = []

    def bad(key: str, message: str) -> None:
        out.append(Problem(f"defaults.{key}", message))

    if not isinstance(d.layer, str) or not d.layer:
        bad("layer", "must be a non-empty layer name or alias such as 'output'")
    if isinstance(d.sigma, str):
        if d.sigma not in SIGMA_RULES:
            bad("sigma", f"{d.sigma!r} is not a rule; use {list(SIGMA_RULES)} or a positive number")
    elif not (isinstance(d.sigma, (int, float)) and math.isfinite(d.sigma) and d.sigma > 0):
        bad("sigma", f"{d.sigma!r} must be positive")
    for key, minimum in (
        ("subset_size", 4),
        ("targets", 2),
        ("splits", 2),
        ("bins", 2),
        ("panel_size", 3),
        ("seed", 0),
        ("null_pairs", 1),
        ("baseline_targets", 0),
    ):
        value = getattr(d, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            bad(key, f"{value!r} must be an integer >= {minimum}")
    for key, example in (("alpha", 0.01), ("alpha_calibrated", 0.05)):
        value = getattr(d, key)
        if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
            bad(key, f"{value!r} must be in (0, 1), e.g. {example}")
    if d.estimator not in ("biased", "unbiased"):
        bad("estimator", f"{d.estimator!r} must be 'biased' or 'unbiased'")
    if not out:
        try:
            EvalSettings.from_mapping(dataclasses.asdict(d))
        except SDEError as exc:
            out.append(Problem("defaults", str(exc)))
    return out


def _dataset_problems(ws: Workspace, check_data: bool) -> tuple[list[Problem], int | None]:
    """Problems of ``[dataset]`` and the training-set size when known."""
    from sde_core.inputs.data import load_dataset

    try:
        spec = ws.dataset_spec()
    except (SDEError, TypeError) as exc:
        return [Problem("dataset", str(exc))], None
    generated = spec.kind == "mnist1d"  # its root is a cache that is created on first load
    if spec.root is not None and not generated and not Path(spec.root).exists():
        return [
            Problem(
                "dataset.root", f"{spec.root} does not exist: fix the path or copy the data there"
            )
        ], None
    if not check_data:
        return [], spec.train_size
    try:
        bundle = load_dataset(spec)
    except SDEError as exc:
        return [Problem("dataset", str(exc))], None
    return [], len(bundle.train)


def _file_problem(where: str, ws: Workspace, relative: str) -> Problem | None:
    if not relative:
        return Problem(where, "is empty: give a path relative to the workspace folder")
    if not ws.path(relative).is_file():
        return Problem(
            where, f"{ws.path(relative)} does not exist: fix the path or re-create the file"
        )
    return None


def _model_problems(ws: Workspace) -> list[Problem]:
    from sde_core.inputs.models import get_arch

    out: list[Problem] = []
    seen: set[str] = set()
    originals = [m.name for m in ws.models if m.role == "original"]
    if len(originals) > 1:
        out.append(
            Problem(
                "models", f"{len(originals)} models have role 'original' ({originals}); keep one"
            )
        )
    for i, m in enumerate(ws.models):
        where = f"models[{i}]"
        if not m.name.strip():
            out.append(Problem(f"{where}.name", "is empty: give every model a unique name"))
        elif m.name in seen:
            out.append(Problem(f"{where}.name", f"{m.name!r} is used twice: names must be unique"))
        seen.add(m.name)
        if m.role not in ROLES:
            out.append(
                Problem(f"{where}.role", f"{m.role!r} is not a role; use one of {list(ROLES)}")
            )
        try:
            get_arch(m.arch)
        except SDEError as exc:
            out.append(Problem(f"{where}.arch", str(exc)))
        missing = _file_problem(f"{where}.checkpoint", ws, m.checkpoint)
        if missing is not None:
            out.append(missing)
        elif m.sha256 is not None and file_sha256(ws.path(m.checkpoint)) != m.sha256:
            out.append(
                Problem(
                    f"{where}.sha256",
                    f"{m.checkpoint} changed since it was recorded: cached results are stale; "
                    "refresh the hash with `python -m sde_core workspace validate --rehash`",
                    "warning",
                )
            )
        if m.init_checkpoint is not None:
            problem = _file_problem(f"{where}.init_checkpoint", ws, m.init_checkpoint)
            out.extend([problem] if problem else [])
        for j, ref in enumerate(m.checkpoints):
            if not 0.0 < ref.fraction <= 1.0:
                out.append(
                    Problem(
                        f"{where}.checkpoints[{j}].fraction", f"{ref.fraction} is outside (0, 1]"
                    )
                )
            problem = _file_problem(f"{where}.checkpoints[{j}].path", ws, ref.path)
            out.extend([problem] if problem else [])
        if m.seconds is not None and not (math.isfinite(m.seconds) and m.seconds >= 0):
            out.append(Problem(f"{where}.seconds", f"{m.seconds} must be a non-negative time"))
    return out


def validate_workspace(ws: Workspace, *, check_data: bool = False) -> list[Problem]:
    """Every problem of ``ws``: errors (unusable) and warnings (e.g. a changed checkpoint hash).

    Checks: dataset table and root, the forget index file (integers, unique, in range when the
    training-set size is known), roles, at most one original, unique names, known architectures,
    that every checkpoint exists and matches its recorded hash, defaults' values. With
    ``check_data`` the dataset is loaded to know the training-set size.
    """
    from sde_core.inputs.data import load_index_file

    if not isinstance(ws, Workspace):
        raise WorkspaceError(f"validate_workspace needs a Workspace, got {_type_name(ws)}")
    problems, n_train = _dataset_problems(ws, check_data)
    missing = _file_problem("forget_indices", ws, ws.forget_indices)
    if missing is not None:
        problems.append(missing)
    else:
        try:
            load_index_file(ws.path(ws.forget_indices), n_train if n_train else 2**62)
        except SDEError as exc:
            problems.append(Problem("forget_indices", str(exc)))
    problems += _model_problems(ws)
    problems += _defaults_problems(ws.defaults)
    return problems


def check_workspace(ws: Workspace, *, check_data: bool = False) -> list[Problem]:
    """Raise :class:`WorkspaceError` naming every error of ``ws``; return the warnings."""
    problems = validate_workspace(ws, check_data=check_data)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise WorkspaceError(
            f"workspace {ws.root} has {len(errors)} problem(s): " + "; ".join(map(str, errors))
        )
    return problems


# ----------------------------------------------------------------------------- writing


def _drop_none(value: Any) -> Any:
    """TOML has no null: drop None values (recursively)."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_drop_none(v) for v in value]
    return value


def _to_toml(ws: Workspace) -> dict[str, Any]:
    doc: dict[str, Any] = {"version": _VERSION}
    if ws.name:
        doc["name"] = ws.name
    if ws.description:
        doc["description"] = ws.description
    doc["forget_indices"] = ws.forget_indices
    doc["dataset"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in ws.dataset.items()}
    doc["defaults"] = dataclasses.asdict(ws.defaults)
    models = []
    for m in ws.models:
        table = dataclasses.asdict(m)
        table["checkpoints"] = [dataclasses.asdict(c) for c in m.checkpoints]
        if not table["checkpoints"]:
            del table["checkpoints"]
        models.append(table)
    doc["models"] = models
    return _drop_none(doc)


def write_workspace(ws: Workspace, path: str | Path | None = None) -> Path:
    """Write ``ws`` as TOML to ``path`` (a folder or file; default ``ws.root``), atomically.

    Returns:
        The written ``workspace.toml`` path.
    """
    if not isinstance(ws, Workspace):
        raise WorkspaceError(f"write_workspace needs a Workspace, got {_type_name(ws)}")
    file = _toml_file(path if path is not None else ws.root)
    try:
        text = tomli_w.dumps(_to_toml(ws))
    except TypeError as exc:
        raise WorkspaceError(
            f"workspace holds a value TOML cannot store ({exc}): use strings, numbers, "
            "booleans, lists and tables only"
        ) from exc
    return atomic_write_text(file, text)


def rehash_models(ws: Workspace) -> list[str]:
    """Record the current SHA-256 of every existing checkpoint; return the names that changed."""
    changed = []
    for m in ws.models:
        if ws.path(m.checkpoint).is_file():
            digest = file_sha256(ws.path(m.checkpoint))
            if digest != m.sha256:
                m.sha256 = digest
                changed.append(m.name)
    return changed


def relative_to_workspace(ws: Workspace, path: str | Path) -> str:
    """``path`` relative to the workspace folder (POSIX form) when inside it, else absolute."""
    p = Path(path).resolve()
    try:
        return p.relative_to(ws.root).as_posix()
    except ValueError:
        return str(p)


def init_workspace(
    folder: str | Path,
    dataset: Mapping[str, Any],
    forget_indices: str,
    *,
    name: str = "",
    description: str = "",
    defaults: EvalDefaults | None = None,
    overwrite: bool = False,
) -> Workspace:
    """Create ``folder/workspace.toml`` with no models yet and return the workspace."""
    root = Path(folder)
    if (root / WORKSPACE_FILE).exists() and not overwrite:
        raise WorkspaceError(
            f"{root / WORKSPACE_FILE} already exists: pass overwrite to replace it"
        )
    root.mkdir(parents=True, exist_ok=True)
    ws = Workspace(
        root=root.resolve(),
        dataset=dict(dataset),
        forget_indices=forget_indices,
        defaults=defaults or EvalDefaults(),
        name=name,
        description=description,
    )
    write_workspace(ws)
    return ws


def workspace_hash(ws: Workspace, *, data_fingerprint: str | None = None) -> str:
    """Content hash of what determines evaluation results (a cache key; paths excluded).

    Covers the data (``data_fingerprint`` from :class:`sde_core.inputs.data.DatasetBundle` when
    given,
    else the ``[dataset]`` table without its path fields), the forget index file's bytes and, per
    model, name, role, architecture, kwargs and the checkpoint file's SHA-256.
    """
    if not isinstance(ws, Workspace):
        raise WorkspaceError(f"workspace_hash needs a Workspace, got {_type_name(ws)}")
    data = data_fingerprint or {k: v for k, v in ws.dataset.items() if k not in _DATASET_PATH_KEYS}
    for where, rel in [("forget_indices", ws.forget_indices)] + [
        (f"model {m.name!r} checkpoint", m.checkpoint) for m in ws.models
    ]:
        if not ws.path(rel).is_file():
            raise WorkspaceError(
                f"{where} {ws.path(rel)} does not exist: cannot hash the workspace"
            )
    return stable_hash(
        {
            "data": data,
            "forget": file_sha256(ws.path(ws.forget_indices)),
            "models": sorted(
                (
                    (
                        m.name,
                        m.role,
                        m.arch,
                        _drop_none(m.arch_kwargs),  # as written to TOML: no nulls
                        file_sha256(ws.path(m.checkpoint)),
                    )
                    for m in ws.models
                ),
                key=lambda row: row[0],
            ),
        }
    )
