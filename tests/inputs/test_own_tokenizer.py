"""Each language model reads the texts with its own tokenizer (issue 35): a second model folder
saved with ``save_pretrained`` and a tokenizer of its own (another, smaller vocabulary than the
dataset's ``options.tokenizer``) is added with ``workspace add-model`` and its activations are
its hidden states on its own tokens; a model folder without a tokenizer whose vocabulary cannot
hold the dataset's tokens is refused with a message that names the tokenizer, not the
architecture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from llm_artefacts import qa_records, save_model_folder, tiny_gpt2, tokenizer_for, write_jsonl

from sde_core.errors import CheckpointError
from sde_core.inputs.activation_cache import ActivationCache
from sde_core.inputs.data import load_dataset
from sde_core.inputs.text_data import QA_TEMPLATE, has_tokenizer, model_view
from sde_core.pipeline.model_inputs import entry_activations, entry_bundle
from sde_core.pipeline.workspace_load import load_workspace

pytest.importorskip("transformers")  # the optional [llm] extra


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("own_tok")
    train, test = qa_records(16), qa_records(8, offset=16)
    texts = [QA_TEMPLATE.format(**r) for r in train + test]
    big = tokenizer_for(texts)
    # a smaller vocabulary, other ids: the other model's own tokenizer (unknown words -> [UNK])
    small = tokenizer_for([*texts[:3], "author born in was Where ? ."])
    assert len(small) < len(big)
    data = root / "ws"
    write_jsonl(data / "full.jsonl", train)
    write_jsonl(data / "holdout.jsonl", test)
    write_jsonl(data / "forget.json", train[:4])
    folders = {
        "original": save_model_folder(tiny_gpt2(big), big, root / "hf" / "original"),
        "other": save_model_folder(tiny_gpt2(small, seed=1), small, root / "hf" / "other"),
    }
    bare = root / "hf" / "bare"
    tiny_gpt2(small, seed=2).save_pretrained(bare)  # weights only, no tokenizer files
    folders["bare"] = bare
    return {"root": root, "data": data, "folders": folders, "small": small, "big": big}


def _workspace(setup: dict[str, Any]) -> Path:
    from sde_core.services.workspace_models import ModelSpec, add_model
    from sde_core.services.workspaces import create_workspace

    data, roots = setup["data"], [setup["root"]]
    if not (data / "workspace.toml").exists():
        options = {"test_path": "holdout.jsonl", "tokenizer": str(setup["folders"]["original"]),
                   "max_length": 24}  # fmt: skip
        dataset = {"kind": "text", "root": "full.jsonl", "options": options}
        create_workspace(data, dataset, forget_split="forget.json", roots=roots)
        add_model(data, ModelSpec("original", role="original"),
                  checkpoint=setup["folders"]["original"], roots=roots)  # fmt: skip
    return data


def test_a_second_model_reads_the_texts_with_its_own_tokenizer(setup: dict[str, Any]) -> None:
    from sde_core.services.workspace_models import ModelSpec, add_model

    data, roots = _workspace(setup), [setup["root"]]
    add_model(data, ModelSpec("other", role="unlearned"), checkpoint=setup["folders"]["other"],
              roots=roots)  # fmt: skip
    ws = load_workspace(data, roots=roots)
    bundle = load_dataset(ws.dataset_spec())
    own = entry_bundle(ws, ws.model("other"), bundle)
    assert entry_bundle(ws, ws.model("original"), bundle) is bundle  # shares options.tokenizer
    assert own.fingerprint != bundle.fingerprint and own.train.texts == bundle.train.texts
    assert own.train.ids.max() < len(setup["small"]) <= bundle.train.ids.max()
    cache = ActivationCache(setup["root"] / "cache")
    got = entry_activations(ws, ws.model("other"), bundle, "test", "final", cache)["final"]
    # by hand: the folder's own tokenizer and transformers' own hidden states, mean-pooled
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(setup["folders"]["other"])
    lm = AutoModelForCausalLM.from_pretrained(setup["folders"]["other"]).eval()
    enc = tok(bundle.test.texts, padding="max_length", truncation=True, max_length=24,
              return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        states = lm(**enc, output_hidden_states=True).hidden_states[-1]
    mask = enc["attention_mask"].unsqueeze(-1).float()
    expected = ((states * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # the answer span is kept, found again in the other tokenizer's tokens
    assert own.test.answer_mask is not None
    assert (own.test.answer_mask.sum(axis=1) > 0).all()


def test_a_folder_without_a_tokenizer_is_told_about_the_tokens(setup: dict[str, Any]) -> None:
    from sde_core.services.workspace_models import ModelSpec, add_model

    data, roots = _workspace(setup), [setup["root"]]
    assert not has_tokenizer(setup["folders"]["bare"])
    with pytest.raises(CheckpointError) as err:
        add_model(data, ModelSpec("bare", role="unlearned"), checkpoint=setup["folders"]["bare"],
                  roots=roots)  # fmt: skip
    said = str(err.value)
    assert "vocabulary has" in said and "tokenizer of its own" in said
    assert "save_pretrained" in said and "check the architecture" not in said


def test_model_view_keeps_other_datasets_and_shared_tokenizers(setup: dict[str, Any]) -> None:
    ws = load_workspace(_workspace(setup), roots=[setup["root"]])
    bundle = load_dataset(ws.dataset_spec())
    assert model_view(bundle, setup["folders"]["original"]) is bundle
    assert model_view(bundle, setup["folders"]["bare"]) is bundle  # no tokenizer: shares
    other = model_view(bundle, setup["folders"]["other"])
    assert model_view(bundle, setup["folders"]["other"]).train is other.train  # cached
