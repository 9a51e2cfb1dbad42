"""Trust for a workspace's models comes from the person running the tool, never from the folder.

A ``workspace.toml`` marks a model ``trusted = true`` when its files are code and records their
hashes, but a workspace folder may come from someone else: what actually lets the code run is
the local trust store (:mod:`sde_core.common.trust_store`), which holds the SHA-256 of each
piece of code the user chose to run. :func:`model_code` lists what a model would run,
:func:`require_local_trust` refuses a model whose code is not in the store (nothing of it runs;
the message says how to trust it), :func:`trust_model` records it (``workspace trust``, and
``workspace add-model --trusted``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sde_core.common.hashing import file_sha256
from sde_core.common.trust_store import is_trusted, trust, trust_store_path, untrust
from sde_core.errors import WorkspaceError

__all__ = [
    "ModelCode",
    "model_code",
    "require_local_trust",
    "trust_command",
    "trust_model",
    "untrust_model",
    "untrusted_code",
]

_LOCK = threading.Lock()
_HASHES: dict[tuple[str, int, int, int, int], str] = {}


@dataclass(frozen=True)
class ModelCode:
    """One piece of code a model runs: its content hash and what it is, for the user."""

    sha256: str
    label: str


def _content_sha256(path: Path) -> str:
    """:func:`~sde_core.common.hashing.file_sha256`, remembered per file identity, size,
    mtime and ctime (a code checkpoint is hashed once per process, not at every step; ctime
    cannot be set back by a user)."""
    try:
        st = path.stat()
    except OSError:
        return file_sha256(path)
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _LOCK:
        if key in _HASHES:
            return _HASHES[key]
    digest = file_sha256(path)
    with _LOCK:
        _HASHES[key] = digest
    return digest


def model_code(ws: Any, m: Any) -> list[ModelCode]:
    """What model ``m`` of workspace ``ws`` would run: its ``file:`` class (the file and the
    modules beside it, :func:`~sde_core.inputs.external_archs.code_digest`) and its checkpoint
    when that is code (TorchScript, a full pickle, a model folder with pickled weights or
    custom code). Empty for a weights-only model. Nothing is run.

    Raises:
        WorkspaceError, CheckpointError: a file outside the roots, missing or unreadable.
    """
    from sde_core.inputs.checkpoint_files import inspect_checkpoint
    from sde_core.inputs.external_archs import code_digest, is_file_arch, parse_file_arch

    out = []
    if is_file_arch(m.arch):
        spec = parse_file_arch(m.arch)
        file = ws.path(
            spec.path.as_posix(), what=f"model {m.name!r} architecture file", must_exist=True
        )
        out.append(
            ModelCode(code_digest(file), f"file:{file}:{spec.class_name} and the modules beside it")
        )
    if m.checkpoint and not m.precomputed:
        ckpt = ws.path(
            m.checkpoint, what=f"model {m.name!r} checkpoint", must_exist=True, contents=True
        )
        info = inspect_checkpoint(ckpt)
        if info.is_code:
            out.append(ModelCode(_content_sha256(ckpt), f"{ckpt}: {info.describe()}"))
    return out


def untrusted_code(ws: Any, m: Any) -> list[ModelCode]:
    """The entries of :func:`model_code` that are not in the local trust store."""
    return [code for code in model_code(ws, m) if not is_trusted(code.sha256)]


def trust_command(ws: Any, m: Any) -> str:
    """The command that trusts model ``m`` locally."""
    return f"python -m sde_core workspace trust {Path(ws.root)} --model {m.name}"


def require_local_trust(ws: Any, m: Any) -> None:
    """Refuse model ``m`` when it runs code that is not in the local trust store.

    Raises:
        WorkspaceError: naming the code, why a workspace's ``trusted = true`` is not enough,
            and the command that trusts it; nothing was run.
    """
    missing = untrusted_code(ws, m)
    if not missing:
        return
    shown = "; ".join(code.label[:200] for code in missing[:3])
    raise WorkspaceError(
        f"model {m.name!r} runs code that you have not trusted on this machine ({shown}); "
        "nothing of it was run. 'trusted = true' in a workspace.toml is not enough, since a "
        "workspace folder may come from someone else: the opt-in is yours. Read the files, "
        f"then trust them: {trust_command(ws, m)} (it records their SHA-256 in your trust "
        f"store, {trust_store_path()}; a file changed later is refused until trusted again)"
    )


def trust_model(ws: Any, m: Any) -> list[ModelCode]:
    """Record every piece of code model ``m`` runs in the local trust store; returns them.

    Raises:
        WorkspaceError: ``m`` runs no code (nothing to trust).
    """
    code = model_code(ws, m)
    if not code:
        raise WorkspaceError(
            f"model {m.name!r} runs no code (its checkpoint holds weights only): nothing to trust"
        )
    where = ws.name or Path(ws.root).name
    for piece in code:
        trust(piece.sha256, f"{where} / {m.name}: {piece.label}")
    return code


def untrust_model(ws: Any, m: Any) -> list[ModelCode]:
    """Remove the code of model ``m`` from the local trust store; returns what was removed."""
    return [piece for piece in model_code(ws, m) if untrust(piece.sha256)]
