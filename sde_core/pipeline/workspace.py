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
``$SDE_DATA_ROOTS`` and any ``roots`` passed to ``load_workspace``. :meth:`Workspace.path`
and :meth:`Workspace.dataset_spec` enforce it, ``validate_workspace`` reports every
violation, so no entry point reads a file outside those folders.

This module is the workspace's model: the entries (:class:`ModelEntry`, :class:`Problem`,
:class:`Workspace`), the file's caps, :func:`workspace_hash` (a content-based cache key) and
:func:`cache_path` (the cache locations under ``<workspace>/.sde-cache/``). Its siblings do one
thing each with it:

- :mod:`sde_core.pipeline.workspace_load`: ``load_workspace`` parses and type-checks the file
  (raising :class:`~sde_core.errors.WorkspaceError`);
- :mod:`sde_core.pipeline.workspace_checks`: ``validate_workspace`` lists every semantic
  problem, ``check_workspace`` raises on the errors;
- :mod:`sde_core.pipeline.workspace_write`: ``write_workspace`` writes atomically,
  ``commit_files`` moves a staged set of files into place all at once.

A new workspace (its data, forget set and first files) is created by
:func:`sde_core.services.workspaces.create_workspace`, the one creation path of the CLI and the
dashboard.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.common.paths import (
    check_folder_in_roots,
    env_roots,
    resolve_in_roots,
)
from sde_core.errors import SDEError, WorkspaceError
from sde_core.pipeline.criterion import Criterion
from sde_core.pipeline.settings import EvalSettings

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
    "workspace_hash",
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
    "checkpoints": "checkpoints.sqlite",  # checkpoint evaluations (sde_core.pipeline.curves)
    "stages": "stages",
    "staging": "staging",
    "submitit": "submitit",
    "checks": "checks.json",  # findings trusted while a file is unchanged (common.stamps)
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
    ``staging`` (a folder for files not yet committed), ``submitit`` (the Slurm engine's job
    files and resume manifest) or ``checks`` (findings about unchanged files trusted across
    processes, :class:`~sde_core.common.stamps.StampRecords`), all under
    ``<ws_root>/.sde-cache/``.

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
    stores = ("results", "checkpoints")
    names = [path.name] + ([path.name + s for s in SQLITE_SIDE_FILES] if kind in stores else [])
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

    def named(self, role: str) -> list[str]:
        """The names of the models with ``role``, in the workspace's order."""
        return [m.name for m in self.models if m.role == role]

    def first(self, role: str, *, other_than: str | None = None) -> str | None:
        """The name of the first model with ``role`` (other than ``other_than``), or None: the
        one lookup of "the original" or "the retrained model" the pages and reports use."""
        return next((n for n in self.named(role) if n != other_than), None)

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


# ------------------------------------------------------------- helpers the siblings share


def _type_name(value: object) -> str:
    return type(value).__name__


def _toml_file(path: str | Path) -> Path:
    p = Path(path)
    return p / WORKSPACE_FILE if p.is_dir() or p.suffix != ".toml" else p


def _drop_none(value: Any) -> Any:
    """TOML has no null: drop None values (recursively)."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_drop_none(v) for v in value]
    return value


def _sha256(path: Path, known: MutableMapping[Path, str] | None) -> str:
    """``file_sha256(path)``, read from / added to ``known`` when given."""
    if known is None:
        return file_sha256(path)
    if path not in known:
        known[path] = file_sha256(path)
    return known[path]


def workspace_hash(
    ws: Workspace,
    *,
    data_fingerprint: str | None = None,
    file_hashes: MutableMapping[Path, str] | None = None,
) -> str:
    """Content hash of what determines evaluation results (a cache key; paths excluded).

    ``file_hashes``: a mapping of resolved file → SHA-256 that one operation hashing several
    workspaces over the same files (the checkpoint workspaces of a curve, which differ from
    the workspace in one model's file) shares: a file it holds is not read again, a file it
    lacks is added. A plain dict is for that operation only (it does not notice a file
    changing); :class:`~sde_core.common.stamps.RecordedHashes` serves a digest only while the
    file's stamp is unchanged, across processes.

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
    # every file is checked (inside the allowed roots, present) before any is read, and each
    # is resolved once: at hundreds of models the resolution is most of the hash's time
    forget = ws.path(ws.forget_indices, what="forget_indices", must_exist=True)
    sources = {
        m.name: ws.path(m.activations or m.checkpoint, what=f"model {m.name!r} file",
                        must_exist=True)
        for m in ws.models
    }  # fmt: skip
    return stable_hash(
        {
            "data": data,
            "forget": _sha256(forget, file_hashes),
            "models": sorted(
                (
                    (
                        m.name,
                        m.role,
                        m.arch,
                        _drop_none(m.arch_kwargs),  # as written to TOML: no nulls
                        _sha256(sources[m.name], file_hashes),
                    )
                    for m in ws.models
                ),
                key=lambda row: row[0],
            ),
        }
    )
