"""A transfer into BigQuery (the emulator) killed with SIGKILL while a window is being staged: what
the recipient reads through google-cloud-bigquery is exactly the rows and watermark of before; the
next transfer takes over the dead one's lock row at once (its process is gone), drops its staging
table and delivers the source's rows exactly.

The transfer runs as the real command line in its own process group; the test waits until the
window's staging table appears in the dataset, then kills the group. The emulator lives on.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform_tests.support.bigquery import bigquery_rows, bigquery_watermark, new_dataset
from transfer_platform_tests.support.cli import TENANT, add_rows
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import MODEL, create_events, normalize, source_rows
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.processes import transfer_killed_when
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

BATCH = 2_000  # rows of the window that is killed (staged as soon as its table appears)
TIMEOUT_SECONDS = 600  # a failure bound (a JVM starts slowly on a loaded machine), not a wait
COLUMNS = [("id", "integer"), ("organization_id", "string"), ("updated_at", "timestamp"), ("payload", "string")]


def delivered(server, dataset: str) -> list:
    rows = bigquery_rows(server, dataset, MODEL, COLUMNS) or []
    return normalize((r["id"], r["organization_id"], r["updated_at"], r["payload"]) for r in rows)


def staging_tables(server, dataset: str) -> list[str]:
    client = server.client()
    try:
        return [t.table_id for t in client.list_tables(f"{server.project}.{dataset}") if t.table_id.startswith("_tp_stg_")]
    finally:
        client.close()


def test_a_transfer_killed_while_staging_leaves_the_dataset_as_before_and_the_next_one_delivers(
        spark, pg_conn, pg_schema, tmp_path, bigquery_server) -> None:
    now = datetime.now(UTC)
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=10, start=now - timedelta(days=4),
             span=timedelta(hours=1), payload="before-")
    dataset = new_dataset(bigquery_server)
    model = events_model(f"{pg_schema}.events", min_start=now - timedelta(days=5))
    del model["max_transfer_time_window_seconds"]  # one window: the whole batch staged at once
    config_path = tmp_path / "transfer_platform.yaml"
    config_path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "bigquery", "recipient": "rcpt",
                          "connection": {"project": bigquery_server.project, "dataset": dataset,
                                         "api_endpoint": bigquery_server.endpoint}}],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }))
    config = load_config(config_path)
    first = now - timedelta(days=3)
    assert transfer(spark, config, first, "t1").status == "SUCCESS"
    before = delivered(bigquery_server, dataset)
    assert len(before) == 10
    assert bigquery_watermark(bigquery_server, dataset, MODEL) == first
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1000, count=BATCH, start=now - timedelta(days=2),
             span=timedelta(days=1), payload="batch-")

    transfer_killed_when(config_path, DESTINATION, tmp_path,  # killed once the window is being staged
                         lambda: staging_tables(bigquery_server, dataset), timeout=TIMEOUT_SECONDS, poll=0.05)

    assert delivered(bigquery_server, dataset) == before  # the recipient reads exactly what it read
    assert bigquery_watermark(bigquery_server, dataset, MODEL) == first
    assert staging_tables(bigquery_server, dataset)  # the dead transfer's staging, left behind

    assert transfer(spark, config, datetime.now(UTC), "after-crash").status == "SUCCESS"
    assert delivered(bigquery_server, dataset) == source_rows(pg_conn, pg_schema, TENANT)
    assert bigquery_watermark(bigquery_server, dataset, MODEL) > first
    assert not staging_tables(bigquery_server, dataset)
