"""Encoding what a unit of work stores: row dicts as JSON payloads, arrays as bytes.

:func:`encode_tables` checks table names and turns each row into a JSON object of scalars
(:data:`Scalar`), :func:`encode_arrays` turns numeric arrays into ``(dtype, shape, bytes)``,
:func:`json_value` normalises a run's settings; each names what it refuses and how to fix it.
The store that writes them is :class:`~sde_core.pipeline.store.ResultsStore`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sde_core.errors import StoreError

__all__ = ["Scalar", "encode_arrays", "encode_tables", "json_value", "scalar"]

Scalar = None | bool | int | float | str
"""A stored row value."""

_TABLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_ARRAY_KINDS = "biuf"


def scalar(value: Any, where: str, hint: str) -> Scalar:
    """``value`` as a plain Python scalar, or :class:`StoreError` naming ``where``."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return str(value)
    raise StoreError(f"{where} has a value of type {type(value).__name__}; {hint}")


def json_value(value: Any, where: str) -> Any:
    """``value`` with dicts, lists/tuples and scalars normalised to plain JSON values."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise StoreError(f"{where} has a non-string key {key!r}")
            out[key] = json_value(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [json_value(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return scalar(
        value, where, "settings hold dicts, lists, None, bool, int, float or str (e.g. str(path))"
    )


def encode_tables(
    tables: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, tuple[list[str], list[str]]]:
    """Per table: its columns in first-seen order and one JSON payload per row."""
    hint = "store None, bool, int, float or str (one column per value, arrays in `arrays`)"
    encoded: dict[str, tuple[list[str], list[str]]] = {}
    for table, rows in tables.items():
        if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
            raise StoreError(
                f"invalid table name {table!r}: use 1-64 letters, digits, '_', '-' or '.', "
                "not starting with '-' or '.'"
            )
        if isinstance(rows, (str, Mapping)) or not isinstance(rows, Sequence):
            raise StoreError(f"table {table!r} must be a list of row dicts")
        columns: dict[str, None] = {}
        payloads = []
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise StoreError(f"row {i} of table {table!r} is not a dict")
            clean: dict[str, Scalar] = {}
            for key, value in row.items():
                if not isinstance(key, str) or not key:
                    raise StoreError(f"row {i} of table {table!r} has an invalid key {key!r}")
                clean[key] = scalar(value, f"column {key!r} of row {i} of table {table!r}", hint)
                columns[key] = None
            payloads.append(json.dumps(clean))
        encoded[table] = (list(columns), payloads)
    return encoded


def encode_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, tuple[str, str, bytes]]:
    """Per array: dtype string, JSON shape and C-order bytes."""
    encoded: dict[str, tuple[str, str, bytes]] = {}
    for name, arr in arrays.items():
        if not isinstance(name, str) or not name:
            raise StoreError(f"invalid array name {name!r}: use a non-empty string")
        if not isinstance(arr, np.ndarray):
            raise StoreError(
                f"array {name!r} is a {type(arr).__name__}, not a numpy array: convert it "
                "(e.g. tensor.cpu().numpy())"
            )
        if arr.dtype.kind not in _ARRAY_KINDS or arr.dtype.fields is not None:
            raise StoreError(
                f"array {name!r} has dtype {arr.dtype}; store bool, integer or float arrays"
            )
        encoded[name] = (arr.dtype.str, json.dumps(list(arr.shape)), arr.tobytes(order="C"))
    return encoded
