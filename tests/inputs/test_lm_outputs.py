"""The output-level layers of a causal language model (method §7.2) against a hand computation:
each answer token's log-probability from the model run on that token's prefix alone (no
padding, no batching), the answer found by tokenising the question part by itself."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from llm_artefacts import qa_records, save_model_folder, tiny_gpt2, tokenizer_for, write_jsonl

from sde_core.inputs.activation_cache import ActivationCache
from sde_core.inputs.activations import get_activations
from sde_core.inputs.data import DatasetSpec, load_dataset
from sde_core.inputs.hf_models import HFHiddenStates, load_hf_folder
from sde_core.inputs.layers import list_layers
from sde_core.inputs.lm_outputs import (
    ANSWER_TOKENS,
    OUTPUT_LAYERS,
    PROFILE_TOKENS,
    PROJECTION,
    TOP_K,
    output_dims,
    projection,
)
from sde_core.inputs.text_data import QA_TEMPLATE

pytest.importorskip("transformers")  # the optional [llm] extra

MAX_LENGTH = 32


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny GPT-2 folder, its word-level tokenizer, and TOFU-style records; some answers are
    longer than ANSWER_TOKENS tokens, so both windows cut them."""
    root = tmp_path_factory.mktemp("lm_outputs")
    train, test = qa_records(12), qa_records(8, offset=12)
    long = "and then moved far away to the old city by the sea where many other writers lived"
    for i, row in enumerate(test):
        if i % 2:
            row["answer"] = row["answer"][:-1] + " " + long + "."
    texts = [QA_TEMPLATE.format(**r) for r in train + test]
    tokenizer = tokenizer_for(texts)
    model = tiny_gpt2(tokenizer, seed=3)
    folder = save_model_folder(model, tokenizer, root / "hf" / "original")
    write_jsonl(root / "train.jsonl", train)
    write_jsonl(root / "test.jsonl", test)
    return {"root": root, "folder": folder, "tokenizer": tokenizer, "model": model,
            "test": test}  # fmt: skip


def _spec(lm: dict[str, Any], **options: Any) -> DatasetSpec:
    return DatasetSpec(
        "text", lm["root"] / "train.jsonl",
        options={"test_path": str(lm["root"] / "test.jsonl"), "tokenizer": str(lm["folder"]),
                 "max_length": MAX_LENGTH, **options},
    )  # fmt: skip


def _by_hand(model: Any, ids: list[int], j: int) -> tuple[float, list[float], list[float]]:
    """log p(t_j | t_<j), the sorted top-k probabilities and the projected distribution, from
    the prefix t_<j alone, in float64 arithmetic of the logits."""
    with torch.no_grad():
        logits = model(torch.tensor([ids[:j]])).logits[0, -1].double().tolist()
    top = max(logits)
    lse = top + math.log(sum(math.exp(v - top) for v in logits))
    probs = [math.exp(v - lse) for v in logits]
    matrix = projection(len(logits)).double().numpy()
    projected = (np.array(probs) @ matrix).tolist()
    return logits[ids[j]] - lse, sorted(probs, reverse=True)[:TOP_K], projected


def _window(values: list[Any], length: int, from_end: bool, empty: Any) -> list[Any]:
    """``values`` in ``length`` slots: from the first on, or ending at the last."""
    if from_end:
        kept = values[-length:]
        return [empty] * (length - len(kept)) + kept
    kept = values[:length]
    return kept + [empty] * (length - len(kept))


@pytest.fixture(scope="module")
def hand(lm: dict[str, Any]) -> dict[str, list[tuple[float, list[float], list[float]]]]:
    """:func:`_by_hand` at every predicted position of each test text (computed once)."""
    out = {}
    for record in lm["test"]:
        text = QA_TEMPLATE.format(**record)
        ids = lm["tokenizer"](text)["input_ids"][:MAX_LENGTH]
        out[text] = [_by_hand(lm["model"], ids, j) for j in range(1, len(ids))]  # j = i + 1
    return out


def _expected(
    hand: dict[str, list[Any]], texts: list[str], answer_starts: list[int], from_end: bool
) -> dict[str, np.ndarray]:
    out: dict[str, list[np.ndarray]] = {name: [] for name in OUTPUT_LAYERS}
    for text, start in zip(texts, answer_starts, strict=True):
        hand_text = hand[text]
        answer = hand_text[max(start, 1) - 1 :]
        logp = _window([h[0] for h in answer], ANSWER_TOKENS, from_end, 0.0)
        topk = _window([h[1] for h in answer], ANSWER_TOKENS, from_end, [0.0] * TOP_K)
        dist = _window([h[2] for h in answer], ANSWER_TOKENS, from_end, [0.0] * PROJECTION)
        out["answer_logprob"].append(np.array(logp))
        out["answer_topk"].append(np.array(topk).reshape(-1))
        out["answer_dist"].append(np.array(dist).reshape(-1))
        out["loss_profile"].append(np.array(_window([-h[0] for h in hand_text], PROFILE_TOKENS,
                                                    from_end, 0.0)))  # fmt: skip
    return {name: np.stack(rows) for name, rows in out.items()}


