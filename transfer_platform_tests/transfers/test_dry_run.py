"""Dry runs against real destinations: the plan (windows, read bounds, row counts) and proof that
nothing changed: PostgreSQL -> PostgreSQL (catalog, every row and its xmin) and a Parquet lake ->
Delta (every path, size and mtime under the destination's folder). The counts are compared, window
by window, with what the real transfer at the same "now" then reads.

Times are fixed: the model starts on 2024-02-28, the data lies on 2024-03-01..03 (00:00-22:59, so
no row falls into the 30 s lookback before a midnight), the first transfer runs at ``NOW1`` and
the planned one at ``NOW2``. The tenant id holds a quote and a backslash; another tenant's id is
its prefix, so a broken tenant filter shows up in the counts.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import staging_suffix, writer_for
from transfer_platform.destinations.postgres import STAGING_PREFIX, PostgresWriter
from transfer_platform.transfers.dry_run import ModelPlan, plan_as_dict, plan_transfer
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform_tests.support.config import DESTINATION, pg_config
from transfer_platform_tests.support.events import (
    COLUMNS,
    LOOKBACK,
    MODEL,
    create_events,
    day,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.files import tree
from transfer_platform_tests.support.lake import lake_config
from transfer_platform_tests.support.postgres import schema_exists

pytestmark = pytest.mark.integration

MIN_START = day(2, 28)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 6) + timedelta(hours=6)
NOW3 = day(3, 6) + timedelta(hours=18)
TENANT = "o'reilly\\x"
OTHERS = ["o'reilly", "globex"]
TS = pa.timestamp("us", tz="UTC")


def plan_of(spark, config: PlatformConfig, now: datetime, **options) -> ModelPlan:
    (plan,) = plan_transfer(spark, config, DESTINATION, config.models, now, **options)
    assert plan.status == "PLANNED", plan.error
    return plan


def planned_reads(plan: ModelPlan) -> list[tuple]:
    return [(w.partition, w.read_from, w.read_until, w.rows) for w in plan.windows]


def real_reads(spark, config: PlatformConfig, now: datetime, transfer_id: str) -> list[tuple]:
    """Transfer for real; each committed read's partition, bounds and rows_transferred."""
    reads: list[tuple] = []
    writer = writer_for(config.destination(DESTINATION))
    try:
        (summary,) = run_transfer(
            TransferRequest(spark=spark, config=config, order=TransferOrder(destination=DESTINATION),
                            writer=writer, transfer_id=transfer_id, now=now),
            config.models,
            on_window=lambda _model, o: reads.append((o.partition_key, o.planned.bounds.lower,
                                                      o.planned.bounds.upper, o.result.rows_transferred)))
    finally:
        writer.close()
    assert summary.status == "SUCCESS", summary.error
    return reads


def in_bounds(rows: list, plan: ModelPlan) -> list[int]:
    """Per planned window, the rows of ``rows`` whose last-modified value lies in its read bounds."""
    return [sum(1 for r in rows if w.read_from <= r[2] < w.read_until) for w in plan.windows]


# -- PostgreSQL -> PostgreSQL -------------------------------------------------------------------


@pytest.fixture
def source(pg_conn, pg_schema) -> str:
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, *OTHERS], 15, DATA_DAYS, seed=5))
    return pg_schema


def pg_snapshot(conn: psycopg.Connection, schema: str) -> dict:
    """Everything a dry run could have touched in ``schema``: its relations (tables, indexes,
    sequences, with their storage file), and every row of the model and status tables with the
    transaction that wrote it (an UPDATE to the same values changes it) and the one that last
    locked it (``SELECT ... FOR UPDATE`` leaves its mark)."""
    relations = conn.execute(
        "SELECT relname, relkind, relfilenode FROM pg_class WHERE relnamespace = "
        "(SELECT oid FROM pg_namespace WHERE nspname = %s) ORDER BY relname", (schema,)).fetchall()
    snapshot = {"schema": schema_exists(conn, schema), "relations": relations}
    for table, key in ((MODEL, "id"), ("_transfer_status", "data_model_name")):
        if any(r[0] == table for r in relations):
            snapshot[table] = conn.execute(
                f'SELECT xmin::text, xmax::text, t::text FROM "{schema}"."{table}" t ORDER BY {key}').fetchall()
    return snapshot


