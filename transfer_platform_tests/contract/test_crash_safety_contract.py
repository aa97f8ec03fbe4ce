"""Crash safety, whatever the vendor: a transfer killed with SIGKILL while it writes a window
changes nothing a recipient can see, and the next transfer delivers.

Every destination vendor of the registry that keeps a model's state beside its rows (its record
declares a ``state_store``: a status row, a table comment, a manifest) is in it; how to see its
window being written from outside, and what a dead transfer leaves there, is its harness in
``support/harnesses.py`` (``CRASH``): a vendor without one fails here.

The transfer runs as the real command line (``python -m transfer_platform.cli transfer``) in its own
process group (its JVM a child), its "now" the wall clock; the test watches the destination from
outside and kills the whole group once the window is being written (a staging table holds rows,
a staged or data file appears, a clone of the table exists). Then, read through the vendor's own
client as the recipient reads it:

- the rows are exactly the tenant's source rows before the committed watermark: those the first
  transfer delivered, and, where the killed transfer moved daily windows, those of the windows it
  committed before the kill; none of the window being written; the watermark did not move past it
  (with one window: rows and watermark exactly as before);
- the dead transfer left something behind (its staging, its files no manifest names);
- the next transfer removes it and delivers every source row of the tenant, another tenant's never.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.vendors import DESTINATIONS
from transfer_platform_tests.support.cli import TENANT, add_rows
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.destinations import Place, TestDestination
from transfer_platform_tests.support.events import MODEL, create_events, normalize, source_rows
from transfer_platform_tests.support.harnesses import (
    CRASH,
    KILL_TIMEOUT_SECONDS,
    TRANSFER_SCRIPT,
    CrashHarness,
    made,
    missing,
    run_python,
)
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.processes import transfer_killed_when
from transfer_platform_tests.support.transfers import transfer

OTHER = "globex"
DAY = timedelta(days=1)

#: the vendors whose window commits its rows and the model's state together (the registry's)
VENDORS = [name for name, record in DESTINATIONS.items() if record.state_store is not None]


def test_every_vendor_that_keeps_its_state_has_a_crash_harness() -> None:
    assert missing(CRASH, VENDORS) == [], "add its harness to transfer_platform_tests/support/harnesses.py (CRASH)"


def delivered(destination: TestDestination, config) -> list:
    rows = destination.rows(config.model(MODEL)) or []
    return normalize((r["id"], r["organization_id"], r["updated_at"], r["payload"]) for r in rows)


def run(harness: CrashHarness, spark, config_path, now: datetime, transfer_id: str) -> None:
    """A transfer at ``now``: in this process, or in one of its own."""
    if harness.own_process:
        run_python(TRANSFER_SCRIPT, str(config_path), now.isoformat(), transfer_id, cwd=config_path.parent)
        return
    summary = transfer(spark, load_config(config_path), now, transfer_id)
    assert summary.status == "SUCCESS", summary.error


@pytest.mark.integration
@pytest.mark.parametrize("vendor", VENDORS)
def test_a_transfer_killed_while_writing_a_window_changes_nothing_visible_and_the_next_one_delivers(
        vendor, request, spark, pg_conn, pg_schema, new_schema, tmp_path, monkeypatch) -> None:
    assert vendor in CRASH, f"{vendor} keeps its state but has no crash harness (support/harnesses.py CRASH)"
    harness = CRASH[vendor]
    now = datetime.now(UTC).replace(microsecond=0)
    first = now - 3 * DAY
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=10, start=now - 4 * DAY, span=timedelta(hours=1),
             payload="before-")
    model = events_model(f"{pg_schema}.events", min_start=now - 5 * DAY)  # daily windows
    if not harness.daily_windows:
        del model["max_transfer_time_window_seconds"]  # one window: the whole batch at once

    for attempt in range(harness.attempts):  # each into a new destination
        folder = tmp_path / f"attempt_{attempt}"
        folder.mkdir()
        place = Place(new_schema(), folder / "destination", lambda: request.getfixturevalue("s3"),
                      lambda: request.getfixturevalue("azure_blob"), request.getfixturevalue)
        destination = made(harness.make, place, monkeypatch)
        config_path = folder / "transfer_platform.yaml"
        config_path.write_text(yaml.safe_dump({
            "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
            "models": [model],
            "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
            "destinations": [{**destination.entry(DESTINATION, "rcpt"), **harness.settings}],
            "spark": {"master": "local[2]", "driver_memory": "1g"},
        }))
        config = load_config(config_path)
        run(harness, spark, config_path, first, "t1")
        before = delivered(destination, config)
        assert len(before) == 10
        assert harness.watermark(destination, config) == first
        if attempt == 0:  # the batch: the tenant's rows of a day, and another tenant's
            add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1000, count=harness.batch, start=now - 2 * DAY,
                     span=DAY, payload="batch-")
            add_rows(pg_conn, pg_schema, tenant=OTHER, first_id=20_000_000, count=1000, start=now - 2 * DAY,
                     span=DAY, payload="other-")
            if harness.wide_rows:  # ~1 kB of hex a row: a file long enough to write to be seen being written
                pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = payload || repeat(md5(id::text), 30) '
                                "WHERE id >= 1000")

        caught = harness.in_flight(destination)
        transfer_killed_when(config_path, DESTINATION, folder, caught, timeout=KILL_TIMEOUT_SECONDS, poll=harness.poll)
        for close in destination.details.pop("closing", []):
            close()

        committed = harness.watermark(destination, config)
        held = delivered(destination, config)
        assert committed is not None
        assert first <= committed < now - DAY  # the batch's last rows were not delivered
        assert held == [r for r in source_rows(pg_conn, pg_schema, TENANT) if r[2] < committed]  # exact
        assert set(before) <= set(held)
        if not harness.daily_windows:
            assert (held, committed) == (before, first)  # one window: nothing of it
        left = harness.leftovers(destination)
        if left:  # the dead transfer's staging or files, left behind
            break
        assert attempt + 1 < harness.attempts, "the dead transfer left nothing: it was killed after its window"

    run(harness, spark, config_path, datetime.now(UTC), "after-crash")
    assert delivered(destination, config) == source_rows(pg_conn, pg_schema, TENANT)
    assert harness.watermark(destination, config) > committed
    assert harness.leftovers(destination) == [], "the next transfer did not remove what the dead one left"
