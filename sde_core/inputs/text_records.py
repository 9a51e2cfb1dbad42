"""The record files of a text dataset: JSON lines, JSON, CSV and Parquet files and
``datasets.save_to_disk`` folders, read within limits (:mod:`sde_core.inputs.text_data` turns
the records into texts and tokens).

Every limit is checked before the data it bounds is read: a file's size, a record's bytes, a
record's fields and a split's records; a ``save_to_disk`` folder's own JSON files may name only
files inside it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from sde_core.errors import CheckpointError, DataError
from sde_core.inputs.indices import excerpt

__all__ = [
    "MAX_RECORD_BYTES",
    "MAX_TEXT_COLUMNS",
    "MAX_TEXT_FILE_BYTES",
    "MAX_TEXT_ROWS",
    "TEXT_SUFFIXES",
    "disk_dataset",
    "is_disk_dataset",
    "read_records",
]

#: Most records a text split may hold.
MAX_TEXT_ROWS = 2_000_000
#: Largest record file (bytes) read; checked before any of it is read.
MAX_TEXT_FILE_BYTES = 2 * 2**30
#: Largest record (bytes of one JSON-lines line or one JSON-array record).
MAX_RECORD_BYTES = 1 * 2**20
#: Most fields a record may have (the columns of a CSV or Parquet file).
MAX_TEXT_COLUMNS = 1_000
#: File endings of record files.
TEXT_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


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


def disk_dataset(path: Path) -> Any:
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


def is_disk_dataset(path: Path) -> bool:
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
    if is_disk_dataset(p):
        data = disk_dataset(p)
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
