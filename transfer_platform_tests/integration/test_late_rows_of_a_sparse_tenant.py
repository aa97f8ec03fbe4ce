"""Where the next incremental read starts: the seeds' rule, on a sparse tenant, for every destination.

The expectations come from the reference documents (``../shared/seeds/``), not from our code:

- change detection: "After each transfer ... Prequel will record the most recent updated_at value
  that was transferred. This value will be used as the starting point for the subsequent
  transfer", and "Prequel will query the source for slightly earlier data than the most recently
  transferred row": ``WHERE lm >= to_timestamp(LastModifiedAtEpoch - INTERVAL lookback)``;
- the cursor spec: "the final stream state will be the datetime of the last record emitted. On the
  subsequent sync, the connector will fetch records whose cursor value begins on that datetime";
- ``delta_rows_transferred`` counts the rows "strictly newer than the current high watermark".

A sparse tenant: its last row is at ``LAST`` (with a fraction of a second); the first transfer runs
five minutes later. Then rows commit late (a transaction that stamped ``now()`` at its start):
exactly at ``LAST``, 20 s before it, at the lookback's edge (30 s before, inclusive), 0.6 s and
0.8 s after it, and one a microsecond beyond the lookback, which the reference does not promise to
deliver. Anchoring the read at the previous transfer's clock (``NOW1 - 30 s``, today's old rule)
loses all of them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.destinations import ONE_ROW_PER_KEY, events_rows
from transfer_platform_tests.support.events import (
    LOOKBACK,
    create_events,
    day,
    insert_rows,
    source_rows,
)
from transfer_platform_tests.support.postgres import (
    destination_rows,
    pg_connection_config,
    status_row,
)
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT = "o'sparse"
OTHER = "busy"
MIN_START = day(2, 28)
LAST = day(3, 1) + timedelta(hours=10, microseconds=400_000)  # 10:00:00.4: the tenant's last row
NOW1 = LAST + timedelta(minutes=5)
NOW2 = NOW1 + timedelta(minutes=1)
US = timedelta(microseconds=1)

EARLIER_ROWS = [(1, TENANT, day(3, 1) + timedelta(hours=3, microseconds=7), "early"),
                (2, TENANT, LAST, "last delivered"),
                (3, OTHER, NOW1 - timedelta(seconds=2), "another tenant, busy")]
LATE_ROWS = [
    (11, TENANT, LAST, "(a) exactly at the greatest delivered value"),
    (12, TENANT, LAST - timedelta(seconds=20), "(b) 20 s before it"),
    (13, TENANT, LAST - LOOKBACK, "at the lookback's edge (inclusive)"),
    (14, TENANT, LAST + timedelta(milliseconds=600), "(c) 0.6 s after it"),
    (15, TENANT, LAST + timedelta(milliseconds=800), "(c) 0.8 s after it"),
]
BEYOND = (16, TENANT, LAST - LOOKBACK - US, "beyond the lookback: the reference does not promise it")
OTHER_LATE = (17, OTHER, LAST, "another tenant's late row: never this recipient's")


def sparse_config(source_schema: str, destination: dict, *, window: int | None) -> PlatformConfig:
    model = events_model(f"{source_schema}.events", min_start=MIN_START)
    model["max_transfer_time_window_seconds"] = window
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", **destination}],
    }, now=day(6, 1))


def postgres_config(source_schema: str, dst_schema: str, *, window: int | None) -> PlatformConfig:
    return sparse_config(source_schema, {"vendor": "postgres", "connection": pg_connection_config(dst_schema)},
                         window=window)


def delta_config(source_schema: str, root, *, window: int | None) -> PlatformConfig:
    return sparse_config(source_schema, {"vendor": "delta", "connection": {"path": str(root)}}, window=window)


@pytest.mark.parametrize("window", [86_400, None], ids=["daily-windows", "unwindowed"])
@pytest.mark.parametrize("vendor", ONE_ROW_PER_KEY)
def test_late_commits_at_and_around_the_last_delivered_row_arrive_in_the_next_transfer(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, vendor, window):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, EARLIER_ROWS)
    if vendor == "postgres":
        config, where = postgres_config(pg_schema, dst_schema, window=window), dst_schema
    else:
        config, where = delta_config(pg_schema, tmp_path / "delta", window=window), tmp_path / "delta"

    first = transfer(spark, config, NOW1, "t1")
    assert first.status == "SUCCESS", first.error
    assert first.state.high_watermark == LAST
    assert first.state.watermark == NOW1

    insert_rows(pg_conn, pg_schema, [*LATE_ROWS, BEYOND, OTHER_LATE])  # all commit after t1
    second = transfer(spark, config, NOW2, "t2")
    assert second.status == "SUCCESS", second.error

    expected = [r for r in source_rows(pg_conn, pg_schema, TENANT) if r[0] != BEYOND[0]]
    delivered = events_rows(vendor, pg_conn, where)
    assert delivered == expected  # every late row inside the lookback, each once, nothing else
    assert len({r[0] for r in delivered}) == len(delivered)
    # read: [LAST - 30 s, NOW2): the last delivered row again and the five late ones
    assert second.rows_transferred == 6
    # newer than the previous high watermark (LAST): the 0.6 s and 0.8 s rows only
    assert second.delta_rows_transferred == 2
    assert second.state.high_watermark == LAST + timedelta(milliseconds=800)
    assert second.state.watermark == NOW2
    if vendor == "postgres":
        status = status_row(pg_conn, dst_schema)
        assert (status["watermark"], status["high_watermark"]) == (NOW2, LAST + timedelta(milliseconds=800))


def test_a_tenant_that_never_had_a_row_reads_a_late_one_from_the_configured_start(
        spark, pg_conn, pg_schema, dst_schema):
    """No row delivered, so no anchor: the cursor spec starts at ``start_datetime``. The late row
    (stamped the day before the first transfer) arrives; the empty windows finished before are
    not moved again (one read reaches back, windows go on from the watermark)."""
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [(3, OTHER, day(3, 1), "another tenant")])
    config = postgres_config(pg_schema, dst_schema, window=86_400)
    first = transfer(spark, config, NOW1, "t1")
    assert (first.status, first.windows, first.state.high_watermark) == ("SUCCESS", 3, None)  # 02-28, 02-29, 03-01

    insert_rows(pg_conn, pg_schema, [(21, TENANT, day(2, 28) + timedelta(hours=1), "late, day one")])
    second = transfer(spark, config, NOW2, "t2")
    assert second.status == "SUCCESS", second.error
    assert second.windows == 1  # the window holding the watermark, not the days before again
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert (second.rows_transferred, second.delta_rows_transferred) == (1, 1)
