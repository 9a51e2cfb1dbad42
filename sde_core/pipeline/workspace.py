"""Workspaces: a folder with a ``workspace.toml`` naming the data, the forget set and the models.

Layout of ``workspace.toml`` (paths are relative to the workspace folder unless absolute)::

    version = 1
    name = "demo"
    forget_indices = "forget.npy"          # .npy, .txt, .json or .pt indices (or a boolean mask)

    [dataset]                              # the fields of sde_core.inputs.data.DatasetSpec
    kind = "fashion-mnist"
    root = "data"
    train_size = 6000
    [dataset.options]

    [defaults]                             # optional: any field of EvalSettings (CLI flags and
    layer = "output"                       # dashboard widgets override them)
    sigma = "sqrt_dim"
    subset_size = 400

    [[models]]
    name = "original"                      # letters, digits, _ . + - (a key in results)
    role = "original"                      # original | retrained | unlearned | random
    method = "train"
    arch = "fmnist_cnn"                    # omitted: read from the checkpoint or inferred;
                                           # "precomputed": no checkpoint, see activations;
                                           # "hf": checkpoint is a Hugging Face model folder
    checkpoint = "models/original/ckpt_100.safetensors"
    sha256 = "..."                         # of the checkpoint; a mismatch is a warning
    trusted = true                         # optional: this file may be a full pickle / TorchScript
                                           # (runs only once trusted locally: workspace trust)
    activations = "acts/original.npz"      # optional: precomputed activations of this model
    seed = 0
    seconds = 91.2
    init_checkpoint = "models/original/init.safetensors"
    checkpoints = [{ fraction = 0.1, path = "models/original/ckpt_010.safetensors" }]
    [models.arch_kwargs]                   # builder kwargs, honoured wherever the model is built
    [models.hyperparameters]               # the training recipe or the method's parameters

**Path policy** (:mod:`sde_core.common.paths`): every path the file names is resolved (symlinks
followed) and must lie inside the workspace folder or an allowed root — the folders of
``$SDE_DATA_ROOTS`` and any ``roots`` passed to :func:`load_workspace`. :meth:`Workspace.path`
and :meth:`Workspace.dataset_spec` enforce it, :func:`validate_workspace` reports every
violation, so no entry point reads a file outside those folders.

:func:`load_workspace` parses and type-checks the file (raising :class:`WorkspaceError`),
:func:`validate_workspace` lists every semantic problem (:class:`Problem`), :func:`write_workspace`
writes atomically, :func:`commit_files` moves a staged set of files into place all at once and
:func:`workspace_hash` gives a content-based cache key. :func:`cache_path` spells the cache
locations under ``<workspace>/.sde-cache/``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from sde_core.common.fsio import atomic_write_text
from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.common.paths import (
    check_folder_in_roots,
    check_path_text,
    env_roots,
    resolve_in_roots,
)
from sde_core.common.staging import Staging
from sde_core.common.toml_limits import nesting_depth, read_toml
from sde_core.errors import CheckpointError, SDEError, SettingsError, WorkspaceError
from sde_core.families.registry import family_by_arch
from sde_core.pipeline.criterion import Criterion, criterion_from_table
from sde_core.pipeline.settings import EvalSettings, with_stated_design

__all__ = [
    "CACHE_FOLDER",
    "MAX_DESCRIPTION_CHARS",
    "MAX_MODELS",
    "MAX_TABLE_KEYS",
    "MAX_TOML_BYTES",
    "MAX_TOML_DEPTH",
    "MODEL_NAME_RULE",
    "PRECOMPUTED",
    "ROLES",
    "SQLITE_SIDE_FILES",
    "WORKSPACE_FILE",
    "CheckpointRef",
    "ModelEntry",
    "Problem",
    "Workspace",
    "cache_path",
    "check_model_name",
    "check_workspace",
    "commit_files",
    "defaults_from_table",
    "fresh_model_path",
    "init_workspace",
    "load_workspace",
    "rehash_models",
    "relative_to_workspace",
    "resolve_arch",
    "validate_workspace",
    "workspace_hash",
    "workspace_toml",
    "write_workspace",
]

WORKSPACE_FILE = "workspace.toml"
ROLES = ("original", "retrained", "unlearned", "random")
#: ``arch`` of a model known only by its precomputed activations (no checkpoint).
PRECOMPUTED = "precomputed"
#: Folder of every cache of a workspace (activations, results store, staging).
CACHE_FOLDER = ".sde-cache"
_CACHE_KINDS = {
    "activations": "activations",
    "results": "results.sqlite",
    "stages": "stages",
    "staging": "staging",
}
_VERSION = 1
#: Largest ``workspace.toml`` read, in bytes (a workspace of 1,000 models takes ~0.5 MB).
MAX_TOML_BYTES = 2**20
#: Deepest nesting read (dotted key parts plus open brackets; a workspace needs about 4).
MAX_TOML_DEPTH = 32
#: Most ``[[models]]`` entries in a workspace.
MAX_MODELS = 1000
#: Longest workspace description, in characters.
MAX_DESCRIPTION_CHARS = 20_000
#: Most keys of one model's ``hyperparameters`` or ``arch_kwargs`` table.
MAX_TABLE_KEYS = 256
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
#: What a model name may hold (it becomes a key in the results store and a file name).
MODEL_NAME_RULE = (
    "1-64 characters: letters, digits, '_', '.', '+', '-', starting with a letter or digit"
)
_ADD_HINT = (
    "add one with `python -m sde_core workspace add-model WORKSPACE --name NAME --checkpoint "
    "FILE` (or `train`), or on the dashboard's Workspace page"
)


#: Files SQLite keeps beside a database (write-ahead log, shared memory, rollback journal).
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def cache_path(ws_root: str | Path, kind: str, roots: Iterable[str | Path] | None = None) -> Path:
    """Where a workspace keeps a cache: ``activations`` (a folder), ``results`` (the results
    store, ``results.sqlite``), ``stages`` (the evaluation's stage cache, a folder) or
    ``staging`` (a folder for files not yet committed), all under ``<ws_root>/.sde-cache/``.

    The path is checked under the path policy whether it exists yet or not: with symlinks
    followed (a dangling link counts where it points; so does a ``.sde-cache`` that is itself
    a link) it must lie inside the workspace folder or an allowed root (``roots``, default
    ``$SDE_DATA_ROOTS``); for the results store so must its SQLite side files
    (:data:`SQLITE_SIDE_FILES`), so nothing — not even ``--repair`` — writes outside.

    Returns:
        The path below ``ws_root`` as spelled (not resolved).

    Raises:
        WorkspaceError: an unknown kind, or a cache that resolves outside the allowed folders.
    """
    if kind not in _CACHE_KINDS:
        raise WorkspaceError(f"unknown cache kind {kind!r}; use one of {sorted(_CACHE_KINDS)}")
    path = Path(ws_root) / CACHE_FOLDER / _CACHE_KINDS[kind]
    allowed = [Path(ws_root).resolve()]
    allowed += [Path(r).resolve() for r in roots] if roots is not None else env_roots()
    names = [path.name] + ([path.name + s for s in SQLITE_SIDE_FILES] if kind == "results" else [])
    for name in names:
        try:
            resolve_in_roots(path.with_name(name), allowed, what=f"the {kind} cache",
                             must_exist=False)  # fmt: skip
        except SDEError as exc:
            raise WorkspaceError(
                f"{exc}. The workspace's caches must stay inside its folder: remove the link "
                f"{path.parent if path.parent.is_symlink() else path.with_name(name)} (it is "
                "re-created empty)"
            ) from None
    return path


def check_model_name(name: object) -> str:
    """``name`` when it is a valid model name (:data:`MODEL_NAME_RULE`).

    Raises:
        WorkspaceError: naming the rule and a cleaned-up suggestion.
    """
    if isinstance(name, str) and _MODEL_NAME.fullmatch(name):
        return name
    text = name if isinstance(name, str) else repr(name)
    suggestion = re.sub(r"[^A-Za-z0-9_.+-]+", "_", text).strip("_.+-")[:64] or "model"
    raise WorkspaceError(
        f"model name {text[:40]!r} is not allowed: use {MODEL_NAME_RULE}, e.g. {suggestion!r}"
    )


@dataclass(frozen=True)
class CheckpointRef:
    """A checkpoint at ``fraction`` (in (0, 1]) of the original's training, ``path`` relative."""

    fraction: float
    path: str


@dataclass
class ModelEntry:
    """One ``[[models]]`` entry.

    Attributes:
        name: unique name (a key in results; :data:`MODEL_NAME_RULE`).
        role: one of :data:`ROLES`.
        arch: architecture name known to :func:`sde_core.inputs.models.get_arch`; ``""`` to
            read it from the checkpoint (or infer it); :data:`PRECOMPUTED` for a model known
            only by its ``activations`` file.
        checkpoint: checkpoint path (relative to the workspace folder); ``""`` for a
            precomputed model.
        method: how it was produced (``"train"``, ``"init"``, or an unlearning method name).
        arch_kwargs: builder keyword arguments of the architecture.
        hyperparameters: the training recipe or the unlearning method's parameters.
        seed: seed used to produce the model.
        seconds: wall-clock time taken to produce it, in seconds.
        sha256: SHA-256 of the checkpoint file when it was recorded.
        init_checkpoint: the initial weights θ_0 of a trained model.
        checkpoints: intermediate checkpoints at fractions of training.
        trusted: the user vouched for this model's files: full pickles and TorchScript load.
        activations: precomputed activations of this model (``.npz``/``.parquet``, see
            :mod:`sde_core.inputs.precomputed`); evaluations read them instead of extracting.
        arch_sha256: for ``arch = "file:PATH.py:CLASS"`` (the user's own class: code), the
            SHA-256 of that file when it was trusted; a file that no longer matches is refused
            until it is trusted again.
    """

    name: str
    role: str
    arch: str = ""
    checkpoint: str = ""
    method: str = ""
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    seconds: float | None = None
    sha256: str | None = None
    init_checkpoint: str | None = None
    checkpoints: list[CheckpointRef] = field(default_factory=list)
    trusted: bool = False
    activations: str | None = None
    arch_sha256: str | None = None

    @property
    def precomputed(self) -> bool:
        """Whether the model is known only by its activations file."""
        return self.arch == PRECOMPUTED

    @property
    def arch_file(self) -> str | None:
        """The Python file of a ``file:`` architecture (relative to the workspace), or None."""
        from sde_core.inputs.external_archs import is_file_arch, parse_file_arch

        if not is_file_arch(self.arch):
            return None
        try:
            return parse_file_arch(self.arch).path.as_posix()
        except SDEError:
            return None

    def files(self) -> dict[str, str]:
        """Every file the entry names, keyed by its field (``checkpoints[0].path``...)."""
        out = {"checkpoint": self.checkpoint} if self.checkpoint else {}
        if self.arch_file:
            out["arch"] = self.arch_file
        if self.activations:
            out["activations"] = self.activations
        if self.init_checkpoint:
            out["init_checkpoint"] = self.init_checkpoint
        for j, ref in enumerate(self.checkpoints):
            out[f"checkpoints[{j}].path"] = ref.path
        return out


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
        defaults: the evaluation defaults (one :class:`EvalSettings`).
        name, description: free text.
        criterion: when an audited model counts as forgotten (the ``[criterion]`` table;
            :class:`~sde_core.pipeline.criterion.Criterion`'s default when absent).
        roots: allowed folders besides ``root`` for the files the workspace names (default:
            ``$SDE_DATA_ROOTS``); not part of the file, not compared.
    """

    root: Path
    dataset: dict[str, Any]
    forget_indices: str
    models: list[ModelEntry] = field(default_factory=list)
    defaults: EvalSettings = field(default_factory=EvalSettings)
    name: str = ""
    description: str = ""
    criterion: Criterion = field(default_factory=Criterion)
    roots: tuple[Path, ...] = field(
        default_factory=lambda: tuple(env_roots()), compare=False, repr=False
    )

    def allowed_roots(self) -> list[Path]:
        """The workspace folder (resolved) followed by :attr:`roots`."""
        return [Path(self.root).resolve(), *self.roots]

    def path(
        self,
        relative: str | Path,
        *,
        what: str = "path",
        must_exist: bool = False,
        contents: bool = False,
    ) -> Path:
        """Absolute, resolved path of a path written in the file (or of a file to create).

        With ``contents``, a folder's every file and sub-folder is checked too
        (:func:`~sde_core.common.paths.check_folder_in_roots`): a model or tokenizer folder, or
        a ``save_to_disk`` dataset, whose loader opens the files inside by name.

        Raises:
            WorkspaceError: the path (or, with ``contents``, a file inside the folder) leaves
                the workspace folder and the allowed roots (symlinks count where they point),
                is malformed, or is missing when ``must_exist``.
        """
        try:
            roots = self.allowed_roots()
            resolved = resolve_in_roots(
                relative, roots, what=what, must_exist=must_exist, base=self.root
            )
            if contents and resolved.is_dir():
                check_folder_in_roots(resolved, roots, what=what)
            return resolved
        except SDEError as exc:
            raise WorkspaceError(str(exc)) from None

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
                "`python -m sde_core train WORKSPACE --name original --arch ...` or add one with "
                "`python -m sde_core workspace add-model WORKSPACE --name original --role "
                "original --checkpoint FILE`"
            )
        return found[0]

    def dataset_spec(self) -> Any:
        """The :class:`sde_core.inputs.data.DatasetSpec` of ``[dataset]``, every path resolved
        under the path policy.

        Raises:
            DataError: a malformed ``[dataset]`` table.
            WorkspaceError: a path outside the allowed folders.
        """
        from sde_core.inputs.data import DatasetSpec

        spec = DatasetSpec.from_dict(self.dataset)
        resolved = {  # a text dataset's folders (tokenizer, save_to_disk) are read by name
            key: self.path(
                value, what=f"dataset.{key}", contents=spec.kind == "text" or "tokenizer" in key
            )
            for key, value in spec.path_fields().items()
        }
        return spec.with_paths(resolved)

    def add_model(self, entry: ModelEntry, *, replace: bool = False) -> None:
        """Append ``entry`` (or replace the entry of the same name when ``replace``).

        Raises:
            WorkspaceError: an invalid name, or a taken one without ``replace``.
        """
        check_model_name(entry.name)
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


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _expect(where: str, value: object, types: tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and bool not in types:
        raise WorkspaceError(f"{where}: expected {what}, got a boolean")
    if not isinstance(value, types):
        raise WorkspaceError(f"{where}: expected {what}, got {_type_name(value)} {_shown(value)}")
    return value


def _check_keys(where: str, table: Mapping[str, Any], cls: type, required: tuple[str, ...]) -> None:
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in set(table) - allowed)
    if unknown:
        raise WorkspaceError(f"{where}: unknown key(s) {unknown}; allowed keys: {sorted(allowed)}")
    missing = [k for k in required if k not in table]
    if missing:
        raise WorkspaceError(f"{where}: missing required key(s) {missing}")


def _parse_model(i: int, table: object) -> ModelEntry:
    where = f"models[{i}]"
    _expect(where, table, (dict,), "a table")
    assert isinstance(table, dict)
    _check_keys(where, table, ModelEntry, ("name", "role"))
    values = dict(table)
    for key in ("name", "role", "arch", "checkpoint", "method", "activations"):
        if key in values:
            _expect(f"{where}.{key}", values[key], (str,), "a string")
    for key in ("arch_kwargs", "hyperparameters"):
        if key in values:
            _expect(f"{where}.{key}", values[key], (dict,), "a table")
    if "trusted" in values:
        _expect(f"{where}.trusted", values["trusted"], (bool,), "true or false")
    if "seed" in values:
        _expect(f"{where}.seed", values["seed"], (int,), "an integer")
    if "seconds" in values:
        values["seconds"] = float(
            _expect(f"{where}.seconds", values["seconds"], (int, float), "a number")
        )
    for key in ("sha256", "init_checkpoint", "arch_sha256"):
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


def _python_types(hint: Any) -> tuple[type, ...]:
    """The runtime types a settings field annotation admits (``str | float`` -> (str, float))."""
    args = typing.get_args(hint)
    if args:
        return tuple(t for a in args for t in _python_types(a))
    return (hint,) if isinstance(hint, type) else ()


def defaults_from_table(table: object) -> tuple[EvalSettings, list[Problem]]:
    """``[defaults]`` as :class:`EvalSettings`, with one :class:`Problem` per bad field.

    Fields are checked in :class:`EvalSettings` order, each against the fields accepted before
    it, so a cross-field rule (e.g. ``panel_size`` vs ``alpha_calibrated``) is reported on the
    later field. Integers are accepted where a float is expected.

    Returns:
        The settings built from the good fields, and the problems (empty when all are good).
    """
    if not isinstance(table, dict):
        return EvalSettings(), [Problem("defaults", f"expected a table, got {_type_name(table)}")]
    hints = typing.get_type_hints(EvalSettings)
    order = [f.name for f in dataclasses.fields(EvalSettings)]
    problems = [
        Problem(f"defaults.{key}", f"unknown setting; valid settings: {order}")
        for key in sorted(str(k) for k in table)
        if key not in order
    ]
    good: dict[str, Any] = {}
    for key in (k for k in order if k in table):
        value = table[key]
        types = _python_types(hints[key])
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            expected = " or ".join(t.__name__ for t in types)
            problems.append(
                Problem(
                    f"defaults.{key}",
                    f"expected {expected}, got {_type_name(value)} {_shown(value)}",
                )
            )
            continue
        try:
            EvalSettings(**with_stated_design({**good, key: value}))
        except SettingsError as exc:
            problems.append(Problem(f"defaults.{key}", str(exc)))
            continue
        good[key] = value
    return EvalSettings(**with_stated_design(good)), problems  # B alone: the fixed design


def _check_caps(file: Path, raw: Mapping[str, Any]) -> None:
    """Refuse a parsed ``workspace.toml`` above the caps (:data:`MAX_MODELS`,
    :data:`MAX_DESCRIPTION_CHARS`, :data:`MAX_TABLE_KEYS` per model table)."""
    text = raw.get("description", "")
    if isinstance(text, str) and len(text) > MAX_DESCRIPTION_CHARS:
        raise WorkspaceError(
            f"{file}: the description has {len(text)} characters; at most "
            f"{MAX_DESCRIPTION_CHARS} are kept: shorten it"
        )
    models = raw.get("models", [])
    if isinstance(models, list) and len(models) > MAX_MODELS:
        raise WorkspaceError(
            f"{file} has {len(models)} [[models]]; a workspace holds at most {MAX_MODELS}: "
            "split it into several workspaces"
        )
    for i, table in enumerate(models if isinstance(models, list) else []):
        for key in ("hyperparameters", "arch_kwargs"):
            value = table.get(key) if isinstance(table, dict) else None
            if isinstance(value, dict) and len(value) > MAX_TABLE_KEYS:
                raise WorkspaceError(
                    f"{file}: models[{i}].{key} has {len(value)} keys; at most "
                    f"{MAX_TABLE_KEYS} are read: keep the ones that describe the model"
                )


def _toml_file(path: str | Path) -> Path:
    p = Path(path)
    return p / WORKSPACE_FILE if p.is_dir() or p.suffix != ".toml" else p


def load_workspace(
    path: str | Path, *, validate: bool = True, roots: Iterable[str | Path] | None = None
) -> Workspace:
    """Read a workspace folder (or its ``workspace.toml``).

    Args:
        path: the folder or the ``.toml`` file.
        validate: also run :func:`check_workspace` (raise on the first semantic errors).
        roots: folders besides the workspace folder that its files may lie in (default:
            ``$SDE_DATA_ROOTS``).

    Raises:
        WorkspaceError: missing/unreadable file, TOML syntax error, unknown or mistyped keys
            (every bad ``[defaults]`` field is named), and (with ``validate``) every error
            :func:`validate_workspace` finds.
    """
    try:
        # absolute (not resolved: the root check below follows symlinks itself), so that a
        # relative path means the current directory's, not the workspace folder's
        file = _toml_file(check_path_text(path, "workspace path")).absolute()
    except SDEError as exc:
        raise WorkspaceError(str(exc)) from None
    extra = tuple(Path(r).resolve() for r in roots) if roots is not None else tuple(env_roots())
    try:
        present = file.is_file()
    except OSError as exc:  # e.g. a name the file system refuses
        raise WorkspaceError(f"cannot read {file} ({type(exc).__name__})") from None
    if not present:
        raise WorkspaceError(
            f"{file} does not exist: create a workspace with `python -m sde_core workspace init`"
        )
    folder = file.parent.resolve()
    try:
        resolve_in_roots(file, [folder, *extra], what="workspace.toml")
    except SDEError as exc:
        raise WorkspaceError(str(exc)) from None
    raw = read_toml(
        file, max_bytes=MAX_TOML_BYTES, max_depth=MAX_TOML_DEPTH, what=WORKSPACE_FILE,
        error=WorkspaceError,
    )  # fmt: skip
    _check_caps(file, raw)
    allowed = {
        "version", "name", "description", "dataset", "forget_indices", "models", "defaults",
        "criterion",
    }  # fmt: skip
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise WorkspaceError(
            f"{file}: unknown top-level key(s) {unknown}; allowed: {sorted(allowed)}"
        )
    version = raw.get("version", _VERSION)
    if isinstance(version, bool) or version != _VERSION:
        raise WorkspaceError(
            f"{file}: version {_shown(version)} is not supported (this library reads {_VERSION})"
        )
    if "dataset" not in raw or "forget_indices" not in raw:
        raise WorkspaceError(f"{file}: needs a [dataset] table and a forget_indices path")
    models = _expect("models", raw.get("models", []), (list,), "an array of [[models]] tables")
    defaults, problems = defaults_from_table(raw.get("defaults", {}))
    if problems:
        raise WorkspaceError(
            f"{file}: {len(problems)} problem(s) in [defaults]: " + "; ".join(map(str, problems))
        )
    ws = Workspace(
        root=folder,
        dataset=dict(_expect("dataset", raw["dataset"], (dict,), "a table")),
        forget_indices=_expect("forget_indices", raw["forget_indices"], (str,), "a path string"),
        models=[_parse_model(i, m) for i, m in enumerate(models)],
        defaults=defaults,
        name=_expect("name", raw.get("name", ""), (str,), "a string"),
        description=_expect("description", raw.get("description", ""), (str,), "a string"),
        criterion=criterion_from_table(raw.get("criterion"), str(file)),
        roots=extra,
    )
    if validate:
        check_workspace(ws)
    return ws


# ----------------------------------------------------------------------------- validation


def _dataset_problems(ws: Workspace, check_data: bool) -> tuple[list[Problem], int | None]:
    """Problems of ``[dataset]`` and the training-set size when known."""
    from sde_core.inputs.data import DatasetSpec, load_dataset

    try:
        raw_spec = DatasetSpec.from_dict(ws.dataset)
    except SDEError as exc:
        return [Problem("dataset", str(exc))], None
    problems = []
    for key, value in raw_spec.path_fields().items():
        try:
            ws.path(
                value, what=f"dataset.{key}", contents=raw_spec.kind == "text" or "tokenizer" in key
            )
        except SDEError as exc:
            problems.append(Problem(f"dataset.{key}", str(exc)))
    if problems:
        return problems, None
    spec = ws.dataset_spec()
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
    return [], len(bundle.train_labels)


def _file_problem(where: str, ws: Workspace, relative: str) -> Problem | None:
    """The problem of a path the workspace names: empty, outside the roots or missing."""
    if not relative:
        return Problem(where, "is empty: give a path relative to the workspace folder")
    try:
        ws.path(relative, what=where, must_exist=True, contents=where.endswith(".checkpoint"))
    except SDEError as exc:
        return Problem(where, str(exc))
    target = ws.path(relative)
    if where.endswith(".checkpoint") and target.is_dir():
        return None  # a Hugging Face model folder; loading it checks its contents
    if not target.is_file():
        return Problem(where, f"{target} is not a file: give the file's path")
    return None


def _arch_file_problems(ws: Workspace, m: ModelEntry, where: str) -> list[Problem]:
    """Problems of a ``file:`` architecture: not trusted, no pinned hash, or a changed file
    (errors); code not trusted on this machine (a warning: ``workspace trust`` fixes it, and
    running the model is refused until then)."""
    try:
        resolve_arch(ws, m, local=False)
    except SDEError as exc:
        return [Problem(f"{where}.arch", str(exc))]
    return _local_trust_problems(ws, m, where)


def _local_trust_problems(ws: Workspace, m: ModelEntry, where: str) -> list[Problem]:
    from sde_core.pipeline.local_trust import require_local_trust

    try:
        require_local_trust(ws, m)
    except SDEError as exc:
        return [Problem(f"{where}.trusted", str(exc), "warning")]
    return []


def resolve_arch(ws: Workspace, m: ModelEntry, *, local: bool = True) -> str | None:
    """The architecture string to build ``m`` with: its ``arch`` (None when empty), a ``file:``
    architecture resolved under the path policy, checked against the recorded
    ``arch_sha256`` (the SHA-256 of the file and every module beside it,
    :func:`~sde_core.inputs.external_archs.code_digest`) and pinned to the file's bytes.

    Args:
        local: also require the code to be trusted on this machine (the local trust store,
            :func:`~sde_core.pipeline.local_trust.require_local_trust`); validation alone
            passes ``False`` and reports it as a warning.

    Raises:
        WorkspaceError: a ``file:`` architecture of a model that is not trusted, has no
            recorded hash or is not trusted locally, or whose file leaves the allowed folders or
            is missing.
        CheckpointError: a malformed ``file:`` string, a file (or a module beside it) changed
            since it was trusted, or an inline ``#sha256=`` pin that disagrees with the file
            (nothing of it is run).
    """
    from sde_core.inputs.external_archs import (
        code_digest,
        file_arch_string,
        is_file_arch,
        parse_file_arch,
    )

    if not is_file_arch(m.arch):
        return m.arch or None
    spec = parse_file_arch(m.arch)
    root = Path(ws.root)
    absolute = {
        key: str(path if path.is_absolute() else root / path)
        for key, path in (("checkpoint", Path(m.checkpoint)), ("arch", spec.path))
    }
    again = (
        f"python -m sde_core workspace add-model {root} --name {m.name} --checkpoint "
        f"{absolute['checkpoint']} --arch file:{absolute['arch']}:{spec.class_name} --trusted "
        "--replace"
    )
    if not m.trusted or not m.arch_sha256:
        raise WorkspaceError(
            f"model {m.name!r} is built by the class {spec.class_name} of {spec.path}, which is "
            "code: it runs only when the model is trusted with the file's SHA-256 recorded "
            f"(arch_sha256). Read the file, then trust it: {again}"
        )
    what = f"model {m.name!r} architecture file"
    file = ws.path(spec.path.as_posix(), what=what, must_exist=True)
    actual = code_digest(file)
    if actual != m.arch_sha256:
        raise CheckpointError(
            f"the architecture file {spec.path} of model {m.name!r}, or a Python module beside "
            f"it, changed since it was trusted (SHA-256 {m.arch_sha256[:12]}… recorded, "
            f"{actual[:12]}… now); none of it was run. Check the change, then trust it again: "
            f"{again}"
        )
    own = file_sha256(file)
    if spec.sha256 is not None and spec.sha256 != own:
        raise CheckpointError(
            f"the architecture of model {m.name!r} pins {spec.path} to SHA-256 "
            f"{spec.sha256[:12]}… but the file is {own[:12]}… now; none of it was run. Check "
            f"the change, then trust it again: {again}"
        )
    if local:
        from sde_core.pipeline.local_trust import require_local_trust

        require_local_trust(ws, m)
    return file_arch_string(file, spec.class_name, own)


def _model_problems(ws: Workspace) -> list[Problem]:
    from sde_core.inputs.architectures import get_arch

    out: list[Problem] = []
    if not ws.models:
        out.append(Problem("models", f"the workspace has no models: {_ADD_HINT}"))
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
        else:
            try:
                check_model_name(m.name)
            except SDEError as exc:
                out.append(Problem(f"{where}.name", str(exc)))
        seen.add(m.name)
        if m.role not in ROLES:
            out.append(
                Problem(f"{where}.role", f"{m.role!r} is not a role; use one of {list(ROLES)}")
            )
        if m.precomputed:
            if not m.activations:
                out.append(
                    Problem(
                        f"{where}.activations",
                        f"arch = {PRECOMPUTED!r} needs the model's activations file",
                    )
                )
            if m.checkpoint:
                out.append(
                    Problem(
                        f"{where}.checkpoint",
                        f"a {PRECOMPUTED!r} model has no checkpoint: remove it or set its arch",
                    )
                )
        else:
            if m.arch_file is not None:
                out.extend(_arch_file_problems(ws, m, where))
            elif m.arch and family_by_arch(m.arch) is None:  # not a model-folder route
                try:
                    get_arch(m.arch)
                except SDEError as exc:
                    out.append(Problem(f"{where}.arch", str(exc)))
            if not m.checkpoint:
                out.append(
                    Problem(
                        f"{where}.checkpoint",
                        f"is empty: give the checkpoint file, or arch = {PRECOMPUTED!r} with an "
                        "activations file",
                    )
                )
        for key, relative in m.files().items():
            problem = _file_problem(f"{where}.{key}", ws, relative)
            if problem is not None:
                out.append(problem)
            elif (
                key == "checkpoint"
                and m.sha256 is not None
                and file_sha256(ws.path(relative)) != m.sha256
            ):
                out.append(
                    Problem(
                        f"{where}.sha256",
                        f"{m.checkpoint} changed since it was recorded: cached results are "
                        "stale; refresh the hash with "
                        "`python -m sde_core workspace validate --rehash`",
                        "warning",
                    )
                )
            elif key == "checkpoint" and m.trusted and m.arch_file is None:
                out.extend(_local_trust_problems(ws, m, where))
        if m.init_checkpoint is not None and not m.init_checkpoint.strip():
            out.append(
                Problem(
                    f"{where}.init_checkpoint",
                    "is empty: give the file of the initial weights, or remove the key",
                )
            )
        for j, ref in enumerate(m.checkpoints):
            if not 0.0 < ref.fraction <= 1.0:
                out.append(
                    Problem(
                        f"{where}.checkpoints[{j}].fraction", f"{ref.fraction} is outside (0, 1]"
                    )
                )
        if m.seconds is not None and not (math.isfinite(m.seconds) and m.seconds >= 0):
            out.append(Problem(f"{where}.seconds", f"{m.seconds} must be a non-negative time"))
    return out


def validate_workspace(ws: Workspace, *, check_data: bool = False) -> list[Problem]:
    """Every problem of ``ws``: errors (unusable) and warnings (e.g. a changed checkpoint hash).

    Checks: the dataset table and its paths, the forget index file (integers or a mask, unique,
    in range when the training-set size is known), that every file lies inside the workspace
    folder or an allowed root, at least one model, model names, roles, at most one original,
    known architectures, that every checkpoint/activations file exists and matches its
    recorded hash. With ``check_data`` the dataset is loaded to know the training-set size.
    """
    from sde_core.inputs.indices import load_index_file

    if not isinstance(ws, Workspace):
        raise WorkspaceError(f"validate_workspace needs a Workspace, got {_type_name(ws)}")
    problems, n_train = _dataset_problems(ws, check_data)
    missing = _file_problem("forget_indices", ws, ws.forget_indices)
    if missing is not None:
        problems.append(missing)
    else:
        try:
            load_index_file(ws.path(ws.forget_indices), n_train or None)
        except SDEError as exc:
            problems.append(Problem("forget_indices", str(exc)))
    problems += _model_problems(ws)
    if not isinstance(ws.defaults, EvalSettings):
        problems.append(Problem("defaults", f"must be EvalSettings, got {_type_name(ws.defaults)}"))
    elif ws.defaults.device != "cpu":
        problems += _device_problems(ws.defaults.device)
    return problems


def _device_problems(device: str) -> list[Problem]:
    """Whether this machine has the device ``evaluate`` will compute on (extraction, HSIC)."""
    from sde_core.inputs.activations import torch_device

    try:
        torch_device(device)
    except SDEError as exc:
        return [Problem("defaults.device", str(exc))]
    return []


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


def _model_table(m: ModelEntry) -> dict[str, Any]:
    table = dataclasses.asdict(m)
    table["checkpoints"] = [dataclasses.asdict(c) for c in m.checkpoints]
    for key, empty in (("checkpoints", []), ("trusted", False), ("arch", ""), ("checkpoint", "")):
        if table[key] == empty:
            del table[key]
    return table


def workspace_toml(ws: Workspace) -> str:
    """The ``workspace.toml`` text of ``ws``.

    Raises:
        WorkspaceError: a value TOML cannot store.
    """
    doc: dict[str, Any] = {"version": _VERSION}
    if ws.name:
        doc["name"] = ws.name
    if ws.description:
        doc["description"] = ws.description
    doc["forget_indices"] = ws.forget_indices
    doc["dataset"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in ws.dataset.items()}
    doc["defaults"] = dataclasses.asdict(ws.defaults)
    if ws.criterion.stated:
        doc["criterion"] = ws.criterion.to_table()
    doc["models"] = [_model_table(m) for m in ws.models]
    file = Path(ws.root) / WORKSPACE_FILE
    _check_caps(file, doc)  # never write what load_workspace would refuse
    try:
        text = tomli_w.dumps(_drop_none(doc))
    except (TypeError, ValueError) as exc:
        raise WorkspaceError(
            f"workspace holds a value TOML cannot store ({exc}): use strings, numbers, "
            "booleans, lists and tables only"
        ) from None
    size, depth = len(text.encode()), nesting_depth(text)
    if size > MAX_TOML_BYTES or depth > MAX_TOML_DEPTH:
        raise WorkspaceError(
            f"{file} would have {size} bytes and {depth} levels of nesting; at most "
            f"{MAX_TOML_BYTES} bytes and {MAX_TOML_DEPTH} levels are read back: store less"
        )
    return text


def write_workspace(ws: Workspace, path: str | Path | None = None) -> Path:
    """Write ``ws`` as TOML to ``path`` (a folder or file; default ``ws.root``), atomically.

    Returns:
        The written ``workspace.toml`` path.
    """
    if not isinstance(ws, Workspace):
        raise WorkspaceError(f"write_workspace needs a Workspace, got {_type_name(ws)}")
    file = _toml_file(path if path is not None else ws.root)
    return atomic_write_text(file, workspace_toml(ws))


def commit_files(ws_root: str | Path, files: Mapping[str, bytes | Path]) -> list[Path]:
    """Write several files into a workspace folder all at once, ``workspace.toml`` last.

    ``files`` maps paths relative to ``ws_root`` to their new content (bytes, or a file to copy).
    Everything is first written to a staging folder; only then are the files moved into place
    (existing ones are replaced, and restored if a later move fails). On any error nothing in
    the workspace has changed.

    Returns:
        The absolute paths written.

    Raises:
        WorkspaceError: a path that leaves the workspace folder.
        OSError: the folder is not writable (nothing was changed).
    """
    root = Path(ws_root)
    for rel in files:
        resolve_in_roots(rel, [root.resolve()], what="file", must_exist=False, base=root)
    scratch = cache_path(root, "staging") if root.is_dir() else root.parent
    with Staging(root, scratch) as staging:
        for rel, content in files.items():
            staging.put(rel, content)
        return staging.commit(last=[WORKSPACE_FILE])


def rehash_models(ws: Workspace) -> list[str]:
    """Record the current SHA-256 of every existing checkpoint; return the names that changed."""
    changed = []
    for m in ws.models:
        if m.checkpoint and ws.path(m.checkpoint).exists():
            digest = file_sha256(ws.path(m.checkpoint))
            if digest != m.sha256:
                m.sha256 = digest
                changed.append(m.name)
    return changed


def relative_to_workspace(ws: Workspace, path: str | Path) -> str:
    """``path`` relative to the workspace folder (POSIX form) when inside it, else absolute."""
    p = Path(path).resolve()
    try:
        return p.relative_to(Path(ws.root).resolve()).as_posix()
    except ValueError:
        return str(p)


def fresh_model_path(ws: Workspace, preferred: str) -> str:
    """``preferred`` (a file or folder relative to the workspace), or ``<stem>-2<suffix>``,
    ``-3``… — the first candidate that holds no file another model entry names, so adding or
    replacing a model never overwrites files the workspace refers to."""
    used = set()
    for m in ws.models:
        for rel in m.files().values():
            try:
                used.add(ws.path(rel))
            except SDEError:  # outside the allowed folders: cannot collide with a new file
                continue
    p = Path(preferred)
    suffix = "".join(p.suffixes) if p.suffix in (".safetensors", ".pt", ".pth") else ""
    stem = p.name[: len(p.name) - len(suffix)] if suffix else p.name
    for k in range(1, 10_000):
        candidate = (p.parent / (f"{stem}{suffix}" if k == 1 else f"{stem}-{k}{suffix}")).as_posix()
        target = ws.path(candidate)
        if not any(u == target or u.is_relative_to(target) for u in used):
            return candidate
    raise WorkspaceError(f"no free file name for {preferred!r}: clean up the models folder")


def init_workspace(
    folder: str | Path,
    dataset: Mapping[str, Any],
    forget_indices: str,
    *,
    name: str = "",
    description: str = "",
    defaults: EvalSettings | None = None,
    overwrite: bool = False,
) -> Workspace:
    """Create ``folder/workspace.toml`` with no models yet and return the workspace.

    The file is written atomically; nothing is written when the arguments are invalid.

    Raises:
        WorkspaceError: an existing ``workspace.toml`` without ``overwrite``, a malformed folder
            name, defaults that are not :class:`EvalSettings`.
    """
    from sde_core.inputs.data import DatasetSpec

    try:
        root = Path(check_path_text(folder, "workspace folder"))
    except SDEError as exc:
        raise WorkspaceError(str(exc)) from None
    if (root / WORKSPACE_FILE).exists() and not overwrite:
        raise WorkspaceError(
            f"{root / WORKSPACE_FILE} already exists: pass overwrite to replace it"
        )
    if defaults is not None and not isinstance(defaults, EvalSettings):
        raise WorkspaceError(f"defaults must be EvalSettings, got {_type_name(defaults)}")
    DatasetSpec.from_dict(dict(dataset))  # type and key checks before anything is written
    _expect("forget_indices", forget_indices, (str,), "a path string")
    ws = Workspace(
        root=root.resolve(),
        dataset=dict(dataset),
        forget_indices=forget_indices,
        defaults=defaults or EvalSettings(),
        name=name,
        description=description,
    )
    text = workspace_toml(ws)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(root / WORKSPACE_FILE, text)
    return ws


def workspace_hash(ws: Workspace, *, data_fingerprint: str | None = None) -> str:
    """Content hash of what determines evaluation results (a cache key; paths excluded).

    Covers the data (``data_fingerprint`` from :class:`sde_core.inputs.data.DatasetBundle` when
    given, else the ``[dataset]`` table without its path fields), the forget index file's bytes
    and, per model, name, role, architecture, kwargs and the SHA-256 of the file its numbers
    come from (the activations file when it has one, else the checkpoint).

    Raises:
        WorkspaceError: the workspace has no models (nothing to evaluate), or a file is missing
            or outside the allowed folders.
    """
    if not isinstance(ws, Workspace):
        raise WorkspaceError(f"workspace_hash needs a Workspace, got {_type_name(ws)}")
    if not ws.models:
        raise WorkspaceError(f"the workspace {ws.root} has no models to evaluate: {_ADD_HINT}")
    path_keys = ("root", "train_indices", "test_indices")
    data = data_fingerprint or {k: v for k, v in ws.dataset.items() if k not in path_keys}
    sources = {m.name: m.activations or m.checkpoint for m in ws.models}
    for where, rel in [("forget_indices", ws.forget_indices)] + [
        (f"model {name!r} file", rel) for name, rel in sources.items()
    ]:
        ws.path(rel, what=where, must_exist=True)
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
                        file_sha256(ws.path(sources[m.name])),
                    )
                    for m in ws.models
                ),
                key=lambda row: row[0],
            ),
        }
    )
