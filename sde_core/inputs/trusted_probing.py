"""Trusted code checkpoints, run only in an isolated child process.

A checkpoint that is code (TorchScript, full pickle), or one read as a ``file:`` architecture (a
class from the user's Python file), is refused unless it is trusted; a trusted one is loaded and
run in a child process, one forward pass per request, and stopped when a step takes longer than
``time_limit`` seconds (:mod:`sde_core.inputs.isolation`): probing it once, extracting its
activations, listing its layers, or rebuilding it here from its weights alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from sde_core.common.validation import check_int
from sde_core.errors import ActivationError, CheckpointError
from sde_core.inputs.checkpoint_files import inspect_checkpoint, untrusted_message
from sde_core.inputs.extraction import Progress, _batches, torch_device
from sde_core.inputs.isolation import (
    DEFAULT_MEMORY_LIMIT,
    IsolatedWorker,
    check_time_limit,
)
from sde_core.inputs.layers import _Capture, _model_dtype, list_layers, resolve_layer
from sde_core.inputs.models import load_checkpoint_details

__all__ = ["TrustedProbe", "probe_trusted_checkpoint", "trusted_weights"]


def _check_trusted(info: Any, arch: str | None, trusted: bool) -> None:
    """Refuse code (a code checkpoint, or a ``file:`` architecture) that is not trusted."""
    if trusted:
        return
    if info.is_code:
        raise CheckpointError(untrusted_message(info))
    raise CheckpointError(
        f"architecture {str(arch).partition('#')[0]!r} is code from a Python file: it runs only "
        "for a model you trusted (--trusted, `python -m sde_core workspace trust WORKSPACE "
        "--model NAME`, the page's trusted box); nothing was run"
    )


def _serve_checkpoint(
    path: str, arch: str | None, arch_kwargs: dict[str, Any]
) -> Callable[[tuple[Any, ...]], Any]:
    """Child-process side: load the trusted checkpoint and answer extraction requests.

    Requests: ``("probe", x)`` -> :class:`TrustedProbe` (one forward pass of a float32 batch);
    ``("state",)`` -> ``(arch, arch_kwargs, {name: array})`` (the weights, as NumPy arrays);
    ``("resolve", names)`` -> None (raises on unknown layers);
    ``("batch", names, pool, device, x)`` -> ``{name: float32 (N, d)}`` for a float32 batch;
    ``("layers", input_shape, noise_levels)`` -> ``list[LayerInfo]``.
    """
    loaded = load_checkpoint_details(path, arch=arch, trusted=True, **arch_kwargs)
    model = loaded.model.eval()
    captures: dict[tuple[tuple[str, ...], bool], _Capture] = {}

    def handle(message: tuple[Any, ...]) -> Any:
        op = message[0]
        if op == "probe":
            return _probe(model, loaded.arch, loaded.notes, message[1])
        if op == "state":
            kwargs = dict(getattr(model, "sde_arch_kwargs", None) or {})
            state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
            return getattr(model, "sde_arch", None) or loaded.arch, kwargs, state
        if op == "resolve":
            for name in message[1]:
                resolve_layer(model, name)
            return None
        if op == "layers":
            return list_layers(model, message[1], message[2])
        _, names, pool, device, x = message
        key = (tuple(names), bool(pool))
        if key not in captures:
            captures[key] = _Capture(model, {n: resolve_layer(model, n) for n in names}, pool)
        dev = torch_device(device)
        model.to(dev)
        batch = torch.from_numpy(x).to(dev, dtype=_model_dtype(model))
        with torch.inference_mode():
            values = captures[key].run(model, batch)
        return {n: v.cpu().numpy() for n, v in values.items()}

    return handle


@dataclass(frozen=True)
class TrustedProbe:
    """What a trusted code checkpoint is, found in the child process that loaded it.

    Attributes:
        arch: the registry architecture its model declares (``None``: TorchScript or unknown).
        arch_kwargs: the builder kwargs it was built with.
        notes: the loader's notes for the user.
        output: the model's output for the probe batch (the first element of a tuple output),
            float32 ``(batch, ...)``; ``None`` when it failed or was not a tensor.
        error: the exception the forward pass raised (its type and first line), else ``""``.
        returned: the type of what the model returned when it was not a tensor, else ``""``.
        class_name: the class of the loaded model object (e.g. a user's ``MyCNN``).
    """

    arch: str | None
    arch_kwargs: dict[str, Any]
    notes: tuple[str, ...]
    output: np.ndarray | None
    error: str = ""
    returned: str = ""
    class_name: str = ""


def _probe(model: nn.Module, arch: str | None, notes: tuple[str, ...], x: Any) -> TrustedProbe:
    """Child-process side of :func:`probe_trusted_checkpoint`."""
    kwargs = dict(getattr(model, "sde_arch_kwargs", None) or {})
    arch = getattr(model, "sde_arch", None) or arch
    name = type(model).__name__
    try:
        with torch.inference_mode():
            out = model(torch.from_numpy(x))
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        first = str(exc).strip().split("\n")[0][:200]
        error = f"{type(exc).__name__}: {first}"
        return TrustedProbe(arch, kwargs, notes, None, error=error, class_name=name)
    if isinstance(out, tuple | list) and out:
        out = out[0]
    if not isinstance(out, torch.Tensor):
        return TrustedProbe(arch, kwargs, notes, None, returned=type(out).__name__, class_name=name)
    return TrustedProbe(arch, kwargs, notes, out.detach().float().cpu().numpy(), class_name=name)


def _checkpoint_child(
    path: Path,
    arch: str | None,
    arch_kwargs: Mapping[str, Any] | None,
    time_limit: float | None,
    *,
    on_cpu: bool = True,
) -> IsolatedWorker:
    """The isolated child that loads a trusted code checkpoint and answers requests about it,
    under ``time_limit`` seconds and, on the CPU, the memory cap (a GPU's driver reserves far
    more address space than it uses, so no cap there)."""
    return IsolatedWorker(
        _serve_checkpoint,
        (str(path), arch, dict(arch_kwargs or {})),
        time_limit=check_time_limit(time_limit),
        memory_limit=DEFAULT_MEMORY_LIMIT if on_cpu else None,
        label=f"the trusted model in {path.name}",
    )


def probe_trusted_checkpoint(
    path: str | Path,
    x: np.ndarray,
    *,
    arch: str | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    time_limit: float | None = None,
) -> TrustedProbe:
    """Load a trusted code checkpoint in a child process and run it once on ``x``.

    Used to add a trusted model to a workspace: the file's code runs only in the child, under
    ``time_limit`` seconds per step (default :data:`DEFAULT_TIME_LIMIT`) and
    :data:`~sde_core.inputs.isolation.DEFAULT_MEMORY_LIMIT`; its process tree is killed after.

    Args:
        x: a float32 batch of dataset inputs ``(batch, *input_shape)``.

    Raises:
        CheckpointError: the file cannot be loaded (re-raised from the child).
        ActivationError: the time or memory limit was exceeded, or the child crashed.
    """
    file = Path(path)
    with _checkpoint_child(file, arch, arch_kwargs, time_limit) as worker:
        probe: TrustedProbe = worker.request(
            ("probe", np.ascontiguousarray(x, dtype=np.float32)), "a forward pass of 2 samples"
        )
    return probe


def trusted_weights(
    path: str | Path,
    *,
    arch: str | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    time_limit: float | None = None,
) -> nn.Module:
    """The model of a trusted code checkpoint rebuilt in this process from its weights alone.

    The file is loaded in a child process (under ``time_limit`` seconds and the memory cap);
    only its architecture name, kwargs and weights come back, and the model is built here
    from the registry, so none of the file's code runs in this process (used to unlearn from
    or train on such a model).

    Raises:
        CheckpointError: the file's model is not a registry architecture (e.g. TorchScript),
            or cannot be loaded.
        ActivationError: the time or memory limit was exceeded, or the child crashed.
    """
    from sde_core.inputs.architectures import build_model

    file = Path(path)
    with _checkpoint_child(file, arch, arch_kwargs, time_limit) as worker:
        name, kwargs, state = worker.request(("state",), "reading its weights")
    if name is None:
        raise CheckpointError(
            f"{file.name} is {inspect_checkpoint(file).describe()} without a registry "
            "architecture: it can be evaluated (in its own process) but not rebuilt from its "
            "weights; save its weights as a state dict of a registry architecture"
        )
    model = build_model(name, **{**kwargs, **dict(arch_kwargs or {})})
    try:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{file.name}: its weights do not fit {name!r} ({exc})") from None
    return model.eval()


def _extract_isolated(
    path: Path,
    arch: str | None,
    arch_kwargs: dict[str, Any],
    time_limit: float,
    dataset: Dataset,
    names: list[str],
    *,
    batch_size: int,
    device: str | torch.device,
    pool: bool,
    indices: np.ndarray | None,
    progress: Progress | None,
) -> dict[str, np.ndarray]:
    """:func:`extract_activations` of a trusted code checkpoint, run in a child process."""
    batch_size = check_int(batch_size, "batch_size", minimum=1, error=ActivationError)
    n_total = len(dataset)  # type: ignore[arg-type]  # map-style datasets have a length
    idx = np.arange(n_total, dtype=np.int64) if indices is None else indices
    if idx.size == 0:
        raise ActivationError("the dataset is empty; nothing to extract")
    outputs: dict[str, np.ndarray] = {}
    done = 0
    on_cpu = torch_device(device).type == "cpu"
    with _checkpoint_child(path, arch, arch_kwargs, time_limit, on_cpu=on_cpu) as worker:
        worker.request(("resolve", names), "checking the layer names")
        for xb in _batches(dataset, idx, batch_size):
            x = xb.detach().cpu().float().numpy()
            values = worker.request(
                ("batch", names, pool, str(device), x), f"a forward pass of {x.shape[0]} samples"
            )
            for key, val in values.items():
                if key not in outputs:
                    outputs[key] = np.empty((idx.size, val.shape[1]), dtype=np.float32)
                outputs[key][done : done + val.shape[0]] = val
            done += x.shape[0]
            if progress is not None:
                progress(done, int(idx.size))
    return {name: outputs[name] for name in names}