def leave_dead_staging(conn: psycopg.Connection, schema: str) -> None:
    """A staging table as a killed transfer leaves it: the next transfer drops it, a dry run not."""
    name = STAGING_PREFIX + staging_suffix(MODEL, "deadtransfer")
    conn.execute(f'CREATE UNLOGGED TABLE "{schema}"."{name}" AS SELECT * FROM "{schema}"."{MODEL}" WITH NO DATA')


def test_postgres_never_transferred_creates_nothing(spark, pg_conn, source, dst_schema) -> None:
    config = pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    tenant_rows = source_rows(pg_conn, source, TENANT)

    plan = plan_of(spark, config, NOW1)

    assert not schema_exists(pg_conn, dst_schema)  # no schema, so no table, staging or status
    assert (plan.kind, plan.watermark, plan.most_recent_last_updated_at) == ("incremental", None, None)
    assert plan.read_from == MIN_START
    assert [w.partition for w in plan.windows] == ["2024-02-28", "2024-02-29", "2024-03-01",
                                                   "2024-03-02", "2024-03-03", "2024-03-04"]
    assert plan.windows[-1].read_until == NOW1  # the window in progress, up to "now"
    assert [w.rows for w in plan.windows] == in_bounds(tenant_rows, plan)
    assert plan.rows == len(tenant_rows) == 15

    # the schema exists but nothing was ever transferred into it: still nothing created
    pg_conn.execute(f'CREATE SCHEMA "{dst_schema}"')
    before = pg_snapshot(pg_conn, dst_schema)
    assert plan_of(spark, config, NOW1).rows == 15
    assert pg_snapshot(pg_conn, dst_schema) == before == {"schema": True, "relations": []}


def test_postgres_dry_run_changes_nothing_and_counts_what_the_transfer_reads(
        spark, pg_conn, source, dst_schema) -> None:
    config = pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    assert real_reads(spark, config, NOW1, "first")
    delivered = source_rows(pg_conn, source, TENANT)
    last_delivered = max(r[2] for r in delivered)
    old = delivered[0][0]
    insert_rows(pg_conn, source, [
        (9001, TENANT, last_delivered + timedelta(seconds=1), "a late commit, before the watermark"),
        (9002, TENANT, NOW1 + timedelta(hours=1), "new"),
        (9003, TENANT, day(3, 5) + timedelta(hours=3), "new, a day later"),
        (9004, "o'reilly", NOW1 + timedelta(hours=2), "another tenant's"),
    ])
    pg_conn.execute(f'UPDATE "{source}".events SET updated_at = %s WHERE id = %s',
                    (day(3, 6) + timedelta(hours=1), old))
    leave_dead_staging(pg_conn, dst_schema)
    before = pg_snapshot(pg_conn, dst_schema)
    assert before["_transfer_status"]
    assert len(before[MODEL]) == 15

    plan = plan_of(spark, config, NOW2)
    refresh = plan_of(spark, config, NOW2, full_refresh=True)
    explicit = plan_of(spark, config, NOW2, start=day(3, 2), end=day(3, 3))

    assert pg_snapshot(pg_conn, dst_schema) == before
    assert (plan.kind, plan.watermark, plan.most_recent_last_updated_at) == ("incremental", NOW1, last_delivered)
    assert plan.read_from == last_delivered - LOOKBACK  # the greatest delivered value minus the lookback
    assert [w.partition for w in plan.windows] == ["2024-03-04", "2024-03-05", "2024-03-06"]
    # the last delivered row again (lookback), the late commit and 9002; 9003; the updated row
    assert [w.rows for w in plan.windows] == [3, 1, 1]

    assert refresh.kind == "full_refresh"
    assert refresh.refresh_watermark is None
    assert refresh.read_from == MIN_START
    assert refresh.watermark == NOW1
    assert refresh.rows == len(source_rows(pg_conn, source, TENANT)) == 18
    assert [w.partition for w in explicit.windows] == ["2024-03-02"]
    assert explicit.windows[0].read_from == day(3, 2) - LOOKBACK

    as_text = str(plan_as_dict(DESTINATION, NOW2, [plan, refresh, explicit]))
    assert "password" not in as_text

    assert real_reads(spark, config, NOW2, "second") == planned_reads(plan)


