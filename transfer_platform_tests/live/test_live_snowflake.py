"""The live lane of the Snowflake destination: a backfill, an update and a soft-deleted row moved
from the machine's PostgreSQL into a real Snowflake schema, read back through
snowflake.connector; the schema's tables are dropped afterwards. Skipped unless
``TRANSFER_PLATFORM_LIVE_SNOWFLAKE_{ACCOUNT,USER,PASSWORD,DATABASE,SCHEMA,WAREHOUSE}`` are set
(``_ROLE`` optional; docs/development.md, *Live lanes*)."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from transfer_platform.config.parsing import parse_config
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.destinations import TestDestination
from transfer_platform_tests.support.events import MODEL, day
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer

TENANT = "acme"
BASE = day(3, 1) + timedelta(hours=1)
NOW1, NOW2 = day(3, 2) + timedelta(hours=1), day(3, 2) + timedelta(hours=2)
MARKER = {"name_in_source": "is_deleted", "data_type": "boolean", "is_deleted_marker": True}

PREFIX = "TRANSFER_PLATFORM_LIVE_SNOWFLAKE_"
REQUIRED = ("ACCOUNT", "USER", "PASSWORD", "DATABASE", "SCHEMA", "WAREHOUSE")
MISSING = [PREFIX + name for name in REQUIRED if not os.environ.get(PREFIX + name)]

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(bool(MISSING), reason=f"the Snowflake live lane needs {', '.join(MISSING)}")]


def _env(name: str) -> str | None:
    return os.environ.get(PREFIX + name)


def _connect():
    import snowflake.connector

    return snowflake.connector.connect(account=_env("ACCOUNT"), user=_env("USER"), password=_env("PASSWORD"),
                                       warehouse=_env("WAREHOUSE"), role=_env("ROLE"), login_timeout=30)


@pytest.fixture
def live_destination() -> TestDestination:
    database, schema = _env("DATABASE"), _env("SCHEMA")
    connection = {"account": _env("ACCOUNT"), "user": _env("USER"), "password": f"${{{PREFIX}PASSWORD}}",
                  "database": database, "schema": schema, "warehouse": _env("WAREHOUSE")}
    if _env("ROLE"):
        connection["role"] = _env("ROLE")

    def read(model):
        names = [c.destination_name for c in model.columns]
        with _connect() as conn, conn.cursor() as cursor:
            cursor.execute(f'SELECT {", ".join(chr(34) + n + chr(34) for n in names)} '
                           f'FROM "{database}"."{schema}"."{model.model_name}" ORDER BY 1')
            return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]

    yield TestDestination("snowflake-live", "snowflake", {"vendor": "snowflake", "connection": connection}, read)
    with _connect() as conn, conn.cursor() as cursor:
        cursor.execute(f'DROP TABLE IF EXISTS "{database}"."{schema}"."{MODEL}"')
        cursor.execute(f'DELETE FROM "{database}"."{schema}"."_transfer_status" WHERE data_model_name = %s', (MODEL,))


def config_for(schema: str, destination: TestDestination):
    model = events_model(f"{schema}.events", min_start=day(3, 1))
    model["columns"] = [*model["columns"], MARKER]
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [destination.entry(DESTINATION, "rcpt")],
    }, now=day(6, 1))


def succeeds(spark, config, now, transfer_id: str) -> None:
    summary = transfer(spark, config, now, transfer_id)
    assert summary.status == "SUCCESS", summary.error


def test_a_backfill_an_update_and_a_soft_delete_arrive_in_snowflake(spark, pg_conn, source, live_destination) -> None:
    table = f'"{source}".events'
    with pg_conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} (id, organization_id, updated_at, payload) VALUES (%s, %s, %s, %s)",
                        [(k, TENANT, BASE + timedelta(minutes=k), f"v1-{k}") for k in range(1, 5)])
    config = config_for(source, live_destination)
    succeeds(spark, config, NOW1, "live-1")
    pg_conn.execute(f"UPDATE {table} SET payload = 'v2-1', updated_at = %s WHERE id = 1", (NOW1 + timedelta(minutes=1),))
    pg_conn.execute(f"UPDATE {table} SET is_deleted = true, updated_at = %s WHERE id = 2", (NOW1 + timedelta(minutes=2),))
    succeeds(spark, config, NOW2, "live-2")
    rows = live_destination.rows(config.model(MODEL))
    assert [(r["id"], r["payload"]) for r in rows] == [(1, "v2-1"), (3, "v1-3"), (4, "v1-4")]


@pytest.fixture
def source(pg_conn, pg_schema) -> str:
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint, organization_id text, '
                    "updated_at timestamptz, payload text, is_deleted boolean NOT NULL DEFAULT false)")
    return pg_schema
