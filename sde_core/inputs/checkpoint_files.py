"""What a checkpoint file holds, found by reading its structure without running anything.

A checkpoint is either *weights* (tensors, numbers, strings and plain containers, plus the
harmless NumPy values training scripts keep next to them) or *code*:

- a **TorchScript archive** is a program: its ``forward`` and ``__setstate__`` run when it is
  loaded and used, and can read or write files;
- a **full pickle** names Python classes or functions (e.g. ``argparse.Namespace``, a model
  class, or anything else) that unpickling would import and call.

:func:`inspect_checkpoint` tells them apart by reading the zip directory and disassembling the
pickles (:mod:`pickletools`, which only parses), never by loading the file. Loading code needs
the explicit per-file trusted opt-in (see :mod:`sde_core.inputs.models`); weights load with
``torch.load(weights_only=True)`` under :func:`safe_globals`, which also admits the NumPy
allowlist :data:`NUMPY_SAFE_GLOBALS` (SalUn's ``main_forget`` checkpoints hold NumPy floats)
and the plain-data classes of :data:`PLAIN_DATA_SAFE_GLOBALS` (``argparse.Namespace``: timm's
``CheckpointSaver`` stores the training arguments in every checkpoint).
"""

from __future__ import annotations

import _compat_pickle
import argparse
import contextlib
import io
import json
import pickletools
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import torch

from sde_core.errors import CheckpointError

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "NUMPY_SAFE_GLOBALS",
    "PLAIN_DATA_SAFE_GLOBALS",
    "CheckpointFormat",
    "CheckpointInfo",
    "checkpoint_kind",
    "checkpoint_suffix",
    "folder_code",
    "has_checkpoint_suffix",
    "inspect_checkpoint",
    "json_object",
    "plain_text",
    "safe_globals",
    "untrusted_message",
]

#: File name endings of model checkpoints (``.pth.tar`` is what SalUn / Unlearn-Sparse write).
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".pth.tar", ".tar", ".bin", ".ckpt", ".safetensors")

CheckpointFormat = Literal[
    "safetensors", "torch-zip", "torch-legacy", "torchscript", "pickle", "hf-folder"
]
#: Pickled weight files of a Hugging Face model folder (``pytorch_model.bin`` and shards).
_HF_PICKLED_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt")
#: Pickles a ``transformers.Trainer`` writes next to the weights and no loader reads.
_HF_TRAINER_FILES = ("training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth")
_MAX_CONFIG = 10 * 2**20

_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = 0x80
_LEGACY_PICKLES = 5  # magic number, protocol, sys info, the object, storage keys
_MAX_HEADER = 100_000_000
_MAX_PICKLE = 256 * 2**20  # a zip record holding the object pickle (tensors live elsewhere)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def checkpoint_suffix(path: str | Path) -> str:
    """The checkpoint ending of a file name, lower-cased: ``".pth.tar"`` or the last suffix."""
    name = Path(path).name.lower()
    return ".pth.tar" if name.endswith(".pth.tar") else Path(name).suffix


def has_checkpoint_suffix(path: str | Path) -> bool:
    """Whether a file name ends like a checkpoint (one of :data:`CHECKPOINT_SUFFIXES`)."""
    return checkpoint_suffix(path) in CHECKPOINT_SUFFIXES


def plain_text(text: str, limit: int = 300) -> str:
    """``text`` on one line without terminal escape codes or control characters, shortened."""
    flat = _CONTROL.sub(" ", _ANSI.sub("", str(text)).replace("\n", " ").replace("\t", " "))
    flat = re.sub(r" {2,}", " ", flat).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# ------------------------------------------------------------------------------------------
# The weights allowlist
# ------------------------------------------------------------------------------------------


def _numpy_globals() -> list[Any]:
    """NumPy scalars, arrays and dtypes of non-object kinds, under NumPy 1.x and 2.x names."""
    core = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray  # type: ignore[attr-defined]
    scalar, reconstruct = core.scalar, core._reconstruct
    dtype_classes = {type(np.dtype(code)) for code in "?bhilqBHILQefdgFDGUS"}
    return [
        scalar,
        reconstruct,
        np.ndarray,
        np.dtype,
        *sorted(dtype_classes, key=lambda c: c.__name__),
        (scalar, "numpy.core.multiarray.scalar"),
        (reconstruct, "numpy.core.multiarray._reconstruct"),
        (scalar, "numpy._core.multiarray.scalar"),
        (reconstruct, "numpy._core.multiarray._reconstruct"),
    ]


