"""The data of a classifier demo: its seeded training and test subsets, written byte-for-byte
deterministically as ``data.npz`` with the forget set and the data licence.

Fashion-MNIST is read offline from :data:`~sde_core.pipeline.demo_recipes.FASHION_SOURCE` (never
downloaded); mnist1d is generated offline by the ``mnist1d`` package.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping
from importlib import metadata as importlib_metadata
from pathlib import Path

import numpy as np

from sde_core.common.fsio import atomic_write_bytes
from sde_core.common.validation import check_int
from sde_core.errors import DataError, SettingsError
from sde_core.pipeline.demo_recipes import (
    DATA_FILE,
    FASHION_SOURCE,
    FORGET_FILE,
    LICENSE_FILE,
    DemoRecipe,
)

__all__ = ["area_resize", "npz_bytes"]


_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


_FASHION_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


_FASHION_LICENSE = """\
Fashion-MNIST (subset shipped in data.npz)
Copyright (c) 2017 Zalando SE, https://tech.zalando.com
Source: https://github.com/zalandoresearch/fashion-mnist (read offline from Debian's
dataset-fashion-mnist package). data.npz holds {train} of the 60,000 training images and {test}
of the 10,000 test images; their positions in the original files are the arrays
source_train_indices and source_test_indices.

The MIT License (MIT)

Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""


_MNIST1D_HEADER = """\
mnist1d (data generated offline by the mnist1d package {version}, shipped in data.npz)
Copyright (c) Sam Greydanus and the mnist1d contributors, https://github.com/greydanus/mnist1d
Generation settings: {settings}. data.npz holds {train} training and {test} test samples; their
positions in the generated arrays are source_train_indices and source_test_indices.
Licensed under the Apache License, Version 2.0; the licence text of the package follows.

"""


def _seeded_subset(n: int, size: int | None, seed: int, stream: int, what: str) -> np.ndarray:
    """Sorted indices of a seeded random subset of ``range(n)`` (all of it for ``size=None``)."""
    if size is None:
        return np.arange(n, dtype=np.int64)
    if size > n:
        raise SettingsError(f"{what} size {size} exceeds the {n} samples available")
    rng = np.random.default_rng([seed, stream])
    return np.sort(rng.choice(n, size=size, replace=False)).astype(np.int64)


def _source_arrays(recipe: DemoRecipe, source: Path | None) -> tuple[dict[str, np.ndarray], str]:
    """The full source splits (``x_train, y_train, x_test, y_test``) and the licence text."""
    from sde_core.inputs.array_datasets import ArrayDataset
    from sde_core.inputs.data import DatasetSpec, load_dataset
    from sde_core.inputs.dataset_readers import read_idx

    if recipe.dataset == "fashion-mnist":
        root = source or FASHION_SOURCE
        arrays = {}
        for key, stem in _FASHION_FILES.items():
            found = [
                root / f"{stem}{ext}" for ext in (".gz", "") if (root / f"{stem}{ext}").is_file()
            ]
            if not found:
                raise DataError(
                    f"{root} has no {stem}(.gz): install Debian's dataset-fashion-mnist package "
                    f"(files in {FASHION_SOURCE}) or pass --source with the four idx files"
                )
            arrays[key] = read_idx(found[0])
        return arrays, _FASHION_LICENSE
    cache = source or (Path(os.environ.get("TMPDIR", "/tmp")) / "sde-demo-mnist1d")
    options = dict(recipe.source_options)
    bundle = load_dataset(DatasetSpec(kind="mnist1d", root=cache, options=options))
    train, test = bundle.train, bundle.test
    assert isinstance(train, ArrayDataset) and isinstance(test, ArrayDataset)  # mnist1d: in memory
    arrays = {
        "x_train": np.asarray(train.x, dtype=np.float32),
        "y_train": bundle.train_labels,
        "x_test": np.asarray(test.x, dtype=np.float32),
        "y_test": bundle.test_labels,
    }
    licence = _MNIST1D_HEADER.replace("{version}", importlib_metadata.version("mnist1d")).replace(
        "{settings}", ", ".join(f"{k}={v}" for k, v in options.items())
    )
    licence_files = importlib_metadata.files("mnist1d") or []
    text = next((f.read_text() for f in licence_files if f.name == "LICENSE"), None)
    if text is None:
        raise DataError("the mnist1d package ships no LICENSE file; reinstall mnist1d")
    return arrays, licence + text


