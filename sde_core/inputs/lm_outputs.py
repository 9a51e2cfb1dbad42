"""Output-level representations of a causal language model, offered as layers (method §7.2).

On a classifier SDE reads the softmax output; a language model's analogue is its predictive
distribution on a text's answer tokens. :class:`~sde_core.inputs.hf_models.HFHiddenStates`
offers three such layers beside its hidden states, each a fixed-length vector per text:

- ``answer_logprob`` (d = :data:`ANSWER_TOKENS`): the log-probability the model gives each
  reference answer token, ``log p(t_j | t_<j)``, in answer order;
- ``answer_topk`` (d = :data:`ANSWER_TOKENS` · :data:`TOP_K`): at each of those answer positions
  the :data:`TOP_K` largest next-token probabilities, sorted in decreasing order (the shape of
  the predictive distribution, whatever token it puts first);
- ``answer_dist`` (d = :data:`ANSWER_TOKENS` · :data:`PROJECTION`): at each of those answer
  positions the whole next-token distribution ``p ∈ Δ^V``, projected to :data:`PROJECTION`
  numbers by a fixed random Gaussian matrix ``R ∈ R^{V×r}`` with independent ``N(0, 1/r)``
  entries (:func:`projection`; the same for every model with the same vocabulary size V), so
  that ``E‖Rᵀp − Rᵀq‖² = ‖p − q‖²`` (Johnson–Lindenstrauss): the language-model analogue of a
  classifier's softmax output, which keeps which token the model predicts;
- ``loss_profile`` (d = :data:`PROFILE_TOKENS`): the next-token loss ``−log p(t_j | t_<j)`` of
  every predicted token of the whole text (question and answer), in text order.

**Answer tokens.** The tokens of a record's ``{answer}`` field (the question/answer template's
last field), marked at tokenisation (``TextDataset.answer_mask``,
:func:`~sde_core.inputs.text_data.tokenize_texts`, the same marks the behaviour check scores):
a real token is an answer token when it begins at or after the answer's first character (the
tokenizer's character offsets; a tokenizer without offsets: the tokens after those of the text
before the answer). The batch carries them as the value 2 of its mask channel. A text with no
marked answer token (the texts come from a column, the template has no ``answer`` field, or
truncation cut the answer off) counts every predicted token as an answer token.
A token is *predicted* when it and the token before it are real (not padding): the first token
of a text has no prediction.

**Fixed length.** Each vector has a fixed number of slots; the selected tokens fill them in
order, and slots with no token hold 0 (a log-probability of 0, a probability of 0, a loss of 0:
the same value in every model, so an empty slot adds nothing to a distance between two texts of
the same length). The evaluation setting ``pool`` chooses where the window sits, as it chooses
what a text's hidden states become: ``pool = true`` (default, "mean") fills the slots from the
first selected token on (longer answers are cut at their end), ``pool = false`` ("last") ends
the window at the last selected token, the one a causal model has read the whole text before
(longer answers are cut at their start; shorter ones leave the first slots empty).
"""

from __future__ import annotations

import functools
import math

import torch

__all__ = [
    "ANSWER_TOKENS",
    "OUTPUT_LAYERS",
    "PROFILE_TOKENS",
    "PROJECTION",
    "PROJECTION_SEED",
    "TOP_K",
    "output_dims",
    "output_representations",
    "projection",
]

#: Slots of ``answer_logprob`` and positions of ``answer_topk``: answer tokens per text.
ANSWER_TOKENS = 16
#: Probabilities per answer position in ``answer_topk``.
TOP_K = 8
#: Numbers per answer position in ``answer_dist`` (r, the projection's width).
PROJECTION = 16
#: Slots of ``loss_profile``: predicted tokens per text.
PROFILE_TOKENS = 64
#: Seed of the projection matrix of ``answer_dist``.
PROJECTION_SEED = 0
#: The output-level layers, in the order they are listed.
OUTPUT_LAYERS = ("answer_logprob", "answer_topk", "answer_dist", "loss_profile")


