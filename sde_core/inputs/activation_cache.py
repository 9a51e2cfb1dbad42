"""The content-addressed on-disk activation cache: one ``.npy`` per key with a ``.json`` sidecar."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.common.fsio import atomic_write, atomic_write_text
from sde_core.common.hashing import array_sha256, stable_hash
from sde_core.errors import ActivationError

__all__ = ["ActivationCache", "CacheStats"]


@dataclass
class CacheStats:
    """Counters of an :class:`ActivationCache` since it was opened."""

    hits: int = 0
    misses: int = 0
    rebuilt: int = 0
    stored: int = 0


class ActivationCache:
    """On-disk activation cache: ``<root>/<key[:2]>/<key>.npy`` plus a ``.json`` sidecar.

    The sidecar records shape, dtype, the array's SHA-256 and what the key was made of. An entry
    whose file is unreadable or whose hash differs is deleted and reported as a miss (counted in
    ``stats.rebuilt``), so corrupt data are never returned. Writes are atomic (temp + rename).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ActivationError(
                f"cannot create activation cache folder {self.root}: {exc}"
            ) from exc
        self.stats = CacheStats()

    @staticmethod
    def key(
        model_hash: str,
        fingerprint: str,
        split: str,
        layer: str,
        pool: bool,
        indices: np.ndarray | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The entry digest and the fields it hashes (checkpoint hash, dataset fingerprint, split,
        layer, pooling, and the row subset when not the whole split)."""
        fields = {
            "model": model_hash,
            "data": fingerprint,
            "split": split,
            "layer": layer,
            "pool": bool(pool),
            "rows": None if indices is None else array_sha256(np.asarray(indices, dtype=np.int64)),
        }
        return stable_hash(fields), fields

    def _paths(self, digest: str) -> tuple[Path, Path]:
        folder = self.root / digest[:2]
        return folder / f"{digest}.npy", folder / f"{digest}.json"

    def contains(self, digest: str) -> bool:
        """Whether an entry exists (cheap: no read; :meth:`load` still checks its hash)."""
        npy, meta_path = self._paths(digest)
        return npy.is_file() and meta_path.is_file()

    def load(self, digest: str) -> np.ndarray | None:
        """The cached array, or ``None`` on a miss (a corrupt entry is deleted first)."""
        npy, meta_path = self._paths(digest)
        if not npy.exists() and not meta_path.exists():
            self.stats.misses += 1
            return None
        try:
            meta = json.loads(meta_path.read_text())
            arr = np.load(npy, allow_pickle=False)
            ok = (
                list(arr.shape) == meta["shape"]
                and str(arr.dtype) == meta["dtype"]
                and array_sha256(arr) == meta["sha256"]
            )
        except (OSError, ValueError, KeyError, EOFError):
            ok = False
        if not ok:
            self.delete(digest)
            self.stats.rebuilt += 1
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        return arr

    def store(self, digest: str, array: np.ndarray, fields: dict[str, Any] | None = None) -> None:
        """Write ``array`` (float32 ``(n, d)``) and its sidecar atomically."""
        arr = np.ascontiguousarray(array)
        npy, meta_path = self._paths(digest)
        npy.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "sha256": array_sha256(arr),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "key": fields or {},
        }
        try:
            atomic_write(npy, lambda tmp: _save_npy(tmp, arr))
            atomic_write_text(meta_path, json.dumps(meta))
        except OSError as exc:
            raise ActivationError(
                f"cannot write activation cache entry in {npy.parent}: {exc}"
            ) from exc
        self.stats.stored += 1

    def delete(self, digest: str) -> None:
        """Remove an entry (both files) if present."""
        for p in self._paths(digest):
            p.unlink(missing_ok=True)


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, arr)
