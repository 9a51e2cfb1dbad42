"""Content hashes used as explicit cache keys (files, arrays, settings).

All hashes are hex SHA-256 digests. They are stable across processes and machines, unlike
Python's ``hash`` or Streamlit's sampled array hashing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["array_sha256", "file_sha256", "stable_hash"]

_CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks.

    A folder (a Hugging Face model folder, a ``datasets.save_to_disk`` folder) hashes as the
    SHA-256 of its files' relative POSIX paths and SHA-256s, in sorted order, so renaming,
    adding, removing or changing any file inside changes the hash; symbolic links are followed
    like the loaders follow them.
    """
    target = Path(path)
    if target.is_dir():
        entries = sorted(
            (p.relative_to(target).as_posix(), p) for p in target.rglob("*") if p.is_file()
        )
        digest = hashlib.sha256(b"folder\n")
        for name, file in entries:
            digest.update(f"{name}\0{file_sha256(file)}\n".encode())
        return digest.hexdigest()
    digest = hashlib.sha256()
    with open(target, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def array_sha256(arr: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and every byte (C order)."""
    arr = np.ascontiguousarray(arr)
    digest = hashlib.sha256()
    digest.update(f"{arr.dtype.str}|{arr.shape}|".encode())
    digest.update(arr.data.cast("B"))
    return digest.hexdigest()


def stable_hash(obj: Any) -> str:
    """SHA-256 of a JSON-serialisable object with sorted keys (settings, manifests)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
