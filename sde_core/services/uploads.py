"""Uploaded files: checks before anything loads them, and the Workspace page's build and add forms.

:func:`check_upload` checks a file's name, size and suffix; :func:`inspect_upload` tells what an
uploaded checkpoint is *without running any of its code* (it reads the zip directory only), so a
front end can ask the user to vouch for a TorchScript archive or a full pickle before it is
loaded. :func:`build_from_uploads` validates a whole "build a workspace" form and writes it —
or nothing — and :func:`add_uploaded_model` adds one uploaded model to an open workspace; both
stage the files and check them (:mod:`sde_core.services.workspace_models`) before anything is
moved into place.
"""

from __future__ import annotations

import dataclasses
import io
import re
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from sde_core.common.paths import resolve_in_roots
from sde_core.common.staging import Staging
from sde_core.errors import (
    InputError,
    SDEError,
    WorkspaceError,
)
from sde_core.inputs.checkpoint_files import CHECKPOINT_SUFFIXES
from sde_core.inputs.indices import INDEX_SUFFIXES
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import (
    WORKSPACE_FILE,
    ModelEntry,
    Problem,
    Workspace,
    cache_path,
    check_model_name,
)
from sde_core.pipeline.workspace_checks import validate_workspace
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import (
    fresh_model_path,
    relative_to_workspace,
    workspace_toml,
)
from sde_core.services.sizing import _size_reason, null_check_warning, suggest_subset_size
from sde_core.services.workspace_models import (
    ModelSpec,
    _accuracy_rows,
    _arch_file_of,
    _check_addition,
    _describe,
    _precomputed_default_layer,
    _record_trust,
    _sample_rows,
)

__all__ = [
    "ACTIVATION_SUFFIXES",
    "MAX_UPLOAD_MB",
    "BuildRequest",
    "BuildResult",
    "Upload",
    "UploadInfo",
    "add_uploaded_model",
    "build_from_uploads",
    "check_upload",
    "file_suffix",
    "inspect_upload",
    "safe_name",
]

#: Precomputed activations files (see :mod:`sde_core.inputs.precomputed`).
ACTIVATION_SUFFIXES = (".npz", ".parquet")
#: Largest accepted upload in MiB (also ``server.maxUploadSize`` in ``.streamlit/config.toml``).
MAX_UPLOAD_MB = 200

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(name: str) -> str:
    """A file-name-safe version of an uploaded file's or model's name (no folders, no dots
    at the start); raises :class:`InputError` when nothing usable is left."""
    base = Path(str(name).replace("\\", "/").replace("\x00", "")).name
    cleaned = _SAFE.sub("_", base).lstrip(".")[:200]
    if not cleaned.strip("_"):
        raise InputError(f"{name!r:.60} is not a usable file name: rename the file")
    return cleaned


def file_suffix(name: str, suffixes: Sequence[str]) -> str | None:
    """The longest of ``suffixes`` that ``name`` ends with (case-insensitive), or None."""
    low = name.lower()
    found = [s for s in suffixes if low.endswith(s)]
    return max(found, key=len) if found else None


def check_upload(
    name: str, size: int, suffixes: Sequence[str], *, max_mb: int = MAX_UPLOAD_MB
) -> str:
    """Check an uploaded file's name and size; return its safe file name.

    Raises:
        InputError: wrong suffix, empty file or larger than ``max_mb`` MiB.
    """
    safe = safe_name(name)
    if file_suffix(safe, suffixes) is None:
        shown = Path(safe).suffix or "suffix-less"
        raise InputError(f"{safe} is a {shown} file; upload one of {', '.join(suffixes)}")
    if size <= 0:
        raise InputError(f"{safe} is empty (0 bytes): upload the complete file")
    if size > max_mb * 1024 * 1024:
        raise InputError(f"{safe} has {size / 2**20:.0f} MiB; the limit is {max_mb} MiB")
    return safe


@dataclass(frozen=True)
class UploadInfo:
    """What an uploaded checkpoint is, found without loading it (a file on disk is described by
    :class:`sde_core.inputs.checkpoint_files.CheckpointInfo`).

    Attributes:
        format: ``"safetensors"``, ``"torchscript"`` (runs code when loaded: needs trust),
            or ``"pickle"`` (``torch.save``; loaded with ``weights_only`` unless trusted).
        arch, arch_kwargs: the architecture recorded in a safetensors header (else None/{}).
    """

    format: str
    arch: str | None = None
    arch_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_trust(self) -> bool:
        """Whether loading it at all requires the user's explicit trust."""
        return self.format == "torchscript"