def output_dims() -> dict[str, int]:
    """``d`` of each output-level layer."""
    return {
        "answer_logprob": ANSWER_TOKENS,
        "answer_topk": ANSWER_TOKENS * TOP_K,
        "answer_dist": ANSWER_TOKENS * PROJECTION,
        "loss_profile": PROFILE_TOKENS,
    }


@functools.lru_cache(maxsize=4)
def projection(vocabulary: int) -> torch.Tensor:
    """The float32 ``(vocabulary, PROJECTION)`` matrix of ``answer_dist``: independent
    ``N(0, 1/PROJECTION)`` entries from torch's CPU generator seeded :data:`PROJECTION_SEED`."""
    generator = torch.Generator().manual_seed(PROJECTION_SEED)
    draw = torch.randn(vocabulary, PROJECTION, generator=generator, dtype=torch.float64)
    return (draw / math.sqrt(PROJECTION)).float()


def _slots(selected: torch.Tensor, length: int, from_end: bool) -> tuple[torch.Tensor, ...]:
    """``(rows, columns, slots)`` of the selected entries that fit a window of ``length``
    slots: from the first selected entry of each row on, or ending at its last."""
    rank = selected.long().cumsum(dim=1) - 1
    if from_end:
        slot = rank + length - selected.long().sum(dim=1, keepdim=True)
        keep = selected & (slot >= 0)
    else:
        slot = rank
        keep = selected & (slot < length)
    rows, cols = keep.nonzero(as_tuple=True)
    return rows, cols, slot[rows, cols]


def output_representations(
    logits: torch.Tensor,
    ids: torch.Tensor,
    mask: torch.Tensor,
    answer: torch.Tensor,
    pooling: str,
) -> dict[str, torch.Tensor]:
    """The output-level layers of a batch (see the module docstring).

    Args:
        logits: ``(batch, length, vocabulary)`` next-token logits (position j predicts j + 1).
        ids: int64 ``(batch, length)`` token ids.
        mask: ``(batch, length)`` attention mask, 1 for real tokens.
        answer: bool ``(batch, length)``, true at answer tokens.
        pooling: ``"mean"`` (the window from the first selected token) or ``"last"`` (ending
            at the last).

    Returns:
        ``{layer: float32 (batch, d)}`` for every name of :data:`OUTPUT_LAYERS`.
    """
    batch = ids.shape[0]
    from_end = pooling == "last"
    scores = logits[:, :-1].float()
    lse = torch.logsumexp(scores, dim=-1)
    token_logp = scores.gather(-1, ids[:, 1:, None]).squeeze(-1) - lse
    predicted = (mask[:, 1:] > 0) & (mask[:, :-1] > 0)
    in_answer = predicted & answer[:, 1:].bool()
    in_answer = torch.where(in_answer.any(dim=1, keepdim=True), in_answer, predicted)

    rows, cols, slot = _slots(in_answer, ANSWER_TOKENS, from_end)
    logprob = torch.zeros(batch, ANSWER_TOKENS, device=ids.device)
    logprob[rows, slot] = token_logp[rows, cols]
    k = min(TOP_K, scores.shape[-1])
    top = torch.exp(scores[rows, cols].topk(k, dim=-1).values - lse[rows, cols, None])
    topk = torch.zeros(batch, ANSWER_TOKENS, TOP_K, device=ids.device)
    topk[rows, slot, :k] = top
    probs = torch.softmax(scores[rows, cols], dim=-1)
    dist = torch.zeros(batch, ANSWER_TOKENS, PROJECTION, device=ids.device)
    dist[rows, slot] = probs @ projection(scores.shape[-1]).to(probs.device)

    rows, cols, slot = _slots(predicted, PROFILE_TOKENS, from_end)
    profile = torch.zeros(batch, PROFILE_TOKENS, device=ids.device)
    profile[rows, slot] = -token_logp[rows, cols]
    return {
        "answer_logprob": logprob,
        "answer_topk": topk.reshape(batch, ANSWER_TOKENS * TOP_K),
        "answer_dist": dist.reshape(batch, ANSWER_TOKENS * PROJECTION),
        "loss_profile": profile,
    }
