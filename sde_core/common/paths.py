"""The one path policy of SDE Explorer: which files a workspace, a command or a page may read.

Every path a workspace names (dataset root, index files, forget set, checkpoints, activations
files) and every folder typed into the dashboard is resolved with :func:`resolve_in_roots`:
symlinks are followed and the result must lie inside one of the *allowed roots*; ``..``
components, NUL bytes and names longer than the file system allows are refused before the file
system is touched.

Where the roots come from:

- A workspace's files (library, CLI and dashboard alike): the workspace folder itself plus the
  folders listed in ``$SDE_DATA_ROOTS`` (``os.pathsep``-separated) — :func:`env_roots` — plus any
  roots the caller passes explicitly (``load_workspace(path, roots=[...])``).
- A folder typed into the dashboard: :func:`allowed_roots` — ``$SDE_DATA_ROOTS`` or, when it is
  unset, the working directory and its ``assets/`` folder (where the bundled demos live).

Every refusal raises :class:`~sde_core.errors.PathError` (an ``InputError``) whose message names
the path and the fix, never the content of the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from sde_core.errors import PathError

__all__ = [
    "MAX_FOLDER_ENTRIES",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "ROOTS_ENV",
    "allowed_roots",
    "check_folder_in_roots",
    "check_path_text",
    "env_roots",
    "is_inside",
    "resolve_in_roots",
]

#: Environment variable listing the folders data may live in (``os.pathsep``-separated).
ROOTS_ENV = "SDE_DATA_ROOTS"
#: Longest path and file-name component (bytes, UTF-8) accepted; the Linux limits.
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
#: Most files and sub-folders a named folder (a model or tokenizer folder, a ``save_to_disk``
#: dataset) may hold: each is resolved and checked, so the walk is bounded.
MAX_FOLDER_ENTRIES = 20_000


def _entries(env: Mapping[str, str] | None) -> list[str]:
    env = os.environ if env is None else env
    raw = env.get(ROOTS_ENV, "")
    return [e for e in raw.split(os.pathsep) if e.strip()]


def _resolve_root(entry: str | Path, base: Path) -> Path:
    root = Path(entry).expanduser()
    return (root if root.is_absolute() else base / root).resolve()


def env_roots(env: Mapping[str, str] | None = None, cwd: str | Path | None = None) -> list[Path]:
    """The folders listed in ``$SDE_DATA_ROOTS`` (relative entries against ``cwd``), resolved;
    empty when the variable is unset."""
    base = Path(cwd) if cwd is not None else Path.cwd()
    return [_resolve_root(e, base) for e in _entries(env)]


def allowed_roots(
    env: Mapping[str, str] | None = None, cwd: str | Path | None = None
) -> list[Path]:
    """The folders a folder typed into the dashboard may point into: ``$SDE_DATA_ROOTS`` or,
    when unset, the working directory and its ``assets/`` folder; symlinks resolved."""
    base = Path(cwd) if cwd is not None else Path.cwd()
    return env_roots(env, base) or [base.resolve(), (base / "assets").resolve()]


def check_path_text(path: object, what: str = "path") -> str:
    """``path`` as text after the checks that need no file system access.

    Raises:
        PathError: not a string/Path, empty, a NUL byte, a ``..`` component, or longer than
            :data:`MAX_PATH_BYTES` (or a component longer than :data:`MAX_NAME_BYTES`).
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise PathError(f"{what} must be a path string, got {type(path).__name__} {path!r:.40}")
    text = path.strip()
    if not text:
        raise PathError(f"{what} is empty: give a path")
    if "\x00" in text:
        raise PathError(f"{what} {text!r:.80} contains a NUL byte: give a plain path")
    if len(text.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise PathError(f"{what} is longer than {MAX_PATH_BYTES} bytes: give a shorter path")
    parts = Path(text).parts
    long = [p for p in parts if len(p.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES]
    if long:
        raise PathError(
            f"{what} has a name of {len(long[0].encode('utf-8', 'surrogateescape'))} bytes; "
            f"the file system allows {MAX_NAME_BYTES}: use a shorter name"
        )
    if ".." in parts:
        raise PathError(
            f"{what} {text!r} contains '..': give a path without parent references "
            "(an absolute path inside the allowed folders, or one relative to the workspace)"
        )
    return text


def is_inside(path: Path, roots: Sequence[Path]) -> bool:
    """Whether the (already resolved) ``path`` equals or lies below one of ``roots``."""
    return any(path == r or path.is_relative_to(r) for r in roots)


def _roots_text(roots: Sequence[Path]) -> str:
    return ", ".join(str(r) for r in roots) or "(none)"


def resolve_in_roots(
    path: object,
    roots: Sequence[Path],
    *,
    what: str = "path",
    must_exist: bool = True,
    base: str | Path | None = None,
) -> Path:
    """Resolve ``path`` (following symlinks) and check that it stays inside ``roots``.

    Args:
        path: the path as written (relative paths join ``base``, default the first root).
        roots: resolved allowed folders.
        what: how the message names the path (e.g. ``"models[2].checkpoint"``).
        must_exist: also require the resolved path to exist.
        base: folder relative paths are relative to.

    Returns:
        The resolved absolute path.

    Raises:
        PathError: see :func:`check_path_text`; outside every root (a symlink counts where it
            points); missing when ``must_exist``.
    """
    text = check_path_text(path, what)
    if not roots:
        raise PathError(f"no allowed folders are configured for {what}: set {ROOTS_ENV}")
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        candidate = Path(base if base is not None else roots[0]) / candidate
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops, unreadable components
        raise PathError(f"{what} {text!r} cannot be resolved ({type(exc).__name__})") from None
    if not is_inside(resolved, roots):
        link = " (symbolic links count where they point)" if resolved != candidate else ""
        raise PathError(
            f"{what} {resolved} is outside the allowed folders {_roots_text(roots)}{link}: move "
            f"the file into the workspace folder or add its folder to {ROOTS_ENV}"
        )
    if len(os.fsencode(resolved)) >= MAX_PATH_BYTES:  # joined to its base: too long to open
        raise PathError(
            f"{what} is {len(os.fsencode(resolved))} bytes long once joined to its folder; the "
            f"file system allows {MAX_PATH_BYTES - 1}: give a shorter path"
        )
    if must_exist and not resolved.exists():
        raise PathError(f"{what} {resolved} does not exist: check the spelling")
    return resolved


def check_folder_in_roots(folder: Path, roots: Sequence[Path], *, what: str = "folder") -> int:
    """Check that every file and sub-folder below ``folder`` (already resolved) resolves
    inside ``roots``, so a loader that opens the folder's files by name (transformers reading
    ``model.safetensors``, a tokenizer reading ``tokenizer.json``, ``datasets`` reading its
    shards) never reads outside them through a symbolic link. Symlinked sub-folders are
    followed (their own links count too); the walk stops at :data:`MAX_FOLDER_ENTRIES`.

    Returns:
        The number of entries checked.

    Raises:
        PathError: an entry outside every root (named, with where it points), too many
            entries, or one that cannot be resolved.
    """
    count = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        for name in (*dirnames, *filenames):
            count += 1
            if count > MAX_FOLDER_ENTRIES:
                raise PathError(
                    f"{what} {folder} holds more than {MAX_FOLDER_ENTRIES:,} files and folders "
                    "(MAX_FOLDER_ENTRIES): point it at the folder that holds only the model, "
                    "tokenizer or dataset files"
                )
            entry = Path(dirpath) / name
            shown = f"{what} file {entry.relative_to(folder).as_posix()}"
            resolve_in_roots(str(entry), roots, what=shown, must_exist=False)
    return count
