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
and attention mask (:class:`~sde_core.inputs.hf_models.HFHiddenStates` reads it). The files are
read by :mod:`sde_core.inputs.text_records`, within its limits.

**Each model reads the texts with its own tokenizer** where its folder has one
(:func:`model_view`: the same texts tokenised again, cached per tokenizer); a model folder
without tokenizer files shares ``options.tokenizer``'s, and when its vocabulary cannot hold those
tokens :func:`vocabulary_problem` says so and how to fix it. A template with an ``{answer}``
field marks each text's answer span (:attr:`TextDataset.answer_mask`), which the language-model
behaviour check scores (method §9).

Forget sets are index files as for every dataset; :func:`forget_rows` makes one from a split
file of records (TOFU's ``forget10.json``: each record must match one D_tr record's text) or from
a true/false column of D_tr.
"""

from __future__ import annotations

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
from sde_core.errors import DataError
from sde_core.inputs.indices import as_index_array, excerpt
from sde_core.inputs.text_records import TEXT_SUFFIXES, disk_dataset, is_disk_dataset, read_records

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "MAX_TEXT_CHARS",
    "QA_TEMPLATE",
    "TextDataset",
    "TextSource",
    "answer_starts",
    "forget_rows",
    "has_tokenizer",
    "model_view",
    "parse_template",
    "read_text_source",
    "record_texts",
    "tokenize_texts",
    "tokenizer_fingerprint",
    "vocabulary_problem",
]

#: How a question/answer record (TOFU's layout) becomes one text.
QA_TEMPLATE = "Question: {question}\nAnswer: {answer}"
#: Tokens per text unless ``options.max_length`` says otherwise.
DEFAULT_MAX_LENGTH = 128
#: Longest text (characters) a record may give, by its column or the filled template; checked
#: before tokenising (the tokenizer's native code cannot be interrupted), far above any
#: ``max_length`` of tokens.
MAX_TEXT_CHARS = 100_000
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
        answer_starts: per text, the character where its answer begins (question/answer
            records filled into a template with an ``{answer}`` field), or None.
        answer_mask: int8 ``(n, max_length)``, 1 on the real tokens that begin at or after the
            answer's first character (the tokens a behaviour check scores), or None.
        tokenizer: the fingerprint of the tokenizer that made ``ids`` ("" when unknown).
    """

    is_image = False

    def __init__(
        self,
        texts: list[str],
        records: list[dict[str, Any]],
        ids: np.ndarray,
        mask: np.ndarray,
        *,
        answer_starts: list[int] | None = None,
        answer_mask: np.ndarray | None = None,
        tokenizer: str = "",
    ) -> None:
        self.texts, self.records, self.ids, self.mask = texts, records, ids, mask
        self.answer_starts, self.answer_mask, self.tokenizer = answer_starts, answer_mask, tokenizer
        self.y = np.full(len(texts), -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.texts)

    def get_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``(k, 2, max_length)`` (ids, mask) and labels ``(k,)`` (all -1); the mask
        channel is 2 at answer tokens (1 at the other real tokens, 0 at padding)."""
        idx = np.asarray(indices, dtype=np.int64)
        answer = self.answer_mask
        mask = self.mask[idx] if answer is None else self.mask[idx] + answer[idx].astype(np.int32)
        x = np.stack([self.ids[idx], mask], axis=1).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(self.y[idx])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        xb, yb = self.get_batch(np.array([i]))
        return xb[0], int(yb[0])

    def subset(self, indices: np.ndarray) -> TextDataset:
        """The rows ``indices`` (int64 ``(k,)``), in that order."""
        starts = self.answer_starts
        return TextDataset(
            [self.texts[i] for i in indices],
            [self.records[i] for i in indices],
            self.ids[indices],
            self.mask[indices],
            answer_starts=None if starts is None else [starts[i] for i in indices],
            answer_mask=None if self.answer_mask is None else self.answer_mask[indices],
            tokenizer=self.tokenizer,
        )

    def sample_texts(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        """The texts of ``indices``.

        Raises:
            DataError: out-of-range indices.
        """
        idx = as_index_array(indices, len(self), "text indices")
        return [self.texts[int(i)] for i in idx]

    def scored_texts(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        """The part of each text a behaviour check scores: its answer, else the whole text."""
        starts = self.answer_starts
        rows = [int(i) for i in indices]
        if starts is None:
            return [self.texts[i] for i in rows]
        return [self.texts[i][starts[i] :] for i in rows]

    def retokenized(self, tokenizer_dir: Path, max_length: int) -> TextDataset:
        """The same texts tokenised by the tokenizer of another model folder (a model that reads
        its texts with its own tokenizer).

        Raises:
            DataError: the folder's tokenizer cannot be loaded.
        """
        from sde_core.inputs.hf_models import load_tokenizer

        ids, mask, answers = tokenize_texts(
            load_tokenizer(tokenizer_dir), self.texts, max_length, self.answer_starts
        )
        return TextDataset(
            self.texts, self.records, ids, mask, answer_starts=self.answer_starts,
            answer_mask=answers, tokenizer=tokenizer_fingerprint(tokenizer_dir),
        )  # fmt: skip


def tokenize_texts(
    tokenizer: Any, texts: list[str], max_length: int, answer_starts: list[int] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(ids, mask, answer_mask)`` of ``texts``, padded and truncated to ``max_length``
    tokens (int32, int32, int8 or None; see :class:`TextDataset`). A token is an answer token
    when it begins at or after its text's answer character (the tokenizer's character offsets;
    a tokenizer without offsets: the tokens after those of the text before the answer)."""
    enc = tokenizer(
        texts, padding="max_length", truncation=True, max_length=max_length, return_tensors="np",
        return_offsets_mapping=answer_starts is not None and bool(tokenizer.is_fast),
    )  # fmt: skip
    ids = enc["input_ids"].astype(np.int32)
    mask = enc["attention_mask"].astype(np.int32)
    if answer_starts is None:
        return ids, mask, None
    starts = np.asarray(answer_starts, dtype=np.int64)
    if "offset_mapping" in enc:
        offsets = enc["offset_mapping"]
        answers = (offsets[:, :, 0] >= starts[:, None]) & (offsets[:, :, 1] > offsets[:, :, 0])
    else:
        before = tokenizer([t[:s] for t, s in zip(texts, answer_starts, strict=True)])
        first = np.asarray([len(b) for b in before["input_ids"]])
        answers = np.arange(ids.shape[1])[None, :] >= first[:, None]
    return ids, mask, (answers & (mask > 0)).astype(np.int8)


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


