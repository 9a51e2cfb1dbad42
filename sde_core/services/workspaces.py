"""Creating and extending workspaces, for the command line and the dashboard (no UI code).

- :func:`create_workspace` — ``workspace init``: dataset, forget set (a file, a random fraction
  or whole classes) and ``[defaults]`` whose subset size fits the data.
- :func:`add_model` — ``workspace add-model`` and the Workspace page: an existing checkpoint
  (architecture read or inferred, loaded and checked against the dataset, SHA-256 recorded) or
  a model's precomputed activations file.
- :func:`build_from_uploads` — the Workspace page's "build a workspace" form.
- :func:`suggest_subset_size` and :func:`check_fits`.

Every write is staged and committed at once (:func:`~sde_core.pipeline.workspace.commit_files`):
a rejected request changes nothing on disk. Every file is checked under the path policy
(:mod:`sde_core.common.paths`). A TorchScript archive is never loaded unless the user vouched for
that file (``trusted``); full pickles are read with ``weights_only`` unless trusted.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.hashing import file_sha256
from sde_core.common.paths import check_path_text, env_roots, resolve_in_roots
from sde_core.common.staging import Staging
from sde_core.errors import CheckpointError, DataError, SDEError, SettingsError, WorkspaceError
from sde_core.families.registry import family_by_arch, folder_family
from sde_core.inputs.checkpoint_files import CHECKPOINT_SUFFIXES
from sde_core.inputs.indices import INDEX_SUFFIXES
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import (
    PRECOMPUTED,
    ROLES,
    WORKSPACE_FILE,
    ModelEntry,
    Problem,
    Workspace,
    cache_path,
    check_model_name,
    commit_files,
    fresh_model_path,
    load_workspace,
    relative_to_workspace,
    validate_workspace,
    workspace_toml,
)
from sde_core.services.preprocessing import accuracy_sample, check_accuracy, preprocessing_text
from sde_core.services.uploads import ACTIVATION_SUFFIXES, check_upload, file_suffix, guess_role
from sde_core.stats.class_mix import class_mix_reason

__all__ = [
    "AddedModel",
    "BuildRequest",
    "BuildResult",
    "CreatedWorkspace",
    "ModelSpec",
    "Upload",
    "add_model",
    "add_uploaded_model",
    "build_from_uploads",
    "check_fits",
    "check_outputs",
    "create_workspace",
    "null_check_limit",
    "null_check_warning",
    "suggest_subset_size",
]


# ------------------------------------------------------------------------------- checks


def _fit_inputs(bundle: Any) -> Any:
    """The first (at most) two training samples, the batch :func:`check_fits` runs."""
    x, _ = bundle.train.get_batch(np.arange(min(2, len(bundle.train))))
    return x


def _fit_failure(bundle: Any, problem: str) -> CheckpointError:
    return CheckpointError(
        f"the model cannot process the dataset's inputs of shape {tuple(bundle.input_shape)} "
        f"({problem}): check the architecture, its kwargs and the dataset"
    )


def check_fits(model: Any, bundle: Any, folder: Path | None = None) -> int:
    """Run ``model`` on two training samples and check it fits the dataset (a language model
    reads them as it will be evaluated: tokenised by its own folder's tokenizer when it has
    one, :func:`~sde_core.inputs.text_data.model_view`; ``folder`` is its model folder).

    Returns:
        The number of outputs per sample.

    Raises:
        CheckpointError: the model cannot process the inputs, or its number of outputs differs
            from the dataset's number of classes (the message says which kwarg to pass).
    """
    import torch

    from sde_core.inputs.text_data import model_view

    if folder is not None and folder.is_dir():
        bundle = model_view(bundle, folder)
    try:
        with torch.inference_mode():
            out = model(_fit_inputs(bundle))
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        from sde_core.inputs.text_data import vocabulary_problem

        said = vocabulary_problem(bundle, model, folder)  # a language model: the tokens, named
        if said:
            raise CheckpointError(said) from None
        first = str(exc).strip().split("\n")[0][:200]
        raise _fit_failure(bundle, f"{type(exc).__name__}: {first}") from None
    if isinstance(out, tuple | list):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        return check_outputs(type(out).__name__, bundle)
    return check_outputs(tuple(out.shape), bundle)


def _outputs(model: Any, x: np.ndarray, batch: int = 50) -> np.ndarray | None:
    """``model``'s outputs on ``x`` in batches (the first element of a tuple output), or None
    when they are not tensors."""
    import torch

    parts = []
    with torch.inference_mode():
        for start in range(0, len(x), batch):
            out = model(torch.from_numpy(x[start : start + batch]))
            out = out[0] if isinstance(out, tuple | list) else out
            if not isinstance(out, torch.Tensor):
                return None
            parts.append(out.float().cpu().numpy())
    return np.concatenate(parts) if parts else None


def check_outputs(shape: tuple[int, ...] | str, bundle: Any) -> int:
    """The number of outputs per sample of a model whose output for a batch has ``shape``
    (the type's name when it is not a tensor), checked against the dataset's classes.

    Raises:
        CheckpointError: not ``(batch, classes)``, or another number of classes.
    """
    if isinstance(shape, str) or len(shape) != 2:
        raise CheckpointError(
            f"the model returns {shape} for a batch; a classifier returns (batch, classes)"
        )
    outputs = int(shape[1])
    if bundle.num_classes >= 2 and outputs != bundle.num_classes:
        raise CheckpointError(
            f"the model has {outputs} outputs but the dataset has {bundle.num_classes} classes: "
            f"pass the architecture's class count (e.g. --arch-kwarg num_classes="
            f"{bundle.num_classes}) or choose the matching dataset"
        )
    return outputs


def _activation_layers(file: Path, name: str, bundle: Any) -> list[str]:
    """The layers of a model's activations file, after checking its rows fit the dataset."""
    from sde_core.inputs.precomputed import load_precomputed

    pre = load_precomputed(file, model=name)
    for split in ("train", "test"):
        rows = next(iter(pre.features[split].values())).shape[0]
        n_split = len(bundle.split(split))
        source = bundle.source_indices[split]
        if rows != n_split and (source.size == 0 or rows <= int(source.max())):
            raise DataError(
                f"{file} has {rows} {split} rows but the dataset's {split} split has {n_split}: "
                "export one row per sample, in the dataset's order"
            )
    return pre.layers


def null_check_limit(n_test: int) -> int:
    """The largest subset size that keeps the null check on: two disjoint subsets of n rows in
    the control half of D_te (method §12), i.e. n ≤ ⌊⌊|D_te|/2⌋/2⌋."""
    return (int(n_test) // 2) // 2


def null_check_warning(n: int, n_test: int) -> str | None:
    """A sentence saying, before any run, that subset size ``n`` switches the null check off
    (and the largest n that keeps it), or None when it stays on."""
    limit = null_check_limit(n_test)
    if n <= limit:
        return None
    return (
        f"warning: subset size {n} switches the null check off — it needs two disjoint subsets "
        f"of n rows in the control half of D_te ({n_test // 2} rows); choose n ≤ {limit} to "
        "keep it (without it a model shown over-unlearned has no false-positive check beside it)"
    )


def suggest_subset_size(
    n_train: int, n_test: int, forget: np.ndarray, base: EvalSettings | None = None
) -> int:
    """The largest round subset size n (at most ``base.subset_size``) the evaluation can draw
    with every part disjoint as method §12 asks: n ≤ |D_f| (targets), a reference and a control
    half of D_r of at least n each, and two disjoint subsets of n in the control half of D_te
    for the null check (n ≤ |D_te|/4; the reference half then holds the OOT reference and its
    panel), confirmed by the evaluation's own subset drawing. When D_te is too small for a null
    check with n ≥ 4, the largest n without it (:func:`null_check_warning` says so).

    Raises:
        DataError: the pools are too small for any subset (n < 4).
    """
    from sde_core.pipeline.evaluation.plan import draw_subsets

    base = base or EvalSettings()
    f = np.unique(np.asarray(forget, dtype=np.int64))
    cap = min(base.subset_size, f.size, (n_train - f.size) // 2, n_test // 2)
    if null_check_limit(n_test) >= 4:
        cap = min(cap, null_check_limit(n_test))
    n = _round_down(cap)
    while n >= 4:
        try:
            draw_subsets(n_train, n_test, f, dataclasses.replace(base, subset_size=n))
            return n
        except SettingsError:
            n = _round_down(n - max(1, n // 4))
    raise DataError(
        f"the data are too small for an evaluation: |D_f| = {f.size}, |D_r| = "
        f"{n_train - f.size}, |D_te| = {n_test}; subsets need at least 4 rows, and D_r and D_te "
        "at least two subsets each"
    )


def _size_reason(n: int, n_train: int, n_test: int, n_forget: int) -> str:
    """Why ``init`` chose subset size ``n``: the bound each pool sets."""
    bounds = {
        "|D_f| (targets)": n_forget,
        "|D_r|/2 (a reference and a control half)": (n_train - n_forget) // 2,
        "|D_te|/4 (null check: two subsets in the control half)": null_check_limit(n_test),
    }
    tight = min(bounds, key=lambda k: bounds[k])
    listed = ", ".join(f"{k} = {v}" for k, v in bounds.items())
    return (
        f"subset size {n}: the largest round n that fits every pool disjointly ({listed}; "
        f"the tightest is {tight}); the null check is "
        f"{'on' if n <= null_check_limit(n_test) else 'off'}"
    )


def _round_down(n: int) -> int:
    step = 100 if n >= 1000 else 50 if n >= 200 else 10 if n >= 40 else 1
    return (n // step) * step


# ------------------------------------------------------------------------------- init


@dataclass
class CreatedWorkspace:
    """What :func:`create_workspace` made.

    Attributes:
        workspace: the new workspace (written). n_train, n_test, n_forget: row counts.
        notes: sentences for the user (the chosen subset size, the default layer...).
    """

    workspace: Workspace
    n_train: int
    n_test: int
    n_forget: int
    notes: list[str] = field(default_factory=list)


def _roots(roots: Iterable[str | Path] | None) -> tuple[Path, ...]:
    return tuple(Path(r).resolve() for r in roots) if roots is not None else tuple(env_roots())


def _npy_bytes(arr: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(arr, dtype=np.int64))
    return buffer.getvalue()


def create_workspace(
    folder: str | Path,
    dataset: Mapping[str, Any],
    *,
    forget: str | None = None,
    random_forget: float | None = None,
    forget_classes: Sequence[int | str] | None = None,
    forget_split: str | None = None,
    forget_column: str | None = None,
    seed: int = 0,
    name: str = "",
    description: str = "",
    defaults: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    roots: Iterable[str | Path] | None = None,
) -> CreatedWorkspace:
    """Create a workspace (no models yet), all files at once.

    Args:
        folder: the new workspace folder.
        dataset: the ``[dataset]`` table (paths relative to ``folder`` or absolute).
        forget, random_forget, forget_classes, forget_split, forget_column: exactly one: an
            index file (relative to ``folder``), a fraction of D_tr drawn with ``seed``, class
            ids/names, or for a text dataset a split file of records (relative to ``folder``;
            TOFU's ``forget10.json``) or a true/false column of D_tr
            (:func:`sde_core.inputs.text_data.forget_rows`); the last four are written to
            ``forget.npy``.
        defaults: ``[defaults]`` values; ``subset_size`` (unless given) is chosen with
            :func:`suggest_subset_size`, ``layer`` of an activations dataset from its file.
        roots: allowed folders besides ``folder`` (default ``$SDE_DATA_ROOTS``).

    Raises:
        WorkspaceError, DataError, SettingsError: invalid inputs; nothing was written.
    """
    from sde_core.inputs.data import load_dataset
    from sde_core.inputs.indices import class_indices, load_index_file

    try:
        root = Path(check_path_text(folder, "workspace folder")).resolve()
    except SDEError as exc:
        raise WorkspaceError(str(exc)) from None
    if (root / WORKSPACE_FILE).exists() and not overwrite:
        raise WorkspaceError(
            f"{root / WORKSPACE_FILE} already exists: pass overwrite to replace it"
        )
    given = [
        x is not None for x in (forget, random_forget, forget_classes, forget_split, forget_column)
    ]
    if sum(given) > 1:
        raise SettingsError(
            "give exactly one forget set: an index file, a random fraction, classes, or for "
            "text a split file or a column"
        )
    ws = Workspace(
        root=root, dataset=dict(dataset), forget_indices=forget or "forget.npy", name=name,
        description=description, roots=_roots(roots),
    )  # fmt: skip
    bundle = load_dataset(ws.dataset_spec())
    n_train, n_test = len(bundle.train_labels), len(bundle.test_labels)
    files: dict[str, bytes | Path] = {}
    file_mask = None if bundle.precomputed is None else bundle.precomputed.forget_mask
    notes = []
    if bundle.spec.kind not in ("text", "activations"):
        notes.append(f"models get {preprocessing_text(bundle)}: match the training's")
    if not any(given):
        if file_mask is None:
            raise SettingsError(
                "give exactly one forget set: an index file (--forget), a random fraction "
                "(--random-forget), classes (--forget-class), or for text a split file "
                "(--forget-split) or a column (--forget-column); an activations dataset may "
                "also carry it as a 'forget' mask or 'forget_idx' array"
            )
        idx = np.flatnonzero(file_mask).astype(np.int64)
        files["forget.npy"] = _npy_bytes(idx)
        notes.append(f"forget set: the {idx.size} rows the activations file marks as forget")
    elif forget is not None:
        idx = load_index_file(ws.path(forget, what="forget set", must_exist=True), n_train)
    elif forget_split is not None or forget_column is not None:
        from sde_core.inputs.text_data import TextDataset, forget_rows

        if not isinstance(bundle.train, TextDataset):
            raise SettingsError(
                "a forget split file or column is for text datasets (kind = 'text'); give an "
                "index file, a random fraction or classes"
            )
        split_path = (
            None
            if forget_split is None
            else ws.path(forget_split, what="forget split", must_exist=True)
        )
        idx = forget_rows(
            bundle.train, ws.dataset_spec().options, split_file=split_path, column=forget_column
        )
        files["forget.npy"] = _npy_bytes(idx)
    elif random_forget is not None:
        if isinstance(random_forget, bool) or not 0.0 < float(random_forget) < 1.0:
            raise SettingsError(
                f"random forget fraction {random_forget} must be in (0, 1), e.g. 0.2"
            )
        k = max(1, round(float(random_forget) * n_train))
        idx = np.sort(np.random.default_rng(seed).choice(n_train, size=k, replace=False))
        files["forget.npy"] = _npy_bytes(idx)
    else:
        idx = class_indices(bundle.train_labels, list(forget_classes or []), bundle.class_names)
        files["forget.npy"] = _npy_bytes(idx)
    if idx.size >= n_train:
        raise DataError("the forget set holds every training row: D_r would be empty")
    mix = class_mix_reason(
        bundle.train_labels, bundle.test_labels, idx, bundle.num_classes, bundle.class_names
    )
    if mix:
        notes.append(f"warning: evaluate will give no SDE verdict: {mix}")
    values = dict(defaults or {})
    if bundle.precomputed is not None and "layer" not in values:
        layers = bundle.precomputed.layers
        values["layer"] = "output" if "output" in layers else layers[0]
        notes.append(f"default layer {values['layer']!r} (the file holds {', '.join(layers)})")
    base = EvalSettings.from_mapping(values)
    if "subset_size" not in values:
        size = suggest_subset_size(n_train, n_test, idx, base)
        base = dataclasses.replace(base, subset_size=size)
        notes.append(_size_reason(size, n_train, n_test, int(idx.size)))
    warning = null_check_warning(base.subset_size, n_test)
    if warning is not None:
        notes.append(warning)
    ws.defaults = base
    if "root" in ws.dataset:
        ws.dataset["root"] = relative_to_workspace(ws, ws.dataset_spec().root)
    files[WORKSPACE_FILE] = workspace_toml(ws).encode()
    commit_files(root, files)
    return CreatedWorkspace(ws, n_train, n_test, int(idx.size), notes)


# ------------------------------------------------------------------------------- add-model


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

    from sde_core.inputs.activations import probe_trusted_checkpoint
    from sde_core.inputs.checkpoint_files import inspect_checkpoint, untrusted_message
    from sde_core.inputs.external_archs import is_file_arch
    from sde_core.inputs.models import load_checkpoint_details

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
    others = [m.name for m in ws.models if m.role == "original" and m.name != entry.name]
    if entry.role == "original" and others:
        raise WorkspaceError(
            f"the workspace already has an original model ({others[0]!r}): give this one "
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
    try:
        entry, notes, layers = _describe(
            spec, bundle, ws.defaults, files["checkpoint"], files["activations"], arch_file,
            _accuracy_rows(ws, spec, bundle) if files["checkpoint"] is not None else None,
        )  # fmt: skip
    except CheckpointError as exc:
        raise type(exc)(_user_paths(str(exc), workspace, spec.name, files["checkpoint"])) from None
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

    role = spec.role or guess_role(spec.name)
    if not spec.check_accuracy or role not in ("original", "retrained"):
        return None
    if bundle.num_classes < 2 or bundle.spec.kind == "text":
        return None
    forget = load_index_file(ws.path(ws.forget_indices), len(bundle.train))
    x, y = accuracy_sample(bundle, forget)
    return x, y, ws.root


def _arch_file_of(ws: Workspace, spec: ModelSpec, base: Path) -> _ArchFile | None:
    """The pinned ``file:`` architecture of ``spec`` (paths relative to ``base``), or None."""
    from sde_core.inputs.external_archs import is_file_arch

    if not is_file_arch(spec.arch):
        return None
    return _pin_arch_file(ws, str(spec.arch), spec.trusted, base)


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


# ------------------------------------------------------------------------------- uploads


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
        dataset_kind, dataset_path: the dataset (the path must lie inside the workspace folder
            or ``$SDE_DATA_ROOTS``, like every file a workspace names).
        forget: the forget-set upload. models: ``(upload, spec)`` per model file (checkpoints
            or activations files). name: the workspace's name. train_size: a random training
            subset (None: all). overwrite: replace an existing ``workspace.toml``.
    """

    folder: str
    dataset_kind: str
    dataset_path: str
    forget: Upload | None
    models: list[tuple[Upload, ModelSpec]]
    name: str = ""
    train_size: int | None = None
    overwrite: bool = False


@dataclass
class BuildResult:
    """The outcome: ``problems`` (nothing was written when one is an error) and the folder."""

    problems: list[Problem]
    folder: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def saved(self) -> bool:
        """Whether the workspace was written."""
        return self.folder is not None and not any(p.severity == "error" for p in self.problems)


def build_from_uploads(request: BuildRequest, page_roots: Sequence[Path]) -> BuildResult:
    """Validate a whole upload and write it as a new workspace — or write nothing.

    The folder must lie inside ``page_roots`` (see
    :func:`~sde_core.common.paths.allowed_roots`); the dataset path, like every file a
    workspace names, inside the folder or ``$SDE_DATA_ROOTS``. The uploads are written to a
    staging folder and checked there (dataset, forget set, every model loaded and run on two
    samples, names and roles, defaults that fit the data); only a fully valid set is moved into
    place, ``workspace.toml`` last.
    """
    from sde_core.inputs.data import load_dataset

    try:
        folder = resolve_in_roots(
            request.folder, page_roots, what="workspace folder", must_exist=False
        )
    except SDEError as exc:
        return BuildResult([Problem("workspace folder", str(exc))])
    if (folder / WORKSPACE_FILE).exists() and not request.overwrite:
        problem = f"{folder} already has a {WORKSPACE_FILE}: tick overwrite"
        return BuildResult([Problem("workspace folder", problem)])
    ws = Workspace(root=folder, dataset={"kind": request.dataset_kind}, forget_indices="")
    ws.name = request.name.strip() or folder.name
    problems: list[Problem] = []
    bundle, data_root = None, None
    try:
        data_root = ws.path(
            request.dataset_path, what="dataset path",
            must_exist=request.dataset_kind != "mnist1d",
        )  # fmt: skip
        ws.dataset["root"] = relative_to_workspace(ws, data_root)
        if request.train_size:
            ws.dataset["train_size"] = int(request.train_size)
        bundle = load_dataset(ws.dataset_spec())
    except SDEError as exc:
        problems.append(Problem("dataset", str(exc)))
    if request.forget is None:
        problems.append(Problem("forget_indices", "upload the forget set (.npy, .txt, .json, .pt)"))
    if not request.models:
        problems.append(Problem("models", "upload at least one checkpoint or activations file"))
    scratch = cache_path(folder, "staging") if folder.is_dir() else folder.parent
    notes: list[str] = []
    with Staging(folder, scratch) as staging:
        forget = None
        if request.forget is not None and bundle is not None:
            forget, found = _stage_forget(request.forget, staging, ws, len(bundle.train_labels))
            problems += found
        layer_sets: list[list[str]] = []
        for upload, spec in request.models if bundle is not None else []:
            entry, found, said, layers = _stage_model(upload, spec, staging, bundle, ws)
            problems += found
            notes += said
            if entry is not None:
                ws.models.append(entry)
                if layers is not None and entry.precomputed:
                    layer_sets.append(layers)
        if bundle is None or data_root is None or forget is None:
            return BuildResult(problems)
        try:
            ws.defaults = _fitting_defaults(bundle, forget, layer_sets, notes)
        except SDEError as exc:
            problems.append(Problem("defaults", str(exc)))
        if any(p.severity == "error" for p in problems):
            return BuildResult(problems)
        check = dataclasses.replace(
            ws, root=staging.dir, dataset={**ws.dataset, "root": str(data_root)},
            roots=(folder, *ws.roots),
        )  # fmt: skip
        problems += validate_workspace(check, check_data=True)
        if any(p.severity == "error" for p in problems):
            return BuildResult(problems)
        staging.put(WORKSPACE_FILE, workspace_toml(ws).encode())
        staging.commit(last=[WORKSPACE_FILE])
    for _, spec in request.models:
        if spec.trusted:
            _record_trust(ws, ws.model(spec.name), notes)
    return BuildResult(problems, folder, notes)


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
) -> tuple[ModelEntry | None, list[Problem], list[str], list[str] | None]:
    """Stage one uploaded model file under ``folder`` and describe it (or say what is wrong)."""
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
            arch_file,
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
            upload, spec, staging, bundle, ws, folder, replace
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
