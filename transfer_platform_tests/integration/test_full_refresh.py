"""Full refresh: built aside and swapped in, so the recipient never sees an empty or half-built
table; the table is reused when its columns match the model and replaced when they do not; an
unfinished refresh is carried on by the next transfer. PostgreSQL and Delta destinations.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.delta import REFRESH_DIR, read_state
from transfer_platform.destinations.postgres import REFRESH_PREFIX
from transfer_platform.errors import DataError
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import WindowOutcome
from transfer_platform.transfers.runner import TransferRequest, transfer_model
from transfer_platform_tests.support.config import DESTINATION, pg_config, with_columns
from transfer_platform_tests.support.events import (
    MODEL,
    create_events,
    day,
    insert_rows,
    make_rows,
    normalize,
    source_rows,
)
from transfer_platform_tests.support.lake import delivered, lake_config, write_lake
from transfer_platform_tests.support.postgres import destination_rows, status_row, tables_in
from transfer_platform_tests.support.transfers import refresh_step_by_step, transfer

pytestmark = pytest.mark.integration

MIN_START = day(2, 28)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 5) + timedelta(hours=6)
TENANT = "acme"


# -- PostgreSQL -------------------------------------------------------------------------------


@pytest.fixture
def backfilled(spark, pg_conn, pg_schema, dst_schema):
    """Source events of three tenants, delivered to ``dst_schema`` by a backfill at NOW1."""
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex", "initech"], 30, DATA_DAYS, seed=21))
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    return config


def table_oid(conn, schema: str, table: str = MODEL) -> int | None:
    return conn.execute("SELECT to_regclass(%s)::oid", (f'"{schema}"."{table}"',)).fetchone()[0]


def test_postgres_refresh_is_built_aside_and_swapped_into_the_same_table(
        spark, pg_conn, pg_schema, dst_schema, backfilled):
    before = destination_rows(pg_conn, dst_schema)
    watermark_before = status_row(pg_conn, dst_schema)["watermark"]
    oid = table_oid(pg_conn, dst_schema)
    pg_conn.execute(f'CREATE VIEW "{dst_schema}".recent AS SELECT id FROM "{dst_schema}"."{MODEL}"')
    # a delete in the source: only a full refresh can take it away from the destination
    deleted = source_rows(pg_conn, pg_schema, TENANT)[0][0]
    pg_conn.execute(f'DELETE FROM "{pg_schema}".events WHERE id = %s', (deleted,))
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = %s, updated_at = %s '
                    "WHERE organization_id = %s AND id %% 4 = 0", ("refreshed", NOW1 + timedelta(hours=1), TENANT))

    seen = []

    def look():
        seen.append((destination_rows(pg_conn, dst_schema), status_row(pg_conn, dst_schema)["watermark"],
                     [t for t in tables_in(pg_conn, dst_schema) if t.startswith(REFRESH_PREFIX)]))

    items = refresh_step_by_step(spark, backfilled, NOW2, look)

    assert len(seen) == 7  # Feb 28 .. Mar 5, one window each
    for rows, watermark, aside in seen:  # while the refresh runs, readers see the old table whole
        assert rows == before
        assert watermark == watermark_before
        assert len(aside) == 1
    published = items[-1]
    assert isinstance(published, ModelState)
    assert published.watermark == NOW2
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert deleted not in {r[0] for r in destination_rows(pg_conn, dst_schema)}
    status = status_row(pg_conn, dst_schema)
    assert status["watermark"] == NOW2
    assert status["last_transfer_id"] == "refresh1"
    # same columns: the table was truncated and refilled, so the view on it survived
    assert table_oid(pg_conn, dst_schema) == oid
    assert pg_conn.execute(f'SELECT count(*) FROM "{dst_schema}".recent').fetchone()[0] == len(before) - 1
    assert not [t for t in tables_in(pg_conn, dst_schema) if t.startswith(REFRESH_PREFIX) or t.startswith("_tp_stg")]
    assert pg_conn.execute(f'SELECT refresh_state FROM "{dst_schema}"._transfer_status').fetchone()[0] is None


def test_postgres_type_change_is_refused_until_a_full_refresh_replaces_the_table(
        spark, pg_conn, pg_schema, dst_schema, backfilled):
    before = destination_rows(pg_conn, dst_schema)
    status_before = status_row(pg_conn, dst_schema)
    oid = table_oid(pg_conn, dst_schema)
    changed = with_columns(backfilled, types={"id": "decimal"})

    refused = transfer(spark, changed, NOW2, transfer_id="t2")

    assert refused.status == "ERROR"
    assert refused.error_type == "SchemaMismatch"
    for words in ("model 'events'", "destination 'dst'", "column 'id'", "bigint", "decimal",
                  f"transfer-platform transfer {DESTINATION} --model {MODEL} --full-refresh"):
        assert words in refused.error
    assert destination_rows(pg_conn, dst_schema) == before
    assert status_row(pg_conn, dst_schema) == status_before

    writer = writer_for(changed.destination(DESTINATION))
    try:
        request = TransferRequest(spark=spark, config=changed,
                                  order=TransferOrder(destination=DESTINATION, full_refresh=True),
                                  writer=writer, transfer_id="t3", now=NOW2)
        list(transfer_model(request, changed.model(MODEL)))
    finally:
        writer.close()

    assert table_oid(pg_conn, dst_schema) != oid  # dropped and recreated
    (id_type,) = pg_conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
        "AND attname = 'id'", (f'"{dst_schema}"."{MODEL}"',)).fetchone()
    assert id_type == "numeric(38,9)"
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    (pkey,) = pg_conn.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
                              (f'"{dst_schema}"."{MODEL}"',)).fetchone()
    assert pkey == f"{MODEL}_pkey"
    # and incremental transfers go on against the new table
    after = transfer(spark, changed, NOW2 + timedelta(hours=1), transfer_id="t4")
    assert after.status == "SUCCESS", after.error
    assert status_row(pg_conn, dst_schema)["watermark"] == NOW2 + timedelta(hours=1)


def test_an_unfinished_postgres_refresh_is_carried_on_by_the_next_transfer(
        spark, pg_conn, pg_schema, dst_schema):
    create_events(pg_conn, pg_schema, primary_key=False)
    rows = make_rows([TENANT, "globex"], 30, DATA_DAYS, seed=22)
    insert_rows(pg_conn, pg_schema, rows)
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    before = destination_rows(pg_conn, dst_schema)
    # a key twice on March 2 with the same last-modified value: the refresh's fourth window fails
    mar2 = next(r for r in rows if r[1] == TENANT and day(3, 2) <= r[2] < day(3, 3))
    insert_rows(pg_conn, pg_schema, [(mar2[0], TENANT, mar2[2], "dup")])
    writer = writer_for(config.destination(DESTINATION))
    request = TransferRequest(spark=spark, config=config,
                              order=TransferOrder(destination=DESTINATION, full_refresh=True), writer=writer,
                              transfer_id="refresh1", now=NOW2)
    windows = []

    def run_until_failure() -> None:
        for item in transfer_model(request, config.model(MODEL)):
            if isinstance(item, WindowOutcome):
                windows.append(item)

    with pytest.raises(DataError, match="two different versions of key"):
        run_until_failure()
    writer.close()
    assert len(windows) == 3  # Feb 28, Feb 29, Mar 1 committed aside
    assert destination_rows(pg_conn, dst_schema) == before  # the live table is untouched
    assert status_row(pg_conn, dst_schema)["watermark"] == NOW1
    pending = pg_conn.execute(f'SELECT refresh_state::text FROM "{dst_schema}"._transfer_status').fetchone()[0]
    assert ModelState.from_json(pending).watermark == day(3, 2)

    pg_conn.execute(f'DELETE FROM "{pg_schema}".events WHERE payload = %s', ("dup",))
    resumed = transfer(spark, config, NOW2, transfer_id="t3")  # a plain incremental transfer

    assert resumed.status == "SUCCESS", resumed.error
    assert resumed.windows == 4  # Mar 2 .. Mar 5: the refresh resumed at the failed window
    march_2_on = [r for r in source_rows(pg_conn, pg_schema, TENANT) if r[2] >= day(3, 2) - timedelta(seconds=30)]
    assert resumed.rows_transferred == len(march_2_on)
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert status_row(pg_conn, dst_schema)["watermark"] == NOW2
    assert not [t for t in tables_in(pg_conn, dst_schema) if t.startswith(REFRESH_PREFIX)]


# -- Delta ------------------------------------------------------------------------------------


SCHEMA_ROWS_TENANT = "org-o'reilly"


@pytest.fixture
def delta_setup(tmp_path: Path, delta_tables):
    """A folder or a bucket (``delta_tables``)."""
    lake = tmp_path / "lake"
    connection, delta_root = delta_tables
    config = lake_config(lake, connection, tenant=SCHEMA_ROWS_TENANT, min_start=MIN_START)
    rows = make_rows([SCHEMA_ROWS_TENANT, "globex"], 20, DATA_DAYS, seed=23)
    write_lake(lake, rows)
    return config, lake, delta_root, rows


def test_delta_refresh_publishes_in_one_commit_and_replaces_a_changed_schema(spark, delta_setup):
    config, lake, delta_root, rows = delta_setup
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    before = delivered(delta_root)
    version = delta_root.table().version()
    kept = [r for r in rows if r[0] != before[0][0]]  # one row deleted in the source
    write_lake(lake, kept)
    expected = normalize(r for r in kept if r[1] == SCHEMA_ROWS_TENANT)

    seen = []
    items = refresh_step_by_step(
        spark, config, NOW2,
        lambda: seen.append((delta_root.table().version(), delivered(delta_root))))

    assert len(seen) == 7
    assert all(v == version and rows_now == before for v, rows_now in seen)
    assert isinstance(items[-1], ModelState)
    table = delta_root.table()
    assert table.version() == version + 1  # one overwrite commit publishes the whole refresh
    assert delivered(delta_root) == expected
    assert read_state(table).watermark == NOW2
    assert not delta_root.anything_at(f"{REFRESH_DIR}/{MODEL}")

    # a changed type: refused by an incremental transfer, applied by a full refresh
    changed = with_columns(config, types={"id": "decimal"})
    refused = transfer(spark, changed, NOW2 + timedelta(hours=1), transfer_id="t3")
    assert refused.error_type == "SchemaMismatch"
    assert "--full-refresh" in refused.error
    assert delta_root.table().version() == version + 1
    refresh_step_by_step(spark, changed, NOW2 + timedelta(hours=1), lambda: None)
    table = delta_root.table()
    assert pa.schema(table.schema().to_arrow()).field("id").type == pa.decimal128(38, 9)
    assert delivered(delta_root) == expected
