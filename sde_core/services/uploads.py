"""Checks of user-supplied files before anything loads them: names, sizes, suffixes, formats.

:func:`inspect_upload` tells what an uploaded checkpoint is *without running any of its code*
(it reads the zip directory only), so a front end can ask the user to vouch
for a TorchScript archive or a full pickle before it is loaded.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from sde_core.errors import InputError

__all__ = [
    "ACTIVATION_SUFFIXES",
    "MAX_UPLOAD_MB",
    "UploadInfo",
    "check_upload",
    "file_suffix",
    "guess_role",
    "inspect_upload",
    "safe_name",
]

#: Precomputed activations files (see :mod:`sde_core.inputs.precomputed`).
ACTIVATION_SUFFIXES = (".npz", ".parquet")
#: Largest accepted upload in MiB (also ``server.maxUploadSize`` in ``.streamlit/config.toml``).
MAX_UPLOAD_MB = 200

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(name: str) -> str:
    """A file-name-safe version of an uploaded file's or model's name (no folders, no dots
    at the start); raises :class:`InputError` when nothing usable is left."""
    base = Path(str(name).replace("\\", "/").replace("\x00", "")).name
    cleaned = _SAFE.sub("_", base).lstrip(".")[:200]
    if not cleaned.strip("_"):
        raise InputError(f"{name!r:.60} is not a usable file name: rename the file")
    return cleaned


def file_suffix(name: str, suffixes: Sequence[str]) -> str | None:
    """The longest of ``suffixes`` that ``name`` ends with (case-insensitive), or None."""
    low = name.lower()
    found = [s for s in suffixes if low.endswith(s)]
    return max(found, key=len) if found else None


def check_upload(
    name: str, size: int, suffixes: Sequence[str], *, max_mb: int = MAX_UPLOAD_MB
) -> str:
    """Check an uploaded file's name and size; return its safe file name.

    Raises:
        InputError: wrong suffix, empty file or larger than ``max_mb`` MiB.
    """
    safe = safe_name(name)
    if file_suffix(safe, suffixes) is None:
        shown = Path(safe).suffix or "suffix-less"
        raise InputError(f"{safe} is a {shown} file; upload one of {', '.join(suffixes)}")
    if size <= 0:
        raise InputError(f"{safe} is empty (0 bytes): upload the complete file")
    if size > max_mb * 1024 * 1024:
        raise InputError(f"{safe} has {size / 2**20:.0f} MiB; the limit is {max_mb} MiB")
    return safe


def guess_role(name: str) -> str:
    """A first guess of a model's role from its file name (the user can change it)."""
    low = name.lower()
    if "retrain" in low:
        return "retrained"
    if "orig" in low:
        return "original"
    if "rand" in low or "init" in low:
        return "random"
    return "unlearned"


@dataclass(frozen=True)
class UploadInfo:
    """What an uploaded checkpoint is, found without loading it (a file on disk is described by
    :class:`sde_core.inputs.checkpoint_files.CheckpointInfo`).

    Attributes:
        format: ``"safetensors"``, ``"torchscript"`` (runs code when loaded: needs trust),
            or ``"pickle"`` (``torch.save``; loaded with ``weights_only`` unless trusted).
        arch, arch_kwargs: the architecture recorded in a safetensors header (else None/{}).
    """

    format: str
    arch: str | None = None
    arch_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_trust(self) -> bool:
        """Whether loading it at all requires the user's explicit trust."""
        return self.format == "torchscript"


def inspect_upload(name: str, data: bytes) -> UploadInfo:
    """What uploaded checkpoint bytes are, from their zip directory; nothing in them is executed
    (safetensors metadata is read on save)."""
    if name.lower().endswith(".safetensors"):
        return UploadInfo("safetensors")
    return UploadInfo(_zip_format(io.BytesIO(data)))


def _zip_format(fh: BinaryIO) -> str:
    """``"torchscript"`` for a TorchScript archive (code inside), else ``"pickle"``."""
    try:
        with zipfile.ZipFile(fh) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return "pickle"
    code = any("/code/" in n for n in names)
    return "torchscript" if code and any(n.endswith("/constants.pkl") for n in names) else "pickle"
