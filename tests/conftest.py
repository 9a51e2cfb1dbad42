"""Shared pytest fixtures (keep small): tiny datasets written in their real on-disk formats."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as a gzip-compressed idx file (MNIST format)."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(
        struct.pack(">I", d) for d in array.shape
    )
    with gzip.open(path, "wb") as fh:
        fh.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


@pytest.fixture
def fashion_root(tmp_path: Path) -> Path:
    """A Fashion-MNIST folder with 40 train / 20 test random 28×28 images (idx .gz files)."""
    rng = np.random.default_rng(0)
    root = tmp_path / "fashion"
    root.mkdir()
    for prefix, n in (("train", 40), ("t10k", 20)):
        write_idx(root / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    return root


@pytest.fixture
def ws_root(tmp_path: Path) -> Path:
    """A small valid workspace folder (``test_workspace.make_workspace``)."""
    from test_workspace import make_workspace

    root = tmp_path / "ws"
    root.mkdir()
    make_workspace(root)
    return root


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module of tiny nets: a second thread only adds synchronisation
    (20× slower on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
