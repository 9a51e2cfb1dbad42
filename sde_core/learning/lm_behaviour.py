"""What a causal language model still does on its texts: per-text losses and likelihood
attacks (method §9, "Behaviour check", language models).

:func:`lm_text_scores` runs the model once over some texts and returns, per text, three
numbers computed from the next-token negative log-likelihoods (NLL, nats) of its *scored*
tokens — the answer's tokens when the dataset marks an answer span (question/answer records),
else every predicted token of the text:

- ``loss``: the mean NLL of the scored tokens (nats per token; the loss attack's score, Yeom
  et al. 2018);
- ``zlib``: that mean NLL divided by the zlib-compressed length (bytes) of the scored text
  (Carlini et al. 2021, "zlib ratio": a text that is simply easy to predict also compresses
  well);
- ``min_k``: the mean NLL of the ``k`` = 20% scored tokens the model finds least likely (at
  least one; Shi et al. 2024, "Min-K% Prob");
- ``text_loss``: the mean NLL of every predicted token of the whole text, question included
  (the same as ``loss`` when the text has no answer span).

For each, *lower* means "more like a training member"; an attack's membership score is its
negation. The numbers depend on the model, the texts and their tokens only (no seed).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from sde_core.errors import TrainingError
from sde_core.inputs.hf_models import HFHiddenStates
from sde_core.learning.training import resolve_device

__all__ = ["MIN_K_FRACTION", "SCORES", "TextScores", "lm_text_scores", "zlib_bytes"]

#: The share of least likely tokens the Min-K% score averages (Shi et al. 2024's k = 20%).
MIN_K_FRACTION = 0.2
#: The per-text scores, in the order the result tables list their attacks.
SCORES = ("loss", "zlib", "min_k", "text_loss")


@dataclass(frozen=True)
class TextScores:
    """Per-text scores of one model on some texts (float64 ``(k,)`` each).

    Attributes:
        loss, zlib, min_k, text_loss: see the module docstring (lower: more like a member).
        tokens: how many tokens of each text were scored.
        span: ``"answer"`` when the answer's tokens were scored, ``"text"`` otherwise.
    """

    loss: np.ndarray
    zlib: np.ndarray
    min_k: np.ndarray
    text_loss: np.ndarray
    tokens: np.ndarray
    span: str


def zlib_bytes(text: str) -> int:
    """The length in bytes of ``text`` (UTF-8) compressed by zlib at its default level."""
    return len(zlib.compress(text.encode("utf-8")))


def _token_nll(model: HFHiddenStates, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(nll, predicted)``: float ``(k, L − 1)`` NLL of token t + 1 given the tokens before it,
    and whether that position is a real predicted token (both it and its context real)."""
    ids, mask = model.split_inputs(x)
    logits = getattr(model.lm(input_ids=ids, attention_mask=mask), "logits", None)
    if logits is None:
        raise TrainingError(
            f"{type(model.lm).__name__} has no language-model head: its texts have no loss"
        )
    nll = nn.functional.cross_entropy(
        logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none"
    )
    return nll, (mask[:, 1:] > 0) & (mask[:, :-1] > 0)


def lm_text_scores(
    model: HFHiddenStates,
    dataset: Any,
    indices: np.ndarray | None = None,
    *,
    batch_size: int = 64,
    device: str = "cpu",
) -> TextScores:
    """The per-text scores of ``model`` on the texts ``indices`` of ``dataset`` (eval mode).

    Args:
        model: a loaded Hugging Face causal LM folder.
        dataset: a :class:`~sde_core.inputs.text_data.TextDataset` (its ``answer_mask`` marks
            the answer tokens, when it has one).
        indices: rows to score (default all).

    Raises:
        TrainingError: not a language model, not a text dataset, or a text with no token to
            score (an empty answer).
    """
    if not isinstance(model, HFHiddenStates):
        raise TrainingError(
            f"the language-model behaviour check needs a model folder (arch 'hf'), got "
            f"{type(model).__name__}"
        )
    if not hasattr(dataset, "get_batch") or not hasattr(dataset, "texts"):
        raise TrainingError("the language-model behaviour check needs a text dataset")
    rows = np.arange(len(dataset)) if indices is None else np.asarray(indices, dtype=np.int64)
    answers = getattr(dataset, "answer_mask", None)
    span = "answer" if answers is not None else "text"
    dev = resolve_device(device)
    model.to(dev).eval()
    loss: list[float] = []
    min_k: list[float] = []
    whole: list[float] = []
    tokens: list[int] = []
    with torch.inference_mode():
        for start in range(0, rows.size, batch_size):
            chunk = rows[start : start + batch_size]
            x, _ = dataset.get_batch(chunk)
            nll, scored = _token_nll(model, x.to(dev))
            real = scored.clone()
            if answers is not None:
                # the wrapper drops the columns that are padding in every row of the batch
                kept = answers[chunk][:, (x[:, 1] > 0).any(dim=0).numpy()]
                scored &= torch.from_numpy(kept[:, 1:] > 0).to(dev)
            numbers = nll.double().cpu().numpy()
            for values, keep, every in zip(
                numbers, scored.cpu().numpy(), real.cpu().numpy(), strict=True
            ):
                picked = values[keep]
                if picked.size == 0:
                    raise TrainingError(
                        f"a text of row {int(chunk[len(loss) - start])} has no {span} token "
                        "to score within max_length: raise options.max_length"
                    )
                whole.append(float(values[every].mean()))  # keep ⊆ every: not empty
                k = max(1, int(np.ceil(MIN_K_FRACTION * picked.size)))
                loss.append(float(picked.mean()))
                min_k.append(float(np.sort(picked)[-k:].mean()))
                tokens.append(picked.size)
    texts = dataset.scored_texts(rows) if hasattr(dataset, "scored_texts") else None
    texts = texts or [dataset.texts[int(i)] for i in rows]
    loss_arr = np.asarray(loss, dtype=np.float64)
    z = np.asarray([zlib_bytes(t) for t in texts], dtype=np.float64)
    return TextScores(
        loss=loss_arr,
        zlib=loss_arr / z,
        min_k=np.asarray(min_k, dtype=np.float64),
        text_loss=np.asarray(whole, dtype=np.float64),
        tokens=np.asarray(tokens, dtype=np.int64),
        span=span,
    )
