"""A transfer into a DuckDB file killed with SIGKILL while it stages a window: the file is intact,
readable by another process, holding the rows and watermark of before; the dead transfer's staged
files are removed by the next transfer, which delivers the source's rows.

The transfer runs as the real command line in its own process group (its JVM a child); the test
waits until the window's staged Parquet files appear beside the database file, then kills the
group. The command line takes its "now" from the wall clock, so the rows are placed relative to it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform_tests.support.cli import TENANT, add_rows
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.destinations import duckdb_delivered, duckdb_watermark
from transfer_platform_tests.support.events import MODEL, create_events, source_rows
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.processes import transfer_killed_when
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

BATCH = 300_000  # rows of the window that is killed: a load long enough to catch
TIMEOUT_SECONDS = 600  # a failure bound (a JVM starts slowly on a loaded machine), not a wait


def test_a_transfer_killed_while_staging_leaves_the_file_intact_and_the_next_one_delivers(
        spark, pg_conn, pg_schema, tmp_path) -> None:
    now = datetime.now(UTC)
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=10, start=now - timedelta(days=4),
             span=timedelta(hours=1), payload="before-")
    database = tmp_path / "acme.duckdb"
    model = events_model(f"{pg_schema}.events", min_start=now - timedelta(days=5))
    del model["max_transfer_time_window_seconds"]  # one window: the whole batch staged at once
    config_path = tmp_path / "transfer_platform.yaml"
    config_path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "duckdb", "recipient": "rcpt",
                          "connection": {"path": str(database)}}],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }))
    config = load_config(config_path)
    first = now - timedelta(days=3)
    assert transfer(spark, config, first, "t1").status == "SUCCESS"
    before = duckdb_delivered(database)
    assert len(before) == 10
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1000, count=BATCH, start=now - timedelta(days=2),
             span=timedelta(days=1), payload="batch-")

    staging = tmp_path / "acme.duckdb.tp" / "staging" / MODEL
    transfer_killed_when(config_path, DESTINATION, tmp_path,  # killed once the window is being staged
                         lambda: list(staging.rglob("*.parquet")), timeout=TIMEOUT_SECONDS, poll=0.02)

    assert duckdb_delivered(database) == before  # another process opens the file: intact, as before
    assert duckdb_watermark(database) == first
    assert list(staging.rglob("*.parquet"))  # the dead transfer's staging, left behind

    assert transfer(spark, config, datetime.now(UTC), "after-crash").status == "SUCCESS"
    assert duckdb_delivered(database) == source_rows(pg_conn, pg_schema, TENANT)
    assert not list(staging.rglob("*.parquet"))
