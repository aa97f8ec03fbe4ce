"""A transfer into a GCS bucket (fake-gcs-server) killed with SIGKILL while a large window's files
are being written by Spark's executors (pyarrow's GcsFileSystem): a consumer applying the
manifests through google-cloud-storage reads exactly the rows and watermark of before; the next
transfer deletes the dead one's files and delivers the source's rows exactly.

The transfer runs as the real command line in its own process group (its JVM a child); the test
waits until the window's first data file appears in the bucket, then kills the group.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.destinations.manifests import new_signing_key
from transfer_platform_tests.support.cli import TENANT, add_rows
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.destinations import _consumed
from transfer_platform_tests.support.events import MODEL, create_events, normalize, source_rows
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.processes import transfer_killed_when
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

BATCH = 60_000  # rows of the window that is killed (read alone: over Tuning.run_rows), written long enough to catch
TIMEOUT_SECONDS = 600  # a failure bound (a JVM starts slowly on a loaded machine), not a wait
PREFIX = "acme"


def test_a_transfer_killed_while_writing_a_window_leaves_the_previous_rows_and_the_next_one_delivers(
        spark, pg_conn, pg_schema, tmp_path, gcs_server, monkeypatch) -> None:
    now = datetime.now(UTC)
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=10, start=now - timedelta(days=4),
             span=timedelta(hours=1), payload="before-")
    bucket = f"crash-{os.getpid()}-{int(time.time())}"
    gcs_server.create_bucket(bucket)
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", new_signing_key()[0])
    model = events_model(f"{pg_schema}.events", min_start=now - timedelta(days=5))
    del model["max_transfer_time_window_seconds"]  # one window: the whole batch at once
    config_path = tmp_path / "transfer_platform.yaml"
    config_path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "gcs", "recipient": "rcpt",
                          "connection": {"bucket": bucket, "prefix": PREFIX, "endpoint_url": gcs_server.endpoint},
                          "signing_key": "${TP_TEST_SIGNING_KEY}"}],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }))
    config = load_config(config_path)
    client = gcs_server.client()

    def keys(start: str) -> list[str]:
        return sorted(b.name for b in client.list_blobs(bucket, prefix=start))

    def get(key: str) -> bytes:
        return client.bucket(bucket).blob(key).download_as_bytes()

    def consumed() -> list:  # what a consumer applying the manifests holds, by google-cloud-storage
        rows = _consumed(config.model(MODEL), keys, get, PREFIX) or []
        return normalize((r["id"], r["organization_id"], r["updated_at"], r["payload"]) for r in rows)

    def watermark() -> str:  # the last manifest's state, as a consumer reads it
        manifests = [json.loads(get(k)) for k in keys(f"{PREFIX}/_manifests/{MODEL}/")]
        return max(manifests, key=lambda m: m["sequence"])["transfer_platform_state"]

    first = now - timedelta(days=3)
    assert transfer(spark, config, first, "t1").status == "SUCCESS"
    before, before_watermark = consumed(), watermark()
    assert len(before) == 10
    files_before = set(keys(f"{PREFIX}/{MODEL}/"))
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1000, count=BATCH, start=now - timedelta(days=2),
             span=timedelta(days=1), payload="batch-")

    transfer_killed_when(config_path, DESTINATION, tmp_path,  # killed once the window's files are being written
                         lambda: set(keys(f"{PREFIX}/{MODEL}/")) - files_before, timeout=TIMEOUT_SECONDS, poll=0.02)

    left = set(keys(f"{PREFIX}/{MODEL}/")) - files_before
    assert left, "the dead transfer's files, left behind (no manifest names them)"
    assert consumed() == before
    assert watermark() == before_watermark

    assert transfer(spark, config, datetime.now(UTC), "after-crash").status == "SUCCESS"
    assert consumed() == source_rows(pg_conn, pg_schema, TENANT)
    assert not left & set(keys(f"{PREFIX}/{MODEL}/")), "the dead transfer's files were not deleted"
