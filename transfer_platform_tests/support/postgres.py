"""The machine's PostgreSQL for the tests: how to connect (never skipped silently: a test fails
with how to start it), the ``connection`` block of a source or destination, and what a
PostgreSQL destination holds (its rows, its ``_transfer_status`` row, its tables).

127.0.0.1:5432, database ``test``, trust auth (override with TP_TEST_PG_HOST/PORT/USER/DATABASE).
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

import psycopg
import pytest

from transfer_platform.core.timeutil import utc
from transfer_platform_tests.support.events import MODEL, Row, normalize

PG = {
    "host": os.environ.get("TP_TEST_PG_HOST", "127.0.0.1"),
    "port": int(os.environ.get("TP_TEST_PG_PORT", "5432")),
    "dbname": os.environ.get("TP_TEST_PG_DATABASE", "test"),
    "user": os.environ.get("TP_TEST_PG_USER", "postgres"),
}


HOW_TO_START_PG = (
    "PostgreSQL is not reachable at {host}:{port} (database {dbname}, user {user}): {error}\n"
    "Start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start\n"
    "(or point TP_TEST_PG_HOST/TP_TEST_PG_PORT at a server with trust auth and a 'test' database)."
)


def pg_connect(**extra) -> psycopg.Connection:
    try:
        return psycopg.connect(**PG, connect_timeout=5, **extra)
    except psycopg.OperationalError as exc:
        pytest.fail(HOW_TO_START_PG.format(error=str(exc).strip(), **PG), pytrace=False)


def pg_connection_config(schema: str | None = None) -> dict:
    """The ``connection`` block of a postgres source/destination for the test database."""
    block = {"host": PG["host"], "port": PG["port"], "database": PG["dbname"], "username": PG["user"]}
    if schema:
        block["schema"] = schema
    return block


def destination_rows(conn: psycopg.Connection, schema: str, table: str = MODEL) -> list[Row]:
    return normalize(conn.execute(
        f'SELECT id, organization_id, updated_at, payload FROM "{schema}"."{table}"').fetchall())


def status_row(conn: psycopg.Connection, schema: str, model: str = MODEL) -> dict[str, Any] | None:
    row = conn.execute(
        f'SELECT transfer_last_updated_at, high_watermark, state::text, last_transfer_id, updated_at '
        f'FROM "{schema}"."_transfer_status" WHERE data_model_name = %s', (model,)).fetchone()
    if row is None:
        return None
    keys = ("watermark", "high_watermark", "state", "last_transfer_id", "updated_at")
    return {k: (utc(v) if isinstance(v, datetime) else v) for k, v in zip(keys, row, strict=True)}


def tables_in(conn: psycopg.Connection, schema: str) -> list[str]:
    return sorted(r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall())


def schema_exists(conn: psycopg.Connection, schema: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def xmins(conn: psycopg.Connection, schema: str, ids: list[int]) -> dict[int, str]:
    return dict(conn.execute(f'SELECT id, xmin::text FROM "{schema}"."{MODEL}" WHERE id = ANY(%s)',
                             (ids,)).fetchall())


@pytest.fixture
def dagster_database():
    """A PostgreSQL database of its own for a Dagster instance's storage, dropped afterwards."""
    import uuid

    name = f"tp_dagster_{uuid.uuid4().hex[:8]}"
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def statements():
    """Every SQL statement SQLAlchemy executes while the test runs (any engine: a Dagster
    instance's storages, the platform's own)."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    seen: list[str] = []

    def record(conn, cursor, statement, *args) -> None:
        seen.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    yield seen
    event.remove(Engine, "before_cursor_execute", record)