#: The harmless non-tensor objects admitted next to weights: NumPy scalars (e.g. SalUn's MIA
#: scores, ``numpy.float64``), numeric/text arrays and dtypes. Object arrays are not included.
NUMPY_SAFE_GLOBALS: list[Any] = _numpy_globals()


#: Plain-data classes admitted next to weights. ``argparse.Namespace`` is what timm's
#: ``CheckpointSaver`` (and many ``train.py`` scripts) store as ``args``: the unpickler makes
#: an empty instance and fills its ``__dict__`` with values that must themselves be allowed
#: (numbers, text, containers, tensors); the class has no ``__setstate__``/``__reduce__`` of
#: its own, so nothing of the file's choosing runs. Subclasses are other classes and stay out.
PLAIN_DATA_SAFE_GLOBALS: list[Any] = [argparse.Namespace]


def safe_globals() -> contextlib.AbstractContextManager[None]:
    """A context in which ``torch.load(weights_only=True)`` also accepts NUMPY_SAFE_GLOBALS
    and PLAIN_DATA_SAFE_GLOBALS (what timm's own loader admits, ``argparse.Namespace``)."""
    return torch.serialization.safe_globals([*NUMPY_SAFE_GLOBALS, *PLAIN_DATA_SAFE_GLOBALS])


def _global_name(item: Any) -> str:
    if isinstance(item, tuple):
        return str(item[1])
    return f"{item.__module__}.{item.__qualname__}"


def _weights_globals() -> set[str]:
    """Dotted names a weights-only load accepts: torch's own allowlist, NumPy's and the plain
    data classes."""
    names = {_global_name(item) for item in [*NUMPY_SAFE_GLOBALS, *PLAIN_DATA_SAFE_GLOBALS]}
    names |= {_global_name(item) for item in torch.serialization.get_safe_globals()}
    try:  # torch's built-in allowlist (tensor rebuilders, storages, dtypes, OrderedDict, ...)
        from torch import _weights_only_unpickler

        names |= set(_weights_only_unpickler._get_allowed_globals())
    except (ImportError, AttributeError):  # pragma: no cover - older/newer torch layouts
        names |= {
            "collections.OrderedDict",
            "torch._utils._rebuild_tensor_v2",
            "torch._utils._rebuild_parameter",
            "torch.FloatStorage",
            "torch.HalfStorage",
            "torch.LongStorage",
        }
    return names


# ------------------------------------------------------------------------------------------
# Pickle disassembly (no execution)
# ------------------------------------------------------------------------------------------

_STRING_OPS = {
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "SHORT_BINSTRING",
    "BINSTRING",
    "STRING",
}
_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}
_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}


def _python3_name(module: str, attr: str) -> str:
    """The dotted name Python 3 resolves a protocol-0..2 ``GLOBAL`` to (``__builtin__.set`` is
    ``builtins.set``), as :mod:`pickle` does with ``fix_imports``."""
    module, attr = _compat_pickle.NAME_MAPPING.get((module, attr), (module, attr))
    return f"{_compat_pickle.IMPORT_MAPPING.get(module, module)}.{attr}"


