"""The Snowflake test destination of the contract suite: a fresh database and schema in the
session's emulator (``snowflake_server``), and a reader of the model's table through
snowflake.connector, as a recipient reads it (never through the writer)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

from transfer_platform.config.models import ModelConfig
from transfer_platform.core.timeutil import utc

#: the environment variable the test destinations' password names
PASSWORD_ENV = "TP_TEST_SNOWFLAKE_PASSWORD"


def snowflake_rows(server, database: str, schema: str, model: ModelConfig) -> list[dict] | None:
    """The model's rows (its destination columns), or None without its table."""
    names = [c.destination_name for c in model.columns]
    with server.connect() as conn, conn.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{database}".INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = %s '
                       "AND TABLE_NAME = %s", (schema, model.model_name))
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(f"SELECT {', '.join(chr(34) + n + chr(34) for n in names)} "
                       f'FROM "{database}"."{schema}"."{model.model_name}"')
        rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    keys = [c.destination_name for c in model.columns if c.is_primary_key]
    cleaned = [{k: (utc(v) if isinstance(v, datetime) else v) for k, v in row.items()} for row in rows]
    return sorted(cleaned, key=lambda row: tuple(row[k] for k in keys))


def watermark(server, database: str, schema: str, model_name: str):
    """The model's watermark (``transfer_last_updated_at``) in ``_transfer_status``, read through
    the connector; None without the table or the row."""
    with server.connect() as conn, conn.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{database}".INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = %s '
                       "AND TABLE_NAME = '_transfer_status'", (schema,))
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(f'SELECT transfer_last_updated_at FROM "{database}"."{schema}"."_transfer_status" '
                       "WHERE data_model_name = %s", (model_name,))
        row = cursor.fetchone()
    return None if row is None or row[0] is None else utc(row[0])


def staging_tables(server, database: str, schema: str, conn=None) -> list[str]:
    """The window staging tables in the schema (``_tp_stg_...``); through ``conn`` if given (a
    session kept open: polling without a login each time)."""
    if conn is None:
        with server.connect() as conn:
            return staging_tables(server, database, schema, conn)
    with conn.cursor() as cursor:
        cursor.execute(f'SELECT TABLE_NAME FROM "{database}".INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = %s '
                       "AND STARTSWITH(TABLE_NAME, '_tp_stg_')", (schema,))
        return [row[0] for row in cursor.fetchall()]


def snowflake(place) -> object:
    from transfer_platform_tests.support.destinations import TestDestination

    server = place.fixture("snowflake_server")
    database, schema = f"TP_{uuid.uuid4().hex[:10].upper()}", "acme"
    server.create_schema(database, schema)
    read: Callable[[ModelConfig], list[dict] | None] = lambda model: snowflake_rows(server, database, schema, model)  # noqa: E731
    return TestDestination("snowflake", "snowflake",
                           {"vendor": "snowflake", "connection": server.connection(database, schema, PASSWORD_ENV)},
                           read, {"env": {PASSWORD_ENV: "snow"}, "database": database, "schema": schema,
                                  "server": server})
