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

import io
import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.errors import CheckpointError, DataError
from sde_core.inputs.indices import as_index_array, excerpt

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "MAX_RECORD_BYTES",
    "MAX_TEXT_CHARS",
    "MAX_TEXT_COLUMNS",
    "MAX_TEXT_FILE_BYTES",
    "MAX_TEXT_ROWS",
    "QA_TEMPLATE",
    "TEXT_SUFFIXES",
    "TextDataset",
    "TextSource",
    "answer_spans",
    "forget_rows",
    "parse_template",
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
#: Largest record file (bytes) read; checked before any of it is read.
MAX_TEXT_FILE_BYTES = 2 * 2**30
#: Largest record (bytes of one JSON-lines line or one JSON-array record).
MAX_RECORD_BYTES = 1 * 2**20
#: Most fields a record may have (the columns of a CSV or Parquet file).
MAX_TEXT_COLUMNS = 1_000
#: Longest text (characters) a record may give, by its column or the filled template; checked
#: before tokenising (the tokenizer's native code cannot be interrupted), far above any
#: ``max_length`` of tokens.
MAX_TEXT_CHARS = 100_000
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
        answer: int32 ``(n, max_length)``, 1 for the tokens of the record's ``{answer}`` field
            (:func:`sde_core.inputs.lm_outputs.answer_marks`), or None when the texts have no
            answer field; a batch's mask channel then reads 2 at those tokens.
    """

    is_image = False

    def __init__(
        self,
        texts: list[str],
        records: list[dict[str, Any]],
        ids: np.ndarray,
        mask: np.ndarray,
        answer: np.ndarray | None = None,
    ) -> None:
        self.texts, self.records, self.ids, self.mask = texts, records, ids, mask
        self.answer = answer
        self.y = np.full(len(texts), -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.texts)

    def get_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``(k, 2, max_length)`` (ids, mask) and labels ``(k,)`` (all -1); the mask
        channel is 2 at answer tokens (1 at the other real tokens, 0 at padding)."""
        idx = np.asarray(indices, dtype=np.int64)
        mask = self.mask[idx] if self.answer is None else self.mask[idx] + self.answer[idx]
        x = np.stack([self.ids[idx], mask], axis=1).astype(np.int64)
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
            None if self.answer is None else self.answer[indices],
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


def _check_file_size(path: Path) -> None:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DataError(f"cannot read {path} ({type(exc).__name__})") from None
    if size > MAX_TEXT_FILE_BYTES:
        raise DataError(
            f"{path} is {size / 2**30:.1f} GiB, over the {MAX_TEXT_FILE_BYTES / 2**30:g} GiB a "
            "record file may hold (MAX_TEXT_FILE_BYTES): split it or keep a subset"
        )


