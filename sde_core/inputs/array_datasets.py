"""The torch Datasets a :class:`~sde_core.inputs.data.DatasetBundle` holds: arrays in memory and
image files read on access.

Test-time transforms are deterministic: uint8 images become float32 in [0, 1], channels first,
optionally normalised; 1-D signals and feature vectors are taken as they are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from sde_core.errors import DataError
from sde_core.inputs.text_data import TextDataset

__all__ = ["ArrayDataset", "ImageFileDataset"]


def _to_chw_float(
    images: np.ndarray, normalize: tuple[np.ndarray, np.ndarray] | None
) -> torch.Tensor:
    """uint8 ``(k, H, W[, C])`` -> float32 ``(k, C, H, W)`` in [0, 1], optionally normalised."""
    t = torch.from_numpy(np.ascontiguousarray(images))
    t = t.unsqueeze(1) if t.dim() == 3 else t.permute(0, 3, 1, 2)
    t = t.to(torch.float32).div_(255.0)
    if normalize is not None:
        mean, std = (torch.as_tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in normalize)
        t = (t - mean) / std
    return t


class ArrayDataset(Dataset):
    """In-memory samples: uint8 images ``(N, H, W[, C])`` or float feature arrays ``(N, ...)``.

    ``get_batch(indices)`` returns a whole batch as tensors (fast path used by extraction).
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        is_image: bool,
        normalize: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.x, self.y, self.is_image, self.normalize = x, y, is_image, normalize

    def __len__(self) -> int:
        return len(self.x)

    def get_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs ``(k, *input_shape)`` float32 and labels ``(k,)`` int64 for ``indices``."""
        if self.is_image:
            xb = _to_chw_float(self.x[indices], self.normalize)
        else:
            xb = torch.from_numpy(np.ascontiguousarray(self.x[indices], dtype=np.float32))
        return xb, torch.from_numpy(self.y[indices])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        xb, yb = self.get_batch(np.array([i]))
        return xb[0], int(yb[0])

    def raw_images(self, indices: np.ndarray) -> np.ndarray:
        """uint8 images ``(k, H, W)`` or ``(k, H, W, C)``."""
        return np.ascontiguousarray(self.x[indices])


class ImageFileDataset(Dataset):
    """Images read from files, converted to RGB and resized to ``size×size`` (bilinear)."""

    def __init__(
        self,
        paths: list[Path],
        y: np.ndarray,
        size: int,
        normalize: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.paths, self.y, self.size, self.normalize = paths, y, size, normalize

    def __len__(self) -> int:
        return len(self.paths)

    def raw_images(self, indices: np.ndarray) -> np.ndarray:
        """uint8 images ``(k, size, size, 3)``."""
        from PIL import Image

        out = np.empty((len(indices), self.size, self.size, 3), dtype=np.uint8)
        for row, i in enumerate(indices):
            try:
                with Image.open(self.paths[int(i)]) as img:
                    rgb = img.convert("RGB")
                    if rgb.size != (self.size, self.size):
                        rgb = rgb.resize((self.size, self.size), Image.Resampling.BILINEAR)
                    out[row] = np.asarray(rgb)
            except OSError as exc:
                raise DataError(
                    f"cannot read image {self.paths[int(i)]}: {exc}; replace or remove it"
                ) from exc
        return out

    def get_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs ``(k, 3, size, size)`` float32 and labels ``(k,)`` int64."""
        return _to_chw_float(self.raw_images(indices), self.normalize), torch.from_numpy(
            self.y[indices]
        )

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        xb, yb = self.get_batch(np.array([i]))
        return xb[0], int(yb[0])


#: What a :class:`DatasetBundle` split holds: a sized Dataset with ``get_batch``/``raw_images``.
BundleDataset = ArrayDataset | ImageFileDataset | TextDataset
