"""Checking a loaded workspace: every semantic problem of its dataset, files and models.

:func:`validate_workspace` lists the problems (:class:`~sde_core.pipeline.workspace.Problem`:
errors and warnings), :func:`check_workspace` raises on the errors, :func:`resolve_arch` gives the
architecture a model is built with (a ``file:`` class only once trusted on this machine).
"""

from __future__ import annotations

import math
from pathlib import Path

from sde_core.common.hashing import file_sha256
from sde_core.errors import CheckpointError, SDEError, WorkspaceError
from sde_core.families.registry import family_by_arch
from sde_core.pipeline.settings import EvalSettings
from sde_core.pipeline.workspace import (
    _ADD_HINT,
    PRECOMPUTED,
    ROLES,
    ModelEntry,
    Problem,
    Workspace,
    _type_name,
    check_model_name,
)

__all__ = ["check_workspace", "resolve_arch", "validate_workspace"]


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
    originals = ws.named("original")
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
    from sde_core.inputs.extraction import torch_device

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
