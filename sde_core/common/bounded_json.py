"""Read a JSON file someone else may have made: a regular file, bounded in size, depth and digits.

A report or a signature handed over by another person is hostile input until it has been
checked. :func:`read_regular_file` reads only a *regular* file (a FIFO would block forever, a
link to ``/dev/zero`` would read until memory runs out): it checks the type with ``os.stat``
before opening, opens without blocking, checks the opened file again (``fstat``: the path may
have been swapped in between) and reads at most ``max_bytes + 1`` bytes. :func:`loads_bounded`
parses JSON text with a cap on the nesting depth (checked in one linear pass before the parser,
which recurses and would raise ``RecursionError`` on 100,000 nested brackets) and on the digits
of one integer (Python refuses to convert more than 4,300 digits with a ``ValueError``; an SDE
document has none above 20). Every refusal raises the caller's :class:`~sde_core.errors.SDEError`
type with a one-line message naming the file and the limit.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.errors import SDEError

__all__ = ["MAX_INT_DIGITS", "json_depth", "loads_bounded", "read_regular_file"]

#: Most digits of one JSON integer (an int64 has 19; a 5,000-digit number is refused).
MAX_INT_DIGITS = 32
#: JSON strings: their brackets do not nest.
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPENERS = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSERS = np.frombuffer(b"]}", dtype=np.uint8)


def read_regular_file(
    path: str | Path, *, max_bytes: int, what: str, error: type[SDEError]
) -> bytes:
    """The bytes of ``path`` if it is a regular file (symlinks followed) of at most ``max_bytes``.

    Raises:
        error: missing, not a regular file (a FIFO, a device, a folder), larger than
            ``max_bytes``, or unreadable.
    """
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise error(f"{what} {p} does not exist") from None
    except (OSError, ValueError) as exc:
        raise error(f"cannot read {what} {p} ({type(exc).__name__})") from None
    if not stat.S_ISREG(mode):
        raise error(
            f"{what} {p} is not a regular file (a folder, pipe or device): give the file itself"
        )
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        raise error(f"cannot read {what} {p} ({exc.strerror or type(exc).__name__})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped for a pipe or device after the stat
            raise error(f"{what} {p} is not a regular file: give the file itself")
        if info.st_size > max_bytes:
            raise error(
                f"{what} {p} has {info.st_size} bytes; at most {max_bytes} are read: it is not "
                f"a {what}"
            )
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise error(f"cannot read {what} {p} ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:  # it grew while being read
        raise error(f"{what} {p} has more than {max_bytes} bytes: it is not a {what}")
    return data


def json_depth(data: bytes) -> int:
    """The deepest nesting of brackets and braces in JSON bytes, outside strings (an upper
    bound for malformed input); linear in ``len(data)``."""
    bare = _STRINGS.sub(b'""', data)
    codes = np.frombuffer(bare, dtype=np.uint8)
    steps = np.isin(codes, _OPENERS).astype(np.int64) - np.isin(codes, _CLOSERS)
    return int(np.cumsum(steps).max(initial=0))


def loads_bounded(data: bytes | str, *, max_depth: int, what: str, error: type[SDEError]) -> Any:
    """Parse JSON after checking its nesting; integers of more than :data:`MAX_INT_DIGITS`
    digits are refused. ``NaN`` and ``Infinity`` parse as floats (the caller decides).

    Raises:
        error: not UTF-8, nested deeper than ``max_depth``, an integer too long, or not JSON.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    depth = json_depth(raw)
    if depth > max_depth:
        raise error(f"{what} is nested {depth} levels deep; at most {max_depth} are read")

    def parse_int(text: str) -> int:
        if len(text.lstrip("-")) > MAX_INT_DIGITS:
            raise error(
                f"{what} holds an integer of {len(text.lstrip('-'))} digits; at most "
                f"{MAX_INT_DIGITS} are read"
            )
        return int(text)

    try:
        text = raw.decode("utf-8")
        return json.loads(text, parse_int=parse_int)
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON ({exc})") from None
    except RecursionError:  # defence in depth: json_depth is an upper bound
        raise error(f"{what} is nested too deeply") from None