def inspect_upload(name: str, data: bytes) -> UploadInfo:
    """What uploaded checkpoint bytes are, from their zip directory; nothing in them is executed
    (safetensors metadata is read on save)."""
    if name.lower().endswith(".safetensors"):
        return UploadInfo("safetensors")
    return UploadInfo(_zip_format(io.BytesIO(data)))


def _zip_format(fh: BinaryIO) -> str:
    """``"torchscript"`` for a TorchScript archive (code inside), else ``"pickle"``."""
    try:
        with zipfile.ZipFile(fh) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return "pickle"
    code = any("/code/" in n for n in names)
    return "torchscript" if code and any(n.endswith("/constants.pkl") for n in names) else "pickle"


# ------------------------------------------------------------------ building from uploads


@dataclass
class Upload:
    """An uploaded file: its name as the user's browser sent it, and its bytes."""

    name: str
    data: bytes


@dataclass
class BuildRequest:
    """The Workspace page's "build a workspace" form.

    Attributes:
        folder: the new workspace folder as typed (inside the page's allowed folders).
        dataset_kind, dataset_path: the dataset. The path is taken as typed: absolute, or
            relative to the first of the page's allowed folders (the folder the dashboard was
            started in when ``$SDE_DATA_ROOTS`` is unset), as the workspace folder is; it must
            lie inside the new workspace folder or ``$SDE_DATA_ROOTS``, like every file a
            workspace names.
        forget: the forget-set upload. models: ``(upload, spec)`` per model file (checkpoints
            or activations files). name: the workspace's name. train_size: a random training
            subset (None: all). overwrite: replace an existing ``workspace.toml``.
        form_problems: what the form itself found wrong (e.g. unreadable architecture
            kwargs); reported with the rest, and nothing is written while one is an error.
    """

    folder: str
    dataset_kind: str
    dataset_path: str
    forget: Upload | None
    models: list[tuple[Upload, ModelSpec]]
    name: str = ""
    train_size: int | None = None
    overwrite: bool = False
    form_problems: list[Problem] = field(default_factory=list)


@dataclass
class BuildResult:
    """The outcome: ``problems`` (nothing was written when one is an error), the folder, and
    ``dataset_path``, the absolute path the typed dataset path resolved to (None when it could
    not be resolved)."""

    problems: list[Problem]
    folder: Path | None = None
    notes: list[str] = field(default_factory=list)
    dataset_path: Path | None = None

    @property
    def saved(self) -> bool:
        """Whether the workspace was written."""
        return self.folder is not None and not any(p.severity == "error" for p in self.problems)


def _has_error(problems: Sequence[Problem]) -> bool:
    return any(p.severity == "error" for p in problems)


def build_from_uploads(request: BuildRequest, page_roots: Sequence[Path]) -> BuildResult:
    """Validate a whole upload and write it as a new workspace — or write nothing.

    The folder must lie inside ``page_roots`` (see
    :func:`~sde_core.common.paths.allowed_roots`); the dataset path (see
    :class:`BuildRequest`), like every file a workspace names, inside the folder or
    ``$SDE_DATA_ROOTS``. Every field is checked, whatever another field's problem, so the
    result lists every problem at once: the uploads are written to a staging folder and checked
    there (dataset, forget set, every model loaded and run on two samples, names and roles,
    defaults that fit the data); only a fully valid set is moved into place, ``workspace.toml``
    last.
    """
    problems: list[Problem] = list(request.form_problems)
    folder: Path | None = None
    try:
        folder = resolve_in_roots(
            request.folder, page_roots, what="workspace folder", must_exist=False
        )
    except SDEError as exc:
        problems.append(Problem("workspace folder", str(exc)))
    if folder is not None and (folder / WORKSPACE_FILE).exists() and not request.overwrite:
        problem = f"{folder} already has a {WORKSPACE_FILE}: tick overwrite to replace it"
        problems.append(Problem("workspace folder", problem))
    if folder is not None:
        scratch = cache_path(folder, "staging") if folder.is_dir() else folder.parent
        return _build(request, page_roots, folder, folder, scratch, problems)
    with tempfile.TemporaryDirectory(prefix="sde-build-check-") as tmp:  # check, never commit
        return _build(request, page_roots, None, Path(tmp) / "workspace", Path(tmp), problems)