@pytest.mark.parametrize("pool", [True, False], ids=["mean-first-window", "last-end-window"])
def test_output_layers_match_a_hand_computation(
    lm: dict[str, Any], hand: dict[str, list[Any]], tmp_path: Path, pool: bool
) -> None:
    bundle = load_dataset(_spec(lm))
    got = get_activations(lm["folder"], bundle, "test", list(OUTPUT_LAYERS),
                          ActivationCache(tmp_path / "cache"), pool=pool)  # fmt: skip
    texts = [QA_TEMPLATE.format(**r) for r in lm["test"]]
    # the answer starts where the question part alone ends (a word-level tokenizer)
    prefix = [QA_TEMPLATE.split("{answer}")[0].format(question=r["question"]) for r in lm["test"]]
    starts = [len(lm["tokenizer"](p)["input_ids"]) for p in prefix]
    assert any(len(lm["tokenizer"](t)["input_ids"]) - s > ANSWER_TOKENS
               for t, s in zip(texts, starts, strict=True))  # fmt: skip
    want = _expected(hand, texts, starts, from_end=not pool)
    for name in OUTPUT_LAYERS:
        assert got[name].shape == (len(texts), output_dims()[name])
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    probs = got["answer_topk"].reshape(len(texts), ANSWER_TOKENS, TOP_K)
    assert np.all(np.diff(probs, axis=2) <= 1e-7) and np.all(probs.sum(axis=2) <= 1 + 1e-5)


def test_texts_without_an_answer_field_read_every_predicted_token(
    lm: dict[str, Any], hand: dict[str, list[Any]], tmp_path: Path
) -> None:
    for split in ("train", "test"):
        rows = [{"text": QA_TEMPLATE.format(**r)} for r in lm["test"]]
        write_jsonl(tmp_path / f"{split}.jsonl", rows)
    spec = DatasetSpec("text", tmp_path, options={"tokenizer": str(lm["folder"]),
                                                  "max_length": MAX_LENGTH})  # fmt: skip
    bundle = load_dataset(spec)
    assert bundle.test.answer_mask is None
    got = get_activations(lm["folder"], bundle, "test", ["answer_logprob", "loss_profile"],
                          ActivationCache(tmp_path / "cache"))  # fmt: skip
    want = _expected(hand, [r["text"] for r in rows], [1] * len(rows), from_end=False)
    for name in ("answer_logprob", "loss_profile"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_answer_marks_leave_the_hidden_states_and_losses_unchanged(lm: dict[str, Any]) -> None:
    bundle = load_dataset(_spec(lm))
    model = load_hf_folder(lm["folder"])
    x, _ = bundle.test.get_batch(np.arange(len(bundle.test)))
    assert set(np.unique(x[:, 1].numpy())) == {0, 1, 2}
    plain = x.clone()
    plain[:, 1] = (plain[:, 1] > 0).long()
    with torch.no_grad():
        np.testing.assert_array_equal(model(x).numpy(), model(plain).numpy())
        for a, b in zip(model.token_losses(x), model.token_losses(plain), strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_the_projection_is_a_fixed_gaussian_matrix() -> None:
    matrix = projection(5000).double().numpy()
    assert matrix.shape == (5000, PROJECTION)
    np.testing.assert_array_equal(matrix, projection.__wrapped__(5000).double().numpy())
    # N(0, 1/r) entries: mean 0 and variance 1/r within 5 standard errors of 80,000 draws
    assert abs(matrix.mean()) < 5 * math.sqrt(1 / PROJECTION / matrix.size)
    assert abs(matrix.var() * PROJECTION - 1) < 5 * math.sqrt(2 / matrix.size)


def test_output_layers_are_listed_and_resolved_like_any_layer(lm: dict[str, Any]) -> None:
    model = load_hf_folder(lm["folder"])
    assert isinstance(model, HFHiddenStates)
    assert model.layer_names[-len(OUTPUT_LAYERS) :] == OUTPUT_LAYERS
    dims = {info.name: info.dim for info in list_layers(model, (2, MAX_LENGTH))}
    assert {name: dims[name] for name in OUTPUT_LAYERS} == output_dims()
