"""The language-model behaviour scores (``learning/lm_behaviour.py``) against a by-hand
computation: each text's next-token NLLs from ``transformers``' own logits, restricted to the
answer's tokens found from the tokenizer's character offsets, then their mean (loss), the
mean of the 20% largest (Min-K%), the mean over the zlib-compressed answer's bytes, and the
mean over every token of the text."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest
import torch
from llm_artefacts import qa_bundle, qa_records, save_model_folder, tiny_gpt2, tokenizer_for

from sde_core.errors import TrainingError
from sde_core.inputs.hf_models import load_hf_folder
from sde_core.inputs.text_data import QA_TEMPLATE
from sde_core.learning.lm_behaviour import lm_text_scores

pytest.importorskip("transformers")  # the optional [llm] extra


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("lm_behaviour")
    train, test = qa_records(12), qa_records(8, offset=12)
    tokenizer = tokenizer_for([QA_TEMPLATE.format(**r) for r in train + test])
    folder = save_model_folder(tiny_gpt2(tokenizer, seed=4), tokenizer, root / "model")
    return {"bundle": qa_bundle(root, train, test, folder), "folder": folder,
            "tokenizer": tokenizer,
            "records": train}  # fmt: skip


def test_scores_are_the_answer_tokens_nll_by_hand(lm: dict[str, Any]) -> None:
    model = load_hf_folder(lm["folder"])
    data = lm["bundle"].train
    rows = np.array([0, 3, 7, 11])
    got = lm_text_scores(model, data, rows, batch_size=3)
    assert got.span == "answer"
    tok = lm["tokenizer"]
    for j, i in enumerate(rows):
        record = lm["records"][i]
        text = QA_TEMPLATE.format(**record)
        start = text.index("\nAnswer: ") + len("\nAnswer: ")
        enc = tok(text, return_offsets_mapping=True)
        ids = torch.tensor([enc["input_ids"]])
        with torch.no_grad():
            logits = model.lm(input_ids=ids).logits[0]
        logp = torch.log_softmax(logits.double(), dim=-1)
        nll = [-float(logp[t - 1, ids[0, t]]) for t in range(1, ids.shape[1])
               if enc["offset_mapping"][t][0] >= start]  # fmt: skip
        assert len(nll) == got.tokens[j] == len(record["answer"].replace(".", " .").split())
        assert got.loss[j] == pytest.approx(np.mean(nll), rel=1e-5)
        k = max(1, int(np.ceil(0.2 * len(nll))))
        assert got.min_k[j] == pytest.approx(np.mean(sorted(nll)[-k:]), rel=1e-5)
        every = [-float(logp[t - 1, ids[0, t]]) for t in range(1, ids.shape[1])]
        assert got.text_loss[j] == pytest.approx(np.mean(every), rel=1e-5)
        z = len(zlib.compress(record["answer"].encode()))
        assert got.zlib[j] == pytest.approx(np.mean(nll) / z, rel=1e-5)


def test_whole_texts_are_scored_without_an_answer_span(lm: dict[str, Any]) -> None:
    model = load_hf_folder(lm["folder"])
    data = lm["bundle"].train.subset(np.arange(4))
    data.answer_mask, data.answer_starts = None, None
    got = lm_text_scores(model, data)
    assert got.span == "text"
    masks = data.mask.sum(axis=1)
    assert list(got.tokens) == list(masks - 1)  # every real token after the first
    assert np.allclose(got.loss, got.text_loss)


def test_a_classifier_is_refused(lm: dict[str, Any]) -> None:
    with pytest.raises(TrainingError, match="model folder"):
        lm_text_scores(torch.nn.Linear(2, 2), lm["bundle"].train)  # type: ignore[arg-type]
