"""Fixtures of the input tests: tiny datasets written in their real on-disk formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from idx_files import write_idx


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
