"""Text datasets for language models: records in JSONL / JSON / CSV / Parquet files or a
``datasets.save_to_disk`` folder, tokenised with the model folder's tokenizer.

Layouts of a ``kind = "text"`` dataset's ``root``:

- a file (``.jsonl``, ``.json``, ``.csv``, ``.parquet``) holding D_tr, with
  ``options.test_path`` naming the file (or folder) holding D_te;
- a folder with ``train.<ext>`` and ``test.<ext>`` (any of the extensions above);
- a ``datasets.save_to_disk`` folder of a ``DatasetDict`` with ``train`` and ``test`` splits (or
  of one ``Dataset`` holding D_tr, with ``options.test_path``); reading it needs the optional
  ``datasets`` package.

A ``.json`` file is a JSON array of records or, as TOFU's files are, one JSON record per line.
Each record becomes one text: ``options.text_column`` when given, else its ``text`` field, else
``options.template`` filled with the record's fields — by default
:data:`QA_TEMPLATE` ``"Question: {question}\\nAnswer: {answer}"`` for TOFU's
``question``/``answer`` records. The texts are tokenised with the tokenizer of
``options.tokenizer`` (a model folder), padded and truncated to ``options.max_length`` tokens
(default :data:`DEFAULT_MAX_LENGTH`). A sample is an int64 ``(2, max_length)`` tensor: token ids
and attention mask (:class:`~sde_core.inputs.hf_models.HFHiddenStates` reads it).

Forget sets are index files as for every dataset; :func:`forget_rows` makes one from a split
file of records (TOFU's ``forget10.json``: each record must match one D_tr record's text) or from
a true/false column of D_tr.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.errors import DataError
from sde_core.inputs.indices import as_index_array, excerpt

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "MAX_TEXT_ROWS",
    "QA_TEMPLATE",
    "TEXT_SUFFIXES",
    "TextDataset",
    "TextSource",
    "forget_rows",
    "read_records",
    "read_text_source",
    "record_texts",
    "tokenizer_fingerprint",
]

#: How a question/answer record (TOFU's layout) becomes one text.
QA_TEMPLATE = "Question: {question}\nAnswer: {answer}"
#: Tokens per text unless ``options.max_length`` says otherwise.
DEFAULT_MAX_LENGTH = 128
#: Most records a text split may hold.
MAX_TEXT_ROWS = 2_000_000
#: File endings of record files.
TEXT_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model", "added_tokens.json",
)  # fmt: skip


class TextDataset(Dataset):
    """Tokenised texts of one split.

    Attributes:
        texts: the texts, one per row.
        records: the records they were made from (for columns and split matching).
        ids, mask: int32 ``(n, max_length)`` token ids and attention mask (1 = real token).
    """

    is_image = False

    def __init__(
        self, texts: list[str], records: list[dict[str, Any]], ids: np.ndarray, mask: np.ndarray
    ) -> None:
        self.texts, self.records, self.ids, self.mask = texts, records, ids, mask
        self.y = np.full(len(texts), -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.texts)

    def get_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``(k, 2, max_length)`` (ids, mask) and labels ``(k,)`` (all -1)."""
        idx = np.asarray(indices, dtype=np.int64)
        x = np.stack([self.ids[idx], self.mask[idx]], axis=1).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(self.y[idx])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        xb, yb = self.get_batch(np.array([i]))
        return xb[0], int(yb[0])

    def subset(self, indices: np.ndarray) -> TextDataset:
        """The rows ``indices`` (int64 ``(k,)``), in that order."""
        return TextDataset(
            [self.texts[i] for i in indices],
            [self.records[i] for i in indices],
            self.ids[indices],
            self.mask[indices],
        )

    def sample_texts(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        """The texts of ``indices``.

        Raises:
            DataError: out-of-range indices.
        """
        idx = as_index_array(indices, len(self), "text indices")
        return [self.texts[int(i)] for i in idx]


@dataclass
class TextSource:
    """A text dataset read from disk, before subsetting.

    Attributes:
        splits: ``{"train": TextDataset, "test": TextDataset}``.
        files: the files (or folders) read, for the fingerprint.
        settings: what shaped the tokens (column or template, max length, tokenizer hash).
        truncated: per split, how many texts were longer than ``max_length`` tokens.
    """

    splits: dict[str, TextDataset]
    files: list[Path]
    settings: dict[str, Any]
    truncated: dict[str, int]


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------


def _json_records(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise DataError(f"{path} is not valid JSON: re-export it as JSON lines") from None
        if not isinstance(data, list):
            raise DataError(f"{path} must hold a JSON array of records")
        return data
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except (ValueError, RecursionError):
            raise DataError(
                f"{path} line {number} is not a JSON record: a JSON lines file holds one "
                "object per line"
            ) from None
        if len(rows) > MAX_TEXT_ROWS:
            raise DataError(f"{path} holds more than {MAX_TEXT_ROWS} records")
    return rows


def _disk_dataset(path: Path) -> Any:
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{path} is a datasets.save_to_disk folder: reading it needs the optional datasets "
            "package (pip install -e '.[llm]'), or export it with to_json"
        ) from None
    datasets.disable_progress_bars()
    try:
        return datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises many types for a damaged folder
        raise DataError(
            f"cannot read the datasets folder {path} ({type(exc).__name__}); re-save it with "
            "save_to_disk"
        ) from None


def _is_disk_dataset(path: Path) -> bool:
    return path.is_dir() and (
        (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()
    )


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``.jsonl``/``.json``/``.csv``/``.parquet`` file or of a
    ``save_to_disk`` folder of one ``Dataset``, as dicts.

    Raises:
        DataError: a missing or malformed file, an unknown format, a record that is not an
            object, or more than :data:`MAX_TEXT_ROWS` records.
    """
    p = Path(path)
    if _is_disk_dataset(p):
        data = _disk_dataset(p)
        if hasattr(data, "keys") and not hasattr(data, "column_names"):
            raise DataError(
                f"{p} holds several splits ({', '.join(data.keys())}): give it as the dataset "
                "root, or save one split"
            )
        rows: list[Any] = list(data)
    elif not p.is_file():
        raise DataError(f"{p} does not exist: check the path of the text file")
    elif p.suffix in (".jsonl", ".json"):
        rows = _json_records(p)
    elif p.suffix in (".csv", ".parquet"):
        import pandas as pd

        try:
            frame = (
                pd.read_csv(p, dtype=str, keep_default_na=False)
                if p.suffix == ".csv"
                else pd.read_parquet(p)
            )
        except (OSError, ValueError, ImportError) as exc:
            raise DataError(f"cannot read {p} ({type(exc).__name__}): re-export it") from None
        rows = frame.to_dict(orient="records")
    else:
        raise DataError(
            f"{p.name} is not a text data file: use one of {', '.join(TEXT_SUFFIXES)} or a "
            "datasets.save_to_disk folder"
        )
    if len(rows) > MAX_TEXT_ROWS:
        raise DataError(f"{p} holds {len(rows)} records, more than {MAX_TEXT_ROWS}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{p}: record {i} is a {type(row).__name__}, not an object of fields")
    return rows


def record_texts(
    records: list[dict[str, Any]], options: Mapping[str, Any], where: str
) -> list[str]:
    """One text per record: ``options.text_column``, else ``text``, else the template.

    Raises:
        DataError: the column is missing or not text in some record, or the template names a
            field a record lacks (the message names the record and the fields it has).
    """
    column = options.get("text_column")
    template = options.get("template")
    if column is None and template is None:
        if records and all("text" in r for r in records):
            column = "text"
        elif records and all({"question", "answer"} <= set(r) for r in records):
            template = QA_TEMPLATE
        else:
            fields = sorted(records[0]) if records else []
            raise DataError(
                f"{where}: records need a 'text' field or 'question' and 'answer' fields (they "
                f"have {[excerpt(f, 30) for f in fields[:10]]}); set options.text_column or "
                "options.template"
            )
    texts = []
    for i, record in enumerate(records):
        if column is not None:
            value = record.get(column)
            if not isinstance(value, str):
                raise DataError(
                    f"{where}: record {i} has no text in column {excerpt(column, 40)} (fields: "
                    f"{[excerpt(f, 30) for f in sorted(record)[:10]]})"
                )
            texts.append(value)
            continue
        try:
            texts.append(str(template).format(**record))
        except (KeyError, IndexError, ValueError) as exc:
            raise DataError(
                f"{where}: record {i} does not fill the template {excerpt(template, 60)} "
                f"({type(exc).__name__}: {excerpt(str(exc), 40)}); its fields are "
                f"{[excerpt(f, 30) for f in sorted(record)[:10]]}"
            ) from None
    return texts


def _split_files(root: Path, options: Mapping[str, Any]) -> dict[str, Path]:
    if root.is_file() or (_is_disk_dataset(root) and "test_path" in options):
        if "test_path" not in options:
            raise DataError(
                f"{root} holds one split: name the test split's file with options.test_path "
                "(or give a folder with train.<ext> and test.<ext>)"
            )
        return {"train": root, "test": Path(options["test_path"])}
    found = {}
    for split in ("train", "test"):
        hits = [root / f"{split}{suffix}" for suffix in TEXT_SUFFIXES]
        hits = [h for h in hits if h.is_file()]
        if len(hits) != 1:
            raise DataError(
                f"{root} needs exactly one {split} file (train.jsonl, train.json, train.csv or "
                f"train.parquet and the same for test), a datasets.save_to_disk folder, or a "
                f"file with options.test_path; found {[h.name for h in hits]}"
            )
        found[split] = hits[0]
    return found


def _read_splits(root: Path, options: Mapping[str, Any]) -> tuple[dict[str, list], list[Path]]:
    if _is_disk_dataset(root) and "test_path" not in options:
        data = _disk_dataset(root)
        if not hasattr(data, "keys") or not {"train", "test"} <= set(data.keys()):
            held = list(data.keys()) if hasattr(data, "keys") else ["one split"]
            raise DataError(
                f"{root} holds {held}: the dataset needs 'train' and 'test' splits, or "
                "options.test_path for a one-split folder"
            )
        return {s: [dict(r) for r in data[s]] for s in ("train", "test")}, [root]
    files = _split_files(root, options)
    return {s: read_records(f) for s, f in files.items()}, list(files.values())


def tokenizer_fingerprint(folder: Path) -> str:
    """SHA-256 over the tokenizer files of a model folder (names and contents)."""
    return stable_hash(
        sorted((name, file_sha256(folder / name)) for name in _TOKENIZER_FILES
               if (folder / name).is_file())
    )  # fmt: skip


def read_text_source(root: Path, options: Mapping[str, Any]) -> TextSource:
    """Read, join and tokenise both splits of a text dataset (see the module docstring).

    Raises:
        DataError: missing files, malformed records, no tokenizer (``options.tokenizer``), or
            an empty split.
    """
    from sde_core.inputs.hf_models import load_tokenizer

    if "tokenizer" not in options:
        raise DataError(
            "a text dataset needs options.tokenizer: the model folder whose tokenizer files "
            "turn the texts into tokens (e.g. the original model's folder)"
        )
    tokenizer_dir = Path(options["tokenizer"])
    tokenizer = load_tokenizer(tokenizer_dir)
    max_length = int(options.get("max_length", DEFAULT_MAX_LENGTH))
    records, files = _read_splits(root, options)
    splits, truncated = {}, {}
    for split, rows in records.items():
        if not rows:
            raise DataError(f"the {split} split of {root} holds no records")
        texts = record_texts(rows, options, f"{split} split")
        full = tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
        truncated[split] = sum(len(t) > max_length for t in full)
        enc = tokenizer(
            texts, padding="max_length", truncation=True, max_length=max_length,
            return_tensors="np",
        )  # fmt: skip
        splits[split] = TextDataset(
            texts, rows, enc["input_ids"].astype(np.int32), enc["attention_mask"].astype(np.int32)
        )
    settings = {
        "text_column": options.get("text_column"),
        "template": options.get("template"),
        "max_length": max_length,
        "tokenizer": tokenizer_fingerprint(tokenizer_dir),
    }
    return TextSource(splits, files, settings, truncated)


def forget_rows(
    train: TextDataset,
    options: Mapping[str, Any],
    *,
    split_file: str | Path | None = None,
    column: str | None = None,
) -> np.ndarray:
    """The D_tr rows of a forget set given as a split file of records or a true/false column.

    Args:
        train: the training split (after any subsetting).
        options: the dataset's options (the same column or template joins the split file).
        split_file: records (JSONL/JSON/CSV/Parquet or a ``save_to_disk`` folder); each must
            have the text of exactly one D_tr row (TOFU's ``forget10.json`` against
            ``full.json``).
        column: a column of D_tr whose true values (``true``, ``1``, ``"yes"``…) mark D_f.

    Returns:
        int64 ``(n_f,)`` sorted row indices.

    Raises:
        DataError: neither or both given, a record not in D_tr (or in it twice), a missing
            column, or an empty forget set.
    """
    if (split_file is None) == (column is None):
        raise DataError("give the forget set as exactly one of a split file or a column")
    if column is not None:
        marks = []
        for i, record in enumerate(train.records):
            if column not in record:
                raise DataError(f"training record {i} has no column {excerpt(column, 40)}")
            value = record[column]
            text = str(value).strip().lower()
            if isinstance(value, bool | int | np.integer | np.bool_) or text in ("0", "1"):
                marks.append(bool(int(value)) if not isinstance(value, str) else text == "1")
            elif text in ("true", "yes", "false", "no", ""):
                marks.append(text in ("true", "yes"))
            else:
                raise DataError(
                    f"training record {i}: column {excerpt(column, 40)} holds "
                    f"{excerpt(value, 30)}; use true/false, yes/no or 1/0"
                )
        idx = np.flatnonzero(np.asarray(marks, dtype=bool)).astype(np.int64)
    else:
        assert split_file is not None
        wanted = record_texts(read_records(split_file), options, f"forget split {split_file}")
        where: dict[str, list[int]] = {}
        for i, text in enumerate(train.texts):
            where.setdefault(text, []).append(i)
        rows = []
        for j, text in enumerate(wanted):
            hits = where.get(text, [])
            if len(hits) != 1:
                state = "is not in" if not hits else f"appears {len(hits)} times in"
                raise DataError(
                    f"forget split record {j} ({excerpt(text, 60)}) {state} the training split: "
                    "the split must name training records exactly once"
                )
            rows.append(hits[0])
        idx = np.unique(np.asarray(rows, dtype=np.int64))
        if idx.size != len(rows):
            raise DataError("the forget split names a training record twice")
    if idx.size == 0:
        raise DataError("the forget set is empty: it must name at least one training record")
    return idx
