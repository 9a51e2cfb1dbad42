"""Language models (issue 26): a Hugging Face model folder as a model, text datasets in their
real on-disk formats, forget sets by split file or column, the language-model unlearning
methods, and the trust rules for pickled weights and remote code.

Every model is a tiny GPT-2 built from a ``GPT2Config`` and saved with ``save_pretrained``; the
hidden states are checked against ``transformers``' own ``output_hidden_states``. That the vision
path never imports ``transformers`` is checked by ``tests/cli/test_evaluate_cli.py`` (a whole
``python -m sde_core evaluate`` with the package shadowed by one that fails on import).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from llm_artefacts import qa_records, save_model_folder, tiny_gpt2, tokenizer_for, write_jsonl

from sde_core.errors import CheckpointError, DataError, SettingsError, TrainingError
from sde_core.inputs.activation_cache import ActivationCache
from sde_core.inputs.activations import get_activations
from sde_core.inputs.data import DatasetSpec, load_dataset
from sde_core.inputs.hf_models import HFHiddenStates, load_hf_folder
from sde_core.inputs.models import load_checkpoint, load_checkpoint_details
from sde_core.inputs.text_data import QA_TEMPLATE, forget_rows, record_texts
from sde_core.inputs.text_records import read_records
from sde_core.learning.llm_unlearning import causal_lm_losses
from sde_core.learning.unlearning import UnlearnData, unlearn

pytest.importorskip("transformers")  # the optional [llm] extra


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny GPT-2 folder, its tokenizer, and TOFU-style train/test/forget JSONL files."""
    root = tmp_path_factory.mktemp("lm")
    train, test = qa_records(24), qa_records(16, offset=24)
    tokenizer = tokenizer_for([QA_TEMPLATE.format(**r) for r in train + test])
    model = tiny_gpt2(tokenizer)
    folder = save_model_folder(model, tokenizer, root / "hf" / "original")
    write_jsonl(root / "full.jsonl", train)
    write_jsonl(root / "holdout.jsonl", test)
    write_jsonl(root / "forget.json", train[:6])
    return {"root": root, "folder": folder, "tokenizer": tokenizer, "model": model,
            "train": train, "test": test}  # fmt: skip


def text_spec(lm: dict[str, Any], **options: Any) -> DatasetSpec:
    root = lm["root"]
    return DatasetSpec(
        "text",
        root / "full.jsonl",
        options={"test_path": str(root / "holdout.jsonl"), "tokenizer": str(lm["folder"]),
                 "max_length": 24, **options},
    )  # fmt: skip


