"""The local trust store: which code the person running SDE Explorer has chosen to run.

A model whose files are code (a TorchScript archive, a full pickle, a Hugging Face folder with
pickled weights or custom code, a ``file:net.py:Net`` class) runs only with an opt-in given by
the person running the tool — never by a file that came with the workspace. A
``workspace.toml`` may *say* ``trusted = true`` (the model needs trust) and record hashes, but
a received folder cannot trust itself: the opt-in is this store, a JSON file in the user's
configuration folder, keyed by the SHA-256 of the code that runs (a checkpoint's bytes, a model
folder's files, a ``file:`` class's file and every Python module beside and below it).

Only explicit actions write it: ``workspace add-model --trusted``, ``workspace trust``, and the
dashboard's "trusted" box when adding a model. A changed file has another hash, so it is refused
until it is trusted again.

What the store does **not** do: it does not sandbox the code it admits (that code runs in the
isolated child of :mod:`sde_core.inputs.isolation`, which is not a sandbox either), and it does
not protect itself: anything running as your user can edit it, as it can edit your files.

Where it lives: ``$SDE_TRUST_STORE`` when set, else ``$XDG_CONFIG_HOME/sde-explorer/trusted.json``
(``~/.config/sde-explorer/trusted.json``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sde_core.common.fsio import atomic_write_text
from sde_core.errors import InputError

__all__ = [
    "MAX_STORE_BYTES",
    "TRUST_STORE_ENV",
    "is_trusted",
    "trust",
    "trust_store_path",
    "trusted_entries",
    "untrust",
]

#: Environment variable naming the trust store file.
TRUST_STORE_ENV = "SDE_TRUST_STORE"
#: Largest trust store read (bytes); a larger file is refused, not parsed.
MAX_STORE_BYTES = 4 * 2**20
_FORMAT = "sde-trust-store"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def trust_store_path(env: Mapping[str, str] | None = None) -> Path:
    """The trust store file (it need not exist yet)."""
    env = os.environ if env is None else env
    if env.get(TRUST_STORE_ENV, "").strip():
        return Path(env[TRUST_STORE_ENV]).expanduser()
    base = env.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    return Path(base).expanduser() / "sde-explorer" / "trusted.json"


def _broken(path: Path, why: str) -> InputError:
    return InputError(
        f"the trust store {path} {why}: delete it (every model is then untrusted until you trust "
        f"it again) or point {TRUST_STORE_ENV} at another file"
    )


def trusted_entries(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """``{sha256: {"label": …, "added": …}}`` of every trusted content hash (empty when the
    store does not exist).

    Raises:
        InputError: the store is not a regular file, too large, or not a trust store.
    """
    file = trust_store_path() if path is None else path
    if not file.exists():
        return {}
    if not file.is_file():
        raise _broken(file, "is not a regular file")
    try:
        if file.stat().st_size > MAX_STORE_BYTES:
            raise _broken(file, f"is larger than {MAX_STORE_BYTES // 2**20} MiB")
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, InputError):
            raise
        raise _broken(file, f"cannot be read ({type(exc).__name__})") from None
    entries = data.get("trusted") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(entries, dict):
        raise _broken(file, "is not an SDE trust store")
    return {
        k: (v if isinstance(v, dict) else {}) for k, v in entries.items() if _HEX64.match(str(k))
    }


def is_trusted(digest: str | None, path: Path | None = None) -> bool:
    """Whether the content hash ``digest`` is in the trust store."""
    return bool(digest) and digest in trusted_entries(path)


def _write(file: Path, entries: dict[str, dict[str, Any]]) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"format": _FORMAT, "trusted": entries}, indent=1, sort_keys=True)
    atomic_write_text(file, text + "\n")


def trust(digest: str, label: str, path: Path | None = None) -> Path:
    """Record ``digest`` (a SHA-256, hex) as trusted, with ``label`` saying what it is.
    Returns the store file.

    Raises:
        InputError: a malformed digest, or an unreadable store.
    """
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise InputError(f"a trusted hash must be a hex SHA-256, got {digest!r:.80}")
    file = trust_store_path() if path is None else path
    entries = trusted_entries(file)
    added = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    entries[digest] = {"label": str(label)[:500], "added": added}
    _write(file, entries)
    return file


def untrust(digest: str, path: Path | None = None) -> bool:
    """Remove ``digest`` from the store; whether it was there."""
    file = trust_store_path() if path is None else path
    entries = trusted_entries(file)
    if digest not in entries:
        return False
    del entries[digest]
    _write(file, entries)
    return True
