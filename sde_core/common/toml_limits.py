"""Read a TOML file only after bounding it: its size in bytes, then its nesting, then parse.

The standard parser (``tomllib``) is fast on ordinary files but takes time quadratic in the
depth of a dotted key (``a.b.c…``) or of nested arrays and inline tables, and memory in
proportion to the file; a 40 KB file with one key 20,000 levels deep takes it tens of seconds
and gigabytes. :func:`read_toml` refuses a file above ``max_bytes`` without reading it, and a
file whose nesting (dots in a key plus open brackets and braces, counted outside strings and
comments in one linear pass) exceeds ``max_depth`` before parsing it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from sde_core.errors import SDEError

__all__ = ["nesting_depth", "read_toml"]

_OPEN, _CLOSE = "[{", "]}"
#: Characters that end a key (or a number): the next dots belong to another key.
_KEY_END = "\n=,[]{}"


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``text`` as TOML: for every key, its number of dotted parts plus
    the brackets and braces open around it, counted outside strings and comments.

    A rough upper bound, linear in ``len(text)`` (a float value counts as one dot).
    """
    deepest = depth = dots = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            quote = text[i : i + 3] if text.startswith(c * 3, i) else c
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                i += 2 if c == '"' and text[i] == "\\" else 1
            i += len(quote)
            continue
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == ".":
            dots += 1
        elif c in _KEY_END:
            dots = 0
            if c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                depth = max(0, depth - 1)
        deepest = max(deepest, depth + dots + 1)
        i += 1
    return deepest


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
