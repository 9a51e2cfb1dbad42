"""All-or-nothing writes of several files into one folder.

:class:`Staging` collects new files in a private scratch folder; :meth:`Staging.commit` then
moves them into the target folder with :func:`os.replace` (renames on one file system), the
files named ``last`` at the very end. A file that already exists is first moved aside and put
back if a later move fails, so a failed commit leaves the target as it was. Leaving the
``with`` block without committing (an error, a rejected upload) discards everything.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

__all__ = ["Staging"]


def _make_dirs(folder: Path) -> list[Path]:
    """``mkdir -p folder``; returns the folders it created, outermost first."""
    missing = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
    return list(reversed(missing))


def _remove_empty(folders: Iterable[Path]) -> None:
    for path in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):  # not empty (or gone): keep it
            path.rmdir()


class Staging:
    """New files for ``target`` (a folder), staged under ``scratch`` until :meth:`commit`.

    Args:
        target: the folder the files belong in (created on commit when missing).
        scratch: where to keep the staged files; must be on the same file system as ``target``
            (e.g. a cache folder inside it, or its parent for a new folder).
    """

    def __init__(self, target: str | Path, scratch: str | Path) -> None:
        self.target = Path(target)
        self._created = _make_dirs(Path(scratch))
        self.dir = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.staging-", dir=scratch))
        self._files: list[str] = []

    def __enter__(self) -> Staging:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.discard()

    def path(self, relative: str) -> Path:
        """The staged location of ``relative`` (its folder created); recorded for commit."""
        staged = self.dir / relative
        staged.parent.mkdir(parents=True, exist_ok=True)
        if relative not in self._files:
            self._files.append(relative)
        return staged

    def put(self, relative: str, content: bytes | Path) -> Path:
        """Stage ``content`` (bytes, or a file to copy) as ``relative``."""
        staged = self.path(relative)
        if isinstance(content, bytes):
            staged.write_bytes(content)
        else:
            shutil.copyfile(content, staged)
        return staged

    def commit(self, last: Iterable[str] = ()) -> list[Path]:
        """Move every staged file into ``target`` (the ``last`` ones at the end).

        Returns:
            The target paths, in the order they were moved.

        Raises:
            OSError: a move failed; the files moved so far were put back.
        """
        tail = [r for r in last if r in self._files]
        order = [r for r in self._files if r not in tail] + tail
        for rel in order:
            with open(self.dir / rel, "rb+") as fh:
                os.fsync(fh.fileno())
        backup = self.dir / ".replaced"
        created: list[Path] = []
        moved: list[tuple[Path, Path | None]] = []
        try:
            created += _make_dirs(self.target)
            for rel in order:
                dest = self.target / rel
                created += _make_dirs(dest.parent)
                saved = None
                if dest.exists():
                    saved = backup / rel
                    saved.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(dest, saved)
                moved.append((dest, saved))
                os.replace(self.dir / rel, dest)
        except OSError:
            for dest, saved in reversed(moved):
                if saved is not None:
                    os.replace(saved, dest)
                else:
                    dest.unlink(missing_ok=True)
            _remove_empty(created)
            raise
        self._files = []
        return [dest for dest, _ in moved]

    def discard(self) -> None:
        """Remove the scratch folder (and the folders created for it)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        _remove_empty(self._created)