def _pickle_globals(stream: IO[bytes]) -> set[str]:
    """Every class/function one pickle in ``stream`` would import, read by disassembly.

    ``GLOBAL``/``INST`` name it inline; ``STACK_GLOBAL`` takes the two strings pushed before it
    (resolved through the memo). A name that cannot be resolved statically, and the extension
    registry (``EXT1/2/4``), count as ``"<unresolved>"``, i.e. as code.

    Raises:
        ValueError: the bytes are not a well-formed pickle (pickletools' parse error).
    """
    found: set[str] = set()
    recent: list[str | None] = []
    memo: dict[int, str | None] = {}
    for op, arg, _pos in pickletools.genops(stream):
        name = op.name
        if name in ("GLOBAL", "INST"):
            module, _, attr = str(arg).partition(" ")
            found.add(_python3_name(module, attr))
            recent.append(None)
        elif name == "STACK_GLOBAL":
            pair = recent[-2:]
            if len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], str):
                found.add(f"{pair[0]}.{pair[1]}")
            else:
                found.add("<unresolved>")
            recent.append(None)
        elif name.startswith("EXT"):
            found.add("<unresolved>")
        elif name in _STRING_OPS:
            recent.append(arg if isinstance(arg, str) else None)
        elif name == "MEMOIZE":
            memo[len(memo)] = recent[-1] if recent else None
        elif name in _PUT_OPS and isinstance(arg, int):
            memo[arg] = recent[-1] if recent else None
        elif name in _GET_OPS and isinstance(arg, int):
            recent.append(memo.get(arg))
        else:
            recent.append(None)
        del recent[:-4]
    return found


def _scan_pickle_bytes(data: bytes, what: str, path: Path) -> set[str]:
    try:
        return _pickle_globals(io.BytesIO(data))
    except (ValueError, EOFError, IndexError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"cannot read checkpoint {path}: its {what} is not a valid pickle "
            f"({plain_text(str(exc), 120)}); the file is truncated or corrupt"
        ) from None


