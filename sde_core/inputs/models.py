"""Safe checkpoint loading and saving (the architectures: :mod:`sde_core.inputs.architectures`).

Nothing from a file is executed unless that file is explicitly trusted:

1. :func:`~sde_core.inputs.checkpoint_files.inspect_checkpoint` reads the file's structure
   (safetensors header, zip directory, disassembled pickles) and says whether it is weights or
   code (a TorchScript archive, or a full pickle naming classes/functions).
2. Weights load with ``safetensors`` or ``torch.load(weights_only=True)`` under an allowlist
   that also admits NumPy scalars/arrays/dtypes (what training scripts keep next to weights,
   e.g. SalUn's ``evaluation_result``), whatever the caller's ``trusted`` flag.
3. Code loads only with ``trusted=True`` (per file: ``--trusted`` on the command line, the
   dashboard's "trusted" box, or for a workspace model ``trusted = true`` *and* the local trust
   store, :mod:`sde_core.pipeline.local_trust`); without it the
   message says what the file contains and how to mark it trusted. Running such a model for an
   evaluation happens in a child process under a time limit (see
   :func:`sde_core.inputs.activations.get_activations`).

Before any model is allocated it is built on the meta device and compared with the file's
tensor shapes, and refused above a memory budget, so a small file cannot make the library
allocate gigabytes. Checkpoints as the unlearning code bases save them are understood: state
dicts under ``state_dict``/``model`` next to training metadata, ``module.``/``_orig_mod.``
prefixes, ``.pth.tar`` names, and ``torch.nn.utils.prune`` pairs ``weight_orig``/``weight_mask``
(folded into ``weight`` with a note). So are the field's ecosystems: Lightning ``.ckpt`` files
(``pytorch-lightning_version``: the ``state_dict``, its ``hyper_parameters`` as default builder
kwargs where the class takes them), a key prefix every key shares (a wrapper's ``model.``,
``net.`` or ``module.``, any LightningModule attribute) stripped when the keys do not fit as
stored (with a note), timm checkpoints whose ``arch`` string is a hint checked against the
shapes (never over them), and ``timm:``/``file:`` architectures
(:mod:`sde_core.inputs.external_archs`; a ``file:`` class is code and needs ``trusted``).
Every failure raises
:class:`~sde_core.errors.CheckpointError` with a one-line message free of terminal codes.

Reading a file into tensors (steps 2 and 3, the state-dict layouts and the ecosystems' formats)
is :mod:`sde_core.inputs.checkpoint_reading`; matching the tensors to an architecture, building
the model and saving a checkpoint are here.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sde_core.common.fsio import atomic_write
from sde_core.errors import CheckpointError
from sde_core.inputs.arch_inference import (
    candidate_kwargs,
    infer_architecture_from_shapes,
    meta_model,
    shape_report,
    state_shapes,
)
from sde_core.inputs.architectures import ARCHITECTURES, build_model_within, get_arch
from sde_core.inputs.builtin_nets import Shapes
from sde_core.inputs.checkpoint_files import (
    CheckpointInfo,
    inspect_checkpoint,
    plain_text,
)
from sde_core.inputs.checkpoint_reading import _NORMALIZE_KEYS, _Raw, _read
from sde_core.inputs.external_archs import (
    TIMM_PREFIX,
    accepted_kwargs,
    is_file_arch,
    load_file_class,
)

__all__ = [
    "LoadedCheckpoint",
    "infer_architecture",
    "load_checkpoint",
    "load_checkpoint_details",
    "save_checkpoint",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A loaded checkpoint and what was done to read it.

    Attributes:
        model: the model in eval mode (float32, CPU).
        arch: its architecture name (``None`` for a TorchScript archive or a pickled module of
            unknown architecture).
        arch_kwargs: the builder kwargs used.
        info: what the file holds (:func:`inspect_checkpoint`).
        notes: plain-language notes for the user, e.g. that pruning masks were folded.
    """

    model: nn.Module
    arch: str | None
    arch_kwargs: dict[str, Any]
    info: CheckpointInfo
    notes: tuple[str, ...] = ()