def test_postgres_committed_state_reads_an_unfinished_refresh(spark, pg_conn, source, dst_schema) -> None:
    config = pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    model = config.model(MODEL)
    writer = PostgresWriter(config.destination(DESTINATION))
    try:
        assert writer.committed_state(model).state == ModelState()  # no schema yet
        real_reads(spark, config, NOW1, "first")
        writer.prepare(model, "refresh", full_refresh=True)  # a refresh begun, no window moved yet
        leave_dead_staging(pg_conn, dst_schema)
        before = pg_snapshot(pg_conn, dst_schema)
        committed = writer.committed_state(model)
    finally:
        writer.close()
    assert committed.state.watermark == NOW1
    assert committed.refresh == ModelState(high_watermark=committed.state.high_watermark)
    plan = plan_of(spark, config, NOW2)  # carried on, whatever kind was asked for
    assert pg_snapshot(pg_conn, dst_schema) == before
    assert (plan.kind, plan.read_from, plan.watermark) == ("full_refresh", MIN_START, NOW1)
    assert real_reads(spark, config, NOW2, "carry-on") == planned_reads(plan)


# -- Parquet lake -> Delta ----------------------------------------------------------------------


def write_lake_file(lake: Path, name: str, rows: list) -> None:
    folder = lake / "events"
    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS),
                        ("payload", pa.string())])
    pq.write_table(pa.Table.from_pylist([dict(zip(COLUMNS, r, strict=True)) for r in rows], schema=schema),
                   folder / name)


def test_delta_dry_run_changes_no_file_and_counts_what_the_transfer_reads(spark, tmp_path: Path) -> None:
    lake, dest = tmp_path / "lake", tmp_path / "dest"
    rows = make_rows([TENANT, *OTHERS], 15, DATA_DAYS, seed=8)
    write_lake_file(lake, "part-0.parquet", rows)
    config = lake_config(lake, dest, tenant=TENANT, min_start=MIN_START)
    config = config.model_copy(update={"sources": [config.source("src").model_copy(
        update={"lookback_window": 30})]})  # as PostgreSQL's: no row lies in it but those placed there
    tenant_rows = [r for r in rows if r[1] == TENANT]

    # never transferred: the destination's folder is not even created
    first = plan_of(spark, config, NOW1)
    assert tree(dest) is None
    assert [w.rows for w in first.windows] == in_bounds(tenant_rows, first)
    assert first.rows == 15
    assert real_reads(spark, config, NOW1, "first") == planned_reads(first)

    last_delivered = max(r[2] for r in tenant_rows)
    write_lake_file(lake, "part-1.parquet", [
        (9001, TENANT, last_delivered + timedelta(seconds=1), "a late commit"),
        (9002, TENANT, NOW1 + timedelta(hours=1), "new"),
        (9003, OTHERS[0], NOW1 + timedelta(hours=1), "another tenant's"),
    ])
    before = tree(dest)
    assert before is not None
    assert any("_delta_log" in p for p in before)

    plan = plan_of(spark, config, NOW2)
    refresh = plan_of(spark, config, NOW2, full_refresh=True)

    assert tree(dest) == before
    assert (plan.kind, plan.watermark, plan.read_from) == ("incremental", NOW1, last_delivered - LOOKBACK)
    assert [w.rows for w in plan.windows] == [3, 0, 0]  # the last delivered row, the late one, 9002
    assert refresh.kind == "full_refresh"
    assert refresh.rows == 17
    assert real_reads(spark, config, NOW2, "second") == planned_reads(plan)

    # an unfinished full refresh (begun, nothing moved): planned from the configured start
    writer = writer_for(config.destination(DESTINATION))
    writer.prepare(config.model(MODEL), "refresh", full_refresh=True)
    writer.close()  # the refresh is left unfinished; its lock goes with the writer
    before = tree(dest)
    assert any(p.startswith("_refresh") for p in before)
    carry_on = plan_of(spark, config, NOW3)
    assert tree(dest) == before
    assert (carry_on.kind, carry_on.read_from, carry_on.refresh_watermark) == ("full_refresh", MIN_START, None)
    assert real_reads(spark, config, NOW3, "carry-on") == planned_reads(carry_on)