# ------------------------------------------------------------------------------------------
# Inspection
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint file holds (from :func:`inspect_checkpoint`; nothing was executed).

    Attributes:
        path: the file (or the Hugging Face model folder).
        format: ``"safetensors"``, ``"torch-zip"`` (``torch.save`` since PyTorch 1.6),
            ``"torch-legacy"`` (older ``torch.save``), ``"torchscript"``, ``"pickle"`` (a
            plain Python pickle) or ``"hf-folder"`` (a ``save_pretrained`` folder).
        size: the file size in bytes (a folder: the sum of its files).
        objects: every class/function the file's pickles name (sorted dotted names).
        code_objects: those a weights-only load would refuse (for a TorchScript archive, its
            ``__torch__`` classes; for a model folder, its pickled weight files and the custom
            model code its ``config.json`` names).
    """

    path: Path
    format: CheckpointFormat
    size: int
    objects: tuple[str, ...] = ()
    code_objects: tuple[str, ...] = ()

    @property
    def is_code(self) -> bool:
        """Loading or running the file would execute code from it (needs the trusted opt-in)."""
        return self.format == "torchscript" or bool(self.code_objects)

    @property
    def kind(self) -> Literal["weights", "torchscript", "full-pickle"]:
        """``"weights"``, ``"torchscript"`` (a program) or ``"full-pickle"`` (imports code)."""
        if self.format == "torchscript":
            return "torchscript"
        return "full-pickle" if self.code_objects else "weights"

    def describe(self) -> str:
        """One sentence in plain words for messages and the dashboard."""
        if self.format == "hf-folder":
            if self.code_objects:
                return (
                    "a Hugging Face model folder whose loading would run code from it: "
                    + ", ".join(self.code_objects[:4])
                )
            return "a Hugging Face model folder (config.json and safetensors weights)"
        if self.format == "torchscript":
            return (
                "a TorchScript archive: a compiled program whose code runs when it is loaded "
                "and used (it can read and write files)"
            )
        if self.code_objects:
            shown = ", ".join(self.code_objects[:4])
            more = f" and {len(self.code_objects) - 4} more" if len(self.code_objects) > 4 else ""
            return (
                f"a full Python pickle that would import and run {shown}{more} while loading "
                "(more than weights and plain values)"
            )
        if self.format == "safetensors":
            return "weights in safetensors format (tensors and text metadata only)"
        return "weights saved with torch.save (tensors, numbers, text and plain containers)"


def _safetensors_header_ok(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    n = int.from_bytes(head[:8], "little")
    return 2 <= n <= min(_MAX_HEADER, size - 8) and head[8:9] == b"{"


def _inspect_zip(path: Path, size: int, allowed: Callable[[str], bool]) -> CheckpointInfo:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            script = any(
                n.endswith("/constants.pkl") or n == "constants.pkl" or "/code/" in n for n in names
            )
            pickles = [n for n in names if n.endswith(".pkl") and not n.endswith("debug_pkl")]
            if not any(n.endswith("data.pkl") for n in pickles):
                raise CheckpointError(
                    f"{path} is a zip archive without a data.pkl record: it is not a PyTorch "
                    "checkpoint (save models with torch.save or safetensors)"
                )
            objects: set[str] = set()
            for name in pickles:
                if zf.getinfo(name).file_size > _MAX_PICKLE:
                    raise CheckpointError(
                        f"{path}: its record {name} unpacks to "
                        f"{zf.getinfo(name).file_size / 2**20:.0f} MiB, far more than any "
                        "checkpoint's object pickle; the file is not a sane checkpoint"
                    )
                objects |= _scan_pickle_bytes(zf.read(name), name, path)
    except CheckpointError:
        raise
    except Exception as exc:  # zipfile raises many types on damaged archives
        raise CheckpointError(
            f"cannot read checkpoint {path} ({plain_text(str(exc), 120)}): the zip archive is "
            "truncated or corrupt; re-save or re-copy it"
        ) from None
    if any(o.startswith("__torch__.") for o in objects):
        script = True
    code = sorted(o for o in objects if not allowed(o))
    if script:
        code = sorted({o for o in objects if o.startswith("__torch__.")} | set(code))
    return CheckpointInfo(
        path, "torchscript" if script else "torch-zip", size, tuple(sorted(objects)), tuple(code)
    )


def _inspect_stream(path: Path, size: int, allowed: Callable[[str], bool]) -> CheckpointInfo:
    objects: set[str] = set()
    scanned = 0
    with open(path, "rb") as stream:
        for _ in range(_LEGACY_PICKLES):
            start = stream.tell()
            if stream.read(1) != bytes([_PICKLE_PROTO]):
                break
            stream.seek(start)
            try:
                objects |= _pickle_globals(stream)
            except (ValueError, EOFError, IndexError, KeyError, TypeError) as exc:
                if scanned == 0:
                    raise CheckpointError(
                        f"cannot read checkpoint {path}: not a valid pickle "
                        f"({plain_text(str(exc), 120)}); the file is truncated or corrupt"
                    ) from None
                break
            scanned += 1
    legacy = scanned >= 4
    code = sorted(o for o in objects if not allowed(o))
    return CheckpointInfo(
        path, "torch-legacy" if legacy else "pickle", size, tuple(sorted(objects)), tuple(code)
    )


def inspect_checkpoint(path: str | Path) -> CheckpointInfo:
    """Find out what a checkpoint holds WITHOUT loading or executing any of it.

    Reads the safetensors header, the zip directory of a ``torch.save``/TorchScript archive,
    or disassembles the pickles of a legacy ``torch.save`` or a plain pickle.

    Raises:
        CheckpointError: the file is missing, empty, unreadable, truncated, or not a
            safetensors / PyTorch / TorchScript / pickle file.
    """
    file = Path(path)
    if file.is_dir():
        return _inspect_folder(file)
    if not file.is_file():
        raise CheckpointError(f"checkpoint {file} does not exist or is not a file; check the path")
    try:
        size = file.stat().st_size
        with open(file, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {file}: {plain_text(str(exc))}") from None
    if size == 0:
        raise CheckpointError(f"checkpoint {file} is empty (0 bytes); re-save or re-copy it")
    allowed_names = _weights_globals()

    def allowed(name: str) -> bool:
        return name in allowed_names

    if head.startswith(_ZIP_MAGIC):
        return _inspect_zip(file, size, allowed)
    if _safetensors_header_ok(head, size):
        return CheckpointInfo(file, "safetensors", size)
    if head[:1] == bytes([_PICKLE_PROTO]):
        return _inspect_stream(file, size, allowed)
    raise CheckpointError(
        f"{file.name} is not a model checkpoint (neither safetensors, a torch.save file, a "
        "TorchScript archive nor a pickle); it was NOT executed: check that the right file "
        "was chosen"
    )


def _inspect_folder(folder: Path) -> CheckpointInfo:
    """What a Hugging Face model folder holds, from its file names and ``config.json`` only.

    Its weights load from ``*.safetensors``; the folder is code (needs the trusted opt-in) when
    its weights exist only as pickles (``pytorch_model.bin`` …) or its ``config.json`` maps the
    model to code shipped in the folder (``auto_map``, what ``trust_remote_code`` would run).
    """
    config = folder / "config.json"
    if not config.is_file():
        raise CheckpointError(
            f"{folder} is a folder without config.json: give a checkpoint file, or a Hugging "
            "Face model folder as save_pretrained / Trainer.save_model write it"
        )
    cfg = json_object(config, fix="re-save the model folder")
    try:
        files = sorted(p for p in folder.iterdir() if p.is_file())
    except OSError as exc:
        raise CheckpointError(
            f"cannot read {folder} ({type(exc).__name__}): re-save the model folder"
        ) from None
    safetensors = [p for p in files if p.suffix == ".safetensors"]
    pickled = [
        p.name for p in files if p.suffix in _HF_PICKLED_WEIGHTS and p.name not in _HF_TRAINER_FILES
    ]
    if not safetensors and not pickled:
        raise CheckpointError(
            f"{folder} holds config.json but no weights (model.safetensors or "
            "pytorch_model.bin): copy the whole folder save_pretrained wrote"
        )
    code = [] if safetensors else [f"{name} (pickled weights)" for name in pickled]
    code.extend(folder_code(folder, files, cfg))
    size = sum(p.stat().st_size for p in files)
    return CheckpointInfo(folder, "hf-folder", size, (), tuple(code))


def json_object(file: Path, *, fix: str = "re-save the folder") -> dict[str, Any]:
    """A small JSON object file (``config.json``, ``tokenizer_config.json``), or ``{}`` when
    absent.

    Args:
        fix: what the error tells the user to do.

    Raises:
        CheckpointError: too large, not JSON, or not an object.
    """
    if not file.is_file():
        return {}
    try:
        if file.stat().st_size > _MAX_CONFIG:
            raise ValueError(f"{file.name} is larger than any configuration")
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"cannot read {file} ({type(exc).__name__}): {fix}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} is not a JSON object: {fix}")
    return data


def folder_code(
    folder: Path, files: list[Path] | None = None, config: dict[str, Any] | None = None
) -> list[str]:
    """What in a Hugging Face model or tokenizer folder is code that ``trust_remote_code``
    would run: an ``auto_map`` in ``config.json`` or ``tokenizer_config.json`` (custom model
    or tokenizer classes) and any Python file in the folder. Read without running anything.

    Raises:
        CheckpointError: a configuration file that is too large or not a JSON object.
    """
    files = sorted(p for p in folder.iterdir() if p.is_file()) if files is None else files
    cfg = json_object(folder / "config.json") if config is None else config
    code = []
    if "auto_map" in cfg:
        code.append("the custom model code config.json names (auto_map, trust_remote_code)")
    if "auto_map" in json_object(folder / "tokenizer_config.json"):
        code.append(
            "the custom tokenizer code tokenizer_config.json names (auto_map, trust_remote_code)"
        )
    code.extend(f"{p.name} (Python code)" for p in files if p.suffix == ".py")
    return code


def checkpoint_kind(path: str | Path) -> Literal["weights", "torchscript", "full-pickle"]:
    """``"weights"`` (safe to load), ``"torchscript"`` or ``"full-pickle"`` (code), statically.

    Raises:
        CheckpointError: as :func:`inspect_checkpoint`.
    """
    return inspect_checkpoint(path).kind


def untrusted_message(info: CheckpointInfo) -> str:
    """The refusal message for a code checkpoint loaded without the trusted opt-in."""
    return (
        f"{info.path.name} was not loaded: it is {info.describe()}. Nothing in it was run. "
        "If you trust the person who made this file, trust it yourself: --trusted on the "
        "command line (workspace add-model … --trusted), `python -m sde_core workspace trust "
        "WORKSPACE --model NAME` for a model a workspace names with 'trusted = true' (which "
        "alone runs nothing), or the 'trusted' box in the dashboard. Otherwise ask for its "
        "weights as a state dict or safetensors file"
    )