def _fmt_keys(keys: list[Any], limit: int = 8) -> str:
    shown = ", ".join(str(k) for k in keys[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def _adapt_normalize(shapes: dict[str, tuple[int, ...]], expected: Shapes) -> None:
    """Accept ``normalize.mean/std`` stored in another layout of the same size (e.g. 1×3×1×1)."""
    for key in (k for k in _NORMALIZE_KEYS if k in shapes and k in expected):
        if shapes[key] != expected[key] and _numel(shapes[key]) == _numel(expected[key]):
            shapes[key] = tuple(expected[key])


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for s in shape:
        count *= int(s)
    return count


def _mismatch_message(path: Path, arch: str, expected: Shapes, shapes: Shapes) -> str | None:
    missing, unexpected, mismatched = shape_report(expected, shapes)
    if not (missing or unexpected or mismatched):
        return None
    parts = []
    if missing:
        parts.append(f"missing keys: {_fmt_keys(missing)}")
    if unexpected:
        parts.append(f"unexpected keys: {_fmt_keys(unexpected)}")
    if mismatched:
        shown = [f"{k} {s} vs expected {e}" for k, s, e in mismatched]
        parts.append(f"shape mismatches: {_fmt_keys(shown, 5)}")
    return (
        f"{path.name} does not fit architecture {arch!r} — "
        + "; ".join(parts)
        + ". Check the architecture and its kwargs (e.g. num_classes)"
    )


def _hparam_defaults(raw: _Raw, arch: str) -> dict[str, Any]:
    """The checkpoint's ``hyper_parameters`` that the architecture's class takes as keyword
    arguments (a LightningModule's ``lr`` is not one of a ResNet's)."""
    if not raw.hparams:
        return {}
    try:
        takes = accepted_kwargs(type(meta_model(arch)))
    except CheckpointError:
        return {}
    if takes is None:
        return {}
    return {k: v for k, v in raw.hparams.items() if k in takes}


def _expected_shapes(arch: str, kwargs: dict[str, Any]) -> Shapes:
    """``{key: shape}`` of ``arch`` built with ``kwargs`` on the meta device (nothing is
    allocated); remembered per architecture and kwargs except for a ``file:`` class, whose file
    may change."""
    if is_file_arch(arch):
        return state_shapes(meta_model(arch, **kwargs))
    try:
        text = json.dumps(kwargs, sort_keys=True)
    except (TypeError, ValueError):
        return state_shapes(meta_model(arch, **kwargs))
    return _remembered_shapes(arch, text)


@functools.lru_cache(maxsize=128)
def _remembered_shapes(arch: str, kwargs_json: str) -> Shapes:
    return state_shapes(meta_model(arch, **json.loads(kwargs_json)))


def _fit_problem(
    raw: _Raw, arch: str, kwargs: dict[str, Any], path: Path
) -> tuple[Shapes, str | None]:
    """The expected shapes of ``arch`` with ``kwargs`` and why ``raw`` does not fit (None: it
    fits). Normalisation buffers stored in another layout are adapted in ``raw.shapes``."""
    expected = _expected_shapes(arch, kwargs)
    _adapt_normalize(raw.shapes, expected)
    return expected, _mismatch_message(path, arch, expected, raw.shapes)


def _kwargs_for(raw: _Raw, arch: str, explicit: Mapping[str, Any]) -> dict[str, Any]:
    """Builder kwargs: the file's hyper_parameters, then what the file stores for this arch
    (or what the shapes say), then the caller's."""
    stored = dict(raw.arch_kwargs) if raw.arch == arch else {}
    if not stored:
        stored = candidate_kwargs(get_arch(arch), raw.shapes)
    return {**_hparam_defaults(raw, arch), **stored, **explicit}


def _variants(raw: _Raw, path: Path) -> list[_Raw]:
    unwrapped = raw.unwrapped(path)
    return [raw] if unwrapped is None else [raw, unwrapped]


def _named_arch(
    raw: _Raw, arch: str, arch_kwargs: Mapping[str, Any], path: Path
) -> tuple[str, dict[str, Any], _Raw]:
    """An explicitly named architecture: the keys as stored or, when they do not fit, without
    their shared wrapper prefix. Raises the mismatch closest to fitting."""
    tried: list[tuple[int, str]] = []
    for variant in _variants(raw, path):
        kwargs = _kwargs_for(variant, arch, arch_kwargs)
        try:
            expected, problem = _fit_problem(variant, arch, kwargs, path)
        except CheckpointError:
            if not variant.hparams:
                raise
            kwargs = {k: v for k, v in kwargs.items() if k not in variant.hparams}
            expected, problem = _fit_problem(variant, arch, kwargs, path)
        if problem is None:
            return arch, kwargs, variant
        missing, unexpected, _ = shape_report(expected, variant.shapes)
        tried.append((len(missing) + len(unexpected), problem))
    raise CheckpointError(min(tried)[1])


def _stored_hint(
    raw: _Raw, arch_kwargs: Mapping[str, Any], path: Path
) -> tuple[str, dict[str, Any], _Raw] | None:
    """The architecture the file names (``arch``), used only when its shapes fit it; a timm
    checkpoint's ``arch`` (timm's model name) is also tried as ``timm:<name>``."""
    assert raw.arch is not None
    names = [raw.arch]
    if ":" not in raw.arch:  # e.g. timm's CheckpointSaver: "resnet18" is timm's own name
        names.append(f"{TIMM_PREFIX}{raw.arch}")
    for name in names:
        if is_file_arch(name):
            continue
        try:
            return _named_arch(raw, name, arch_kwargs, path)
        except CheckpointError:
            continue
    raw.notes.append(
        f"{path.name} names its architecture {raw.arch!r}, but its keys and shapes do not fit "
        "that name here; the architecture was inferred from the shapes instead"
    )
    return None


def _resolve_arch(
    raw: _Raw, arch: str | None, arch_kwargs: Mapping[str, Any], path: Path
) -> tuple[str, dict[str, Any], _Raw]:
    """The architecture, builder kwargs and key layout (as stored, or unwrapped) to load."""
    if arch is not None:
        return _named_arch(raw, arch, arch_kwargs, path)
    if raw.arch is not None:
        hinted = _stored_hint(raw, arch_kwargs, path)
        if hinted is not None:
            return hinted
        if raw.arch_kwargs:  # SDE's own metadata (arch + kwargs) that lies about the shapes
            return raw.arch, {**raw.arch_kwargs, **arch_kwargs}, raw
    for variant in _variants(raw, path):
        hits = infer_architecture_from_shapes(variant.shapes)
        if len(hits) == 1:
            name, kwargs = hits[0]
            return name, {**_hparam_defaults(variant, name), **kwargs, **arch_kwargs}, variant
        if hits:
            raise CheckpointError(
                f"cannot infer the architecture of {path.name}: its keys fit several "
                f"architectures ({', '.join(h[0] for h in hits)}); name one with --arch "
                "(and its kwargs with --arch-kwarg)"
            )
    raise CheckpointError(no_architecture_message(path, raw.shapes, raw.arch))


#: Key fragments of transformer language models (Hugging Face ``transformers`` layouts).
_TRANSFORMER_KEYS = (".self_attn.", ".attention.", ".attn.", "embed_tokens", "word_embeddings",
                     ".mlp.gate_proj", "lm_head")  # fmt: skip


def no_architecture_message(path: Path, shapes: Shapes, named: str | None = None) -> str:
    """Why a checkpoint's architecture cannot be inferred, and every route that works for it,
    each with its command (``WS``/``NAME`` stand for the workspace and the model's name).
    ``named``: the architecture string the file itself holds, which did not fit."""
    keys = sorted(shapes)
    if named is not None:
        return (
            f"{path.name} names its architecture {plain_text(named, 60)!r}, which does not fit "
            "its keys and shapes here (timm's CheckpointSaver writes the class name, e.g. "
            "'mobilenetv3', not the model): name the model, e.g. --arch "
            "timm:mobilenetv3_small_100 (timm.list_models() lists the names). "
            + no_architecture_message(path, shapes)
        )
    add = f"python -m sde_core workspace add-model WS --name NAME --checkpoint {path.name}"
    if any(frag in k for k in keys for frag in _TRANSFORMER_KEYS):
        return (
            f"cannot infer the architecture of {path.name}: its {len(keys)} keys (e.g. "
            f"{_fmt_keys(keys, 2)}) are a transformer language model's, not a classifier SDE "
            "Explorer builds. Give the model's folder (config.json + *.safetensors) with "
            "--arch hf, or export its hidden states and add them with "
            "`python -m sde_core workspace add-model WS --name NAME --activations FILE.npz` "
            "(docs/bring-your-own.md, 'language-model hidden states')"
        )
    return (
        f"cannot infer the architecture of {path.name}: its {len(keys)} keys (e.g. "
        f"{_fmt_keys(keys, 3)}) match no registered architecture nor a torchvision classifier. "
        "Routes that work: (1) name it: "
        f"`{add} --arch ARCH --arch-kwarg num_classes=C` with ARCH one of "
        f"{', '.join(sorted(ARCHITECTURES))}, torchvision:NAME or timm:NAME (pip install -e "
        "'.[timm]'); (2) your own model class: "
        f"`{add} --arch file:PATH.py:CLASS --arch-kwarg K=V --trusted` (the .py file runs, so "
        "only for code you trust); (3) a pickle of the whole model, "
        "torch.save(model, 'model.pt'): "
        f"`python -m sde_core workspace add-model WS --name NAME --checkpoint model.pt --trusted`"
        " (its class must be importable: PYTHONPATH); (4) exported activations: "
        "`python -m sde_core workspace add-model WS --name NAME --activations FILE.npz` "
        "(see docs/bring-your-own.md)"
    )


def _load_into(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    expected = model.state_dict()
    cast = {}
    for key, value in state.items():
        target = expected[key]
        if value.is_complex() and not target.is_complex():
            raise CheckpointError(
                f"weight {key} is complex-valued ({value.dtype}) but the architecture's is "
                f"{target.dtype}: casting would drop the imaginary part; save real weights"
            )
        if value.shape != target.shape:  # normalize buffers stored in another layout
            value = value.reshape(target.shape)
        if value.is_floating_point() and target.is_floating_point():
            value = value.to(target.dtype)
        cast[key] = value
    model.load_state_dict(cast, strict=True)


def load_checkpoint_details(
    path: str | Path,
    arch: str | None = None,
    trusted: bool = False,
    max_bytes: int | None = None,
    **arch_kwargs: Any,
) -> LoadedCheckpoint:
    """Load a checkpoint safely; the model plus the architecture used and notes for the user.

    Args:
        path: a Hugging Face model folder (``save_pretrained``: ``config.json`` plus
            safetensors weights; see :mod:`sde_core.inputs.hf_models`, ``arch`` ``"hf"`` or
            None), or ``.pt``/``.pth``/``.pth.tar``/``.bin``/``.ckpt`` (``torch.save``: a state
            dict, plain or under ``state_dict``/``model`` next to training metadata such as
            ``epoch``, ``optimizer`` or SalUn's ``evaluation_result``; ``module.`` prefixes
            stripped; pruning masks folded), ``.safetensors``, or a TorchScript archive.
        arch: architecture name; when ``None`` it is read from the file's metadata (files
            written by :func:`save_checkpoint`) or inferred when exactly one registered
            architecture or torchvision classifier fits the keys and shapes.
        trusted: allow files that are code (TorchScript, full pickles). Loading them runs
            their code in this process; only for files whose author you trust. Weights files
            never need it.
        max_bytes: memory budget of the model (default :data:`MAX_MODEL_BYTES`).
        **arch_kwargs: builder kwargs overriding the stored/inferred ones.

    Raises:
        CheckpointError: missing/truncated/corrupt file, a code file without ``trusted``, keys
            and shapes that do not fit the architecture (listed), or a model over the budget.
    """
    file = Path(path)
    info = inspect_checkpoint(file)
    if info.format == "hf-folder":
        from sde_core.families.causal_lm import CAUSAL_LM
        from sde_core.inputs.hf_models import load_hf_folder

        if arch not in (None, "", CAUSAL_LM.arch):
            raise CheckpointError(
                f"{file.name} is a Hugging Face model folder: its architecture is its "
                f"config.json; use arch {CAUSAL_LM.arch!r} (--arch {CAUSAL_LM.arch}), not {arch!r}"
            )
        folder_model = load_hf_folder(file, trusted=trusted, max_bytes=max_bytes)
        return LoadedCheckpoint(folder_model, str(CAUSAL_LM.arch), {}, info)
    if arch == "hf":
        raise CheckpointError(
            f"arch 'hf' is for a Hugging Face model folder (config.json + model.safetensors); "
            f"{file.name} is a single file: give the folder save_pretrained wrote"
        )
    if is_file_arch(arch):
        if not trusted:
            raise CheckpointError(
                f"architecture {str(arch).partition('#')[0]!r} is code from a Python file: it "
                "runs only for a model you trusted (--trusted on the command line, `python -m "
                "sde_core workspace trust WORKSPACE --model NAME`, the page's trusted box); "
                "nothing was run"
            )
        load_file_class(str(arch))  # the user's class: runs the file (trusted)
    try:
        raw = _read(file, info, trusted)
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(_read_failure(file, info, exc)) from exc
    if raw.module is not None:
        model = raw.module.float().eval()
        if arch is not None and not isinstance(model, torch.jit.ScriptModule):
            setattr(model, "sde_arch", arch)  # noqa: B010 - a plain attribute
        return LoadedCheckpoint(model, arch or raw.arch, {}, info, tuple(raw.notes))
    name, kwargs, raw = _resolve_arch(raw, arch, arch_kwargs, file)
    _, problem = _fit_problem(raw, name, kwargs, file)
    if problem is not None:
        raise CheckpointError(problem)
    model = build_model_within(name, kwargs, max_bytes)
    assert raw.tensors is not None
    try:
        _load_into(model, raw.tensors())
    except CheckpointError:
        raise
    except (RuntimeError, ValueError, OSError) as exc:
        raise CheckpointError(
            f"cannot read the weights of {file.name} ({plain_text(str(exc), 200)}); the file "
            "is truncated or corrupt"
        ) from exc
    for note in raw.notes:
        log.info(note)
    setattr(model, "sde_load_notes", list(raw.notes))  # noqa: B010 - a plain attribute
    used: dict[str, Any] = dict(getattr(model, "sde_arch_kwargs", {}))
    return LoadedCheckpoint(model.eval(), name, used, info, tuple(raw.notes))


def _read_failure(file: Path, info: CheckpointInfo, exc: Exception) -> str:
    """The message for a checkpoint whose reading raised ``exc`` (a trusted full pickle whose
    class cannot be imported here gets the fix: the module's folder on PYTHONPATH)."""
    if info.kind == "full-pickle" and isinstance(exc, ModuleNotFoundError | AttributeError):
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        classes = ", ".join(o for o in info.code_objects if not o.startswith("torch."))[:200]
        where = (
            f"module {missing!r} cannot be imported here" if missing
            else f"a class it names is missing ({plain_text(str(exc), 120)})"
        )  # fmt: skip
        return (
            f"cannot read checkpoint {file.name}: it is a pickle of a whole model ({classes}) "
            f"and {where}. Run from the folder that holds {missing or 'that module'}.py or put "
            "that folder on PYTHONPATH (PYTHONPATH=/path/to/project python -m sde_core ...); "
            "or save the weights alone (torch.save(model.state_dict(), 'weights.pt')) and add "
            "them with --arch file:PATH.py:CLASS --trusted"
        )
    return (
        f"cannot read checkpoint {file.name} ({type(exc).__name__}: "
        f"{plain_text(str(exc), 200)}); the file is truncated, corrupt or not a "
        "PyTorch/safetensors/TorchScript checkpoint"
    )


def load_checkpoint(
    path: str | Path, arch: str | None = None, trusted: bool = False, **arch_kwargs: Any
) -> nn.Module:
    """Load a model checkpoint safely and return the model in eval mode (float32, CPU).

    The model of :func:`load_checkpoint_details` (same arguments); its notes (e.g. folded
    pruning masks) are also in the model's ``sde_load_notes`` attribute and the log.

    Raises:
        CheckpointError: missing/truncated/corrupt file, a code file (TorchScript, full pickle)
            without ``trusted=True``, or keys and shapes that do not fit the architecture.
    """
    return load_checkpoint_details(path, arch, trusted, **arch_kwargs).model


def infer_architecture(path: str | Path) -> tuple[str, dict[str, Any]]:
    """The architecture name and kwargs a weights checkpoint fits, without building it.

    Uses the ``arch``/``arch_kwargs`` the file stores (files of :func:`save_checkpoint`), else
    the unique registered architecture or torchvision classifier whose keys and shapes fit.

    Raises:
        CheckpointError: unreadable file, a code file (TorchScript or full pickle: its
            architecture is in its code), or no/several architectures fitting.
    """
    file = Path(path)
    info = inspect_checkpoint(file)
    if info.format == "hf-folder":
        return "hf", {}
    if info.is_code:
        raise CheckpointError(
            f"{file.name} is {info.describe()}; its architecture is defined by its own code"
        )
    try:
        raw = _read(file, info, trusted=False)
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"cannot read checkpoint {file.name} ({plain_text(str(exc), 200)})"
        ) from exc
    name, kwargs, _ = _resolve_arch(raw, None, {}, file)
    return name, kwargs


def _canonicalize_safetensors(path: Path) -> None:
    """Rewrite a safetensors header with sorted keys, so equal tensors give equal bytes.

    The safetensors writer serialises the header from an unordered map, so two processes that
    save the same weights and metadata may order its keys differently (different SHA-256, which
    would defeat content-hash caches). The rewritten file holds the same tensors and metadata.
    """
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    ordered = {key: header[key] for key in sorted(header)}
    if "__metadata__" in ordered:
        ordered["__metadata__"] = dict(sorted(ordered["__metadata__"].items()))
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size :])


