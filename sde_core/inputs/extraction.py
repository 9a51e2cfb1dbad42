"""Batched activation extraction with forward hooks, in one pass over the data.

Activations are float32 ``(n, d)`` arrays: each sample's tensor flattened, after global average
pooling of 4-D ``(N, C, H, W)`` and 3-D ``(N, C, L)`` maps when ``pool=True`` (never for a
``":flat"`` reference such as a denoiser's ``denoised`` image); a denoiser runs one forward pass
per noise level. A Hugging Face model folder's hidden states are averaged over a text's real
tokens with ``pool=True`` and taken at its last token with ``pool=False``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from sde_core.common.validation import as_index_vector, check_int
from sde_core.errors import ActivationError, DataError
from sde_core.inputs.layers import _Capture, _model_dtype, resolve_layer

__all__ = ["extract_activations", "torch_device"]


Progress = Callable[[int, int], None]


def torch_device(device: object) -> torch.device:
    """The torch device named ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``;
    ``"auto"``: CUDA when available, else the CPU), after checking that this machine has it.

    Raises:
        ActivationError: another name (e.g. ``"meta"``, which holds no data, or ``""``), or a
            device this machine does not have (the message says which it has).
    """
    if isinstance(device, torch.device):
        device = str(device)
    if isinstance(device, str) and device.strip() == "auto":  # a CUDA GPU when there is one
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str) or not _DEVICE_NAME.fullmatch(device.strip()):
        raise ActivationError(
            f"device {str(device)[:40]!r} is not a compute device: use 'auto', 'cpu', 'cuda', "
            "'cuda:N' or 'mps'"
        )
    dev = torch.device(device.strip())
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ActivationError(
                f"device {device!r} requested but CUDA is not available on this machine; use "
                "device 'cpu'"
            )
        if dev.index is not None and dev.index >= count:
            raise ActivationError(
                f"device {device!r} does not exist: this machine has {count} CUDA device(s), "
                f"cuda:0 to cuda:{count - 1}"
            )
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ActivationError(f"device {device!r} (Apple MPS) is not available; use 'cpu'")
    return dev


_DEVICE_NAME = re.compile(r"cpu|cuda(:[0-9]{1,3})?|mps")


def _batches(dataset: Dataset, indices: np.ndarray, batch_size: int) -> Iterable[torch.Tensor]:
    for start in range(0, len(indices), batch_size):
        chunk = indices[start : start + batch_size]
        if hasattr(dataset, "get_batch"):
            yield dataset.get_batch(chunk)[0]
        else:
            items = [dataset[int(i)] for i in chunk]
            yield torch.stack([it[0] if isinstance(it, tuple | list) else it for it in items])


def _row_indices(indices: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """Validated int64 row indices into ``n`` rows (non-empty, 1-D, integer, in range)."""
    return as_index_vector(indices, n, "indices", error=ActivationError)


def extract_activations(
    model: nn.Module,
    dataset: Dataset,
    layers: str | Sequence[str],
    *,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    pool: bool = True,
    indices: Sequence[int] | np.ndarray | None = None,
    progress: Progress | None = None,
) -> dict[str, np.ndarray]:
    """Activations of several layers in ONE batched pass (eval mode, ``torch.inference_mode``).

    Args:
        model: any ``nn.Module`` (left in its original train/eval mode afterwards).
        dataset: yields ``(x, y)`` or ``x``; datasets with ``get_batch(indices)`` are batched
            directly.
        layers: names (aliases, module names, ``"module:input"``; a denoiser's with a noise
            level, ``"denoised@0.5"``, one probe per level); a single string is allowed.
        batch_size: samples per forward pass.
        device: ``"cpu"`` or ``"cuda"``; the model is moved there.
        pool: global-average-pool 4-D and 3-D maps (so d is the channel count).
        indices: rows of ``dataset`` to use (default all), in this order.
        progress: called as ``progress(done, total)`` in samples after each batch.

    Returns:
        ``{layer: float32 array (n, d)}`` keyed by the names as given.

    Raises:
        ActivationError: unknown layer (listing the valid names), bad arguments, or a forward
            pass that fails.
    """
    names = [layers] if isinstance(layers, str) else list(layers)
    if not names:
        raise ActivationError("layers is empty; pass at least one layer name such as 'output'")
    batch_size = check_int(batch_size, "batch_size", minimum=1, error=ActivationError)
    n_total = len(dataset)  # type: ignore[arg-type]
    idx = np.arange(n_total, dtype=np.int64) if indices is None else _row_indices(indices, n_total)
    if idx.size == 0:
        raise ActivationError("the dataset is empty; nothing to extract")
    refs = {name: resolve_layer(model, name) for name in dict.fromkeys(names)}
    dev = torch_device(device)
    model.to(dev)
    was_training = model.training
    model.eval()
    capture = _Capture(model, refs, pool)
    outputs: dict[str, np.ndarray] = {}
    done = 0
    try:
        with torch.inference_mode():
            for xb in _batches(dataset, idx, batch_size):
                values = capture.run(
                    model, xb.to(dev, dtype=_model_dtype(model), non_blocking=True)
                )
                for key, val in values.items():
                    if key not in outputs:
                        outputs[key] = np.empty((idx.size, val.shape[1]), dtype=np.float32)
                    outputs[key][done : done + val.shape[0]] = val.cpu().numpy()
                done += xb.shape[0]
                if progress is not None:
                    progress(done, int(idx.size))
    except (ActivationError, DataError):
        raise
    except Exception as exc:
        raise ActivationError(
            f"forward pass failed ({type(exc).__name__}: {exc}); check that the dataset's inputs "
            "fit the model (shape, channels)"
        ) from exc
    finally:
        capture.close()
        model.train(was_training)
    return {name: outputs[name] for name in refs}
