"""What a causal language model writes when it is given the start of a text: greedy
completions, for the drill-down of a target subset (method §18, "Completions").

Each text is cut into a *prompt* and a *reference*:

- a text with an answer span (question/answer records filled into a template with an
  ``{answer}`` field): the prompt is every token before the answer, the reference the answer's
  tokens (the tokens the behaviour check scores, :attr:`TextDataset.answer_mask`);
- any other text: the prompt is the first half of its real tokens (at least one), the
  reference the rest.

The model then extends the prompt by greedy decoding (the most likely next token at each
step, no sampling, no temperature) for as many tokens as the reference holds, so the two line
up token by token. ``matched`` counts the reference tokens the completion reproduces at their
own position (Carlini et al. 2021's verbatim extraction, token by token): a model that still
knows a fact writes its answer back; one that never saw it writes another. The numbers depend
on the model and the tokens only (no seed); two logits that tie to the last bit may pick
either token on another machine, which changes a completion, not any SDE number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sde_core.errors import TrainingError
from sde_core.inputs.hf_models import HFHiddenStates
from sde_core.learning.training import resolve_device

__all__ = ["Completion", "greedy_completions", "prompt_and_reference"]


@dataclass(frozen=True)
class Completion:
    """One text's greedy completion by one model.

    Attributes:
        prompt, reference, completion: decoded text (special tokens left out).
        matched: reference tokens the completion reproduces at their own position.
        tokens: reference tokens (the completion has as many).
    """

    prompt: str
    reference: str
    completion: str
    matched: int
    tokens: int

    @property
    def match(self) -> float:
        """The share of the reference's tokens reproduced (``matched / tokens``)."""
        return self.matched / self.tokens


def prompt_and_reference(dataset: Any, row: int) -> tuple[np.ndarray, np.ndarray]:
    """``(prompt, reference)`` token ids (int64) of one text of a text dataset (see the
    module docstring for the cut).

    Raises:
        TrainingError: the text has too few real tokens to cut (fewer than two), or an answer
            span with no token within ``max_length``.
    """
    real = np.asarray(dataset.mask[row]) > 0
    ids = np.asarray(dataset.ids[row], dtype=np.int64)[real]
    answers = getattr(dataset, "answer_mask", None)
    if answers is not None:
        answer = np.asarray(answers[row])[real] > 0
        if not answer.any():
            raise TrainingError(
                f"the text of row {row} has no answer token within max_length: raise "
                "options.max_length"
            )
        first = int(np.argmax(answer))
    else:
        first = ids.size // 2
    if first < 1 or ids.size < 2:
        raise TrainingError(
            f"the text of row {row} has {ids.size} token(s) before its reference: too few to "
            "give the model a prompt"
        )
    return ids[:first], ids[first:]


def _greedy(lm: Any, prompt: np.ndarray, steps: int, dev: torch.device) -> list[int]:
    """``steps`` greedy tokens after ``prompt``: the whole sequence is run again at each step
    (no key/value cache, whose interface changes across ``transformers`` versions; a text is
    at most ``max_length`` tokens)."""
    ids = torch.from_numpy(prompt)[None].to(dev)
    for _ in range(steps):
        logits = lm(input_ids=ids, use_cache=False).logits
        token = logits[0, -1].argmax().reshape(1, 1)
        ids = torch.cat([ids, token], dim=1)
    return ids[0, prompt.size :].tolist()


def greedy_completions(
    model: HFHiddenStates,
    dataset: Any,
    rows: np.ndarray,
    tokenizer: Any,
    *,
    device: str = "cpu",
) -> list[Completion]:
    """The greedy completion of each text ``rows`` of ``dataset`` by ``model`` (eval mode).

    Args:
        model: a loaded Hugging Face causal LM folder.
        dataset: a :class:`~sde_core.inputs.text_data.TextDataset` tokenised the way ``model``
            reads it (its own tokenizer, when its folder has one).
        rows: rows of ``dataset``.
        tokenizer: the tokenizer that made the dataset's tokens (it decodes them).

    Raises:
        TrainingError: not a language model with a head, not a text dataset, or a text too
            short to cut (:func:`prompt_and_reference`).
    """
    if not isinstance(model, HFHiddenStates) or not model.output_layers:
        raise TrainingError(
            f"completions need a causal language model folder (arch 'hf' with a head), got "
            f"{type(model).__name__}"
        )
    if not hasattr(dataset, "ids") or not hasattr(dataset, "mask"):
        raise TrainingError("completions need a text dataset")
    dev = resolve_device(device)
    model.to(dev).eval()
    found = []
    with torch.inference_mode():
        for row in np.asarray(rows, dtype=np.int64):
            prompt, reference = prompt_and_reference(dataset, int(row))
            tokens = _greedy(model.lm, prompt, reference.size, dev)
            matched = int((np.asarray(tokens) == reference).sum())
            found.append(
                Completion(
                    prompt=tokenizer.decode(prompt.tolist(), skip_special_tokens=True),
                    reference=tokenizer.decode(reference.tolist(), skip_special_tokens=True),
                    completion=tokenizer.decode(tokens, skip_special_tokens=True),
                    matched=matched,
                    tokens=int(reference.size),
                )
            )
    return found
