"""Architectures from outside the registry: timm models, and a user's own class in a ``.py`` file.

- ``timm:<name>`` is any model of the optional `timm` package (``pip install -e '.[timm]'``),
  always built with ``pretrained=False`` (nothing is downloaded).
- ``file:<path>.py:<Class>`` is the ``nn.Module`` subclass ``Class`` defined in a Python file.
  The file is **code**: :func:`load_file_class` executes it, and callers reach it only for a
  model the user marked trusted (the per-file opt-in). The file's bytes are read once, hashed
  (SHA-256), compared with the pin when the architecture string carries one
  (``file:<path>.py:<Class>#sha256=<hex>``, what a workspace records) and exactly those bytes
  are executed, so a file changed after it was trusted is refused before any of it runs.

:func:`loaded_file_class` returns a class only when the same file content was already loaded by
:func:`load_file_class` in this process, so asking for the layers or shapes of a ``file:``
architecture never runs code that was not explicitly admitted.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import re
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from sde_core.errors import CheckpointError

__all__ = [
    "CODE_SUFFIXES",
    "FILE_PREFIX",
    "MAX_CODE_ENTRIES",
    "MAX_CODE_FILES",
    "TIMM_EXTRA_HINT",
    "TIMM_PREFIX",
    "FileArch",
    "accepted_kwargs",
    "code_digest",
    "file_arch_string",
    "is_file_arch",
    "load_file_class",
    "loaded_file_class",
    "parse_file_arch",
    "timm_builder",
]

FILE_PREFIX = "file:"
TIMM_PREFIX = "timm:"
_PIN = "#sha256="
_CLASS_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
#: How to install the optional timm extra (named in every message about a missing timm).
TIMM_EXTRA_HINT = "pip install -e '.[timm]' (or pip install timm)"

_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str, str], type[nn.Module]] = {}


@dataclass(frozen=True)
class FileArch:
    """A parsed ``file:`` architecture.

    Attributes:
        path: the Python file (as written: relative paths are relative to the caller's folder).
        class_name: the class inside it (dotted for a nested class).
        sha256: the pinned SHA-256 (hex) of the file's bytes, or ``None`` when not pinned.
    """

    path: Path
    class_name: str
    sha256: str | None = None


def is_file_arch(arch: object) -> bool:
    """Whether ``arch`` names a class in a Python file (``file:...``): code, needs trust."""
    return isinstance(arch, str) and arch.startswith(FILE_PREFIX)


def file_arch_string(path: str | Path, class_name: str, sha256: str | None = None) -> str:
    """The architecture string of class ``class_name`` in ``path`` (pinned when ``sha256``)."""
    return f"{FILE_PREFIX}{path}:{class_name}" + (f"{_PIN}{sha256}" if sha256 else "")


def parse_file_arch(arch: str) -> FileArch:
    """Split ``file:PATH.py:CLASS[#sha256=HEX]`` into its parts.

    Raises:
        CheckpointError: not of that form (the message shows the form).
    """
    body = arch[len(FILE_PREFIX) :] if arch.startswith(FILE_PREFIX) else arch
    body, _, pin = body.partition(_PIN)
    path, sep, name = body.rpartition(":")
    if not sep or not path.endswith(".py") or not _CLASS_NAME.match(name):
        raise CheckpointError(
            f"architecture {arch!r} is not of the form file:PATH.py:CLASS (e.g. "
            "file:nets.py:MyCNN, the class your checkpoint's state dict was saved from)"
        )
    if pin and not _HEX64.match(pin):
        raise CheckpointError(f"architecture {arch!r} has a malformed sha256 pin")
    return FileArch(Path(path), name, pin or None)


#: File endings Python imports code from (sources, compiled modules, extension modules).
CODE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd")
#: Most code files, and most entries walked, below a ``file:`` architecture's folder.
MAX_CODE_FILES = 2_000
MAX_CODE_ENTRIES = 200_000


def code_digest(path: str | Path) -> str:
    """SHA-256 of the code a ``file:`` architecture can run: the file and every module it can
    import from its folder (the folder is first on ``sys.path`` while it is imported) — every
    :data:`CODE_SUFFIXES` file in the folder and below it, by relative path and content.

    Editing, adding or removing any of them changes the digest, so a neighbour module changed
    after trust is refused like the file itself. Hidden folders and ``__pycache__`` are
    skipped (Python never imports a module from them by name).

    Raises:
        CheckpointError: the file is unreadable, or its folder holds more than
            :data:`MAX_CODE_FILES` code files or :data:`MAX_CODE_ENTRIES` entries.
    """
    file = Path(path).resolve()
    if not file.is_file():
        raise CheckpointError(f"the architecture file {path} does not exist: check the path")
    folder = file.parent
    found: list[tuple[str, Path]] = []
    walked = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        walked += len(dirnames) + len(filenames)
        if walked > MAX_CODE_ENTRIES:
            raise CheckpointError(_crowded(file, f"{MAX_CODE_ENTRIES:,} files and folders"))
        for name in filenames:
            if name.endswith(CODE_SUFFIXES):
                found.append(
                    (Path(dirpath, name).relative_to(folder).as_posix(), Path(dirpath, name))
                )
        if len(found) > MAX_CODE_FILES:
            raise CheckpointError(_crowded(file, f"{MAX_CODE_FILES:,} Python files"))
    digest = hashlib.sha256(f"code\0{file.name}\n".encode())
    for name, member in sorted(found):
        try:
            digest.update(f"{name}\0{hashlib.sha256(member.read_bytes()).hexdigest()}\n".encode())
        except OSError as exc:
            raise CheckpointError(
                f"cannot read {member} beside the architecture file ({type(exc).__name__})"
            ) from None
    return digest.hexdigest()


def _crowded(file: Path, what: str) -> str:
    return (
        f"the folder of the architecture file {file.name} holds more than {what}: every module "
        "beside the file is pinned with it, so put the file (and the modules it imports) in a "
        "folder of their own"
    )


def _read_source(spec: FileArch) -> tuple[bytes, str]:
    try:
        data = spec.path.read_bytes()
    except OSError as exc:
        raise CheckpointError(
            f"cannot read the architecture file {spec.path} ({type(exc).__name__}): check the "
            "path in file:PATH.py:CLASS"
        ) from None
    digest = hashlib.sha256(data).hexdigest()
    if spec.sha256 is not None and digest != spec.sha256:
        raise CheckpointError(
            f"the architecture file {spec.path} changed since it was trusted (SHA-256 "
            f"{spec.sha256[:12]}… recorded, {digest[:12]}… now); none of it was run. Check the "
            "change, then trust the file again (add the model again with --trusted --replace)"
        )
    return data, digest


def _key(spec: FileArch, digest: str) -> tuple[str, str, str]:
    return (str(spec.path.resolve()), digest, spec.class_name)


def _find_class(module: types.ModuleType, spec: FileArch) -> type[nn.Module]:
    obj: Any = module
    for part in spec.class_name.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        found = sorted(
            n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, nn.Module)
        )
        what = "is not an nn.Module subclass" if obj is not None else "is not defined"
        raise CheckpointError(
            f"{spec.class_name} {what} in {spec.path.name}; the nn.Module classes there are: "
            f"{', '.join(found) or 'none'}"
        )
    return obj


def load_file_class(arch: str) -> type[nn.Module]:
    """Import the file of a ``file:`` architecture and return its class. RUNS THE FILE'S CODE:
    call it only for a model the user marked trusted.

    The file's folder is first on ``sys.path`` while it is imported (so it may import its
    neighbours); the module is registered under a name derived from its content.

    Raises:
        CheckpointError: malformed string, unreadable file, a pin that does not match, an
            import that fails (the exception's type and message), or no such ``nn.Module``.
    """
    spec = parse_file_arch(arch)
    data, digest = _read_source(spec)
    with _LOCK:
        key = _key(spec, digest)
        if key in _LOADED:
            return _LOADED[key]
        name = f"sde_user_arch_{digest[:16]}"
        module = types.ModuleType(name)
        module.__file__ = str(spec.path.resolve())
        folder = str(spec.path.resolve().parent)
        sys.modules[name] = module
        sys.path.insert(0, folder)
        try:
            importlib.invalidate_caches()
            exec(compile(data, str(spec.path), "exec"), module.__dict__)
        except Exception as exc:
            sys.modules.pop(name, None)
            first = str(exc).strip().split("\n")[0][:200]
            hint = (
                f"; put the folder of module {exc.name!r} on PYTHONPATH or install it"
                if isinstance(exc, ModuleNotFoundError)
                else ""
            )
            raise CheckpointError(
                f"cannot import the architecture file {spec.path} ({type(exc).__name__}: "
                f"{first}){hint}"
            ) from None
        finally:
            if folder in sys.path:
                sys.path.remove(folder)
        cls = _find_class(module, spec)
        _LOADED[key] = cls
        return cls


def loaded_file_class(arch: str) -> type[nn.Module] | None:
    """The class of a ``file:`` architecture if :func:`load_file_class` already imported this
    file content in this process, else ``None`` (nothing is run).

    Raises:
        CheckpointError: malformed string, unreadable file, or a pin that does not match.
    """
    spec = parse_file_arch(arch)
    _, digest = _read_source(spec)
    with _LOCK:
        return _LOADED.get(_key(spec, digest))


def accepted_kwargs(builder: Callable[..., Any]) -> set[str] | None:
    """Keyword names ``builder`` (a class or function) accepts; ``None`` when it takes
    ``**kwargs`` (any name) or has no readable signature."""
    target = builder.__init__ if isinstance(builder, type) else builder  # type: ignore[misc]
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    ok = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in params if p.kind in ok and p.name != "self"}


def _timm() -> Any:
    try:
        import timm
    except ImportError:
        raise CheckpointError(
            f"timm: architectures need the optional timm package, which is not installed: "
            f"{TIMM_EXTRA_HINT}"
        ) from None
    return timm


@functools.lru_cache(maxsize=32)
def timm_builder(name: str) -> tuple[Callable[..., nn.Module], tuple[int, ...]]:
    """The builder of ``timm:<name>`` (``pretrained=False``) and its input shape.

    Raises:
        CheckpointError: timm missing (names the extra), or no such timm model.
    """
    timm = _timm()
    if not timm.is_model(name):
        close = timm.list_models(f"*{name.split('_')[0]}*")[:8]
        raise CheckpointError(
            f"timm has no model {name!r}; similar names: {', '.join(close) or 'none'} "
            "(timm.list_models() lists them all)"
        )

    def build(**kwargs: Any) -> nn.Module:
        if kwargs.get("pretrained") or kwargs.get("pretrained_cfg_overlay"):
            raise CheckpointError(
                f"timm:{name} is always built without pretrained weights (nothing is "
                "downloaded); give the trained weights as the checkpoint"
            )
        kwargs = {k: v for k, v in kwargs.items() if k != "pretrained"}
        return timm.create_model(name, pretrained=False, **kwargs)

    cfg = timm.get_pretrained_cfg(name)
    size = tuple(getattr(cfg, "input_size", None) or (3, 224, 224))
    return build, size
