"""What a check of an unchanged file found, kept across processes: file stamps and their records.

A page's first load at hundreds of models used to re-read every byte the workspace names in
each new process: the SHA-256 of every checkpoint (the workspace's content hash) and SQLite's
structural check of the results store (every page of a file of hundreds of MB). What such a
check finds holds while the file is unchanged, and whether a file changed is what its
**stamp** says (:func:`identity`): device, inode, size, modification and status-change times
(ns). Any write to the file changes its modification and status-change times; replacing the
file changes its inode; the status-change time cannot be set back by a user (``touch`` and
``os.utime`` set it to *now*). It is git's rule for its index, with git's guard against a
"racily clean" file: a file modified within the last :data:`SETTLED_NS` has no stamp, so
nothing about it is recorded or trusted (its timestamp may not yet tell a second write apart).

:class:`StampRecords` keeps such findings in a small JSON file in the workspace's cache folder
(``.sde-cache/checks.json``): key → (stamp, value). A value is served only for the exact stamp
it was recorded with. The file is a cache: a missing, unreadable, oversized or malformed record
file, or a malformed entry, counts as empty (the check runs again); a failed write is dropped.
Concurrent writers merge what they find; one may lose another's newest entries, never corrupt
the file (each write is atomic). It trusts the cache folder as much as the results store beside
it: whoever can write one can write the other (SECURITY.md).

:class:`RecordedHashes` is the workspace content hash's memo
(:func:`~sde_core.pipeline.workspace.workspace_hash`'s ``file_hashes``) backed by the records.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from sde_core.common.bounded_json import loads_bounded, read_regular_file
from sde_core.common.fsio import atomic_write_json
from sde_core.errors import SDEError

__all__ = [
    "MAX_RECORDS",
    "SETTLED_NS",
    "RecordedHashes",
    "Stamp",
    "StampRecords",
    "identity",
    "settled_ns",
]

#: A file modified less than this long ago (ns) has no stamp (git's "racily clean" rule).
SETTLED_NS = 2_000_000_000
#: Most entries a record file keeps (the newest); a workspace has at most 1,000 models.
MAX_RECORDS = 20_000
#: Largest record file read (bytes); a larger one counts as empty.
MAX_RECORD_BYTES = 8 * 2**20
_MAX_KEY_CHARS = 4_200
_MAX_VALUE_CHARS = 200
_MAX_STAMP_LEN = 16
_FORMAT = 1


def settled_ns() -> int:
    """:data:`SETTLED_NS`, read when called (a test may lower it)."""
    return SETTLED_NS


#: A file's stamp: integers that change whenever the file does (:func:`identity`).
Stamp = tuple[int, ...]


def identity(path: str | Path) -> Stamp | None:
    """``(device, inode, size, mtime_ns, ctime_ns)`` of the regular file ``path`` (symlinks
    followed), or ``None`` when it cannot be stat'ed, is not a regular file (a folder's times
    do not change when a file inside it does) or was modified (or its status changed) within
    the last :data:`SETTLED_NS` nanoseconds."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < settled_ns():
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _RecordError(SDEError):
    """A record file that cannot be used (counted as empty)."""


def _valid_stamp(value: object) -> bool:
    return (
        isinstance(value, list)
        and 0 < len(value) <= _MAX_STAMP_LEN
        and all(type(v) is int and -(2**63) <= v < 2**64 for v in value)
    )


def _entries(path: Path) -> dict[str, tuple[Stamp, str]]:
    """The well-formed entries of the record file at ``path`` (empty on any problem)."""
    try:
        data = read_regular_file(path, max_bytes=MAX_RECORD_BYTES, what="check record",
                                 error=_RecordError)  # fmt: skip
        doc = loads_bounded(data, max_depth=4, what="check record", error=_RecordError)
    except _RecordError:
        return {}
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        return {}
    raw = doc.get("entries")
    if not isinstance(raw, dict):
        return {}
    out: dict[str, tuple[Stamp, str]] = {}
    for key, entry in list(raw.items())[-MAX_RECORDS:]:
        if (
            len(key) <= _MAX_KEY_CHARS
            and isinstance(entry, list)
            and len(entry) == 2
            and _valid_stamp(entry[0])
            and isinstance(entry[1], str)
            and len(entry[1]) <= _MAX_VALUE_CHARS
        ):
            out[key] = (tuple(entry[0]), entry[1])
    return out