def _build(
    request: BuildRequest,
    page_roots: Sequence[Path],
    folder: Path | None,
    target: Path,
    scratch: Path,
    problems: list[Problem],
) -> BuildResult:
    """Check every field of ``request`` (staged under ``scratch``); write the workspace into
    ``folder`` when it is known and nothing is wrong."""
    from sde_core.inputs.data import load_dataset

    ws = Workspace(root=target, dataset={"kind": request.dataset_kind}, forget_indices="")
    ws.name = request.name.strip() or target.name
    roots = ws.allowed_roots() if folder is not None else (list(ws.roots) or list(page_roots))
    bundle, data_root = None, None
    try:
        data_root = resolve_in_roots(
            request.dataset_path, roots, what="dataset path", base=page_roots[0],
            must_exist=request.dataset_kind != "mnist1d",
        )  # fmt: skip
    except SDEError as exc:
        problems.append(Problem("dataset", str(exc)))
    if data_root is not None:
        try:
            ws.dataset["root"] = relative_to_workspace(ws, data_root)
            if request.train_size:
                ws.dataset["train_size"] = int(request.train_size)
            readable = ws if folder is not None else dataclasses.replace(ws, roots=tuple(roots))
            bundle = load_dataset(readable.dataset_spec())
        except SDEError as exc:
            problems.append(Problem("dataset", str(exc)))
    if request.forget is None:
        problems.append(Problem("forget_indices", "upload the forget set (.npy, .txt, .json, .pt)"))
    if not request.models and not request.form_problems:
        problems.append(Problem("models", "upload at least one checkpoint or activations file"))
    notes: list[str] = []

    def result(found: list[Problem], saved: Path | None = None) -> BuildResult:
        return BuildResult(found, saved, notes, data_root)

    with Staging(target, scratch) as staging:
        forget = None
        if request.forget is not None and bundle is not None:
            forget, found = _stage_forget(request.forget, staging, ws, len(bundle.train_labels))
            problems += found
        elif request.forget is not None:  # no data to check the indices against: the file
            problems += _upload_problems(request.forget, INDEX_SUFFIXES, "forget_indices")
        layer_sets: list[list[str]] = []
        for upload, spec in request.models:
            if bundle is None:  # no data to run the model on: its name and file
                problems += _unstaged_model_problems(upload, spec)
                continue
            sample = None if forget is None else _sample_rows(spec, bundle, forget, target)
            entry, found, said, layers = _stage_model(
                upload, spec, staging, bundle, ws, sample=sample
            )
            problems += found
            notes += said
            if entry is not None:
                ws.models.append(entry)
                if layers is not None and entry.precomputed:
                    layer_sets.append(layers)
        if bundle is None or data_root is None or forget is None:
            return result(problems)
        try:
            ws.defaults = _fitting_defaults(bundle, forget, layer_sets, notes)
        except SDEError as exc:
            problems.append(Problem("defaults", str(exc)))
        if _has_error(problems) or folder is None:
            return result(problems)
        check = dataclasses.replace(
            ws, root=staging.dir, dataset={**ws.dataset, "root": str(data_root)},
            roots=(folder, *ws.roots),
        )  # fmt: skip
        problems += validate_workspace(check, check_data=True)
        if _has_error(problems):
            return result(problems)
        staging.put(WORKSPACE_FILE, workspace_toml(ws).encode())
        staging.commit(last=[WORKSPACE_FILE])
    for _, spec in request.models:
        if spec.trusted:
            _record_trust(ws, ws.model(spec.name), notes)
    return result(problems, folder)


def _upload_problems(upload: Upload, suffixes: Sequence[str], where: str) -> list[Problem]:
    try:
        check_upload(upload.name, len(upload.data), suffixes)
    except SDEError as exc:
        return [Problem(where, str(exc))]
    return []


def _unstaged_model_problems(upload: Upload, spec: ModelSpec) -> list[Problem]:
    """What can be checked of an uploaded model without the data: its file and its name."""
    is_acts = file_suffix(upload.name, ACTIVATION_SUFFIXES) is not None
    where = f"{'activations' if is_acts else 'checkpoint'} {upload.name}"
    found = _upload_problems(upload, CHECKPOINT_SUFFIXES + ACTIVATION_SUFFIXES, where)
    try:
        check_model_name(spec.name)
    except SDEError as exc:
        found.append(Problem(where, str(exc)))
    return found


def _stage_forget(
    upload: Upload, staging: Staging, ws: Workspace, n_train: int
) -> tuple[np.ndarray | None, list[Problem]]:
    from sde_core.inputs.indices import load_index_file

    try:
        safe = check_upload(upload.name, len(upload.data), INDEX_SUFFIXES)
        ws.forget_indices = f"forget{file_suffix(safe, INDEX_SUFFIXES)}"
        return load_index_file(staging.put(ws.forget_indices, upload.data), n_train), []
    except SDEError as exc:
        return None, [Problem("forget_indices", str(exc))]


