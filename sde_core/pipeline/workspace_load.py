"""Reading ``workspace.toml``: parse and type-check it into a ``Workspace``.

:func:`load_workspace` refuses a file above the caps of :mod:`sde_core.pipeline.workspace` and
raises :class:`~sde_core.errors.WorkspaceError` naming the field; :func:`defaults_from_table`
turns ``[defaults]`` into :class:`~sde_core.pipeline.settings.EvalSettings` with one problem per
bad field. What the file means beyond its types is checked by
:mod:`sde_core.pipeline.workspace_checks`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sde_core.common.paths import (
    check_path_text,
    env_roots,
    resolve_in_roots,
)
from sde_core.common.toml_limits import read_toml
from sde_core.errors import SDEError, SettingsError, WorkspaceError
from sde_core.pipeline.criterion import criterion_from_table
from sde_core.pipeline.settings import EvalSettings, with_stated_design
from sde_core.pipeline.workspace import (
    _VERSION,
    MAX_DESCRIPTION_CHARS,
    MAX_MODELS,
    MAX_TABLE_KEYS,
    MAX_TOML_BYTES,
    MAX_TOML_DEPTH,
    WORKSPACE_FILE,
    CheckpointRef,
    ModelEntry,
    Problem,
    Workspace,
    _toml_file,
    _type_name,
)
from sde_core.pipeline.workspace_checks import check_workspace

__all__ = ["defaults_from_table", "load_workspace"]


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
