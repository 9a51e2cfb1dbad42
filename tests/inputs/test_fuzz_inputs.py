"""Property-based checks (Hypothesis, seeded) of the file readers a user's data goes through:
index files, dataset loaders, precomputed activations and the workspace.toml validator.

Property: whatever the bytes, the reader either returns a well-formed result or raises an
:class:`~sde_core.errors.SDEError` — never another exception (issue 12). Seeded
(``derandomize=True``) and sized to run ~1,000 examples in well under a minute.
"""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sde_core.errors import SDEError
from sde_core.inputs.data import DatasetSpec, load_dataset
from sde_core.inputs.indices import load_index_file
from sde_core.inputs.precomputed import load_precomputed
from sde_core.pipeline.workspace_load import load_workspace

SETTINGS = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DTYPES = st.sampled_from(
    ["i1", "i4", "i8", "u1", "u8", "f4", "f8", "?", "c8", "U3", "S2", "M8[D]", "m8[s]"]
)


def arrays(max_dims: int = 3, max_side: int = 6) -> st.SearchStrategy[np.ndarray]:
    return DTYPES.flatmap(
        lambda dtype: hnp.arrays(
            np.dtype(dtype), hnp.array_shapes(min_dims=0, max_dims=max_dims, max_side=max_side)
        )
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def expect_sde(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a reader; an SDEError is an accepted outcome, any other exception fails."""
    try:
        return call(*args, **kwargs)
    except SDEError:
        return None


def _check_index(result: np.ndarray | None, n: int) -> None:
    if result is not None:
        assert result.dtype == np.int64 and result.ndim == 1 and result.size >= 1
        assert result.min() >= 0 and result.max() < n


# ------------------------------------------------------------------------------- index files


@settings(SETTINGS, max_examples=150)
@given(
    text=st.text(max_size=60) | st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
    n=st.integers(1, 50),
)
def test_txt_index_files(scratch: Path, text: str, n: int):
    path = scratch / "f.txt"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    _check_index(expect_sde(load_index_file, path, n), n)


@settings(SETTINGS, max_examples=150)
@given(value=JSON, n=st.integers(1, 50))
def test_json_index_files(scratch: Path, value: object, n: int):
    path = scratch / "f.json"
    path.write_text(json.dumps(value))
    _check_index(expect_sde(load_index_file, path, n), n)


@settings(SETTINGS, max_examples=150)
@given(arr=arrays(max_dims=2, max_side=8), n=st.integers(1, 8))
def test_npy_index_files(scratch: Path, arr: np.ndarray, n: int):
    path = scratch / "f.npy"
    np.save(path, arr)
    _check_index(expect_sde(load_index_file, path, n), n)


@settings(SETTINGS, max_examples=40)
@given(data=st.binary(max_size=64), n=st.integers(1, 8))
def test_pt_index_files_from_garbage(scratch: Path, data: bytes, n: int):
    path = scratch / "f.pt"
    path.write_bytes(data)
    _check_index(expect_sde(load_index_file, path, n), n)


# ------------------------------------------------------------------------------- datasets


@settings(SETTINGS, max_examples=150)
@given(
    parts=st.fixed_dictionaries(
        {}, optional={k: arrays() for k in ("x_train", "y_train", "x_test", "y_test", "classes")}
    )
)
def test_npz_datasets(scratch: Path, parts: dict[str, np.ndarray]):
    path = scratch / "d.npz"
    np.savez(path, **parts)
    bundle = expect_sde(load_dataset, DatasetSpec("npz", path))
    if bundle is not None:
        assert len(bundle.train) == len(bundle.train_labels) > 0
        assert len(bundle.class_names) == bundle.num_classes


@settings(SETTINGS, max_examples=100)
@given(
    parts=st.dictionaries(
        st.sampled_from(
            [
                "train_h",
                "test_h",
                "x_train",
                "x_test",
                "y_train",
                "y_test",
                "forget",
                "split",
                "hidden",
                "label",
                "train_idx",
                "test_idx",
            ]
        ),
        arrays(max_dims=2),
        max_size=5,
    )
)
def test_precomputed_activation_files(scratch: Path, parts: dict[str, np.ndarray]):
    path = scratch / "a.npz"
    np.savez(path, **parts)
    pre = expect_sde(load_precomputed, path)
    if pre is not None:
        for split in ("train", "test"):
            assert all(a.ndim == 2 and a.dtype == np.float32 for a in pre.features[split].values())


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
)
TOML_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(SETTINGS, max_examples=80)
@given(values=st.dictionaries(
    st.sampled_from(["kind", "root", "train_indices", "test_indices", "train_size", "test_size",
                     "seed", "options", "colour"]), TOML_VALUES, max_size=5))  # fmt: skip
def test_dataset_tables(scratch: Path, values: dict):
    spec = expect_sde(DatasetSpec.from_dict, values, scratch)
    if spec is not None:
        expect_sde(load_dataset, spec)


# ------------------------------------------------------------------------------- workspace.toml


@pytest.fixture(scope="module")
def skeleton(scratch: Path) -> tuple[Path, dict]:
    """A valid workspace folder (one model) and its TOML document."""
    from helpers.workspaces import make_workspace

    from sde_core.pipeline.workspace_write import write_workspace

    root = scratch / "ws"
    root.mkdir()
    ws = make_workspace(root)
    ws.models = ws.models[:1]
    write_workspace(ws)
    return root, tomllib.loads((root / "workspace.toml").read_text())


PATHS = [("version",), ("name",), ("forget_indices",), ("dataset", "kind"), ("dataset", "root"),
         ("dataset", "train_size"), ("dataset", "seed"), ("dataset", "options"),
         ("defaults", "sigma"), ("defaults", "subset_size"), ("defaults", "layer"),
         ("defaults", "alpha"), ("defaults", "pool"), ("models",), ("models", 0, "name"),
         ("models", 0, "arch"), ("models", 0, "checkpoint"), ("models", 0, "arch_kwargs"),
         ("models", 0, "trusted"), ("models", 0, "activations"), ("models", 0, "checkpoints"),
         ("models", 0, "seconds"), ("extra",)]  # fmt: skip


def _edit(doc: dict, path: tuple, value: object) -> None:
    """Set (or, for None, delete) ``doc[path]`` when its parent exists."""
    target: object = doc
    for key in path[:-1]:
        in_dict = isinstance(target, dict) and key in target
        in_list = isinstance(target, list) and isinstance(key, int) and key < len(target)
        if not (in_dict or in_list):
            return
        target = target[key]  # type: ignore[index]
    if isinstance(target, dict):
        if value is None:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value


def _drop_none(value: object) -> object:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value if v is not None]
    return value


@settings(SETTINGS, max_examples=150)
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), TOML_VALUES), min_size=1, max_size=3))
def test_workspace_toml_validator(skeleton: tuple[Path, dict], edits: list):
    root, base = skeleton
    doc = copy.deepcopy(base)
    for path, value in edits:
        _edit(doc, path, value)
    try:
        text = tomli_w.dumps(_drop_none(doc))
    except (TypeError, ValueError):  # not representable in TOML: nothing to read
        return
    (root / "workspace.toml").write_text(text)
    ws = expect_sde(load_workspace, root)
    if ws is not None:
        assert ws.models and all(m.name and m.role for m in ws.models)


@settings(SETTINGS, max_examples=40)
@given(raw=st.binary(max_size=200))
def test_workspace_toml_from_garbage(scratch: Path, raw: bytes):
    folder = scratch / "garbage"
    folder.mkdir(exist_ok=True)
    (folder / "workspace.toml").write_bytes(raw)
    assert expect_sde(load_workspace, folder) is None  # no dataset, no models: always refused


# ------------------------------------------------------------------------------- issue 20


@settings(SETTINGS, max_examples=100)
@given(
    arr=arrays(max_dims=2, max_side=8),
    position=st.integers(0, 127),
    byte=st.integers(0, 255),
    n=st.one_of(st.none(), st.integers(1, 8)),
)
def test_npy_index_files_with_a_damaged_header(scratch, arr, position, byte, n):
    """Any byte of an .npy header changed (a shape of 10**12, a broken literal, another
    dtype): an index array or an SDEError, never a tokenizer error or a huge allocation."""
    path = scratch / "damaged.npy"
    np.save(path, arr)
    raw = bytearray(path.read_bytes())
    header_end = 10 + int.from_bytes(raw[8:10], "little")
    raw[position % header_end] = byte
    path.write_bytes(bytes(raw))
    _check_index(expect_sde(load_index_file, path, n), n or 20_000_000)


@settings(SETTINGS, max_examples=60)
@given(shape=st.integers(9, 10**15), n=st.integers(1, 8))
def test_npy_headers_declaring_more_entries_than_the_training_set(scratch, shape, n):
    path = scratch / "declared.npy"
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<i8", "fortran_order": False, "shape": (shape,)}
        )
        fh.write(np.arange(1, dtype=np.int64).tobytes())
    with pytest.raises(SDEError, match="declares"):
        load_index_file(path, n)


@settings(SETTINGS, max_examples=100)
@given(
    params=st.dictionaries(
        st.sampled_from(["n", "T", "K", "seed", "B", "bins", "R", "sigma", "layer"]),
        st.text(max_size=40) | st.integers(0, 10**60).map(str) | st.just("9" * 5000),
        max_size=5,
    )
)
def test_link_parameters_never_raise(params):
    """Whatever a link carries (non-ASCII digits, thousands of digits): values in range or a
    short problem per parameter, never an exception."""
    from sde_core.services.view_state import decode

    view, problems = decode("explore", params)
    values = view.settings
    assert len(values) + len(problems) == len(params)
    for key in ("subset_size", "targets", "splits", "seed", "draws", "bins", "panel_size"):
        assert key not in values or 0 <= values[key] < 2**63
    assert all(len(p) < 200 for p in problems)


@settings(SETTINGS, max_examples=200)
@given(value=st.text(max_size=20) | st.floats() | st.integers())
def test_csv_cells_never_start_a_formula(value):
    from sde_core.common.csv_cells import FORMULA_STARTS, neutralise_formula

    out = neutralise_formula(value)
    if not isinstance(value, str):
        assert out is value
    elif isinstance(out, str) and out.startswith(FORMULA_STARTS):
        float(out)  # only text that reads as a number is left as it is
    else:
        assert out in (value, "'" + value)


KEYS = st.text(alphabet="abc", min_size=1, max_size=3)


@settings(SETTINGS, max_examples=80)
@given(
    parts=st.lists(KEYS, min_size=1, max_size=60),
    brackets=st.integers(0, 60),
    quoted=st.booleans(),
)
def test_toml_nesting_is_bounded_before_parsing(scratch, parts, brackets, quoted):
    """Deep dotted keys and nested arrays (also inside strings, which do not count): a clean
    refusal above the depth cap, the parser's answer below it."""
    from sde_core.common.toml_limits import nesting_depth, read_toml

    value = "[" * brackets + "1" + "]" * brackets
    key = ".".join(parts)
    text = f'{key} = {value}\ns = "{"[" * 100 if quoted else ""}"\n'
    path = scratch / "deep.toml"
    path.write_text(text)
    assert max(len(parts), brackets + 1) <= nesting_depth(text) <= len(parts) + brackets
    try:
        doc = read_toml(path, max_bytes=2**20, max_depth=32, what="t", error=SDEError)
    except SDEError as exc:
        assert nesting_depth(text) > 32 or "not valid TOML" in str(exc)
    else:
        assert nesting_depth(text) <= 32 and "s" in doc
