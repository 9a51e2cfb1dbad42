"""Read a TOML file only after bounding it: its size in bytes, then its nesting, then parse.

The standard parser (``tomllib``) is fast on ordinary files but takes time quadratic in the
depth of a dotted key (``a.b.c…``) or of nested arrays and inline tables, and memory in
proportion to the file; a 40 KB file with one key 20,000 levels deep takes it tens of seconds
and gigabytes. :func:`read_toml` refuses a file above ``max_bytes`` without reading it, and a
file whose nesting (:func:`nesting_depth`: dots in a key plus open brackets and braces, outside
strings and comments, in one linear pass) exceeds ``max_depth`` before parsing it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.errors import SDEError

__all__ = ["nesting_depth", "read_toml"]

#: Strings (basic, literal, multi-line) and comments: their brackets and dots do not nest.
_OPAQUE = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*'
)
#: Characters that end a key (or a number): the next dots belong to another key.
_KEY_END = re.compile(r"[\n=,\[\]{}]")
_OPENERS = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSERS = np.frombuffer(b"]}", dtype=np.uint8)


def nesting_depth(text: str) -> int:
    """An upper bound on the nesting of ``text`` as TOML: the most dots in one key (a dotted key
    ``a.b.c`` is 3 levels deep) plus the deepest run of open brackets and braces, plus one;
    strings and comments do not count.

    Linear in ``len(text)`` and computed by regular expressions and NumPy (milliseconds for a
    megabyte), so it can run before the parser, whose time grows with the square of the depth.
    """
    bare = _OPAQUE.sub('""', text)
    codes = np.frombuffer(bare.encode("utf-8", "surrogateescape"), dtype=np.uint8)
    steps = np.isin(codes, _OPENERS).astype(np.int64) - np.isin(codes, _CLOSERS)
    brackets = int(np.cumsum(steps).max(initial=0))
    dots = max((part.count(".") for part in _KEY_END.split(bare)), default=0)
    return brackets + dots + 1


def read_toml(
    path: Path, *, max_bytes: int, max_depth: int, what: str, error: type[SDEError]
) -> dict[str, Any]:
    """Parse the TOML file ``path`` after checking its size and nesting.

    Args:
        path: the file. max_bytes: largest size read. max_depth: deepest nesting parsed (see
            :func:`nesting_depth`). what: how messages name the file. error: the error type.

    Raises:
        error: the file is too large, nested too deeply, unreadable, not UTF-8 or not TOML.
    """
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error(
                f"{what} {path} has {size} bytes; at most {max_bytes} are read: it is not a "
                f"{what} (or holds far more than one needs)"
            )
        with open(path, "rb") as fh:
            text = fh.read(max_bytes + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {path} ({type(exc).__name__}): it must be UTF-8 text") from None
    depth = nesting_depth(text)
    if depth > max_depth:
        raise error(
            f"{what} {path} is nested {depth} levels deep (keys and brackets); at most "
            f"{max_depth} are read: flatten it"
        )
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path} is not valid TOML ({exc}): fix the syntax") from None
    except RecursionError:
        raise error(f"{what} {path} is nested too deeply: flatten it") from None
