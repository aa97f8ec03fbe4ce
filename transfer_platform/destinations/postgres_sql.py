"""The SQL text of the PostgreSQL destination, planned without a database (tested as text).

``destinations/postgres.py`` runs these statements; the upsert and the soft delete are planned in
``core/sql.py`` (shared with the sources' quoting).
"""

from __future__ import annotations

import hashlib

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.sql import marked_deleted, qualified, quote_ident
from transfer_platform.core.types import TYPES


def target_ddl(table: str, model: ModelConfig) -> str:
    columns = ", ".join(f"{quote_ident(c.destination_name)} {TYPES[c.data_type].postgres}" for c in model.columns)
    key = ", ".join(quote_ident(c.destination_name) for c in model.primary_key)
    return f"CREATE TABLE IF NOT EXISTS {table} ({columns}, PRIMARY KEY ({key}))"


def model_lock_key(database: str, schema: str, model: str) -> int:
    """The advisory lock key of one model in one destination schema (a signed 64-bit integer)."""
    digest = hashlib.sha256(f"transfer_platform\x00{database}\x00{schema}\x00{model}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def probe_steps(schema: str, name: str) -> list[tuple[str, list[str]]]:
    """What a transfer does in its schema, as (check, statements) in the order they depend on each
    other, on a probe table ``name``."""
    table, staging, renamed = (qualified(schema, n) for n in (name, name + "_s", name + "_r"))
    return [
        (f"create schema {quote_ident(schema)}", [f"CREATE SCHEMA {quote_ident(schema)}"]),
        (f"create tables in schema {quote_ident(schema)} (model, status and staging tables)",
         [f"CREATE TABLE {table} (id bigint PRIMARY KEY, v text)",
          f"CREATE UNLOGGED TABLE {staging} AS SELECT * FROM {table} WITH NO DATA"]),
        ("insert, update, delete and truncate rows (merge, state, full refresh)",
         [f"INSERT INTO {table} VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
          f"UPDATE {table} SET v = 'b'", f"DELETE FROM {table}", f"TRUNCATE {table}"]),
        ("add and drop columns (schema evolution)",
         [f"ALTER TABLE {table} ADD COLUMN w text", f"ALTER TABLE {table} DROP COLUMN w"]),
        ("rename tables and constraints (a backfill into an empty table, a full refresh)",
         [f"ALTER TABLE {table} RENAME TO {quote_ident(name + '_r')}",
          f"ALTER TABLE {renamed} RENAME CONSTRAINT {quote_ident(name + '_pkey')} TO {quote_ident(name + '_k')}"]),
        ("drop tables (staging, full refresh)", [f"DROP TABLE {renamed}", f"DROP TABLE {staging}"]),
    ]


def status_ddl(table: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {table} ("
        "data_model_name text PRIMARY KEY, "
        "transfer_last_updated_at timestamp with time zone, "
        "high_watermark timestamp with time zone, "
        "state jsonb, "
        "refresh_state jsonb, "
        "last_transfer_id text, "
        "updated_at timestamp with time zone NOT NULL DEFAULT now())"
    )


def batch_summary_sql(model: ModelConfig, staging: str) -> str:
    """One scan of a staged batch: rows, rows newer than ``%(hw)s`` (the high watermark), the
    greatest last-modified value, the staging table's size (``%(staging)s``), NULL keys, NULL
    last-modified values, and rows marked deleted newer than ``%(hw)s`` (or all, if it is NULL)."""
    lm = quote_ident(model.last_modified.destination_name)
    null_key = " OR ".join(f"{quote_ident(c.destination_name)} IS NULL" for c in model.primary_key)
    marker = model.deletion_marker
    marked = "false" if marker is None else marked_deleted(marker.destination_name, marker.data_type)
    newer = f"({lm} > %(hw)s OR %(hw)s IS NULL)"
    return (f"SELECT count(*), count(*) FILTER (WHERE {lm} > %(hw)s), max({lm}), "
            f"pg_total_relation_size(%(staging)s::regclass), count(*) FILTER (WHERE {null_key}), "
            f"count(*) FILTER (WHERE {lm} IS NULL), count(*) FILTER (WHERE {marked} AND {newer}) "
            f"FROM {staging}")


def delete_matching_sql(target: str, staging: str, columns: list[str]) -> str:
    """Delete the ``target`` rows equal to a staged row on every one of ``columns``."""
    match = " AND ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in columns)
    return f"DELETE FROM {target} AS t USING {staging} AS s WHERE {match}"
