"""Download payloads of a report's tables: :func:`tables_for_export`, and :func:`to_csv_bytes` /
:func:`to_json_bytes` / :func:`tables_to_zip` (e.g. for ``st.download_button``).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from sde_core.common.csv_cells import neutralise_formula
from sde_core.errors import SettingsError
from sde_core.viz.report.tables import settings_table
from sde_core.viz.verdicts.explanation import verdict_table

__all__ = [
    "EXPORT_TABLE_FORMATS",
    "tables_for_export",
    "tables_to_zip",
    "to_csv_bytes",
    "to_json_bytes",
]

#: Formats of :func:`tables_to_zip`.
EXPORT_TABLE_FORMATS = ("csv", "json")


def tables_for_export(result: Any, *, include_h: bool = False) -> dict[str, pd.DataFrame]:
    """The result's tables for download.

    Returns:
        ``{"models": one row per model, "subsets": one row per scored subset, "verdicts":``
        :func:`verdict_table` ``, "settings":`` :func:`settings_table` ``}`` and, with
        ``include_h``, ``"h_values"``: every raw H value as rows ``model, array, subset, split,
        h`` (``subset`` is the row of a ``(T, K)`` array, 0 for the ``(K,)`` references).
    """
    tables = {
        "models": result.models.copy(),
        "subsets": result.subsets.copy(),
        "verdicts": verdict_table(result),
        "settings": settings_table(result.settings),
    }
    if include_h:
        parts = []
        for key, arr in result.arrays.items():
            model, name = key.split("/", 1)
            a = np.atleast_2d(np.asarray(arr, dtype=np.float64))
            subset, split = np.indices(a.shape)
            parts.append(
                pd.DataFrame(
                    {
                        "model": model,
                        "array": name,
                        "subset": subset.ravel(),
                        "split": split.ravel(),
                        "h": a.ravel(),
                    }
                )
            )
        columns = ["model", "array", "subset", "split", "h"]
        tables["h_values"] = (
            pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
        )
    return tables


def to_csv_bytes(df: pd.DataFrame) -> bytes:
    """UTF-8 CSV of a table (no index; floats at full precision, NaN as an empty field; text
    a spreadsheet would run as a formula gets a leading apostrophe, see
    :func:`~sde_core.common.csv_cells.neutralise_formula`)."""
    safe = df.map(neutralise_formula).rename(columns=neutralise_formula)
    return safe.to_csv(index=False).encode("utf-8")


def _json_cell(value: Any) -> Any:
    """A JSON value of a table cell: Python scalars, missing and non-finite numbers as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return None
    if not isinstance(value, (str, bool, int, float)) and pd.isna(value):
        return None
    return value


def to_json_bytes(df: pd.DataFrame) -> bytes:
    """UTF-8 JSON of a table: a list of row objects (floats exact, NaN/inf/missing as null)."""
    rows = [
        {str(k): _json_cell(v) for k, v in zip(df.columns, values, strict=True)}
        for values in df.itertuples(index=False, name=None)
    ]
    return json.dumps(rows, ensure_ascii=False).encode("utf-8")


def tables_to_zip(tables: Mapping[str, pd.DataFrame], fmt: str = "csv") -> bytes:
    """A ZIP archive holding ``<name>.<fmt>`` for every table."""
    if fmt not in EXPORT_TABLE_FORMATS:
        raise SettingsError(f"table format must be one of {EXPORT_TABLE_FORMATS}; got {fmt!r}")
    write = to_csv_bytes if fmt == "csv" else to_json_bytes
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, df in tables.items():
            archive.writestr(f"{name}.{fmt}", write(df))
    return buffer.getvalue()
