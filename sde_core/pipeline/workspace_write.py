"""Writing a workspace: its ``workspace.toml`` text, atomic writes and the files it names.

:func:`workspace_toml` / :func:`write_workspace` write the file atomically, :func:`commit_files`
moves a staged set of files into place all at once (``workspace.toml`` last), :func:`rehash_models`
records the checkpoints' SHA-256, :func:`relative_to_workspace` and :func:`fresh_model_path` spell
the paths a new entry is written with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from sde_core.common.fsio import atomic_write_text
from sde_core.common.hashing import file_sha256
from sde_core.common.paths import (
    resolve_in_roots,
)
from sde_core.common.staging import Staging
from sde_core.common.toml_limits import nesting_depth
from sde_core.errors import SDEError, WorkspaceError
from sde_core.pipeline.workspace import (
    _VERSION,
    MAX_TOML_BYTES,
    MAX_TOML_DEPTH,
    WORKSPACE_FILE,
    ModelEntry,
    Workspace,
    _drop_none,
    _toml_file,
    _type_name,
    cache_path,
)
from sde_core.pipeline.workspace_load import _check_caps

__all__ = [
    "commit_files",
    "fresh_model_path",
    "rehash_models",
    "relative_to_workspace",
    "workspace_toml",
    "write_workspace",
]


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
