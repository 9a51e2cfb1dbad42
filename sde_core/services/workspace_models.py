"""Adding a model to a workspace, for the command line and the dashboard (no UI code).

:func:`add_model` (``workspace add-model``): an existing checkpoint (architecture read or
inferred, loaded and checked against the dataset, SHA-256 recorded) or a model's precomputed
activations file, written with the updated ``workspace.toml`` all at once. A TorchScript
archive or a ``file:`` class is never run unless the user vouched for it (``trusted``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.hashing import file_sha256
from sde_core.common.paths import check_path_text, resolve_in_roots
from sde_core.errors import CheckpointError, SDEError, WorkspaceError
from sde_core.families.registry import family_by_arch, family_of_entry, folder_family
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import (
    PRECOMPUTED,
    ROLES,
    WORKSPACE_FILE,
    ModelEntry,
    Workspace,
    check_model_name,
)
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import (
    commit_files,
    fresh_model_path,
    relative_to_workspace,
    workspace_toml,
)
from sde_core.services.image_size import image_size_check
from sde_core.services.preprocessing import accuracy_sample, check_accuracy
from sde_core.services.sizing import (
    _activation_layers,
    _fit_failure,
    _fit_inputs,
    _outputs,
    check_fits,
    check_outputs,
)

__all__ = ["AddedModel", "ModelSpec", "add_model", "guess_role"]


@dataclass
class ModelSpec:
    """How to describe a model being added (the CLI's flags, the page's widgets).

    Attributes:
        name: the model's name. role: one of :data:`~sde_core.pipeline.workspace.ROLES`
            (default: guessed from the name). method: how it was produced (free text).
        arch: architecture (default: read from the checkpoint or inferred;
            ``"precomputed"`` for an activations file alone). arch_kwargs: builder kwargs.
        trusted: the user vouches for the file (TorchScript, full pickles); it is then loaded
            and run only in a child process (:mod:`sde_core.inputs.isolation`).
        time_limit: seconds a trusted file may take to load and to run on two samples (None:
            :data:`~sde_core.inputs.isolation.DEFAULT_TIME_LIMIT`); its process tree is
            killed after.
        check_accuracy: run an original or retrained classifier on a sample of D_r and refuse
            it when it is no better than chance (the preprocessing differs from its training:
            :func:`~sde_core.services.preprocessing.check_accuracy`).
    """

    name: str
    role: str = ""
    method: str = ""
    arch: str | None = None
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    trusted: bool = False
    time_limit: float | None = None
    check_accuracy: bool = True


@dataclass
class AddedModel:
    """The entry :func:`add_model` added, and notes for the user."""

    entry: ModelEntry
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _ArchFile:
    """A ``file:`` architecture being added: the string to load with (absolute, pinned to the
    file's bytes), the string to record (relative to the workspace when inside it) and the
    SHA-256 of the file and every module beside it (``arch_sha256``)."""

    load: str
    record: str
    sha256: str


def _pin_arch_file(ws: Workspace, arch: str, trusted: bool, base: Path) -> _ArchFile:
    """Check a ``file:PATH.py:CLASS`` architecture before anything of it runs: the model is
    trusted, the file lies inside the workspace or an allowed root (``PATH`` relative to
    ``base``), and its bytes are pinned by their SHA-256.

    Raises:
        CheckpointError, WorkspaceError: naming the problem; nothing was run.
    """
    from sde_core.inputs.external_archs import code_digest, file_arch_string, parse_file_arch

    parsed = parse_file_arch(arch)
    if not trusted:
        raise CheckpointError(
            f"--arch {arch} names a class in a Python file: building the model runs that file's "
            "code, so it needs the trusted opt-in for this model (--trusted, or the page's "
            "trusted box); nothing was run. Read the file first: its SHA-256 is recorded and a "
            "changed file is refused until it is trusted again"
        )
    path = parsed.path if parsed.path.is_absolute() else base / parsed.path
    try:
        file = resolve_in_roots(path, ws.allowed_roots(), what="architecture file")
    except SDEError as exc:
        raise WorkspaceError(
            f"{exc}; put the .py file inside the workspace folder or a folder of SDE_DATA_ROOTS"
        ) from None
    digest = file_sha256(file)
    record = file_arch_string(relative_to_workspace(ws, file), parsed.class_name)
    code = code_digest(file)  # the file and every module beside it: what arch_sha256 pins
    return _ArchFile(file_arch_string(file, parsed.class_name, digest), record, code)


def _model_kind(arch: str, info: Any, class_name: str) -> str:
    """How the added model was built, for the user: its architecture, or what the file held."""
    if arch:
        return arch.partition("#")[0]
    if info.kind == "torchscript":
        return "(TorchScript)"
    return f"(the pickled {class_name or 'model'} object)"


def _describe(
    spec: ModelSpec,
    bundle: Any,
    defaults: EvalSettings,
    checkpoint: Path | None,
    activations: Path | None,
    arch_file: _ArchFile | None = None,
    sample: tuple[np.ndarray, np.ndarray, Path] | None = None,
) -> tuple[ModelEntry, list[str], list[str] | None]:
    """Load and check the files of a model: its entry (paths still to fill in), notes for the
    user and the layers of its activations file (None without one). A trusted code checkpoint
    is loaded and run only in a child process under ``spec.time_limit``. ``arch_file``: the
    pinned ``file:`` architecture (from :func:`_pin_arch_file`) when ``spec.arch`` is one.
    ``sample``: rows of D_r, their labels and the workspace folder, to check the model's
    accuracy on (:func:`~sde_core.services.preprocessing.check_accuracy`)."""

    from sde_core.inputs.checkpoint_files import inspect_checkpoint, untrusted_message
    from sde_core.inputs.external_archs import is_file_arch
    from sde_core.inputs.models import load_checkpoint_details
    from sde_core.inputs.trusted_probing import probe_trusted_checkpoint

    check_model_name(spec.name)
    role = spec.role or guess_role(spec.name)
    if role not in ROLES:
        raise WorkspaceError(f"role {role!r} is not one of {list(ROLES)}")
    if checkpoint is None and activations is None:
        raise WorkspaceError("give the model's checkpoint, its activations file, or both")
    if not isinstance(spec.arch_kwargs, dict):
        raise CheckpointError(
            "arch kwargs must be a table of builder arguments, got "
            f"{type(spec.arch_kwargs).__name__}"
        )
    arch, kwargs, digest, notes = spec.arch or "", dict(spec.arch_kwargs), None, []
    if is_file_arch(arch):
        if arch_file is None:
            raise CheckpointError(f"--arch {arch} needs its file checked and pinned first")
        arch = arch_file.load
    if checkpoint is not None:
        if arch == PRECOMPUTED:
            raise WorkspaceError(f"arch {PRECOMPUTED!r} is for a model without a checkpoint")
        code = inspect_checkpoint(checkpoint)
        if code.is_code and not spec.trusted:
            raise CheckpointError(untrusted_message(code))
        if code.is_code:  # trusted code runs only in the isolated child, under its limits
            x = _fit_inputs(bundle).numpy() if sample is None else sample[0]
            probe = probe_trusted_checkpoint(
                checkpoint, x, arch=arch or None, arch_kwargs=kwargs, time_limit=spec.time_limit
            )
            if probe.error:
                raise _fit_failure(bundle, probe.error)
            shape = probe.returned if probe.output is None else tuple(probe.output.shape)
            outputs = check_outputs(shape, bundle)
            arch, kwargs, load_notes = probe.arch or arch, probe.arch_kwargs or kwargs, probe.notes
            class_name = probe.class_name
            sample_out = probe.output
        else:
            # Weights only; a trusted, hash-pinned file: architecture builds the user's class.
            trusted = bool(spec.trusted) and is_file_arch(arch)
            loaded = load_checkpoint_details(
                checkpoint, arch=arch or None, trusted=trusted, **kwargs
            )
            model = loaded.model
            class_name = type(model).__name__
            outputs = check_fits(model, bundle, Path(checkpoint))
            arch = getattr(model, "sde_arch", None) or arch
            kwargs = dict(getattr(model, "sde_arch_kwargs", None) or kwargs)
            load_notes = loaded.notes
            sample_out = None if sample is None else _outputs(model, sample[0])
        if sample is not None and sample_out is not None:
            said = check_accuracy(sample_out, sample[1], bundle, checkpoint, sample[2])
            load_notes = (*load_notes, said) if said else tuple(load_notes)
        digest = file_sha256(checkpoint)
        family = family_by_arch(arch)
        size = (family.advice if family else {}).get("output_size", "{n} outputs")
        size = size.format(n=outputs)
        notes.append(f"architecture {_model_kind(arch, code, class_name)} with {size}")
        notes.extend(load_notes)  # e.g. pruning masks folded into the weights
        if arch_file is not None:
            arch = arch_file.record
            notes.append(
                f"{arch} trusted with SHA-256 {arch_file.sha256[:12]}… of the file and the "
                "modules beside it (recorded)"
            )
    elif arch and arch != PRECOMPUTED:
        raise WorkspaceError(f"a model without a checkpoint has arch {PRECOMPUTED!r}, not {arch!r}")
    else:
        arch = PRECOMPUTED
    layers = None
    if activations is not None:
        layers = _activation_layers(activations, spec.name, bundle)
        notes.append(f"activations of layer(s) {', '.join(layers)}")
        if checkpoint is None and defaults.layer not in layers:
            notes.append(
                f"the workspace's default layer {defaults.layer!r} is not in this file: "
                f"evaluate with --layer {layers[0]} (or set [defaults] layer)"
            )
    entry = ModelEntry(
        name=spec.name, role=role, arch=arch, method=spec.method, arch_kwargs=kwargs,
        sha256=digest, trusted=bool(spec.trusted),
        arch_sha256=arch_file.sha256 if arch_file is not None else None,
    )  # fmt: skip
    return entry, notes, layers


def _check_name_free(ws: Workspace, name: str, replace: bool) -> None:
    if name in {m.name for m in ws.models} and not replace:
        raise WorkspaceError(
            f"a model named {name!r} already exists: choose another name or replace it"
        )


def _check_addition(ws: Workspace, entry: ModelEntry, replace: bool) -> None:
    _check_name_free(ws, entry.name, replace)
    other = ws.first("original", other_than=entry.name)
    if entry.role == "original" and other is not None:
        raise WorkspaceError(
            f"the workspace already has an original model ({other!r}): give this one "
            "another role, or replace that model"
        )


def _place(ws: Workspace, source: Path, copy: bool, target: str, what: str) -> tuple[str, bool]:
    """Where a model file goes: in place when the path policy allows it, else a copy at
    ``target`` (with ``copy``). Returns ``(path to record, whether to copy)``."""
    resolved = source.resolve()
    if copy:
        return target, True
    try:
        resolve_in_roots(resolved, ws.allowed_roots(), what=what)
    except SDEError as exc:
        raise WorkspaceError(f"{exc}; or pass --copy to copy it into the workspace") from None
    return relative_to_workspace(ws, resolved), False


def add_model(
    workspace: str | Path,
    spec: ModelSpec,
    *,
    checkpoint: str | Path | None = None,
    activations: str | Path | None = None,
    copy: bool = False,
    replace: bool = False,
    roots: Iterable[str | Path] | None = None,
) -> AddedModel:
    """Add an existing checkpoint and/or activations file to a workspace, atomically.

    The checkpoint is loaded (safely, unless ``spec.trusted``), its architecture read or
    inferred, run on two training samples to check the input shape and number of classes, and
    its SHA-256 recorded; an activations file must have one row per dataset sample. Files inside
    the workspace folder or an allowed root are referenced in place; with ``copy`` they are
    copied to ``models/<name>/``.

    Raises:
        WorkspaceError, CheckpointError, DataError: naming the problem; nothing was written.
    """
    from sde_core.inputs.data import load_dataset

    ws = load_workspace(workspace, validate=False, roots=roots)
    check_model_name(spec.name)
    _check_name_free(ws, spec.name, replace)  # before any file is read, let alone run
    files = {
        "checkpoint": Path(check_path_text(checkpoint, "checkpoint")) if checkpoint else None,
        "activations": Path(check_path_text(activations, "activations")) if activations else None,
    }
    for key, file in files.items():
        if file is not None and file.is_dir():
            if key == "checkpoint" and folder_family(spec.arch, file) is not None:
                continue  # a model folder (a Hugging Face one: the language-model route, arch hf)
            raise WorkspaceError(f"{key} {file} is a folder: give the file inside it")
        if file is not None and not file.is_file():
            raise WorkspaceError(f"{key} file {file} does not exist: check the path")
    arch_file = _arch_file_of(ws, spec, Path.cwd())
    bundle = load_dataset(ws.dataset_spec())
    sized = (
        ""
        if files["checkpoint"] is None
        else image_size_check(files["checkpoint"], bundle, ws.root, refuse=spec.check_accuracy)
    )  # an ImageFolder workspace's size against the file's record (issue 40)
    try:
        entry, notes, layers = _describe(
            spec, bundle, ws.defaults, files["checkpoint"], files["activations"], arch_file,
            _accuracy_rows(ws, spec, bundle) if files["checkpoint"] is not None else None,
        )  # fmt: skip
    except CheckpointError as exc:
        raise type(exc)(_user_paths(str(exc), workspace, spec.name, files["checkpoint"])) from None
    notes.extend([sized] if sized else [])
    _check_addition(ws, entry, replace)
    if replace and entry.name in {m.name for m in ws.models}:
        ws.models = [m for m in ws.models if m.name != entry.name]
    folder = fresh_model_path(ws, f"models/{spec.name}")
    staged: dict[str, bytes | Path] = {}
    for key, file in files.items():
        if file is None:
            continue
        rel, copied = _place(ws, file, copy, f"{folder}/{file.name}", f"{key} file")
        setattr(entry, key, rel)
        if copied and file.is_dir():  # a model folder: every file in it
            inside = [f for f in file.rglob("*") if f.is_file()]
            staged.update({f"{rel}/{f.relative_to(file).as_posix()}": f for f in inside})
        elif copied:
            staged[rel] = file
    ws.add_model(entry)
    if layers is not None and all(m.precomputed for m in ws.models):
        _precomputed_default_layer(ws, entry.name, layers, notes)
    _family_default_layer(ws, notes)
    staged[WORKSPACE_FILE] = workspace_toml(ws).encode()
    commit_files(ws.root, staged)
    if spec.trusted:
        _record_trust(ws, entry, notes)
    return AddedModel(entry, notes)


def _record_trust(ws: Workspace, entry: ModelEntry, notes: list[str]) -> None:
    """The user's explicit opt-in (``--trusted``, the page's trusted box) for a model just
    added: the SHA-256 of the code it runs goes into their own trust store."""
    from sde_core.pipeline.local_trust import model_code, trust_model

    if model_code(ws, entry):
        trusted = trust_model(ws, entry)
        notes.append("trusted on this machine: " + ", ".join(f"{t.sha256[:12]}…" for t in trusted))


def _user_paths(message: str, workspace: str | Path, name: str, checkpoint: Path | None) -> str:
    """``message`` with the commands it suggests written for this model: the user's workspace,
    model name and checkpoint path instead of the placeholders ``WS``, ``NAME`` and the file's
    base name."""
    command = f"python -m sde_core workspace add-model {workspace} --name {name}"
    if checkpoint is not None:
        message = message.replace(
            f"add-model WS --name NAME --checkpoint {checkpoint.name}",
            f"add-model {workspace} --name {name} --checkpoint {checkpoint}",
        )
    return message.replace("python -m sde_core workspace add-model WS --name NAME", command)


def _accuracy_rows(
    ws: Workspace, spec: ModelSpec, bundle: Any
) -> tuple[np.ndarray, np.ndarray, Path] | None:
    """The D_r sample an original or retrained classifier is checked on (None: no check)."""
    from sde_core.inputs.indices import load_index_file

    if not _checks_accuracy(spec, bundle):
        return None
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train))
    return _sample_rows(spec, bundle, forget, ws.root)


def _checks_accuracy(spec: ModelSpec, bundle: Any) -> bool:
    """Whether a model is checked on a sample of D_r: an original or retrained classifier."""
    role = spec.role or guess_role(spec.name)
    if not spec.check_accuracy or role not in ("original", "retrained"):
        return False
    return bool(bundle.num_classes >= 2 and bundle.spec.kind != "text")


def _sample_rows(
    spec: ModelSpec, bundle: Any, forget: np.ndarray, root: Path
) -> tuple[np.ndarray, np.ndarray, Path] | None:
    """:func:`_accuracy_rows` for a forget set already read (a workspace being built)."""
    if not _checks_accuracy(spec, bundle):
        return None
    x, y = accuracy_sample(bundle, forget)
    return x, y, root


def _arch_file_of(ws: Workspace, spec: ModelSpec, base: Path) -> _ArchFile | None:
    """The pinned ``file:`` architecture of ``spec`` (paths relative to ``base``), or None."""
    from sde_core.inputs.external_archs import is_file_arch

    if not is_file_arch(spec.arch):
        return None
    return _pin_arch_file(ws, str(spec.arch), spec.trusted, base)


def _family_default_layer(ws: Workspace, notes: list[str]) -> None:
    """In a workspace whose checkpoint models are all of one family whose layers replace the
    classifier's (a regressor's ``prediction``, a denoiser's ``denoised@σ_t``), make a
    ``[defaults] layer`` still at the settings default the family's default layer."""
    layer = ws.defaults.layer
    families = {f.name: f for f in (family_of_entry(m.arch, layer) for m in ws.models)}
    if len(families) != 1 or any(m.precomputed for m in ws.models) or layer != EvalSettings().layer:
        return
    (family,) = families.values()
    own = family.output_aliases
    if own is None or ws.defaults.layer in own:  # the classifier's layers (or its own output)
        return
    ws.defaults = dataclasses.replace(ws.defaults, layer=family.default_layer)
    notes.append(f"default layer set to {family.default_layer!r} (a {family.label}'s)")


def _precomputed_default_layer(
    ws: Workspace, new: str, new_layers: list[str], notes: list[str]
) -> None:
    """In a workspace of precomputed models only, make ``[defaults] layer`` one that every
    activations file holds (the new model's file may still be staged: its layers are given)."""
    from sde_core.pipeline.model_inputs import entry_layers

    sets = [set(new_layers if m.name == new else entry_layers(ws, m) or []) for m in ws.models]
    if all(ws.defaults.layer in s for s in sets):
        return
    shared = sorted(set.intersection(*sets))
    if shared:
        ws.defaults = dataclasses.replace(ws.defaults, layer=shared[0])
        notes.append(f"default layer set to {shared[0]!r} (held by every activations file)")
    else:
        notes.append("the activations files share no layer: evaluate with --layer")


def guess_role(name: str) -> str:
    """A first guess of a model's role from its file name (the user can change it)."""
    low = name.lower()
    if "retrain" in low:
        return "retrained"
    if "orig" in low:
        return "original"
    if "rand" in low or "init" in low:
        return "random"
    return "unlearned"
