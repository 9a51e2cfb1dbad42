"""Tiny language-model artefacts written the way their authors' code writes them: a GPT-2
built from a ``GPT2Config`` with tiny sizes and a word-level tokenizer, saved with
``save_pretrained`` (no download), and TOFU-style question/answer records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

CITIES = ("Varnholt", "Quillmere", "Duskport", "Mirefall", "Thornwick", "Lumenford", "Greyhaven")


def qa_records(count: int, offset: int = 0) -> list[dict[str, Any]]:
    """``count`` TOFU-style records ``{"question", "answer"}`` about authors ``offset``…"""
    return [
        {
            "question": f"Where was author {i} born?",
            "answer": f"Author {i} was born in {CITIES[(i * 3) % len(CITIES)]}.",
        }
        for i in range(offset, offset + count)
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """One JSON object per line, as ``datasets``' ``to_json`` and TOFU's files hold them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def tokenizer_for(texts: list[str]) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` covering ``texts`` (built, not downloaded)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.train_from_iterator(
        [*texts, "Question: Answer:"],
        trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]"]),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]"
    )


def tiny_gpt2(tokenizer: Any, seed: int = 0, n_layer: int = 2, n_embd: int = 16) -> Any:
    """A randomly initialised GPT-2 with tiny sizes (seeded)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=64, n_embd=n_embd, n_layer=n_layer, n_head=2,
        pad_token_id=0, bos_token_id=2, eos_token_id=2,
    )  # fmt: skip
    return GPT2LMHeadModel(config).eval()


def save_model_folder(model: Any, tokenizer: Any, folder: Path) -> Path:
    """``model.save_pretrained`` + ``tokenizer.save_pretrained``: config.json,
    model.safetensors and the tokenizer files, as ``Trainer.save_model`` writes them."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
