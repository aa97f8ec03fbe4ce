"""A transfer into an SFTP folder killed with SIGKILL while it writes a window's file: what a
recipient reads over SFTP (paramiko, applying the manifests) is exactly the rows and watermark of
before (the file being written is a dot-name no manifest names, renamed into place only when
whole); the next transfer delivers the source's rows exactly, and removes the dead transfer's
half-written file.

The transfer runs as the real command line in its own process group; the test waits until the
window's file is being written (its dot-name appears in the chroot), then kills the group.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.destinations.manifests import new_signing_key
from transfer_platform_tests.support.cli import TENANT, add_rows
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import MODEL, create_events, normalize, source_rows
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.processes import transfer_killed_when
from transfer_platform_tests.support.sftp import SFTP_KEY_ENV, sftp_consumed, sftp_keys
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

BATCH = 60_000  # rows of the window that is killed (more than Tuning.run_rows: read alone, one file)
TIMEOUT_SECONDS = 600  # a failure bound (a JVM starts slowly on a loaded machine), not a wait


def delivered(server, root: str, model) -> list:
    rows = sftp_consumed(server, root, "acme", model) or []
    return normalize((r["id"], r["organization_id"], r["updated_at"], r["payload"]) for r in rows)


def visible(server, root: str) -> dict[str, bytes]:
    """What a recipient can see of the model: its manifests (rows and watermark), by key."""
    with server.sftp() as client:
        found = {}
        for key in sftp_keys(client, root, "acme/_manifests/"):
            with client.open(f"{root}/{key}", "rb") as file:
                found[key] = file.read()
        return found


def test_a_transfer_killed_while_writing_a_window_leaves_the_previous_rows_and_the_next_one_delivers(
        spark, pg_conn, pg_schema, tmp_path, sftp_server, monkeypatch) -> None:
    server = sftp_server
    now = datetime.now(UTC)
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=10, start=now - timedelta(days=4),
             span=timedelta(hours=1), payload="before-")
    root = server.folder()
    model = events_model(f"{pg_schema}.events", min_start=now - timedelta(days=5))
    del model["max_transfer_time_window_seconds"]  # one window: the whole batch in one file
    signing_key = new_signing_key()[0]
    monkeypatch.setenv(SFTP_KEY_ENV, server.private_key)
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", signing_key)
    config_path = tmp_path / "transfer_platform.yaml"
    config_path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "sftp", "recipient": "rcpt",
                          "signing_key": "${TP_TEST_SIGNING_KEY}",
                          "connection": server.connection(root, SFTP_KEY_ENV, prefix="acme")}],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }))
    config = load_config(config_path)
    events = config.model(MODEL)
    first = now - timedelta(days=3)
    assert transfer(spark, config, first, "t1").status == "SUCCESS"
    before, seen = delivered(server, root, events), visible(server, root)
    assert len(before) == 10
    (manifest,) = [json.loads(m) for m in seen.values()]
    assert manifest["transfer_id"] == "t1"
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1000, count=BATCH, start=now - timedelta(days=2),
             span=timedelta(days=1), payload="batch-")
    # ~1 kB of hex a row (tens of MB of Parquet, which compresses hex poorly): the window's file
    # takes long enough to upload that the test sees it being written, whatever the machine's speed
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = payload || repeat(md5(id::text), 30) '
                    "WHERE id >= 1000")

    data = server.chroot / root.lstrip("/") / "acme" / MODEL
    transfer_killed_when(config_path, DESTINATION, tmp_path,  # killed once the window's file is being written
                         lambda: list(data.rglob(".part-*.tmp")), timeout=TIMEOUT_SECONDS, poll=0.01)

    assert visible(server, root) == seen  # the manifests: rows and watermark as before, byte for byte
    assert delivered(server, root, events) == before
    assert list(data.rglob(".part-*.tmp"))  # the dead transfer's half-written file, left behind

    assert transfer(spark, config, datetime.now(UTC), "after-crash").status == "SUCCESS"
    assert delivered(server, root, events) == source_rows(pg_conn, pg_schema, TENANT)
    assert not list(data.rglob(".*.tmp"))