def answer_starts(records: list[dict[str, Any]], options: Mapping[str, Any]) -> list[int] | None:
    """Per record, the character where its ``{answer}`` field begins in its text, when the
    texts are filled into a template with one (:func:`record_texts`: TOFU's question/answer
    records); None for texts read from a column (they have no answer span)."""
    template = options.get("template")
    if options.get("text_column") is not None or (
        template is None and records and all("text" in r for r in records)
    ):
        return None
    pieces = parse_template(str(template or QA_TEMPLATE))
    if not any(name == "answer" for _, name in pieces):
        return None
    head = pieces[: next(i for i, (_, name) in enumerate(pieces) if name == "answer")]
    tail = pieces[len(head)][0]  # the literal just before the field
    return [sum(map(len, _fill(head, r))) + len(tail) for r in records]


def _split_files(root: Path, options: Mapping[str, Any]) -> dict[str, Path]:
    if root.is_file() or (is_disk_dataset(root) and "test_path" in options):
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
    if is_disk_dataset(root) and "test_path" not in options:
        data = disk_dataset(root)
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
    fingerprint = tokenizer_fingerprint(tokenizer_dir)
    max_length = int(options.get("max_length", DEFAULT_MAX_LENGTH))
    records, files = _read_splits(root, options)
    splits, truncated = {}, {}
    for split, rows in records.items():
        if not rows:
            raise DataError(f"the {split} split of {root} holds no records")
        texts = record_texts(rows, options, f"{split} split")
        full = tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
        truncated[split] = sum(len(t) > max_length for t in full)
        starts = answer_starts(rows, options)
        ids, mask, answers = tokenize_texts(tokenizer, texts, max_length, starts)
        splits[split] = TextDataset(
            texts, rows, ids, mask, answer_starts=starts, answer_mask=answers,
            tokenizer=fingerprint,
        )  # fmt: skip
    settings = {
        "text_column": options.get("text_column"),
        "template": options.get("template"),
        "max_length": max_length,
        "tokenizer": fingerprint,
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


def has_tokenizer(folder: Path) -> bool:
    """Whether a model folder holds tokenizer files of its own (``save_pretrained`` writes
    them beside the weights)."""
    return folder.is_dir() and any((folder / name).is_file() for name in _TOKENIZER_FILES)


_VIEWS: dict[tuple[str, str], tuple[TextDataset, TextDataset]] = {}


def model_view(bundle: Any, folder: Path) -> Any:
    """The text dataset ``bundle`` as the model in ``folder`` reads it: tokenised by the
    folder's own tokenizer when it has one that differs from ``options.tokenizer``'s (the
    texts, answer spans and rows stay; the fingerprint adds the tokenizer's), else ``bundle``
    itself — a model folder without a tokenizer shares the dataset's, ``options.tokenizer``.
    Any other dataset is returned as it is.

    Raises:
        DataError: the folder's tokenizer cannot be loaded (or holds code).
    """
    import dataclasses

    train = getattr(bundle, "train", None)
    if not isinstance(train, TextDataset) or not has_tokenizer(folder):
        return bundle
    own = tokenizer_fingerprint(folder)
    if own == train.tokenizer:
        return bundle
    key = (str(bundle.fingerprint), own)
    if key not in _VIEWS:
        if len(_VIEWS) >= 8:
            _VIEWS.pop(next(iter(_VIEWS)))
        length = int(train.ids.shape[1])
        _VIEWS[key] = (train.retokenized(folder, length), bundle.test.retokenized(folder, length))
    views = _VIEWS[key]
    return dataclasses.replace(
        bundle, train=views[0], test=views[1], train_labels=views[0].y, test_labels=views[1].y,
        fingerprint=stable_hash({"data": bundle.fingerprint, "tokenizer": own}),
    )  # fmt: skip


def vocabulary_problem(bundle: Any, model: Any, folder: Path | None) -> str:
    """Why a language model cannot read a text dataset's tokens, in words ("" when it can):
    token ids beyond its vocabulary, because the texts were tokenised by another model's
    tokenizer (``options.tokenizer``) and the model's folder has none of its own."""
    train = getattr(bundle, "train", None)
    embeddings = getattr(getattr(model, "lm", None), "get_input_embeddings", None)
    if not isinstance(train, TextDataset) or embeddings is None:
        return ""
    size = int(embeddings().num_embeddings)
    top = int(max(train.ids.max(initial=0), bundle.test.ids.max(initial=0)))
    if top < size:
        return ""
    where = f"the model folder {folder}" if folder is not None else "the model folder"
    return (
        f"the dataset's token ids go up to {top} but the model's vocabulary has {size} tokens: "
        f"the texts were tokenised by the tokenizer of options.tokenizer and {where} has no "
        "tokenizer of its own. Save the tokenizer the model was trained with into its folder "
        "(tokenizer.save_pretrained(folder)), and the model reads the texts with it; or, if "
        "every model shares one, point the dataset's options.tokenizer at that tokenizer's folder"
    )
