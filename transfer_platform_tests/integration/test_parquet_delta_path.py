"""Parquet lake -> Delta Lake transfers end to end: backfill, incremental, tie-break, bad rows, with
the state read back from the Delta commit metadata; each test on a local folder and in an S3
bucket (a real S3-compatible server in its own process, through delta-rs's storage options)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.destinations.delta import read_state
from transfer_platform_tests.support import lake as support_lake
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.events import MODEL, day, make_rows
from transfer_platform_tests.support.lake import (
    delivered,
    tenant_rows,
    write_lake,
)
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

MIN_START = day(2, 28)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 5) + timedelta(hours=6)
TENANT = "org-o'reilly\\x"
LOOKBACK_ROW_AT = NOW1 - timedelta(seconds=100, microseconds=3)  # inside the 300 s parquet lookback


@pytest.fixture
def lake_config(tmp_path, delta_tables):
    connection, delta_root = delta_tables
    config = support_lake.lake_config(tmp_path / "lake", connection, tenant=TENANT, min_start=MIN_START)
    return config, tmp_path / "lake", delta_root


def test_parquet_lake_to_delta_backfill_then_incremental(spark, lake_config):
    config, lake, delta_root = lake_config
    rows = make_rows([TENANT, "org-o'reilly", "globex"], 30, DATA_DAYS, seed=8)
    rows.append((9001, TENANT, LOOKBACK_ROW_AT, "near now"))
    write_lake(lake, rows)
    expected = tenant_rows(rows, TENANT)

    first = transfer(spark, config, NOW1)

    assert first.status == "SUCCESS", first.error
    assert first.windows == 6
    assert delivered(delta_root) == expected
    assert (first.rows_transferred, first.delta_rows_transferred) == (31, 31)
    state = read_state(delta_root.table())
    assert state.watermark == NOW1
    assert state.high_watermark == LOOKBACK_ROW_AT

    ids = [r[0] for r in expected if r[0] < 9000]
    changes = {key: NOW1 + timedelta(hours=1, minutes=k, microseconds=k + 1) for k, key in enumerate(ids[:4])}
    rows = [(r[0], r[1], changes[r[0]], f"v2 {r[0]}") if r[0] in changes else r for r in rows]
    inserted = [(8001 + k, TENANT, day(3, 5) + timedelta(hours=2, microseconds=500_000 + k), f"new {k}")
                for k in range(2)]
    rows += inserted
    rows = [(r[0], r[1], NOW1 + timedelta(hours=3), "other v2") if r[1] == "globex" and r[0] % 5 == 0
            else r for r in rows]
    write_lake(lake, rows)

    second = transfer(spark, config, NOW2, transfer_id="t2")

    assert second.status == "SUCCESS", second.error
    assert second.windows == 2
    assert delivered(delta_root) == tenant_rows(rows, TENANT)
    # the row 100 s before NOW1 is re-read (300 s lookback) but is not new
    assert (second.rows_transferred, second.delta_rows_transferred) == (4 + 2 + 1, 4 + 2)
    state = read_state(delta_root.table())
    assert state.watermark == NOW2
    assert state.high_watermark == inserted[-1][2]

    # a transfer with nothing new still records its progress
    third = transfer(spark, config, NOW2 + timedelta(hours=1), transfer_id="t3")
    assert third.status == "SUCCESS", third.error
    assert read_state(delta_root.table()).watermark == NOW2 + timedelta(hours=1)
    assert delivered(delta_root) == tenant_rows(rows, TENANT)


def test_delta_keeps_the_newer_row_and_refuses_a_bad_batch(spark, lake_config):
    config, lake, delta_root = lake_config
    rows = make_rows([TENANT, "globex"], 10, DATA_DAYS, seed=9)
    write_lake(lake, rows)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    keep, tie = [r for r in tenant_rows(rows, TENANT)][:2]

    # the destination gets a newer version of `keep` and a same-time version of `tie` from elsewhere
    table = delta_root.table()
    dst_newer = NOW1 + timedelta(hours=5, microseconds=654321)
    tie_at = NOW1 + timedelta(hours=2, microseconds=5)
    table.update(predicate=f"id = {keep[0]}",
                 updates={"updated_at": f"'{dst_newer.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}'",
                          "payload": "'destination newer'"})
    table = delta_root.table()
    table.update(predicate=f"id = {tie[0]}",
                 updates={"updated_at": f"'{tie_at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}'",
                          "payload": "'destination, same time'"})
    source_older = NOW1 + timedelta(hours=1, microseconds=111111)
    rows = [(r[0], r[1], source_older, "source older") if r[0] == keep[0]
            else (r[0], r[1], tie_at, "source, same time") if r[0] == tie[0] else r for r in rows]
    write_lake(lake, rows)

    summary = transfer(spark, config, NOW2, transfer_id="t2")

    assert summary.status == "SUCCESS", summary.error
    got = {r[0]: r for r in delivered(delta_root)}
    assert got[keep[0]][2:] == (dst_newer, "destination newer")
    assert got[tie[0]][2:] == (tie_at, "source, same time")

    # two versions of a key with the same last-modified value in a batch: refused, nothing committed
    version = delta_root.table().version()
    before = delivered(delta_root)
    rows += [(tie[0], TENANT, NOW2 + timedelta(minutes=10), "dup a"),
             (tie[0], TENANT, NOW2 + timedelta(minutes=10), "dup b")]
    write_lake(lake, rows)

    failed = transfer(spark, config, NOW2 + timedelta(hours=1), transfer_id="t3")

    assert failed.status == "ERROR"
    assert f"model '{MODEL}'" in failed.error
    assert f"destination '{DESTINATION}'" in failed.error
    assert f"two different versions of key id={tie[0]}" in failed.error
    assert delta_root.table().version() == version
    assert delivered(delta_root) == before
    assert read_state(delta_root.table()).watermark == NOW2


def test_delta_refuses_a_null_primary_key(spark, lake_config):
    """A NULL key never matches in the MERGE: accepted, every re-read would add another copy."""
    config, lake, delta_root = lake_config
    rows = make_rows([TENANT, "globex"], 6, DATA_DAYS, seed=10)
    write_lake(lake, rows)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    version = delta_root.table().version()
    write_lake(lake, [*rows, (None, TENANT, NOW1 + timedelta(minutes=5), "no key")])

    for attempt in ("t2", "t3"):
        failed = transfer(spark, config, NOW2, transfer_id=attempt)

        assert failed.status == "ERROR"
        assert failed.error_type == "DataError"
        assert "NULL primary key value (id)" in failed.error
        assert f"model '{MODEL}'" in failed.error
        assert delta_root.table().version() == version
        assert delivered(delta_root) == tenant_rows(rows, TENANT)
        assert read_state(delta_root.table()).watermark == NOW1
