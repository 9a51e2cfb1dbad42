"""Greedy completions (``learning/lm_completions.py``) against ``transformers``' own greedy
``generate`` on the prompt cut by hand from the tokenizer's character offsets, and on a
controlled case: a tiny GPT-2 trained until it memorises its texts writes their answers back,
the same network untrained does not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from llm_artefacts import qa_bundle, qa_records, save_model_folder, tiny_gpt2, tokenizer_for

from sde_core.errors import TrainingError
from sde_core.inputs.hf_models import load_hf_folder
from sde_core.inputs.text_data import QA_TEMPLATE
from sde_core.learning.lm_completions import greedy_completions, prompt_and_reference

pytest.importorskip("transformers")  # the optional [llm] extra


def _memorised(tokenizer: Any, texts: list[str], seed: int) -> Any:
    """The tiny GPT-2 trained on ``texts`` (full batch, Adam) until it knows them by heart."""
    model = tiny_gpt2(tokenizer, seed=seed, n_embd=64).train()
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(seed)
    for _ in range(400):
        opt.zero_grad()
        model(**enc, labels=labels).loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("lm_completions")
    train, test = qa_records(10), qa_records(6, offset=10)
    tokenizer = tokenizer_for([QA_TEMPLATE.format(**r) for r in train + test])
    texts = [QA_TEMPLATE.format(**r) for r in train]
    trained = save_model_folder(_memorised(tokenizer, texts, 3), tokenizer, root / "trained")
    untrained = save_model_folder(tiny_gpt2(tokenizer, seed=3, n_embd=64), tokenizer,
                                  root / "untrained")  # fmt: skip
    return {"bundle": qa_bundle(root, train, test, trained), "trained": trained,
            "untrained": untrained,
            "tokenizer": tokenizer, "records": train}  # fmt: skip


def test_completions_are_transformers_greedy_generate(lm: dict[str, Any]) -> None:
    model = load_hf_folder(lm["trained"])
    tok = lm["tokenizer"]
    rows = np.array([0, 4, 9])
    got = greedy_completions(model, lm["bundle"].train, rows, tok)
    for c, i in zip(got, rows, strict=True):
        text = QA_TEMPLATE.format(**lm["records"][i])
        start = text.index("\nAnswer: ") + len("\nAnswer: ")
        enc = tok(text, return_offsets_mapping=True)
        cut = next(t for t, (a, _) in enumerate(enc["offset_mapping"]) if a >= start)
        prompt, reference = enc["input_ids"][:cut], enc["input_ids"][cut:]
        out = model.lm.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=len(reference), min_new_tokens=len(reference), do_sample=False,
            num_beams=1, pad_token_id=tok.pad_token_id,
        )[0, len(prompt):].tolist()  # fmt: skip
        assert c.prompt == tok.decode(prompt, skip_special_tokens=True)
        assert c.reference == lm["records"][i]["answer"].replace(".", " .")  # word-level decode
        assert c.completion == tok.decode(out, skip_special_tokens=True)
        assert c.tokens == len(reference)
        assert c.matched == sum(a == b for a, b in zip(out, reference, strict=True))


def test_a_model_that_memorised_writes_its_answers_back(lm: dict[str, Any]) -> None:
    rows = np.arange(10)
    data, tok = lm["bundle"].train, lm["tokenizer"]
    trained = greedy_completions(load_hf_folder(lm["trained"]), data, rows, tok)
    untrained = greedy_completions(load_hf_folder(lm["untrained"]), data, rows, tok)
    assert np.mean([c.match for c in trained]) >= 0.9
    assert sum(c.completion == c.reference for c in trained) >= 8
    assert np.mean([c.match for c in untrained]) <= 0.3


def test_a_text_without_an_answer_span_is_cut_at_half(lm: dict[str, Any]) -> None:
    data = lm["bundle"].train.subset(np.arange(3))
    data.answer_mask, data.answer_starts = None, None
    for row in range(3):
        prompt, reference = prompt_and_reference(data, row)
        real = int(data.mask[row].sum())
        assert prompt.size == real // 2 and prompt.size + reference.size == real
        assert np.array_equal(np.concatenate([prompt, reference]), data.ids[row][:real])
    got = greedy_completions(load_hf_folder(lm["trained"]), data, np.arange(3), lm["tokenizer"])
    assert [c.tokens for c in got] == [int(m.sum()) - int(m.sum()) // 2 for m in data.mask]


def test_refusals_name_the_problem(lm: dict[str, Any]) -> None:
    data = lm["bundle"].train.subset(np.arange(2))
    with pytest.raises(TrainingError, match="causal language model"):
        greedy_completions(torch.nn.Linear(2, 2), data, np.arange(2), lm["tokenizer"])  # type: ignore[arg-type]
    short = data.subset(np.arange(1))
    short.answer_mask, short.answer_starts = None, None
    short.mask = np.zeros_like(short.mask)
    short.mask[0, 0] = 1  # one real token: no prompt and reference to cut
    with pytest.raises(TrainingError, match="too few"):
        prompt_and_reference(short, 0)
    none = data.subset(np.arange(1))
    none.answer_mask = np.zeros_like(none.answer_mask)
    with pytest.raises(TrainingError, match="no answer token"):
        prompt_and_reference(none, 0)
