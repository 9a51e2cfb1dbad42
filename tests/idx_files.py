"""Dataset files in the MNIST idx format (Fashion-MNIST's ``*-idx3-ubyte.gz``), as the dataset's
authors ship them, for the tests of the readers and of the builders that read them."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as a gzip-compressed idx file (MNIST format)."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(
        struct.pack(">I", d) for d in array.shape
    )
    with gzip.open(path, "wb") as fh:
        fh.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())
