"""Atomic file writes: a reader sees the old file or the complete new one, never a torn one.

Every writer of the library goes through :func:`atomic_write`: the content is written to a
temporary file with a unique name beside the target (so two processes writing the same target
never share a temporary file), flushed to disk with ``fsync`` and renamed over the target with
:func:`os.replace`; on any failure the temporary file is removed and the target is untouched.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_json", "atomic_write_text"]


def _temporary_name(path: Path) -> Path:
    # keep the suffix last: some writers (numpy, torch, safetensors) look at it
    return path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp{path.suffix}")


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a fresh temporary path beside ``path``, fsync it, rename it.

    Args:
        path: the target file; its folder is created when missing.
        write: writes the whole content to the path it is given (it creates the file itself,
            so the result gets the usual permissions).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: the folder is not writable or ``write`` failed (nothing was replaced).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(target)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def atomic_write_bytes(path: str | Path, content: bytes) -> Path:
    """Write ``content`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(content))


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | Path, document: Any, indent: int | None = 2) -> Path:
    """Write ``document`` as JSON (strict: NaN/inf are refused) to ``path`` atomically."""
    text = json.dumps(document, indent=indent, allow_nan=False)
    return atomic_write_text(path, text + "\n")