_WRITE_LOCK = threading.Lock()


class StampRecords:
    """Findings about files, each valid for one stamp, kept in the JSON file ``path``.

    The file is read once, at the first :meth:`get` that has a stamp to compare (a store
    whose check this process already trusts never reads it); :meth:`put` collects new findings
    and :meth:`flush` merges them into the file as it is then (atomically).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._read: dict[str, tuple[Stamp, str]] | None = None
        self._new: dict[str, tuple[Stamp, str]] = {}

    @property
    def _known(self) -> dict[str, tuple[Stamp, str]]:
        if self._read is None:
            self._read = _entries(self.path)
        return self._read

    def get(self, key: str, stamp: Stamp | None) -> str | None:
        """The value recorded for ``key`` with exactly ``stamp`` (None: nothing trusted)."""
        if stamp is None:
            return None
        found = self._new.get(key) or self._known.get(key)
        if found is None or found[0] != tuple(stamp):
            return None
        return found[1]

    def put(self, key: str, stamp: Stamp | None, value: str) -> None:
        """Record ``value`` for ``key`` at ``stamp`` (nothing when ``stamp`` is None, or the
        key or value is longer than a record holds)."""
        if stamp is None or len(key) > _MAX_KEY_CHARS or len(value) > _MAX_VALUE_CHARS:
            return
        self._new[key] = (tuple(int(v) for v in stamp), value)

    def flush(self) -> bool:
        """Merge the new findings into the file; whether it was written (a read-only folder,
        a full disk: not written, and nothing else happens)."""
        if not self._new:
            return False
        with _WRITE_LOCK:
            merged = _entries(self.path)
            for key, entry in self._new.items():
                merged.pop(key, None)  # re-inserted last: the newest are kept
                merged[key] = entry
            kept = list(merged.items())[-MAX_RECORDS:]
            doc = {"format": _FORMAT,
                   "entries": {k: [list(stamp), value] for k, (stamp, value) in kept}}  # fmt: skip
            try:
                atomic_write_json(self.path, doc, indent=None)
            except (OSError, ValueError):
                return False
        self._known.update(self._new)
        self._new.clear()
        return True


class RecordedHashes(MutableMapping[Path, str]):
    """SHA-256 of files (resolved path → hex digest) served from :class:`StampRecords` while a
    file's stamp is unchanged: :func:`~sde_core.pipeline.workspace.workspace_hash`'s
    ``file_hashes`` across processes.

    ``path in hashes`` takes the file's stamp; ``hashes[path] = digest`` records the digest
    only when the stamp is still the one taken by that test (the file did not change while it
    was hashed). Call :meth:`flush` to write what was hashed.
    """

    _PREFIX = "sha256:"

    def __init__(self, records: StampRecords) -> None:
        self.records = records
        self._seen: dict[Path, Stamp | None] = {}
        self._digests: dict[Path, str] = {}

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, Path):
            return False
        if path in self._digests:
            return True
        stamp = identity(path)
        self._seen[path] = stamp
        found = self.records.get(self._PREFIX + str(path), stamp)
        if found is None or len(found) != 64:
            return False
        self._digests[path] = found
        return True

    def __getitem__(self, path: Path) -> str:
        if path in self:  # a digest known here or recorded for the file's stamp
            return self._digests[path]
        raise KeyError(path)

    def __setitem__(self, path: Path, digest: str) -> None:
        self._digests[path] = digest
        before = self._seen.pop(path, None)
        if before is not None and identity(path) == before:
            self.records.put(self._PREFIX + str(path), before, digest)

    def __delitem__(self, path: Path) -> None:
        del self._digests[path]

    def __iter__(self) -> Iterator[Path]:
        return iter(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def flush(self) -> bool:
        """Write the digests recorded since the last flush (:meth:`StampRecords.flush`)."""
        return self.records.flush()
