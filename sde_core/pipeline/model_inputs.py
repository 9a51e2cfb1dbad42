"""What one workspace model contributes to an evaluation, and how its model is built.

Every place that builds a workspace model goes through :func:`load_entry_model`, which honours
the entry's ``arch``, ``arch_kwargs`` and ``trusted`` and resolves the file under the path
policy. :func:`entry_activations` returns a model's activations on a split: read from the
model's own precomputed activations file when it has one (``activations = "file"``), else from
the activation cache or by extracting them. :func:`load_model_inputs` gathers what the
evaluation needs (the layer's activations on D_tr and D_te, and the ``output`` probabilities
for the classic metrics when there are any).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sde_core.errors import ActivationError, CheckpointError, DataError
from sde_core.families.registry import family_of_entry
from sde_core.pipeline.settings import NOISE_LEVELS, EvalSettings
from sde_core.pipeline.workspace_checks import resolve_arch

__all__ = [
    "ModelInputs",
    "Progress",
    "checkpoint_metadata",
    "entry_activations",
    "entry_bundle",
    "entry_cached_layers",
    "entry_layer_infos",
    "entry_layers",
    "load_entry_model",
    "load_model_inputs",
]

#: Progress callback: ``progress(stage, done, total)``.
Progress = Callable[[str, int, int], None]
_HEADER_LIMIT = 100_000_000


@dataclass
class ModelInputs:
    """What one model contributes to an evaluation.

    Attributes:
        name, role, method: from the workspace. seconds: the method's wall-clock time.
        train_acts: ``(N_tr, d)`` layer activations on D_tr. test_acts: ``(N_te, d)`` on D_te.
        train_probs, test_probs: ``(N, C)`` softmax outputs for the classic metrics (or None).
        train_labels, test_labels: int labels (or None).
    """

    name: str
    role: str
    train_acts: np.ndarray
    test_acts: np.ndarray
    method: str = ""
    seconds: float | None = None
    train_probs: np.ndarray | None = None
    test_probs: np.ndarray | None = None
    train_labels: np.ndarray | None = None
    test_labels: np.ndarray | None = None


def checkpoint_metadata(path: str | Path) -> tuple[str | None, dict[str, Any] | None]:
    """``(arch, arch_kwargs)`` recorded in a ``.safetensors`` header, read without loading any
    tensor; ``(None, None)`` for other formats or a header without them.

    Raises:
        CheckpointError: a safetensors header that is not JSON, or ``arch_kwargs`` metadata
            that is not a JSON object (a list, number, string or null).
    """
    path = Path(path)
    if path.is_dir():  # a Hugging Face model folder: its config.json is its architecture
        return None, None
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            size = int.from_bytes(head, "little") if len(head) == 8 else 0
            if path.suffix != ".safetensors" or not 0 < size < _HEADER_LIMIT:
                return None, None
            header = json.loads(fh.read(size))
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path} ({type(exc).__name__})") from None
    except (ValueError, RecursionError):
        raise CheckpointError(
            f"{path} has a corrupt safetensors header; re-save the checkpoint"
        ) from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict):
        return None, None
    arch = meta.get("arch") if isinstance(meta.get("arch"), str) else None
    if "arch_kwargs" not in meta:
        return arch, None
    try:
        kwargs = json.loads(meta["arch_kwargs"])
    except (TypeError, ValueError, RecursionError):
        kwargs = meta["arch_kwargs"]
    if not isinstance(kwargs, dict):
        raise CheckpointError(
            f"{path} records arch_kwargs as a JSON {type(kwargs).__name__}, not an object of "
            "builder arguments: re-save it with save_checkpoint, or give the architecture and "
            "its kwargs explicitly (--arch, --arch-kwarg)"
        )
    return arch, kwargs


def load_entry_model(
    ws: Any, entry: Any, path: str | None = None, time_limit: float | None = None
) -> Any:
    """Build a workspace model: its checkpoint (or ``path``, e.g. its ``init_checkpoint``)
    loaded with the entry's architecture, ``arch_kwargs`` and ``trusted`` flag. A trusted code
    checkpoint is loaded in a child process (within ``time_limit`` seconds) and only its
    weights come back (:func:`~sde_core.inputs.trusted_probing.trusted_weights`).

    Raises:
        WorkspaceError: the file leaves the allowed folders or is missing.
        CheckpointError: the file cannot be loaded or does not fit the architecture.
    """
    from sde_core.inputs.checkpoint_files import inspect_checkpoint
    from sde_core.inputs.models import load_checkpoint
    from sde_core.inputs.trusted_probing import trusted_weights

    if entry.precomputed:
        raise CheckpointError(
            f"model {entry.name!r} is known only by its activations file: it has no weights"
        )
    file = ws.path(
        path or entry.checkpoint,
        what=f"model {entry.name!r} checkpoint",
        must_exist=True,
        contents=True,
    )
    checkpoint_metadata(file)  # refuses malformed metadata before the loader reads it
    arch = resolve_arch(ws, entry)
    if _trusted_here(ws, entry) and inspect_checkpoint(file).is_code:
        return trusted_weights(
            file, arch=arch, arch_kwargs=dict(entry.arch_kwargs), time_limit=time_limit,
        )  # fmt: skip
    # Weights only in this process (a code file that is not trusted is refused here); a
    # trusted, hash-pinned file: architecture builds the user's class here, to train on it.
    from sde_core.inputs.external_archs import is_file_arch

    trusted = bool(entry.trusted) and is_file_arch(arch)  # weights never need it
    return load_checkpoint(file, arch=arch, trusted=trusted, **dict(entry.arch_kwargs))


def _trusted_here(ws: Any, entry: Any) -> bool:
    """Whether ``entry``'s code may run: marked ``trusted`` in the workspace *and* trusted on
    this machine (the local trust store; :func:`~sde_core.pipeline.local_trust.
    require_local_trust` raises, naming the command that trusts it, when it is not)."""
    if not entry.trusted:
        return False
    from sde_core.pipeline.local_trust import require_local_trust

    require_local_trust(ws, entry)
    return True


def _build_arguments(ws: Any, file: Path, entry: Any) -> tuple[str | None, dict[str, Any]]:
    """The architecture and kwargs to build a model with: the kwargs only when they change the
    build (they differ from the file's own metadata), so a model saved with its kwargs keeps one
    activation-cache identity whether or not the workspace repeats them. A ``file:``
    architecture is resolved and pinned
    (:func:`~sde_core.pipeline.workspace_checks.resolve_arch`)."""
    arch = resolve_arch(ws, entry)
    kwargs = _no_nulls(dict(entry.arch_kwargs))
    meta_arch, meta_kwargs = checkpoint_metadata(file)
    if meta_kwargs is not None and meta_arch == arch and _no_nulls(meta_kwargs) == kwargs:
        return arch, {}
    return arch, kwargs


def _no_nulls(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Kwargs as a workspace.toml stores them (TOML has no null), JSON-normalised."""
    return {k: v for k, v in json.loads(json.dumps(dict(kwargs))).items() if v is not None}


def entry_layers(ws: Any, entry: Any) -> list[str] | None:
    """The layers of a model's precomputed activations file, or None for a checkpoint model."""
    if not entry.activations:
        return None
    from sde_core.inputs.precomputed import load_precomputed

    file = ws.path(entry.activations, what=f"model {entry.name!r} activations", must_exist=True)
    return load_precomputed(file, model=entry.name).layers


def entry_layer_infos(
    ws: Any, entry: Any, input_shape: Sequence[int], time_limit: float | None = None
) -> list[Any]:
    """The layers a workspace model offers, as
    :class:`~sde_core.inputs.layers.LayerInfo`: the layers of its activations file, or
    those of its checkpoint for inputs of ``input_shape`` (a trusted code checkpoint runs in a
    child process, within ``time_limit`` seconds). A denoiser's layers are listed at each of the
    :data:`~sde_core.pipeline.settings.NOISE_LEVELS` (method §14).
    """
    from sde_core.inputs.activations import checkpoint_layers
    from sde_core.inputs.layers import LayerInfo

    if not entry.activations:
        file = ws.path(
            entry.checkpoint,
            what=f"model {entry.name!r} checkpoint",
            must_exist=True,
            contents=True,
        )
        arch, kwargs = _build_arguments(ws, file, entry)
        return checkpoint_layers(
            file, input_shape, arch=arch, arch_kwargs=kwargs, trusted=_trusted_here(ws, entry),
            time_limit=time_limit,
            noise_levels=NOISE_LEVELS,
        )  # fmt: skip
    from sde_core.inputs.precomputed import load_precomputed

    file = ws.path(entry.activations, what=f"model {entry.name!r} activations", must_exist=True)
    pre = load_precomputed(file, model=entry.name)
    return [
        LayerInfo(layer, (pre.get("train", layer).shape[1],), "precomputed", 0,
                  pre.get("train", layer).shape[1])
        for layer in pre.layers
    ]  # fmt: skip


def _precomputed(
    ws: Any, entry: Any, bundle: Any, split: str, names: Sequence[str], indices: np.ndarray | None
) -> dict[str, np.ndarray]:
    from sde_core.inputs.activations import align_to_dataset
    from sde_core.inputs.precomputed import load_precomputed

    file = ws.path(entry.activations, what=f"model {entry.name!r} activations", must_exist=True)
    try:
        pre = load_precomputed(file, model=entry.name)
    except DataError as exc:
        raise ActivationError(str(exc)) from None
    out = {}
    for name in names:
        if name not in pre.layers:
            raise ActivationError(
                f"layer {name!r} is not in {file} (model {entry.name!r}); it holds "
                f"{', '.join(pre.layers)}: choose one of those layers"
            )
        arr = align_to_dataset(pre.get(split, name), bundle, split, file)
        out[name] = arr if indices is None else arr[indices]
    return out


def entry_bundle(ws: Any, entry: Any, bundle: Any) -> Any:
    """The dataset as a workspace model reads it: a text dataset tokenised by the tokenizer of
    the model's own folder when it has one (:func:`~sde_core.inputs.text_data.model_view`),
    else ``bundle`` (every other dataset, a model known by its activations file, a model folder
    that shares ``options.tokenizer``)."""
    from sde_core.inputs.text_data import TextDataset, model_view

    if entry.precomputed or not isinstance(getattr(bundle, "train", None), TextDataset):
        return bundle
    folder = ws.path(
        entry.checkpoint, what=f"model {entry.name!r} checkpoint", must_exist=True, contents=True
    )
    return model_view(bundle, folder)


def entry_activations(
    ws: Any,
    entry: Any,
    bundle: Any,
    split: str,
    layers: str | Sequence[str],
    cache: Any,
    *,
    device: str = "cpu",
    pool: bool = True,
    batch_size: int = 256,
    indices: Sequence[int] | np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
    time_limit: float | None = None,
) -> dict[str, np.ndarray]:
    """A workspace model's activations ``{layer: float32 (n, d)}`` on ``bundle``'s ``split``.

    Reads the model's own activations file when it has one; otherwise
    :func:`~sde_core.inputs.activations.get_activations` computes only the layers missing from
    ``cache`` (an :class:`~sde_core.inputs.activation_cache.ActivationCache` or None), with the
    entry's ``arch_kwargs``, and runs a trusted code checkpoint in a child process under
    ``time_limit`` seconds.

    Raises:
        ActivationError: unknown layer or split, rows that do not match the dataset.
        CheckpointError, WorkspaceError: see :func:`load_entry_model`.
    """
    from sde_core.inputs.activations import get_activations

    names = list(dict.fromkeys([layers] if isinstance(layers, str) else list(layers)))
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ActivationError(f"layers must be non-empty names such as 'output', got {layers!r}")
    if split not in ("train", "test"):
        raise ActivationError(f"unknown split {split!r}; use 'train' or 'test'")
    n_split = len(bundle.split(split))
    idx = None
    if indices is not None:
        from sde_core.inputs.indices import as_index_array

        try:
            idx = as_index_array(indices, n_split, f"{split} rows")
        except DataError as exc:
            raise ActivationError(str(exc)) from None
    if entry.activations:
        return _precomputed(ws, entry, bundle, split, names, idx)
    file = ws.path(
        entry.checkpoint, what=f"model {entry.name!r} checkpoint", must_exist=True, contents=True
    )
    arch, kwargs = _build_arguments(ws, file, entry)
    return get_activations(
        file, entry_bundle(ws, entry, bundle), split, names, cache, arch=arch,
        arch_kwargs=kwargs or None,
        trusted=_trusted_here(ws, entry), time_limit=time_limit, device=device,
        batch_size=batch_size, progress=progress, indices=idx, pool=pool,
    )  # fmt: skip


def entry_cached_layers(
    ws: Any,
    entry: Any,
    bundle: Any,
    split: str,
    layers: Sequence[str],
    cache: Any,
    pool: bool = True,
) -> set[str]:
    """The ``layers`` :func:`entry_activations` would serve without running the model: all of
    them for a model known by its activations file, else those in ``cache`` under the same
    identity :func:`entry_activations` uses."""
    from sde_core.inputs.activations import cached_layers

    if entry.activations:
        return set(layers)
    file = ws.path(
        entry.checkpoint, what=f"model {entry.name!r} checkpoint", must_exist=True, contents=True
    )
    arch, kwargs = _build_arguments(ws, file, entry)
    return cached_layers(
        file,
        entry_bundle(ws, entry, bundle),
        split,
        layers,
        cache,
        arch=arch,
        arch_kwargs=kwargs or None,
        pool=pool,
    )


def load_model_inputs(
    entry: Any,
    ws: Any,
    bundle: Any,
    settings: EvalSettings,
    cache: Any,
    progress: Progress | None,
    time_limit: float | None = None,
) -> ModelInputs:
    """Load (or read from the activation cache) one model's activations and probabilities.

    ``output`` probabilities (for Acc_r, Acc_f, Acc_te and ASR) come along when the model has
    them: for a checkpoint when its family has class outputs (a denoiser, method §14, a
    language model or a regressor has none), when its file holds an ``output`` layer for a
    precomputed model. A trusted code checkpoint runs in a child process, each step within
    ``time_limit`` seconds (None: the default of :mod:`sde_core.inputs.isolation`).
    """
    layers = [settings.layer]
    available = entry_layers(ws, entry)
    classes = family_of_entry(entry.arch, settings.layer).has_class_outputs
    if (available is None and classes) or (available and "output" in available):
        layers = list(dict.fromkeys([settings.layer, "output"]))
    acts: dict[str, Mapping[str, np.ndarray]] = {}
    for sp in ("train", "test"):
        cb = None
        if progress:

            def cb(done: int, total: int, sp: str = sp) -> None:
                progress(f"{entry.name}: activations ({sp})", done, total)

        acts[sp] = entry_activations(
            ws, entry, bundle, sp, layers, cache, device=settings.device, pool=settings.pool,
            progress=cb, time_limit=time_limit,
        )  # fmt: skip
    has_probs = "output" in acts["train"] and bundle.num_classes >= 2
    labelled = has_probs and bool((bundle.train_labels >= 0).all())
    return ModelInputs(
        name=entry.name,
        role=entry.role,
        method=entry.method,
        seconds=entry.seconds,
        train_acts=np.asarray(acts["train"][settings.layer], dtype=np.float64),
        test_acts=np.asarray(acts["test"][settings.layer], dtype=np.float64),
        train_probs=acts["train"].get("output") if labelled else None,
        test_probs=acts["test"].get("output") if labelled else None,
        train_labels=bundle.train_labels if labelled else None,
        test_labels=bundle.test_labels if labelled else None,
    )
