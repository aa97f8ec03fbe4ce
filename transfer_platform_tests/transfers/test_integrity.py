"""Integrity checks against real databases: PostgreSQL -> PostgreSQL and a Parquet lake -> Delta.

Times are fixed: the model starts on 2024-02-28, the data lies on 2024-03-01..03, the transfer
runs at ``NOW1`` (watermark ``NOW1``) and the checks at ``CHECK_NOW``. The horizon is where the
next transfer's read starts (the change-detection seed): the tenant's greatest delivered
last-modified value minus the lookback (30 s for PostgreSQL), not ``NOW1`` minus it. The tenant id holds a quote and a backslash; another
tenant's id is its prefix, so a broken tenant filter shows up in the counts.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.planning import ModelWindowing
from transfer_platform.core.watermarks import ModelState
from transfer_platform.errors import ConnectionFailure
from transfer_platform.transfers.integrity import (
    IntegrityReport,
    check_integrity,
    describe,
    integrity_horizon,
)
from transfer_platform_tests.support.config import DESTINATION, pg_config
from transfer_platform_tests.support.events import (
    MODEL,
    create_events,
    day,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.lake import lake_config
from transfer_platform_tests.support.transfers import transfer

MIN_START = day(2, 28)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
CHECK_NOW = NOW1 + timedelta(hours=1)
LOOKBACK_S = 30  # the postgres source's default
HORIZON = NOW1 - timedelta(seconds=LOOKBACK_S)  # of a tenant whose last row is at NOW1 or later
US = timedelta(microseconds=1)
TENANT = "o'reilly\\x"
OTHERS = ["o'reilly", "globex"]


def one_window(config: PlatformConfig) -> PlatformConfig:
    """The same configuration with an unwindowed model: a transfer is one read (faster tests)."""
    model = config.model(MODEL).model_copy(update={"max_transfer_time_window_seconds": None})
    return config.model_copy(update={"models": [model]})


def counts(report: IntegrityReport) -> dict[str, int]:
    return report.counts


def zero(rows_compared: int, **nonzero: int) -> dict[str, int]:
    expected = dict.fromkeys(("missing", "stale", "incorrect", "orphaned", "pending"), 0)
    return {"rows_compared": rows_compared, **expected, **nonzero}


# -- pure parts -------------------------------------------------------------------------------


EPOCH0 = datetime(1970, 1, 1, tzinfo=UTC)
LAST_ROW = day(3, 3) + timedelta(hours=22)


@pytest.mark.parametrize(
    ("start", "state", "lookback", "now", "expected"),
    [
        pytest.param(MIN_START, ModelState(), 30, NOW1, None, id="no-watermark-nothing-due"),
        pytest.param(MIN_START, ModelState(NOW1, LAST_ROW), 30, CHECK_NOW,
                     LAST_ROW - timedelta(seconds=30), id="last-delivered-row-minus-lookback"),
        pytest.param(MIN_START, ModelState(NOW1, NOW1 - US), 30, CHECK_NOW,
                     NOW1 - US - timedelta(seconds=30), id="busy-tenant"),
        pytest.param(MIN_START, ModelState(NOW1, None), 30, CHECK_NOW, MIN_START,
                     id="no-row-delivered-the-configured-start"),
        pytest.param(MIN_START, ModelState(NOW1, LAST_ROW), 0, CHECK_NOW, LAST_ROW, id="no-lookback"),
        pytest.param(EPOCH0, ModelState(EPOCH0, EPOCH0), 0, NOW1, EPOCH0, id="epoch-0-is-a-watermark"),
        pytest.param(MIN_START, ModelState(CHECK_NOW, CHECK_NOW), 30, NOW1, HORIZON,
                     id="capped-at-the-checks-now"),
    ],
)
def test_horizon(start, state, lookback, now, expected):
    windowing = ModelWindowing(configured_start=start, lookback_seconds=lookback, max_window_seconds=None)
    assert integrity_horizon(windowing, state, now) == expected


def _report(**counts_: int) -> IntegrityReport:
    return IntegrityReport(destination="dst", model="events", checked_at=CHECK_NOW, watermark=NOW1,
                           lookback_seconds=30, horizon=HORIZON, rows_compared=10, **counts_)


@pytest.mark.parametrize(
    ("counts_", "passed", "says"),
    [
        pytest.param({}, True, ["passed"], id="clean"),
        pytest.param({"pending": 3}, True, ["pending 3", "Not a failure"], id="pending-only"),
        pytest.param({"missing": 1}, False, ["missing 1", "raise lookback_window", "--full-refresh"],
                     id="missing"),
        pytest.param({"stale": 2}, False, ["stale 2", "raise lookback_window", "--full-refresh"],
                     id="stale"),
        pytest.param({"incorrect": 1}, False, ["incorrect 1", "something else writes", "--full-refresh"],
                     id="incorrect"),
        pytest.param({"orphaned": 4}, False, ["orphaned 4", "deletions", "--full-refresh"], id="orphaned"),
    ],
)
def test_report_passes_only_without_failures_and_says_the_fix(counts_, passed, says):
    report = _report(**counts_)
    assert report.passed is passed
    text = describe(report, "src")
    for words in says:
        assert words in text
    assert "transfer-platform transfer dst --model events --full-refresh" in text or passed


# -- PostgreSQL -> PostgreSQL -----------------------------------------------------------------


@pytest.fixture
def source(pg_conn, pg_schema) -> str:
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, *OTHERS], 15, DATA_DAYS, seed=3))
    return pg_schema


@pytest.mark.integration
def test_postgres_clean_then_pending_then_tampered(spark, pg_conn, source, dst_schema):
    config = one_window(pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT,
                                  min_start=MIN_START))
    model = config.model(MODEL)
    tenant_rows = source_rows(pg_conn, source, TENANT)
    n = len(tenant_rows)
    assert n == 15
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    # the next read starts at the greatest value delivered minus the lookback (the seeds' rule)
    horizon = max(r[2] for r in tenant_rows) - timedelta(seconds=LOOKBACK_S)

    clean = check_integrity(spark, config, DESTINATION, model, CHECK_NOW)
    assert clean.passed
    assert counts(clean) == zero(n)
    assert (clean.watermark, clean.horizon, clean.examples) == (NOW1, horizon, {})

    ids = sorted(r[0] for r in tenant_rows if r[2] < horizon)
    a, b, c, e, p1, p2 = ids[:6]
    src, dst = f'"{source}".events', f'"{dst_schema}".events'
    # not due yet: a change just now, one after the check's "now" (made while the check reads),
    # and a late commit stamped exactly at the horizon
    pg_conn.execute(f"UPDATE {src} SET updated_at = %s WHERE id = %s", (CHECK_NOW - US, p1))
    pg_conn.execute(f"UPDATE {src} SET updated_at = %s WHERE id = %s", (CHECK_NOW + US, p2))
    insert_rows(pg_conn, source, [(9001, TENANT, horizon, "late, inside the lookback")])
    # other tenants' rows (one an old late commit) are never counted
    insert_rows(pg_conn, source, [(9101, "o'reilly", day(3, 1), "x"), (9102, "O'REILLY\\x", day(3, 1), "y")])

    pending = check_integrity(spark, config, DESTINATION, model, CHECK_NOW)
    assert pending.passed
    assert counts(pending) == zero(n + 1, pending=3)
    assert pending.examples == {"pending": [f"id={p1}", f"id={p2}", "id=9001"]}

    pg_conn.execute(f"DELETE FROM {dst} WHERE id = %s", (a,))  # missing
    insert_rows(pg_conn, source, [(9002, TENANT, horizon - US, "late, beyond the lookback")])  # missing
    pg_conn.execute(f"UPDATE {dst} SET updated_at = updated_at - interval '1 hour' WHERE id = %s", (b,))
    pg_conn.execute(f"UPDATE {dst} SET updated_at = updated_at + interval '1 microsecond' WHERE id = %s", (c,))
    insert_rows(pg_conn, dst_schema, [(7777, TENANT, day(3, 2), "not in the source"),  # orphaned
                                      (7778, TENANT, horizon, "not in the source, recent")])  # pending
    pg_conn.execute(f"DELETE FROM {src} WHERE id = %s", (e,))  # orphaned
    f = ids[6]  # the same last-modified value, another payload (NULL included): incorrect
    pg_conn.execute(f"UPDATE {dst} SET payload = CASE WHEN payload IS NULL THEN 'x' END WHERE id = %s", (f,))

    tampered = check_integrity(spark, config, DESTINATION, model, CHECK_NOW)
    assert not tampered.passed
    assert counts(tampered) == zero(n + 1, missing=2, stale=1, incorrect=2, orphaned=2, pending=4)
    assert tampered.failures == 7
    assert tampered.examples == {
        "missing": [f"id={a}", "id=9002"], "stale": [f"id={b}"], "incorrect": [f"id={c}", f"id={f}"],
        "orphaned": [f"id={e}", "id=7777"], "pending": [f"id={p1}", f"id={p2}", "id=7778", "id=9001"]}
    text = describe(tampered, "src")
    assert "missing 2" in text
    assert "orphaned 2" in text


@pytest.mark.integration
def test_postgres_never_transferred_is_all_pending(spark, pg_conn, source, dst_schema):
    """No schema, table or status row yet: every row is pending (five of them as examples), and
    the check creates nothing."""
    config = pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)

    report = check_integrity(spark, config, DESTINATION, config.model(MODEL), CHECK_NOW)

    assert report.passed
    assert counts(report) == zero(15, pending=15)
    ids = sorted(r[0] for r in source_rows(pg_conn, source, TENANT))
    assert report.examples == {"pending": [f"id={k}" for k in ids[:5]]}
    assert (report.watermark, report.horizon) == (None, None)
    assert "every difference is pending" in describe(report, "src")
    exists = pg_conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (dst_schema,)).fetchone()
    assert exists is None


@pytest.mark.integration
def test_unreachable_destination_is_a_connection_failure(spark, pg_conn, source, dst_schema):
    config = pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT,
                       min_start=MIN_START, dst_port=1)
    with pytest.raises(ConnectionFailure, match=r"cannot reach PostgreSQL destination 'dst' at 127\.0\.0\.1:1"):
        check_integrity(spark, config, DESTINATION, config.model(MODEL), CHECK_NOW)


# -- Parquet lake -> Delta --------------------------------------------------------------------

LAKE_SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()),
                         ("updated_at", pa.timestamp("us", tz="UTC")), ("payload", pa.string())])
LAKE_LOOKBACK = timedelta(seconds=300)  # the parquet source's default


def write_lake(lake, rows: list) -> None:
    folder = lake / "events"
    for old in folder.glob("*.parquet"):
        old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([dict(zip(LAKE_SCHEMA.names, r, strict=True)) for r in rows],
                                 schema=LAKE_SCHEMA)
    pq.write_table(table, folder / f"part-{uuid.uuid4().hex}.parquet")


@pytest.mark.integration
def test_parquet_lake_to_delta(spark, tmp_path):
    lake, delta_root = tmp_path / "lake", tmp_path / "delta"
    config = one_window(lake_config(lake, delta_root, tenant=TENANT, min_start=MIN_START))
    model = config.model(MODEL)
    rows = make_rows([TENANT, *OTHERS], 10, DATA_DAYS, seed=4)
    write_lake(lake, rows)

    never = check_integrity(spark, config, DESTINATION, model, CHECK_NOW)
    assert counts(never) == zero(10, pending=10)
    assert not delta_root.exists()  # the check writes nothing

    assert transfer(spark, config, NOW1).status == "SUCCESS"
    clean = check_integrity(spark, config, DESTINATION, model, CHECK_NOW)
    assert clean.passed
    assert counts(clean) == zero(10)
    horizon = max(r[2] for r in rows if r[1] == TENANT) - LAKE_LOOKBACK
    assert clean.horizon == horizon

    ids = sorted(r[0] for r in rows if r[1] == TENANT and r[2] < horizon)
    a, b, e = ids[:3]
    table = DeltaTable(str(delta_root / MODEL))
    table.delete(f"id = {a}")
    DeltaTable(str(delta_root / MODEL)).update(
        predicate=f"id = {b}", updates={"updated_at": "'2024-03-01T00:00:00.000000Z'"})
    write_lake(lake, [r for r in rows if r[0] != e]
               + [(9001, TENANT, horizon, "late, inside the lookback")])

    tampered = check_integrity(spark, config, DESTINATION, model, CHECK_NOW)
    assert not tampered.passed
    assert counts(tampered) == zero(10, missing=1, stale=1, orphaned=1, pending=1)
    assert tampered.examples == {"missing": [f"id={a}"], "stale": [f"id={b}"],
                                 "orphaned": [f"id={e}"], "pending": ["id=9001"]}