def _area_weights(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)``: row i averages the input cells that output cell i covers, each by the
    length of its overlap (exact area averaging for any ratio)."""
    edges = np.arange(n_out + 1) * (n_in / n_out)
    cells = np.arange(n_in)
    overlap = np.clip(
        np.minimum(edges[1:, None], cells[None, :] + 1) - np.maximum(edges[:-1, None], cells),
        0,
        None,
    )
    return overlap / overlap.sum(1, keepdims=True)


def area_resize(images: np.ndarray, size: int) -> np.ndarray:
    """Grey-scale ``uint8`` images ``(N, H, W)`` area-averaged to ``(N, size, size)`` and rounded
    (deterministic, pure numpy).

    Raises:
        SettingsError: ``size`` is not between 4 and the images' side.
    """
    _, h, w = images.shape
    size = check_int(size, "image_size", minimum=4, maximum=min(h, w), error=SettingsError)
    rows, cols = _area_weights(h, size), _area_weights(w, size)
    out = np.einsum("ih,nhw,jw->nij", rows, images.astype(np.float64), cols)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _demo_arrays(recipe: DemoRecipe, source: Path | None) -> tuple[dict[str, np.ndarray], str]:
    """The shipped arrays (seeded subsets, compact dtypes, source indices) and the licence."""
    full, licence = _source_arrays(recipe, source)
    tr = _seeded_subset(len(full["y_train"]), recipe.train_size, recipe.seed, 0, "D_tr")
    te = _seeded_subset(len(full["y_test"]), recipe.test_size, recipe.seed, 1, "D_te")
    x_dtype = np.uint8 if recipe.dataset == "fashion-mnist" else np.float32
    x_train, x_test = full["x_train"][tr], full["x_test"][te]
    if recipe.image_size is not None and recipe.dataset == "fashion-mnist":
        x_train, x_test = (area_resize(x, recipe.image_size) for x in (x_train, x_test))
    arrays = {
        "x_train": np.ascontiguousarray(x_train, dtype=x_dtype),
        "y_train": full["y_train"][tr].astype(np.uint8),
        "x_test": np.ascontiguousarray(x_test, dtype=x_dtype),
        "y_test": full["y_test"][te].astype(np.uint8),
        "source_train_indices": tr.astype(np.int32),
        "source_test_indices": te.astype(np.int32),
    }
    licence = licence.replace("{train}", f"{tr.size:,}").replace("{test}", f"{te.size:,}")
    return arrays, licence


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """A compressed ``.npz`` whose bytes depend only on the arrays (fixed zip timestamps)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for key in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, member.getvalue(), zipfile.ZIP_DEFLATED, 9)
    return buffer.getvalue()


def _write_if_changed(path: Path, content: bytes) -> None:
    """Write ``content`` atomically unless the file already holds exactly these bytes."""
    if path.is_file() and path.read_bytes() == content:
        return
    atomic_write_bytes(path, content)


def _write_data(recipe: DemoRecipe, folder: Path, source: Path | None) -> None:
    """``data.npz``, ``LICENSE-data.txt`` and the seeded random ``forget.npy``."""
    from sde_core.inputs.indices import save_index_file

    arrays, licence = _demo_arrays(recipe, source)
    _write_if_changed(folder / DATA_FILE, npz_bytes(arrays))
    _write_if_changed(folder / LICENSE_FILE, licence.encode())
    n = len(arrays["y_train"])
    rng = np.random.default_rng([recipe.seed, 2])
    k = max(1, round(recipe.forget_fraction * n))
    save_index_file(folder / FORGET_FILE, np.sort(rng.choice(n, size=k, replace=False)))
