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


def qa_workspace(root: Path, train: int = 20, test: int = 12, forget: int = 6) -> Any:
    """A written workspace of TOFU-style records (``train`` in D_tr, its first ``forget`` as
    D_f, ``test`` in D_te) with two tiny GPT-2 folders, ``original`` and ``retrained`` (seeds 0
    and 1), the original's tokenizer tokenising the texts."""
    import numpy as np

    from sde_core.inputs.text_data import QA_TEMPLATE
    from sde_core.pipeline.workspace import ModelEntry, Workspace
    from sde_core.pipeline.workspace_write import write_workspace

    records, held_out = qa_records(train), qa_records(test, offset=train)
    tokenizer = tokenizer_for([QA_TEMPLATE.format(**r) for r in records + held_out])
    write_jsonl(root / "train.jsonl", records)
    write_jsonl(root / "test.jsonl", held_out)
    np.save(root / "forget.npy", np.arange(forget))
    options = {"test_path": "test.jsonl", "tokenizer": "models/original", "max_length": 24}
    for i, name in enumerate(("original", "retrained")):
        save_model_folder(tiny_gpt2(tokenizer, seed=i), tokenizer, root / "models" / name)
    ws = Workspace(root.resolve(), {"kind": "text", "root": "train.jsonl", "options": options},
                   "forget.npy", name="lm")  # fmt: skip
    for name in ("original", "retrained"):
        ws.add_model(ModelEntry(name=name, role=name, arch="hf", checkpoint=f"models/{name}"))
    write_workspace(ws)
    return ws


def qa_bundle(root: Path, train: list[dict[str, Any]], test: list[dict[str, Any]],
              tokenizer_folder: Path, max_length: int = 24) -> Any:  # fmt: skip
    """The records written as ``root/train.jsonl`` and ``root/test.jsonl`` and loaded as a
    text dataset tokenised by ``tokenizer_folder``'s tokenizer (QA template)."""
    from sde_core.inputs.data import DatasetSpec, load_dataset

    write_jsonl(root / "train.jsonl", train)
    write_jsonl(root / "test.jsonl", test)
    options = {"test_path": str(root / "test.jsonl"), "tokenizer": str(tokenizer_folder),
               "max_length": max_length}  # fmt: skip
    return load_dataset(DatasetSpec("text", root / "train.jsonl", options=options))