def save_checkpoint(
    model: nn.Module,
    path: str | Path,
    arch: str,
    arch_kwargs: Mapping[str, Any] | None = None,
    half: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Save ``model``'s state dict so that :func:`load_checkpoint` needs no ``arch``.

    ``.safetensors`` paths get safetensors with metadata ``{"arch", "arch_kwargs" (JSON), ...}``;
    any other suffix (``.pt``/``.pth``/``.pth.tar``) a ``{"state_dict", "arch", "arch_kwargs",
    "metadata"}`` dict loadable with ``weights_only=True``. ``half=True`` stores floating tensors
    as float16 (half the size; loading casts back to float32). ``arch_kwargs`` defaults to the
    kwargs the model was built with. Writes atomically (temporary file + rename). Returns the
    path.

    Raises:
        CheckpointError: unknown architecture, non-serialisable kwargs/metadata, or a model
            whose state dict does not fit ``arch``.
    """
    if not isinstance(model, nn.Module):
        raise CheckpointError(f"save_checkpoint needs an nn.Module, got {type(model).__name__}")
    path = Path(path)
    get_arch(arch)
    if arch_kwargs is None:
        arch_kwargs = (
            getattr(model, "sde_arch_kwargs", {})
            if getattr(model, "sde_arch", None) == arch
            else {}
        )
    try:
        kwargs = json.loads(json.dumps(dict(arch_kwargs)))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"architecture kwargs must be JSON-serialisable: {exc}") from exc
    meta = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in (metadata or {}).items()}
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    expected = state_shapes(meta_model(arch, **kwargs))
    missing, unexpected, mismatched = shape_report(
        expected, {k: tuple(v.shape) for k, v in state.items()}
    )
    if missing or unexpected or mismatched:
        raise CheckpointError(
            f"the model does not fit architecture {arch!r} (missing {_fmt_keys(missing)}; "
            f"unexpected {_fmt_keys(unexpected)}; mismatched {_fmt_keys(mismatched, 3)}); "
            "pass the arch and arch_kwargs it was built with"
        )
    if half:
        state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}

    def write(tmp: Path) -> None:
        if path.suffix == ".safetensors":
            from safetensors.torch import save_file

            header = {**meta, "arch": arch, "arch_kwargs": json.dumps(kwargs)}
            save_file(state, str(tmp), metadata=header)
            _canonicalize_safetensors(tmp)
        else:
            document = {"state_dict": state, "arch": arch, "arch_kwargs": kwargs, "metadata": meta}
            torch.save(document, tmp)

    atomic_write(path, write)
    return path
