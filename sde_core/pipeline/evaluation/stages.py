"""Stage caches of an evaluation: each stage keyed by exactly what it depends on (method §12).

=================  ==========================================================  ================
stage              depends on                                                  cached as
=================  ==========================================================  ================
classic metrics    the model's softmax outputs, labels, D_f, seed              ``classic/``
distances          a subset's activations (layer, model) and rows (n, seed)    (in the kernel)
H (per group)      the distances + σ, estimator, K, the group's split seed     ``h/``
MMD baseline       the baseline subsets' activations + σ                       ``mmd/``
W2 baseline        one control's and one draw's references' activations        ``w2/``
decisions          H + bins (JSD), α (thresholds): recomputed, never cached    —
=================  ==========================================================  ================

So a bins or α change reads H from the cache and only re-decides; a σ change recomputes H and
the MMD baseline but reads the classic metrics and the exact W2 distances (O(n³) each) from the
cache. Keys are SHA-256 content hashes of the inputs (activations and rows by their bytes) and
include :data:`~sde_core.pipeline.settings.ALGORITHM_VERSION`, so a numerics change never serves
stale entries. Entries live in memory (an LRU) and, when a folder is given, on disk as ``.npz``
files written atomically (:func:`sde_core.common.fsio.atomic_write`): two processes filling the
same cache write identical bytes and a reader never sees a torn file; an unreadable file is
recomputed. The folder can be deleted at any time (``<workspace>/.sde-cache/stages``).

Distances are not stored: they cost one n×n×d product per subset (cheap beside the split
kernel) but n² floats each (8 MB per subset at n = 1000), and the kernel
(:func:`sde_core.stats.hsic.split_half_batch_stats`) computes them itself. The H key is built on
:func:`distance_key`, so when the kernel accepts precomputed squared distances, a distance stage
keyed by it plugs into :func:`compute_h` without changing any other key.
"""

from __future__ import annotations

import threading
import zipfile
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sde_core.common.fsio import atomic_write
from sde_core.common.hashing import array_sha256, stable_hash
from sde_core.pipeline.evaluation.plan import HGroup
from sde_core.pipeline.settings import ALGORITHM_VERSION, EvalSettings
from sde_core.stats.hsic import engine_device, split_half_batch_stats

__all__ = [
    "STAGE_KINDS",
    "StageCache",
    "classic_key",
    "compute_h",
    "distance_key",
    "h_key",
    "mmd_key",
    "w2_key",
]

#: Sub-folders (kinds) of the stage cache.
STAGE_KINDS = ("h", "classic", "mmd", "w2", "behaviour")

Arrays = dict[str, np.ndarray]


class StageCache:
    """Content-keyed stage results in memory (LRU) and optionally on disk.

    Args:
        folder: the on-disk cache folder (None: memory only).
        memory_items: entries kept in memory (0 with no folder: caching is off).
    """

    def __init__(self, folder: str | Path | None = None, memory_items: int = 2048) -> None:
        self.folder = None if folder is None else Path(folder)
        self.memory_items = int(memory_items)
        self._memory: OrderedDict[tuple[str, str], Arrays] = OrderedDict()
        self._lock = threading.Lock()
        #: How many lookups were answered (memory or disk) and missed, per kind.
        self.hits: dict[str, int] = dict.fromkeys(STAGE_KINDS, 0)
        self.misses: dict[str, int] = dict.fromkeys(STAGE_KINDS, 0)

    @property
    def enabled(self) -> bool:
        """Whether anything is cached (keys are only computed when it is)."""
        return self.folder is not None or self.memory_items > 0

    def _path(self, kind: str, key: str) -> Path:
        assert self.folder is not None
        return self.folder / kind / key[:2] / f"{key}.npz"

    def get(self, kind: str, key: str) -> Arrays | None:
        """The arrays stored under ``(kind, key)``, or None."""
        if not self.enabled:
            return None
        with self._lock:
            found = self._memory.get((kind, key))
            if found is not None:
                self._memory.move_to_end((kind, key))
                self.hits[kind] += 1
                return found
        if self.folder is not None:
            path = self._path(kind, key)
            try:
                with np.load(path, allow_pickle=False) as npz:
                    arrays = {name: npz[name] for name in npz.files}
            except (OSError, ValueError, zipfile.BadZipFile, EOFError):
                arrays = None  # missing or unreadable: recompute
            if arrays is not None:
                self._remember(kind, key, arrays)
                self.hits[kind] += 1
                return arrays
        self.misses[kind] += 1
        return None

    def put(self, kind: str, key: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Store ``arrays`` under ``(kind, key)`` (in memory, and atomically on disk)."""
        if not self.enabled:
            return
        data = {name: np.asarray(value) for name, value in arrays.items()}
        self._remember(kind, key, data)
        if self.folder is not None:
            atomic_write(self._path(kind, key), lambda tmp: _save_npz(tmp, data))

    def _remember(self, kind: str, key: str, arrays: Arrays) -> None:
        if self.memory_items <= 0:
            return
        with self._lock:
            self._memory[(kind, key)] = arrays
            self._memory.move_to_end((kind, key))
            while len(self._memory) > self.memory_items:
                self._memory.popitem(last=False)


def _save_npz(path: Path, arrays: Arrays) -> None:
    """Write ``arrays`` as an uncompressed ``.npz`` file."""
    np.savez(path, **arrays)  # type: ignore[arg-type]


def _versioned(stage: str, **parts: object) -> str:
    return stable_hash({"stage": stage, "algorithm": ALGORITHM_VERSION, **parts})


def distance_key(acts_digest: str, rows: np.ndarray) -> str:
    """Key of the squared distances within each subset: the activations and the rows only."""
    return _versioned("distances", acts=acts_digest, rows=array_sha256(np.asarray(rows)))


def h_key(dist_key: str, sigma: float, settings: EvalSettings, seed: int) -> str:
    """Key of one group's H values and spreads: its distances, σ, estimator, K, split seed and
    the device it runs on (the float32 path of a GPU gives other last digits; ``"auto"`` is
    keyed as the device it resolves to here)."""
    return _versioned(
        "h",
        distances=dist_key,
        sigma=repr(float(sigma)),
        estimator=settings.estimator,
        splits=settings.splits,
        seed=int(seed),
        device=engine_device(str(settings.device)),
    )


def classic_key(digests: Mapping[str, str], seed: int) -> str:
    """Key of the classic metrics: the softmax outputs, labels, D_f and D_r, and the seed of
    the membership attack's shadow sample."""
    return _versioned("classic", **dict(digests), seed=int(seed))


def mmd_key(digests: Mapping[str, str], sigma: float) -> str:
    """Key of one draw's MMD distances: its baseline subsets' and references' activations."""
    return _versioned("mmd", **dict(digests), sigma=repr(float(sigma)))


def w2_key(digests: Mapping[str, str]) -> str:
    """Key of one control's exact W2 distances to its draw's S_IT and S_OOT."""
    return _versioned("w2", **dict(digests))


def compute_h(acts: np.ndarray, group: HGroup, sigma: float, settings: EvalSettings) -> Arrays:
    """H values ``(s, K)`` and spreads ``(s,)`` of one group of subsets (the split kernel).

    The only call of the split-half kernel in the evaluation: a precomputed-distance kernel
    replaces this one call (its distances keyed by :func:`distance_key`).
    """
    stats = split_half_batch_stats(
        acts,
        group.rows,
        n_splits=settings.splits,
        sigma=sigma,
        estimator=settings.estimator,  # type: ignore[arg-type]
        seed=group.seed,
        device=settings.device,
    )
    return {"h": stats.h, "spread": stats.spread}
