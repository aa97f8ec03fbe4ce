"""A transfer into Snowflake (the emulator, in its own process) killed with SIGKILL while a window
is being written: what a recipient reads through snowflake.connector is exactly the rows and
watermark of before; the dead transfer's lock is taken over once its lease runs out, its staging
table dropped, and the next transfer delivers the source's rows.

The transfer runs as the real command line in its own process group (its JVM a child); the test
waits until the window's staging table appears in the schema, then kills the group. The command
line takes its "now" from the wall clock, so the rows are placed relative to it.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform_tests.support.cli import TENANT, add_rows
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import MODEL, create_events, source_rows
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.processes import transfer_killed_when
from transfer_platform_tests.support.snowflake import (
    PASSWORD_ENV,
    snowflake_rows,
    staging_tables,
    watermark,
)
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

BATCH = 20_000  # rows of the window that is killed (its staging lasts long enough to be seen)
TIMEOUT_SECONDS = 600  # a failure bound (a JVM starts slowly on a loaded machine), not a wait
LEASE_SECONDS = 3  # the dead transfer's hold on the model: the next one takes it over after this


def rows(server, database: str, config) -> list[tuple]:
    found = snowflake_rows(server, database, "acme", config.model(MODEL)) or []
    return sorted((r["id"], r["organization_id"], r["updated_at"], r["payload"]) for r in found)


def test_a_transfer_killed_while_writing_a_window_leaves_the_previous_rows_and_the_next_one_delivers(
        spark, pg_conn, pg_schema, tmp_path, snowflake_server, monkeypatch) -> None:
    now = datetime.now(UTC)
    database = f"TP_{uuid.uuid4().hex[:10].upper()}"
    snowflake_server.create_schema(database, "acme")
    monkeypatch.setenv(PASSWORD_ENV, "snow")
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=10, start=now - timedelta(days=4),
             span=timedelta(hours=1), payload="before-")
    model = events_model(f"{pg_schema}.events", min_start=now - timedelta(days=5))
    del model["max_transfer_time_window_seconds"]  # one window: the whole batch staged at once
    config_path = tmp_path / "transfer_platform.yaml"
    config_path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "snowflake", "recipient": "rcpt",
                          "lock_lease_seconds": LEASE_SECONDS,
                          "connection": snowflake_server.connection(database, "acme", PASSWORD_ENV)}],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }))
    config = load_config(config_path)
    first = now - timedelta(days=3)
    assert transfer(spark, config, first, "t1").status == "SUCCESS"
    before = rows(snowflake_server, database, config)
    assert len(before) == 10
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1000, count=BATCH, start=now - timedelta(days=2),
             span=timedelta(days=1), payload="batch-")

    with snowflake_server.connect() as watching:  # one session, polled: a login per poll could miss the window
        transfer_killed_when(config_path, DESTINATION, tmp_path,  # killed once the window is being written
                             lambda: staging_tables(snowflake_server, database, "acme", watching),
                             timeout=TIMEOUT_SECONDS, poll=0.01)

    assert rows(snowflake_server, database, config) == before  # a recipient's read: as before
    assert watermark(snowflake_server, database, "acme", MODEL) == first
    assert staging_tables(snowflake_server, database, "acme")  # the dead transfer's staging, left behind

    assert transfer(spark, config, datetime.now(UTC), "after-crash").status == "SUCCESS"  # takes the lock over
    delivered = rows(snowflake_server, database, config)
    assert delivered == source_rows(pg_conn, pg_schema, TENANT)
    assert not staging_tables(snowflake_server, database, "acme")