def test_hidden_states_match_transformers(lm: dict[str, Any], tmp_path: Path) -> None:
    bundle = load_dataset(text_spec(lm))
    loaded = load_checkpoint_details(lm["folder"])
    assert loaded.arch == "hf" and isinstance(loaded.model, HFHiddenStates)
    assert loaded.model.layer_names[:4] == ("embeddings", "layer.0", "layer.1", "final")
    cache = ActivationCache(tmp_path / "cache")
    layers = ["embeddings", "layer.0", "final", "output"]
    mean = get_activations(lm["folder"], bundle, "test", layers, cache, pool=True)
    last = get_activations(lm["folder"], bundle, "test", layers, cache, pool=False)
    assert cache.stats.stored == 8  # pooling is part of the cache key
    # the independent reference: transformers' own hidden states of the same tokens
    enc = lm["tokenizer"]([QA_TEMPLATE.format(**r) for r in lm["test"]], padding=True,
                          return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        hidden = lm["model"](**enc, output_hidden_states=True).hidden_states
    mask = enc["attention_mask"].numpy().astype(np.float64)
    lengths = mask.sum(1).astype(int)
    for name, state in (("embeddings", hidden[0]), ("layer.0", hidden[1]), ("final", hidden[-1])):
        h = state.numpy().astype(np.float64)
        want_mean = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        want_last = h[np.arange(len(h)), lengths - 1]
        np.testing.assert_allclose(mean[name], want_mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(last[name], want_last, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(mean["output"], mean["final"])
    assert not np.allclose(mean["final"], last["final"])


def _bin_folder(lm: dict[str, Any], folder: Path) -> Path:
    """The same model with its weights as a pickled pytorch_model.bin only."""
    folder.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((lm["folder"] / name).read_bytes())
    torch.save(lm["model"].state_dict(), folder / "pytorch_model.bin")
    return folder


def test_pickled_weights_and_remote_code_need_the_trusted_opt_in(
    lm: dict[str, Any], tmp_path: Path
) -> None:
    folder = _bin_folder(lm, tmp_path / "bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin \(pickled weights\).*trusted"):
        load_checkpoint(folder)
    trusted = load_checkpoint(folder, trusted=True)
    x = load_dataset(text_spec(lm)).train.get_batch(np.arange(4))[0]
    with torch.no_grad():
        torch.testing.assert_close(trusted(x), load_checkpoint(lm["folder"])(x))
    # a Trainer's training_args.bin next to safetensors weights is never loaded: no trust needed
    (tmp_path / "saved").mkdir()
    for f in lm["folder"].iterdir():
        (tmp_path / "saved" / f.name).write_bytes(f.read_bytes())
    (tmp_path / "saved" / "training_args.bin").write_bytes(b"\x80\x04not loaded")
    assert isinstance(load_checkpoint(tmp_path / "saved"), HFHiddenStates)
    # remote code: config.json maps the model to a module in the folder; it must never run
    remote = tmp_path / "remote"
    remote.mkdir()
    for f in lm["folder"].iterdir():
        (remote / f.name).write_bytes(f.read_bytes())
    config = json.loads((remote / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilLM"}
    (remote / "config.json").write_text(json.dumps(config))
    marker = tmp_path / "ran"
    (remote / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    with pytest.raises(CheckpointError, match=r"modeling_evil\.py"):
        load_checkpoint(remote)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="arch 'hf'"):
        load_checkpoint(lm["folder"] / "model.safetensors", arch="hf")
    for too_big in (lm["folder"], folder):  # checked before transformers reads anything
        with pytest.raises(CheckpointError, match="budget"):
            load_hf_folder(too_big, trusted=True, max_bytes=1000)


def _save_formats(rows: list[dict[str, Any]], folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    paths = {
        "jsonl": write_jsonl(folder / "a.jsonl", rows),
        "json": folder / "a.json",
        "csv": folder / "a.csv",
        "parquet": folder / "a.parquet",
    }
    paths["json"].write_text(json.dumps(rows), encoding="utf-8")
    frame.to_csv(paths["csv"], index=False)
    frame.to_parquet(paths["parquet"])
    return paths


def test_text_formats_read_alike(lm: dict[str, Any], tmp_path: Path) -> None:
    import datasets

    rows = lm["train"]
    for path in _save_formats(rows, tmp_path).values():
        assert read_records(path) == rows, path.name
    split = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(lm["test"])}
    )
    split.save_to_disk(str(tmp_path / "disk"))
    spec = DatasetSpec("text", tmp_path / "disk", options={"tokenizer": str(lm["folder"]),
                                                           "max_length": 24})  # fmt: skip
    from_disk, from_jsonl = load_dataset(spec), load_dataset(text_spec(lm))
    assert from_disk.texts("train", [0, 1]) == from_jsonl.texts("train", [0, 1])
    assert from_disk.texts("train", [0])[0] == QA_TEMPLATE.format(**rows[0])
    np.testing.assert_array_equal(from_disk.train.ids, from_jsonl.train.ids)
    assert from_jsonl.input_shape == (2, 24) and from_jsonl.num_classes == 0
    assert from_jsonl.images("train", [0]) is None
    # the template and max length shape the tokens, hence the fingerprint
    other = load_dataset(text_spec(lm, template="{answer}"))
    assert other.texts("train", [0]) == [rows[0]["answer"]]
    assert other.fingerprint != from_jsonl.fingerprint
    with pytest.raises(DataError, match="does not fill the template"):
        load_dataset(text_spec(lm, template="{missing}"))
    no_tokenizer = {"test_path": str(lm["root"] / "holdout.jsonl")}
    with pytest.raises(DataError, match=r"options\.tokenizer"):
        load_dataset(DatasetSpec("text", lm["root"] / "full.jsonl", options=no_tokenizer))


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(st.lists(st.fixed_dictionaries({"text": _TEXT}), min_size=1, max_size=8))
@settings(max_examples=25, deadline=None)
def test_any_texts_round_trip_through_jsonl_and_parquet(rows: list[dict[str, str]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        paths = _save_formats(rows, Path(tmp))
        for kind in ("jsonl", "json", "parquet"):
            assert record_texts(read_records(paths[kind]), {}, kind) == [r["text"] for r in rows]


def test_forget_sets_by_split_file_and_by_column(lm: dict[str, Any], tmp_path: Path) -> None:
    bundle = load_dataset(text_spec(lm))
    options = text_spec(lm).options
    np.testing.assert_array_equal(
        forget_rows(bundle.train, options, split_file=lm["root"] / "forget.json"), np.arange(6)
    )
    rows = [dict(r, forget=("yes" if i % 4 == 0 else "no")) for i, r in enumerate(lm["train"])]
    marked = tmp_path / "marked.csv"
    pd.DataFrame(rows).to_csv(marked, index=False)
    write_jsonl(tmp_path / "test.jsonl", lm["test"])
    spec = DatasetSpec(
        "text", marked, options={**options, "test_path": str(tmp_path / "test.jsonl")}
    )
    column = forget_rows(load_dataset(spec).train, options, column="forget")
    np.testing.assert_array_equal(column, np.arange(0, 24, 4))
    write_jsonl(tmp_path / "stranger.jsonl", qa_records(1, offset=99))
    with pytest.raises(DataError, match="is not in the training split"):
        forget_rows(bundle.train, options, split_file=tmp_path / "stranger.jsonl")
    with pytest.raises(DataError, match="exactly one"):
        forget_rows(bundle.train, options)


@pytest.fixture
def one_thread() -> Any:
    """Tiny models train fastest on one thread (and do not contend on a shared machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_language_model_methods_do_what_they_claim(lm: dict[str, Any]) -> None:
    bundle = load_dataset(text_spec(lm))
    original = load_hf_folder(lm["folder"])
    forget = np.arange(6)
    data = UnlearnData.from_forget(bundle.train, forget)
    retain = data.retain_idx

    def losses(model: HFHiddenStates) -> tuple[float, float]:
        return (causal_lm_losses(model, bundle.train, forget).mean(),
                causal_lm_losses(model, bundle.train, retain).mean())  # fmt: skip

    forget_before, retain_before = losses(original)
    fast = {"lr": 1e-2, "epochs": 2, "batch_size": 3}
    ga = losses(unlearn("llm_ga", original, data, **fast).model)
    assert ga[0] > forget_before  # ascent raises the forget-set loss
    for method in ("llm_gd", "llm_npo"):  # D_f pushed up relative to D_r, which is kept
        forget_after, retain_after = losses(unlearn(method, original, data, **fast).model)
        assert forget_after - retain_after > forget_before - retain_before, method
    retrained = unlearn("llm_retrain", original, data, lr=1e-2, epochs=3, batch_size=6).model
    assert (causal_lm_losses(retrained, bundle.train, retain).mean()
            < causal_lm_losses(original, bundle.train, retain).mean())  # fmt: skip
    # the original is untouched
    torch.testing.assert_close(original.state_dict(), load_hf_folder(lm["folder"]).state_dict())
    with pytest.raises(TrainingError, match="Hugging Face model folder"):
        unlearn("llm_ga", torch.nn.Linear(2, 2), data)


def test_a_model_folder_is_added_in_place_or_copied(lm: dict[str, Any], tmp_path: Path) -> None:
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.services.workspace_models import ModelSpec, add_model
    from sde_core.services.workspaces import create_workspace

    data = tmp_path / "ws"
    for name in ("full.jsonl", "holdout.jsonl", "forget.json"):
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_bytes((lm["root"] / name).read_bytes())
    options = {"test_path": "holdout.jsonl", "tokenizer": str(lm["folder"])}
    dataset = {"kind": "text", "root": "full.jsonl", "options": options}
    made = create_workspace(data, dataset, forget_split="forget.json", roots=[lm["root"]])
    assert made.n_forget == 6
    added = add_model(data, ModelSpec("original", role="original"), checkpoint=lm["folder"],
                      copy=True, roots=[lm["root"]])  # fmt: skip
    ws = load_workspace(data, roots=[lm["root"]])
    copied = ws.path(added.entry.checkpoint)
    assert copied.is_dir() and copied.is_relative_to(data)
    assert {p.name for p in copied.iterdir()} == {p.name for p in lm["folder"].iterdir()}
    assert added.entry.arch == "hf" and added.entry.sha256 == ws.model("original").sha256
    with pytest.raises(SettingsError, match="exactly one forget set"):
        create_workspace(tmp_path / "ws2", dataset, forget_split="f.json", forget_column="c")
