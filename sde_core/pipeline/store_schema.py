"""The results store's SQL schema: its tables, its version and its application id.

:func:`create_schema` writes the current schema into an empty file;
:mod:`~sde_core.pipeline.store_repair` upgrades older ones to it. Schema 3 (this version) adds
each unit's table records (``unit_tables``) and stores each array's bytes after its checksum.
"""

from __future__ import annotations

import sqlite3

__all__ = [
    "APPLICATION_ID",
    "ARRAYS_SCHEMA",
    "SCHEMA_VERSION",
    "TABLES",
    "UNIT_TABLES_SCHEMA",
    "create_schema",
]


ARRAYS_SCHEMA = """CREATE TABLE arrays (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        unit_id INTEGER NOT NULL REFERENCES units (id) ON DELETE CASCADE,
        dtype TEXT NOT NULL,
        shape TEXT NOT NULL,
        checksum TEXT,
        data BLOB NOT NULL,
        PRIMARY KEY (run_id, name)
    )"""
"""The arrays table (schema 3: the bytes last, so reading a unit's record — its arrays'
checksums — does not walk the overflow pages of every array, which SQLite must for a column
stored after a large blob; schema 2 had the checksum after the bytes)."""

UNIT_TABLES_SCHEMA = """CREATE TABLE unit_tables (
        unit_id INTEGER NOT NULL REFERENCES units (id) ON DELETE CASCADE,
        table_name TEXT NOT NULL,
        n_rows INTEGER NOT NULL,
        checksum TEXT NOT NULL,
        PRIMARY KEY (unit_id, table_name)
    )"""
"""Schema 3's record of each unit's rows of each table (their count and checksum)."""


SCHEMA_VERSION = 3
"""Version of the store's SQL schema, kept in ``PRAGMA user_version`` (2: checksums; 3: each
unit's rows of each table checksummed apart, ``unit_tables``)."""


APPLICATION_ID = 0x53444531
"""``PRAGMA application_id`` of an SDE results store (ASCII ``"SDE1"``)."""


TABLES = (
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        workspace_hash TEXT NOT NULL,
        settings_hash TEXT NOT NULL,
        settings TEXT NOT NULL,
        label TEXT NOT NULL,
        created TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'complete')),
        checksum TEXT,
        UNIQUE (workspace_hash, settings_hash)
    )""",
    """CREATE TABLE units (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        unit_key TEXT NOT NULL,
        finished TEXT NOT NULL,
        checksum TEXT,
        UNIQUE (run_id, unit_key)
    )""",
    """CREATE TABLE run_tables (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        columns TEXT NOT NULL,
        checksum TEXT,
        PRIMARY KEY (run_id, name)
    )""",
    """CREATE TABLE table_rows (
        unit_id INTEGER NOT NULL REFERENCES units (id) ON DELETE CASCADE,
        table_name TEXT NOT NULL,
        seq INTEGER NOT NULL,
        payload TEXT NOT NULL,
        PRIMARY KEY (unit_id, table_name, seq)
    )""",
    ARRAYS_SCHEMA,
    "CREATE INDEX arrays_unit ON arrays (unit_id)",
    UNIT_TABLES_SCHEMA,
)
"""Every statement of the current schema, in order."""


def create_schema(conn: sqlite3.Connection) -> None:
    """Create the current schema in an empty database (inside the caller's transaction)."""
    for statement in TABLES:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