def _json_records(path: Path) -> list[Any]:
    _check_file_size(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {path} ({type(exc).__name__}): save it as UTF-8") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise DataError(f"{path} is not valid JSON: re-export it as JSON lines") from None
        if not isinstance(data, list):
            raise DataError(f"{path} must hold a JSON array of records")
        if len(data) > MAX_TEXT_ROWS:
            raise DataError(f"{path} holds more than {MAX_TEXT_ROWS} records")
        return data
    rows = []
    # Lines end at "\n" only: U+2028, U+2029 and U+0085 are valid inside a JSON string, and
    # str.splitlines would cut a record there.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip(" \t\r"):
            continue
        size = len(line.encode("utf-8", "surrogatepass"))
        if size > MAX_RECORD_BYTES:
            raise DataError(
                f"{path} line {number} is {size:,} bytes, over the {MAX_RECORD_BYTES:,} a "
                "record may hold (MAX_RECORD_BYTES): a language model reads at most max_length "
                "tokens of it; shorten the record"
            )
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


def _plain_name(value: object, folder: Path, what: str) -> Path:
    """A file or folder name a ``save_to_disk`` folder's JSON lists, kept inside the folder."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise DataError(f"{folder}/{what} lists {excerpt(value, 40)}, not a file name")
    name = Path(value)
    if name.is_absolute() or ".." in name.parts:
        raise DataError(
            f"{folder}/{what} lists {excerpt(value, 80)}, which leaves the dataset folder: a "
            "save_to_disk folder names only its own files; re-save it with save_to_disk"
        )
    target = (folder / name).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise DataError(
            f"{folder}/{what} lists {excerpt(value, 80)}, which resolves outside the dataset "
            f"folder (to {target}): re-save it with save_to_disk"
        )
    return target


def _check_disk_names(path: Path, depth: int = 0) -> None:
    """Refuse a ``save_to_disk`` folder whose ``dataset_dict.json`` splits or ``state.json``
    ``_data_files`` name anything outside it (``../``, absolute paths, links out), before
    ``datasets`` opens any of it."""
    from sde_core.inputs.checkpoint_files import json_object

    try:
        splits = json_object(path / "dataset_dict.json").get("splits", [])
        state = json_object(path / "state.json")
    except CheckpointError as exc:
        raise DataError(str(exc)) from None
    if not isinstance(splits, list) or not isinstance(state.get("_data_files", []), list):
        raise DataError(f"{path} has a malformed dataset_dict.json or state.json: re-save it")
    for split in splits:
        sub = _plain_name(split, path, "dataset_dict.json")
        if depth == 0 and sub.is_dir():
            _check_disk_names(sub, depth + 1)
    for entry in state.get("_data_files", []):
        name = entry.get("filename") if isinstance(entry, dict) else None
        _plain_name(name, path, "state.json _data_files")


def _disk_dataset(path: Path) -> Any:
    _check_disk_names(path)
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
        rows = _table_records(p)
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
        if len(row) > MAX_TEXT_COLUMNS:
            raise DataError(_columns_message(p, len(row), f"record {i}"))
    return rows


def _columns_message(path: Path, n: int, what: str) -> str:
    return (
        f"{path}: {what} has {n:,} fields, over the {MAX_TEXT_COLUMNS:,} a text record may "
        "have (MAX_TEXT_COLUMNS): keep the text columns only"
    )


def _csv_columns(path: Path) -> int:
    """The number of columns of a CSV file's header, read without reading the file."""
    import csv

    with open(path, encoding="utf-8", newline="") as fh:
        head = fh.read(MAX_RECORD_BYTES + 1)
    if len(head) > MAX_RECORD_BYTES and "\n" not in head:
        raise DataError(
            f"{path}: the header line is over {MAX_RECORD_BYTES:,} characters "
            "(MAX_RECORD_BYTES): keep the text columns only"
        )
    try:
        first = next(csv.reader(io.StringIO(head.split("\n", 1)[0])), [])
    except csv.Error:
        return 0  # pandas names the problem
    return len(first)


def _table_records(path: Path) -> list[Any]:
    """The records of a CSV or Parquet file; the number of columns is checked first."""
    import pandas as pd

    _check_file_size(path)
    try:
        if path.suffix == ".csv":
            columns = _csv_columns(path)
        else:
            import pyarrow.parquet as pq

            columns = len(pq.read_schema(path).names)
        if columns > MAX_TEXT_COLUMNS:
            raise DataError(_columns_message(path, columns, "the header"))
        frame = (
            pd.read_csv(path, dtype=str, keep_default_na=False)
            if path.suffix == ".csv"
            else pd.read_parquet(path)
        )
    except DataError:
        raise
    except (OSError, ValueError, ImportError) as exc:
        raise DataError(f"cannot read {path} ({type(exc).__name__}): re-export it") from None
    rows: list[Any] = frame.to_dict(orient="records")
    return rows


_PLAIN_FIELD = re.compile(r"^[^.\[\]{}!:]+$")


def parse_template(template: str) -> list[tuple[str, str | None]]:
    """The pieces of a template: ``(literal text, field name or None)`` in order.

    A template names plain fields only (``{question}``; ``{{`` and ``}}`` are literal braces):
    no attribute or index access (``{question.__class__}``, ``{a[0]}``), no conversion
    (``{a!r}``) and no format spec (``{a:>3000000}`` would pad each text to millions of
    characters).

    Raises:
        DataError: an unbalanced brace, an empty ``{}``, or any of the forms above.
    """
    shown = excerpt(template, 60)
    if not isinstance(template, str):
        raise DataError(f"options.template must be text, got {shown}")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise DataError(
            f"options.template {shown} is malformed ({exc}): write fields as {{name}} and "
            "literal braces as {{{{ and }}}}"
        ) from None
    pieces: list[tuple[str, str | None]] = []
    for literal, name, spec, conversion in parsed:
        if name is None:
            pieces.append((literal, None))
            continue
        if not name.strip() or not _PLAIN_FIELD.match(name) or spec or conversion:
            field = "{" + name + (f"!{conversion}" if conversion else "")
            field += (f":{spec}" if spec else "") + "}"
            raise DataError(
                f"options.template {shown} has the field {excerpt(field, 40)}: a template names "
                "plain fields only, such as {question} (no attribute or index access, no "
                "conversion, no format spec)"
            )
        pieces.append((literal, name))
    return pieces


def _too_long(where: str, i: int, n: int, how: str) -> DataError:
    return DataError(
        f"{where}: record {i} gives a text of {n:,} characters by its {how}, over the "
        f"{MAX_TEXT_CHARS:,} a text may have (MAX_TEXT_CHARS); a language model reads at most "
        "max_length tokens of it: shorten the record"
    )


def _fill(pieces: list[tuple[str, str | None]], record: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for literal, name in pieces:
        out.append(literal)
        if name is not None:
            value = record[name]
            out.append(value if isinstance(value, str) else str(value))
    return out


def _layout(
    records: list[dict[str, Any]], options: Mapping[str, Any], where: str
) -> tuple[str | None, str | None]:
    """``(column, template)``: which column holds the texts, or which template makes them."""
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
    return column, template


def answer_spans(
    records: list[dict[str, Any]], options: Mapping[str, Any], where: str
) -> list[tuple[int, int]] | None:
    """The character span ``(start, end)`` of each text's answer: the value its template's
    (last) ``{answer}`` field put there; None when the texts come from a column or from a
    template without an ``answer`` field."""
    column, template = _layout(records, options, where)
    if column is not None:
        return None
    pieces = parse_template(str(template))
    last = max((i for i, (_, name) in enumerate(pieces) if name == "answer"), default=None)
    if last is None:
        return None
    spans = []
    for record in records:
        start = sum(map(len, _fill(pieces[:last], record))) + len(pieces[last][0])
        spans.append((start, start + len(_fill([("", "answer")], record)[1])))
    return spans


def record_texts(
    records: list[dict[str, Any]], options: Mapping[str, Any], where: str
) -> list[str]:
    """One text per record: ``options.text_column``, else ``text``, else the template
    (:func:`parse_template`); each at most :data:`MAX_TEXT_CHARS` characters.

    Raises:
        DataError: the column is missing or not text in some record, the template is not
            made of plain fields or names a field a record lacks (the message names the
            record and the fields it has), or a text is too long.
    """
    column, template = _layout(records, options, where)
    pieces = parse_template(str(template)) if column is None else []
    texts = []
    for i, record in enumerate(records):
        if column is not None:
            value = record.get(column)
            if not isinstance(value, str):
                raise DataError(
                    f"{where}: record {i} has no text in column {excerpt(column, 40)} (fields: "
                    f"{[excerpt(f, 30) for f in sorted(record)[:10]]})"
                )
            if len(value) > MAX_TEXT_CHARS:
                raise _too_long(where, i, len(value), f"column {excerpt(column, 40)}")
            texts.append(value)
            continue
        try:
            parts = _fill(pieces, record)
        except KeyError as exc:
            raise DataError(
                f"{where}: record {i} does not fill the template {excerpt(template, 60)} "
                f"(no field {excerpt(exc.args[0], 40)}); its fields are "
                f"{[excerpt(f, 30) for f in sorted(record)[:10]]}"
            ) from None
        n = sum(map(len, parts))
        if n > MAX_TEXT_CHARS:
            raise _too_long(where, i, n, "template")
        texts.append("".join(parts))
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
    from sde_core.inputs.lm_outputs import answer_marks

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
        spans = answer_spans(rows, options, f"{split} split")
        answer = None if spans is None else answer_marks(tokenizer, texts, spans, max_length)
        splits[split] = TextDataset(
            texts, rows, enc["input_ids"].astype(np.int32), enc["attention_mask"].astype(np.int32),
            answer,
        )  # fmt: skip
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
