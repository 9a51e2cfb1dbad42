"""Dataset loading from real on-disk formats, subsets, fingerprints and index files."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from sde_core.errors import DataError
from sde_core.inputs.data import DATASET_KINDS, DatasetSpec, load_dataset
from sde_core.inputs.dataset_readers import READERS, read_idx
from sde_core.inputs.indices import load_index_file, save_index_file
from sde_core.inputs.precomputed import load_precomputed


def _write_cifar10(root: Path, n_per_batch: int = 4) -> np.ndarray:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    first = None
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8)
        first = data if first is None else first
        batch = {b"data": data, b"labels": list(range(n_per_batch))}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    names = [f"class{i}".encode() for i in range(10)]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))
    return first


def test_cifar10_python_batches(tmp_path: Path):
    first = _write_cifar10(tmp_path)
    bundle = load_dataset(DatasetSpec("cifar10", tmp_path))
    assert len(bundle.train) == 20 and len(bundle.test) == 4
    assert bundle.input_shape == (3, 32, 32) and bundle.is_image and bundle.num_classes == 10
    assert bundle.class_names[3] == "class3"
    x, y = bundle.train[1]
    expected = first[1].reshape(3, 32, 32).astype(np.float32) / 255
    assert np.allclose(x.numpy(), expected) and y == 1
    thumbs = bundle.images("train", [0, 1])
    assert thumbs.shape == (2, 32, 32, 3) and thumbs.dtype == np.uint8
    assert np.array_equal(thumbs[1], first[1].reshape(3, 32, 32).transpose(1, 2, 0))
    assert bundle.train_labels.dtype == np.int64


def test_cifar_batch_with_code_is_refused(tmp_path: Path):
    _write_cifar10(tmp_path)
    evil = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"x": Path("/")}
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(pickle.dumps(evil))
    with pytest.raises(DataError, match="refusing to unpickle"):
        load_dataset(DatasetSpec("cifar10", tmp_path))


def test_missing_cifar_says_which_files_where(tmp_path: Path):
    with pytest.raises(
        DataError, match=r"data_batch_1.*cifar-10-batches-py.*nothing is downloaded"
    ):
        load_dataset(DatasetSpec("cifar10", tmp_path))


def test_fashion_mnist_idx_gz_and_subset(fashion_root: Path):
    spec = DatasetSpec("fashion-mnist", fashion_root, train_size=10, test_size=5, seed=3)
    bundle = load_dataset(spec)
    assert len(bundle.train) == 10 and len(bundle.test) == 5
    assert bundle.input_shape == (1, 28, 28) and bundle.class_names[9] == "Ankle boot"
    raw = read_idx(fashion_root / "train-images-idx3-ubyte.gz")
    idx = bundle.source_indices["train"]
    assert np.array_equal(bundle.images("train", [0]), raw[idx[:1]])
    assert np.array_equal(bundle.train_labels, idx % 10)
    assert load_dataset(spec).fingerprint == bundle.fingerprint
    other = DatasetSpec("fashion-mnist", fashion_root, train_size=10, test_size=5, seed=4)
    assert load_dataset(other).fingerprint != bundle.fingerprint


def test_fashion_mnist_explicit_indices_and_bad_indices(fashion_root: Path):
    bundle = load_dataset(DatasetSpec("fashion-mnist", fashion_root, train_indices=[5, 1, 7]))
    assert list(bundle.train_labels) == [5, 1, 7] and len(bundle.test) == 20
    with pytest.raises(DataError, match=r"offending values: \[40\]"):
        load_dataset(DatasetSpec("fashion-mnist", fashion_root, train_indices=[1, 40]))
    with pytest.raises(DataError, match="train_size must be an integer in"):
        load_dataset(DatasetSpec("fashion-mnist", fashion_root, train_size=41))


def test_fashion_mnist_missing_and_truncated(tmp_path: Path, fashion_root: Path):
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte\.gz.*dataset-fashion-mnist"):
        load_dataset(DatasetSpec("fashion-mnist", tmp_path))
    path = fashion_root / "train-images-idx3-ubyte"
    path.write_bytes(read_idx_bytes(fashion_root / "train-images-idx3-ubyte.gz")[:-10])
    with pytest.raises(DataError, match="truncated"):
        read_idx(path)


def read_idx_bytes(path: Path) -> bytes:
    import gzip

    return gzip.decompress(path.read_bytes())


def test_imagefolder_and_tiny_imagenet_layout(tmp_path: Path):
    rng = np.random.default_rng(0)

    def png(path: Path, value: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((40, 40, 3), value, np.uint8)).save(path)

    root = tmp_path / "tiny"
    for wnid in ("n01", "n02"):
        for i in range(3):
            png(root / "train" / wnid / "images" / f"{wnid}_{i}.JPEG", int(rng.integers(256)))
    png(root / "val" / "images" / "val_0.JPEG", 200)
    png(root / "val" / "images" / "val_1.JPEG", 100)
    (root / "val" / "val_annotations.txt").write_text(
        "val_0.JPEG\tn02\t0\t0\t9\t9\nval_1.JPEG\tn01\n"
    )
    bundle = load_dataset(DatasetSpec("imagefolder", root, options={"image_size": 32}))
    assert bundle.class_names == ["n01", "n02"] and len(bundle.train) == 6
    assert list(bundle.test_labels) == [1, 0]
    x, y = bundle.test[0]
    assert x.shape == (3, 32, 32) and y == 1 and float(x.mean()) == pytest.approx(200 / 255)
    assert bundle.images("test", [1]).shape == (1, 32, 32, 3)


def test_npz_single_file_and_folder(tmp_path: Path):
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.normal(size=(12, 5)).astype(np.float32),
        "y_train": np.arange(12) % 3,
        "x_test": rng.normal(size=(6, 5)).astype(np.float32),
        "y_test": np.arange(6) % 3,
    }
    np.savez(tmp_path / "d.npz", **arrays)
    bundle = load_dataset(DatasetSpec("npz", tmp_path / "d.npz"))
    assert not bundle.is_image and bundle.input_shape == (5,) and bundle.num_classes == 3
    assert np.allclose(bundle.test[2][0].numpy(), arrays["x_test"][2])
    assert bundle.images("train", [0]) is None
    folder = tmp_path / "f"
    folder.mkdir()
    np.savez(folder / "train.npz", x=arrays["x_train"], y=arrays["y_train"])
    np.savez(folder / "test.npz", x=arrays["x_test"], y=arrays["y_test"])
    assert len(load_dataset(DatasetSpec("npz", folder)).train) == 12
    np.savez(tmp_path / "bad.npz", x_train=arrays["x_train"])
    with pytest.raises(DataError, match="needs arrays"):
        load_dataset(DatasetSpec("npz", tmp_path / "bad.npz"))


def test_mnist1d_generated_offline_and_cached(tmp_path: Path):
    spec = DatasetSpec("mnist1d", tmp_path / "m1d.npz", options={"num_samples": 100})
    state = np.random.get_state()[1].copy()  # noqa: NPY002 - checks the global RNG is untouched
    bundle = load_dataset(spec)
    assert np.array_equal(np.random.get_state()[1], state)  # noqa: NPY002
    assert len(bundle.train) == 60 and len(bundle.test) == 40 and bundle.input_shape == (40,)
    assert (tmp_path / "m1d.npz").is_file()
    again = load_dataset(spec)
    assert again.fingerprint == bundle.fingerprint
    assert np.array_equal(again.train_labels, bundle.train_labels)


def test_precomputed_activations_parquet(tmp_path: Path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        rng.normal(size=(10, 4)), columns=["penultimate/0", "penultimate/1", "f0", "f1"]
    )
    frame["split"] = ["train"] * 7 + ["test"] * 3
    frame["forget"] = [True, False, False, True, False, False, False, False, False, False]
    frame["label"] = np.arange(10) % 2
    path = tmp_path / "acts.parquet"
    frame.to_parquet(path)
    pre = load_precomputed(path)
    assert pre.layers == ["penultimate", "precomputed"]
    assert pre.get("test", "penultimate").shape == (3, 2)
    assert list(np.flatnonzero(pre.forget_mask)) == [0, 3]
    bundle = load_dataset(DatasetSpec("activations", path, train_indices=[0, 2, 3]))
    assert bundle.precomputed is not None and len(bundle.train) == 3
    assert np.allclose(
        bundle.precomputed.get("train", "precomputed"), frame[["f0", "f1"]].to_numpy()[[0, 2, 3]]
    )
    assert list(bundle.precomputed.forget_mask) == [True, False, True]
    frame["split"] = "validation"
    frame.to_parquet(path)
    with pytest.raises(DataError, match="validation"):
        load_precomputed(path)


@pytest.mark.parametrize("suffix", [".npy", ".txt", ".json"])
def test_index_file_round_trip(tmp_path: Path, suffix: str):
    path = save_index_file(tmp_path / f"forget{suffix}", np.array([7, 3, 11]))
    idx = load_index_file(path, n_train=12)
    assert idx.dtype == np.int64 and list(idx) == [7, 3, 11]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1\n2\n99\n", r"offending values: \[99\]"),
        ("1\n2\n2\n", r"duplicate indices: \[2\]"),
        ("1\nabc\n", r"offending values: line 2: 'abc'"),
        ("1.5\n", r"offending values: line 1: '1.5'"),
        ("# nothing\n", "empty"),
        ("-1\n", r"offending values: \[-1\]"),
    ],
)
def test_index_file_validation_names_offending_values(tmp_path: Path, content: str, message: str):
    path = tmp_path / "forget.txt"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_index_file(path, n_train=10)


def test_index_file_json_dict_and_bad_types(tmp_path: Path):
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"indices": [0, 4]}))
    assert list(load_index_file(path, 5)) == [0, 4]
    path.write_text(json.dumps([0, "x", True]))
    with pytest.raises(DataError, match="integers"):
        load_index_file(path, 5)
    with pytest.raises(DataError, match="does not exist"):
        load_index_file(tmp_path / "nope.npy", 5)


def test_dataset_spec_from_dict_and_unknown_kind(tmp_path: Path):
    spec = DatasetSpec.from_dict({"kind": "npz", "root": "d.npz", "train_size": 3}, tmp_path)
    assert Path(spec.root) == tmp_path / "d.npz" and spec.train_size == 3
    with pytest.raises(DataError, match="unknown keys"):
        DatasetSpec.from_dict({"kind": "npz", "rot": "x"})
    with pytest.raises(DataError, match="unknown dataset kind"):
        load_dataset(DatasetSpec("mnist", tmp_path))


# ----------------------------------------------------------------------------------------------
# Bad inputs: every case is a clean DataError (issue 12), natural layouts are accepted (issue 15)
# ----------------------------------------------------------------------------------------------


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def _xy(n: int = 6, d: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x_train": rng.normal(size=(n, d)).astype(np.float32),
        "y_train": np.arange(n) % 2,
        "x_test": rng.normal(size=(4, d)).astype(np.float32),
        "y_test": np.arange(4) % 2,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"y_train": np.array([0.0, 1.5, 1.0, 0.0, 1.0, 0.0])}, r"integer class ids.*1\.5"),
        ({"y_train": np.array([0.0, 1.0] * 3)}, r"got float64 values .*astype"),
        ({"y_train": np.array([False, True] * 3)}, "got boolean values"),
        ({"y_train": np.arange(7) % 2}, "7 labels for 6 rows"),
        (
            {"x_train": np.arange(12).astype("datetime64[D]").reshape(6, 2)},
            "numbers, got datetime64",
        ),
        ({"x_train": np.array(3.0)}, r"one sample per row"),
        ({"y_train": np.array([0, 1, 2, 3, 4, 10**12])}, "class ids"),
        ({"y_train": np.array(["a"] * 6)}, "integer class ids, got string"),
    ],
)
def test_npz_dataset_refuses_malformed_arrays(tmp_path: Path, change: dict, message: str):
    path = _npz(tmp_path / "d.npz", **{**_xy(), **change})
    with pytest.raises(DataError, match=message):
        load_dataset(DatasetSpec("npz", path))


def test_npz_class_names(tmp_path: Path):
    arrays = {**_xy(), "y_train": np.array([0, 1] * 3), "classes": np.array(["cat", "dog"])}
    bundle = load_dataset(DatasetSpec("npz", _npz(tmp_path / "d.npz", **arrays)))
    assert bundle.class_names == ["cat", "dog"] and bundle.train_labels.dtype == np.int64
    too_few = {**_xy(), "classes": np.array(["cat"])}
    with pytest.raises(DataError, match="one name per class"):
        load_dataset(DatasetSpec("npz", _npz(tmp_path / "e.npz", **too_few)))


def test_class_names_option_names_the_classes_without_changing_the_fingerprint(tmp_path: Path):
    path = _npz(tmp_path / "d.npz", **{**_xy(), "y_train": np.array([0, 1] * 3)})
    plain = load_dataset(DatasetSpec("npz", path))
    named = load_dataset(DatasetSpec("npz", path, options={"class_names": ["cat", " dog "]}))
    assert plain.class_names == ["0", "1"] and named.class_names == ["cat", "dog"]
    assert named.fingerprint == plain.fingerprint  # a name changes no number
    with pytest.raises(DataError, match="3 names but the data have 2 classes"):
        load_dataset(DatasetSpec("npz", path, options={"class_names": ["a", "b", "c"]}))
    for bad in ("cat,dog", [], ["cat", ""], ["cat", 3], ["x" * 101, "y"]):
        with pytest.raises(DataError, match=r"options\.class_names must be"):
            DatasetSpec("npz", path, options={"class_names": bad})


def test_npz_member_that_is_not_an_array(tmp_path: Path):
    import zipfile

    path = _npz(tmp_path / "d.npz", **_xy())
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("notes.txt", "root:x:0:0:root:/root:/bin/bash")
    with pytest.raises(DataError, match=r"not \.npy arrays") as info:
        load_dataset(DatasetSpec("npz", path))
    assert "root:x" not in str(info.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "npz", "root": 5}, "root must be a path string"),
        ({"kind": "npz", "root": "d.npz", "seed": -1}, "seed must be an integer"),
        ({"kind": "npz", "root": "d.npz", "seed": "x"}, "seed must be an integer"),
        ({"kind": "npz", "root": "d.npz", "train_size": 0}, "train_size must be an integer ≥ 1"),
        ({"kind": "npz", "root": "d.npz", "train_size": True}, "train_size must be an integer ≥ 1"),
        ({"kind": "npz", "root": "d.npz", "options": {"colour": 1}}, "unknown dataset option"),
        ({"kind": "npz", "root": "d.npz", "options": []}, "options must be a table"),
        ({"kind": "mnist1d", "root": "m.npz", "options": {"num_samples": 10**12}}, "num_samples"),
        ({"kind": "imagefolder", "root": "x", "options": {"image_size": 10**6}}, "image_size"),
        ({"kind": 3}, "unknown dataset kind"),
    ],
)
def test_dataset_spec_checks_every_field(tmp_path: Path, spec: dict, message: str):
    with pytest.raises(DataError, match=message):
        DatasetSpec.from_dict(spec, tmp_path)


def test_mnist1d_size_is_bounded_before_generating(tmp_path: Path, monkeypatch):
    def never(*_args, **_kwargs):
        raise AssertionError("generated although the size is out of bounds")

    monkeypatch.setattr("sde_core.inputs.dataset_readers._generate_mnist1d", never)
    spec = DatasetSpec.__new__(DatasetSpec)  # bypass __post_init__: the loader checks again
    object.__setattr__(spec, "kind", "mnist1d")
    for key, value in (("root", tmp_path / "m.npz"), ("train_indices", None),
                       ("test_indices", None), ("train_size", None), ("test_size", None),
                       ("seed", 0), ("options", {"num_samples": 10**12})):  # fmt: skip
        object.__setattr__(spec, key, value)
    with pytest.raises(DataError, match="num_samples"):
        load_dataset(spec)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (np.array([1, 2], dtype="timedelta64[s]"), "timedelta64"),
        (np.array([2**64 - 1, 1], dtype=np.uint64), r"\[18446744073709551615\]"),
        (np.array([0.5]), r"offending values: \[0.5\]"),
        (np.array([1e30]), r"1000000000000000019884624838656"),
        (np.array([True, False]), "mask needs exactly one entry per training row"),
    ],
)
def test_index_npy_edge_cases(tmp_path: Path, values: np.ndarray, message: str):
    np.save(tmp_path / "f.npy", values)
    with pytest.raises(DataError, match=message):
        load_index_file(tmp_path / "f.npy", 10)


def test_index_files_masks_bom_tensors_and_big_json(tmp_path: Path):
    import torch

    mask = np.zeros(10, dtype=bool)
    mask[[2, 5]] = True
    np.save(tmp_path / "m.npy", mask)
    assert list(load_index_file(tmp_path / "m.npy", 10)) == [2, 5]
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbf3\n4\n")
    assert list(load_index_file(tmp_path / "b.txt", 10)) == [3, 4]
    torch.save(torch.tensor([7, 1]), tmp_path / "t.pt")
    assert list(load_index_file(tmp_path / "t.pt", 10)) == [7, 1]
    torch.save({"mask": torch.from_numpy(mask)}, tmp_path / "d.pth")
    assert list(load_index_file(tmp_path / "d.pth", 10)) == [2, 5]
    (tmp_path / "j.json").write_text(json.dumps([True] * 3 + [False] * 7))
    assert list(load_index_file(tmp_path / "j.json", 10)) == [0, 1, 2]
    (tmp_path / "big.json").write_text("[1, 1000000000000000000000000000000]")
    with pytest.raises(DataError, match=r"offending values: \[1000000000000000000000000000000\]"):
        load_index_file(tmp_path / "big.json", 10)
    (tmp_path / "deep.json").write_text("[" * 30_000 + "]" * 30_000)  # within the size cap
    with pytest.raises(DataError, match="nested too deeply"):
        load_index_file(tmp_path / "deep.json", 10)
    (tmp_path / "none.npy").write_bytes(np.zeros(10, dtype=bool).tobytes())
    with pytest.raises(DataError):
        load_index_file(tmp_path / "none.npy", 10)


def test_index_file_errors_never_echo_the_file(tmp_path: Path):
    secret = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    path = tmp_path / "forget.txt"
    path.write_text(secret)
    with pytest.raises(DataError) as info:
        load_index_file(path, 10)
    message = str(info.value)
    assert "root:/root" not in message and "/bin/bash" not in message and "daemon" not in message
    assert "line 1: 'root:x:0:...'" in message  # a short, escaped excerpt


def _activations_frame(rng: np.random.Generator, n_train: int = 7, n_test: int = 3) -> pd.DataFrame:
    rows = n_train + n_test
    frame = pd.DataFrame({"split": ["train"] * n_train + ["test"] * n_test})
    frame["hidden_states"] = list(rng.normal(size=(rows, 4)))
    frame["label"] = np.arange(rows) % 2
    return frame


def test_precomputed_natural_layouts(tmp_path: Path):
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(10, 4)).astype(np.float32)
    split = np.array(["train"] * 7 + ["test"] * 3)
    _npz(tmp_path / "rows.npz", hidden_states=hidden, split=split, label=np.arange(10) % 2)
    pre = load_precomputed(tmp_path / "rows.npz")
    assert pre.layers == ["hidden_states"] and pre.get("test", "hidden_states").shape == (3, 4)
    assert list(pre.labels["train"]) == [0, 1, 0, 1, 0, 1, 0]
    _npz(tmp_path / "idx.npz", hidden_states=hidden, train_idx=np.arange(6), test_idx=[6, 9])
    assert np.allclose(
        load_precomputed(tmp_path / "idx.npz").get("test", "hidden_states"), hidden[[6, 9]]
    )
    frame = _activations_frame(rng)
    frame.to_parquet(tmp_path / "lists.parquet")
    got = load_precomputed(tmp_path / "lists.parquet").get("train", "hidden_states")
    assert np.allclose(got, np.stack(frame["hidden_states"][:7]))
    frame["model"] = ["a", "b"] * 5
    frame.to_parquet(tmp_path / "two.parquet")
    assert load_precomputed(tmp_path / "two.parquet", model="b").get(
        "train", "hidden_states"
    ).shape == (3, 4)
    with pytest.raises(DataError, match="several models"):
        load_precomputed(tmp_path / "two.parquet")


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        (
            {"hidden_states": np.zeros((10, 4)), "train_ids": np.arange(3)},
            r"'train_ids' must be an \(n, d\) array",
        ),
        ({"train_h": np.array(["a", "b"]), "test_h": np.zeros((2, 2))}, "must hold numbers"),
        ({"train_h": np.zeros((3, 2, 5)), "test_h": np.zeros((2, 2))}, "pool it"),
        (
            {"train_h": np.zeros((3, 2)), "test_h": np.zeros((2, 2)), "y_train": np.arange(4)},
            "4 labels for 3 rows",
        ),
        (
            {"train_h": np.zeros((3, 2)), "test_h": np.zeros((2, 2)), "y_train": [0.5, 1, 2]},
            "integer class ids",
        ),
        ({"split": np.array(["train", "dev"]), "h": np.zeros((2, 2))}, "'dev'"),
        ({"hidden_states": np.zeros((10, 4))}, "not an activations layout"),
    ],
)
def test_precomputed_bad_layouts_say_what_is_expected(tmp_path: Path, arrays: dict, message: str):
    _npz(tmp_path / "a.npz", **arrays)
    with pytest.raises(DataError, match=message):
        load_precomputed(tmp_path / "a.npz")


def test_parquet_without_numeric_columns(tmp_path: Path):
    pd.DataFrame({"split": ["train", "test"], "text": ["a", "b"]}).to_parquet(
        tmp_path / "p.parquet"
    )
    with pytest.raises(DataError, match="no feature columns"):
        load_precomputed(tmp_path / "p.parquet")


def test_class_names_for_every_kind(tmp_path: Path, fashion_root: Path):
    assert load_dataset(DatasetSpec("fashion-mnist", fashion_root)).class_names[0] == "T-shirt/top"
    bundle = load_dataset(DatasetSpec("npz", _npz(tmp_path / "d.npz", **_xy())))
    assert bundle.class_names == ["0", "1"]
    frame = _activations_frame(np.random.default_rng(0))
    frame.to_parquet(tmp_path / "a.parquet")
    assert load_dataset(DatasetSpec("activations", tmp_path / "a.parquet")).class_names == [
        "0",
        "1",
    ]


def test_every_kind_has_one_reader_and_a_missing_root_is_named():
    kinds = ["cifar10", "cifar100", "svhn", "fashion-mnist", "imagefolder", "npz", "mnist1d"]
    assert list(DATASET_KINDS) == [*kinds, "activations", "text"]  # the order the UI offers
    assert [*READERS, "text"] == list(DATASET_KINDS)  # text: tokenised records, not arrays
    assert [reader.kind for reader in READERS.values()] == list(READERS)
    assert [k for k, reader in READERS.items() if reader.image_files] == ["imagefolder"]
    with pytest.raises(DataError, match=r"a 'mnist1d' dataset needs a root \(a \.npz file"):
        load_dataset(DatasetSpec("mnist1d", None, options={"num_samples": 100}))