def _stage_model(
    upload: Upload,
    spec: ModelSpec,
    staging: Staging,
    bundle: Any,
    ws: Workspace,
    folder: str = "models",
    replace: bool = False,
    sample: tuple[np.ndarray, np.ndarray, Path] | None = None,
) -> tuple[ModelEntry | None, list[Problem], list[str], list[str] | None]:
    """Stage one uploaded model file under ``folder`` and describe it (or say what is wrong);
    ``sample``: the D_r rows an original or retrained classifier's accuracy is checked on."""
    suffixes = CHECKPOINT_SUFFIXES + ACTIVATION_SUFFIXES
    is_acts = file_suffix(upload.name, ACTIVATION_SUFFIXES) is not None
    where = f"{'activations' if is_acts else 'checkpoint'} {upload.name}"
    try:
        safe = check_upload(upload.name, len(upload.data), suffixes)
        rel = f"{folder}/{safe}"
        if rel in (m.checkpoint or m.activations for m in ws.models):
            raise WorkspaceError(f"two uploads are called {safe}: rename one")
        arch_file = _arch_file_of(ws, spec, Path(ws.root))
        staged = staging.put(rel, upload.data)
        entry, notes, layers = _describe(
            spec, bundle, ws.defaults, None if is_acts else staged, staged if is_acts else None,
            arch_file, None if is_acts else sample,
        )  # fmt: skip
        _check_addition(ws, entry, replace)
    except SDEError as exc:
        return None, [Problem(where, str(exc))], [], None
    if is_acts:
        entry.activations = rel
    else:
        entry.checkpoint = rel
    return entry, [], [f"{spec.name}: {n}" for n in notes], layers


def add_uploaded_model(
    workspace: str | Path, upload: Upload, spec: ModelSpec, *, replace: bool = False
) -> BuildResult:
    """Add one uploaded checkpoint or activations file to an existing workspace — or nothing.

    The file is staged, loaded (TorchScript only when ``spec.trusted``), checked against the
    dataset, and moved to ``models/<name>/`` together with the updated ``workspace.toml``.
    """
    from sde_core.inputs.data import load_dataset

    try:
        ws = load_workspace(workspace, validate=False)
        check_model_name(spec.name)
        bundle = load_dataset(ws.dataset_spec())
    except SDEError as exc:
        return BuildResult([Problem("workspace", str(exc))])
    if replace:
        ws.models = [m for m in ws.models if m.name != spec.name]
    folder = fresh_model_path(ws, f"models/{spec.name}")
    with Staging(ws.root, cache_path(ws.root, "staging")) as staging:
        entry, problems, notes, layers = _stage_model(
            upload, spec, staging, bundle, ws, folder, replace, _accuracy_rows(ws, spec, bundle)
        )
        if entry is None:
            return BuildResult(problems)
        ws.add_model(entry)
        if layers is not None and all(m.precomputed for m in ws.models):
            _precomputed_default_layer(ws, entry.name, layers, notes)
        staging.put(WORKSPACE_FILE, workspace_toml(ws).encode())
        staging.commit(last=[WORKSPACE_FILE])
    if spec.trusted:
        _record_trust(ws, entry, notes)
    return BuildResult(validate_workspace(ws), Path(ws.root), notes)


def _fitting_defaults(
    bundle: Any, forget: np.ndarray, layer_sets: list[list[str]], notes: list[str]
) -> EvalSettings:
    """``[defaults]`` that fit the data: the subset size, and for precomputed models a layer
    their files share when they lack the default ``output``."""
    values: dict[str, Any] = {}
    if layer_sets:
        shared = sorted(set.intersection(*(set(s) for s in layer_sets)))
        if not shared:
            raise WorkspaceError(
                "the activations files share no layer name: export the same layer for every model"
            )
        if "output" not in shared:
            values["layer"] = shared[0]
            notes.append(f"default layer {shared[0]!r} (shared by every activations file)")
    base = EvalSettings.from_mapping(values)
    size = suggest_subset_size(len(bundle.train), len(bundle.test), forget, base)
    n_forget = int(np.unique(forget).size)
    notes.append(_size_reason(size, len(bundle.train), len(bundle.test), n_forget))
    warning = null_check_warning(size, len(bundle.test))
    if warning is not None:
        notes.append(warning)
    return dataclasses.replace(base, subset_size=size)
