"""Large windows relayed from a PostgreSQL source into a PostgreSQL destination in binary COPY
format (``transfer_platform/sources/relay.py``): the recipient receives exactly its tenant's rows,
value for value, as the read through Spark delivers them, in a backfill and a full refresh (and
an incremental's small window, streamed in the transfer's process, as the driver's read does); a
column needing a conversion, or a source whose keys are not unique, keeps the window on Spark; a
NULL key or last-modified value is refused by name with the live table and watermark as they were."""

from __future__ import annotations

import json
import logging
import math
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.config import config_for
from transfer_platform_tests.support.events import MODEL, epoch
from transfer_platform_tests.support.postgres import PG, pg_connection_config, status_row
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT = "o'acme"  # a quote in the tenant id
NOW = datetime(2025, 3, 5, 12, tzinfo=UTC)  # two windows
START = datetime(2025, 3, 1, tzinfo=UTC)
#: every window holds more than run_rows rows: each is moved alone, so relayed where it may be
RELAY = Tuning(run_rows=1, direct_reads=False)
SPARK_PATH = Tuning(run_rows=1, direct_reads=False, relay_windows=False)
COLUMNS = [("small", "smallint", "integer"), ("med", "integer", "integer"), ("big", "bigint", "integer"),
           ("name", "text", "string"), ("label", "varchar(20)", "string"), ("score", "double precision", "float"),
           ("flag", "boolean", "boolean"), ("day", "date", "date"), ("seen_at", "timestamptz", "timestamp")]
VALUES = [
    (-32768, -2147483648, -9223372036854775808, "", "x", -1.5e308, False, date(1, 1, 1),
     datetime(1, 1, 1, tzinfo=UTC)),
    (32767, 2147483647, 9223372036854775807, "ünïcødé ✓ 'quote' \"dq\" \\ back,comma", "y" * 20, 1e-300, True,
     date(9999, 12, 31), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    (0, 0, 0, "line\nbreak\ttab\r\n", "z", float("inf"), True, date(1970, 1, 1), datetime(1970, 1, 1, tzinfo=UTC)),
    (None, None, None, None, None, None, None, None, None),
    (7, 8, 9, "nan", "w", float("nan"), False, date(2024, 2, 29),
     datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=UTC)),
    (1, 2, 3, "\\N", "v", float("-inf"), None, date(2000, 1, 1), datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC)),
]
NAMES = ["id", "organization_id", "updated_at", *(name for name, _, _ in COLUMNS)]


def make_source(pg_conn, schema: str, *, key: str = "PRIMARY KEY", extra: str = "") -> None:
    columns = ", ".join(f"{name} {sql_type}" for name, sql_type, _ in COLUMNS)
    pg_conn.execute(f'CREATE TABLE "{schema}".things (id bigint {key}, organization_id text NOT NULL, '
                    f"updated_at timestamptz, {columns}{extra})")
    for i, values in enumerate(VALUES * 2):
        for tenant in (TENANT, "acme"):  # another tenant's rows, never delivered
            pg_conn.execute(
                f'INSERT INTO "{schema}".things (id, organization_id, updated_at, {", ".join(NAMES[3:])}) '
                f"VALUES (%s, %s, %s, {', '.join(['%s'] * len(COLUMNS))})",
                (i if tenant == TENANT else 1000 + i, tenant, START + timedelta(days=i % 4, hours=i, microseconds=i),
                 *values))


def model(schema: str, extra: list[dict] = ()) -> dict:
    return {
        "model_name": MODEL, "source_name": "src", "source_table": f"{schema}.things",
        "organization_column": "organization_id", "max_transfer_time_window_seconds": 3 * 86400,
        "min_start_time_epoch": epoch(START),
        "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                    {"name_in_source": "organization_id", "data_type": "string"},
                    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                    *({"name_in_source": name, "data_type": data_type} for name, _, data_type in COLUMNS),
                    *extra],
    }


def rows_of(pg_conn, sql: str, params: tuple = ()) -> list[tuple]:
    return [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)
            for row in pg_conn.execute(sql, params).fetchall()]


def delivered(pg_conn, schema: str) -> list[tuple]:
    return rows_of(pg_conn, f'SELECT {", ".join(NAMES)} FROM "{schema}"."{MODEL}" ORDER BY id')


def run(spark, source_schema: str, dst_schema: str, tuning: Tuning, caplog, extra: list[dict] = (),
        *, full_refresh: bool = False, parallel: int = 2, expect: str = "SUCCESS", now: datetime = NOW):
    config = config_for({"vendor": "postgres", "connection": pg_connection_config(),
                         "max_concurrent_queries_per_transfer": parallel},
                        model(source_schema, extra), tenant=TENANT, dst_schema=dst_schema)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="transfer_platform"):
        summary = transfer(spark, config, now, tuning=tuning, full_refresh=full_refresh)
    assert summary.status == expect, summary.error
    records = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith('{"phase": ')]
    return summary, records


def relayed(records: list[dict]) -> list[bool]:
    """For each window read, whether it was relayed (as its read record says)."""
    reads = [r for r in records if r["phase"] == "read"]
    assert reads
    return [bool(r.get("relayed")) for r in reads]


def test_a_relayed_backfill_and_refresh_deliver_the_tenants_rows_as_spark_does(
        spark, pg_conn, pg_schema, new_schema, caplog):
    make_source(pg_conn, pg_schema)
    relay_dst, spark_dst = new_schema(), new_schema()
    _, records = run(spark, pg_schema, relay_dst, RELAY, caplog)
    assert all(relayed(records))
    _, records = run(spark, pg_schema, spark_dst, SPARK_PATH, caplog)
    assert not any(relayed(records))

    expected = delivered(pg_conn, spark_dst)
    source = rows_of(pg_conn, f'SELECT {", ".join(NAMES)} FROM "{pg_schema}".things WHERE organization_id = %s '
                     "ORDER BY id", (TENANT,))
    assert len(source) == 2 * len(VALUES)
    assert expected == source
    assert delivered(pg_conn, relay_dst) == source  # every value; no row of the other tenant
    assert status_row(pg_conn, relay_dst)["watermark"] == status_row(pg_conn, spark_dst)["watermark"]

    pg_conn.execute(f'UPDATE "{pg_schema}".things SET name = name || \' v2\' WHERE id % 2 = 0')
    pg_conn.execute(f'DELETE FROM "{pg_schema}".things WHERE id = 3')
    summary, records = run(spark, pg_schema, relay_dst, RELAY, caplog, full_refresh=True, parallel=1)
    assert all(relayed(records))
    assert [r["phase"] for r in records].count("publish") == 1
    assert delivered(pg_conn, relay_dst) == rows_of(
        pg_conn, f'SELECT {", ".join(NAMES)} FROM "{pg_schema}".things WHERE organization_id = %s ORDER BY id',
        (TENANT,))
    assert summary.rows_transferred == 2 * len(VALUES) - 1


def test_an_incrementals_small_window_is_streamed_and_delivers_the_tenants_rows_as_the_drivers_read(
        spark, pg_conn, pg_schema, new_schema, caplog):
    """A small window (read by the driver, not by Spark) is streamed from the source into the
    staging table in binary COPY format in the transfer's process when the source holds each key
    once; the recipient then holds what the driver's read into Arrow delivers, value for value."""
    make_source(pg_conn, pg_schema)
    streamed, read = new_schema(), new_schema()
    paths = [(streamed, Tuning(), [True]), (read, Tuning(relay_windows=False), [False])]
    for dst, tuning, _ in paths:
        run(spark, pg_schema, dst, tuning, caplog)  # the backfill (two windows, read together)
    things = f'"{pg_schema}".things'
    later = NOW + timedelta(hours=1)
    pg_conn.execute(f"UPDATE {things} SET name = coalesce(name, '') || ' v2', score = -0.0, "
                    f"updated_at = %s + id * interval '1 second' WHERE id %% 3 = 0", (NOW,))
    for tenant, first in ((TENANT, 100), ("acme", 1100)):
        pg_conn.execute(f"INSERT INTO {things} (id, organization_id, updated_at, name, seen_at) "
                        f"SELECT %s + i, %s, %s + i * interval '1 minute', 'new ' || i, %s FROM generate_series(0, 9) i",
                        (first, tenant, NOW + timedelta(minutes=5), datetime(1, 1, 1, tzinfo=UTC)))
    for dst, tuning, expected in paths:  # one window: the incremental's
        summary, records = run(spark, pg_schema, dst, tuning, caplog, now=later)
        assert relayed(records) == expected
        assert summary.delta_rows_transferred == 2 * len(VALUES) // 3 + 10  # (the lookback re-reads one more)
    source = rows_of(pg_conn, f'SELECT {", ".join(NAMES)} FROM {things} WHERE organization_id = %s ORDER BY id',
                     (TENANT,))
    assert delivered(pg_conn, read) == source  # the driver's read: the reference
    assert delivered(pg_conn, streamed) == source  # every value; no row of the other tenant
    assert status_row(pg_conn, streamed)["watermark"] == status_row(pg_conn, read)["watermark"]

    pg_conn.execute(f"ALTER TABLE {things} DROP CONSTRAINT things_pkey")  # keys not unique: read and resolved
    pg_conn.execute(f"UPDATE {things} SET updated_at = %s WHERE id = 1", (later,))
    summary, records = run(spark, pg_schema, streamed, Tuning(), caplog, now=later + timedelta(hours=1))
    assert relayed(records) == [False]
    assert summary.delta_rows_transferred == 1


def test_a_column_needing_a_cast_or_keys_not_unique_keep_the_window_on_spark(
        spark, pg_conn, pg_schema, new_schema, caplog):
    make_source(pg_conn, pg_schema, extra=", amount numeric(12,4)")
    pg_conn.execute(f'UPDATE "{pg_schema}".things SET amount = id * 1.25')
    dst = new_schema()
    _, records = run(spark, pg_schema, dst, RELAY, caplog, [{"name_in_source": "amount", "data_type": "decimal"}])
    assert not any(relayed(records))
    assert [r[0] for r in pg_conn.execute(f'SELECT amount FROM "{dst}"."{MODEL}" ORDER BY id')] == [
        Decimal(i) * Decimal("1.25") for i in range(2 * len(VALUES))]

    pg_conn.execute(f'ALTER TABLE "{pg_schema}".things DROP CONSTRAINT things_pkey')
    _, records = run(spark, pg_schema, new_schema(), RELAY, caplog)  # keys not unique: Spark chooses versions
    assert not any(relayed(records))


def test_a_duplicate_key_in_a_source_without_a_unique_key_is_refused_by_name(
        spark, pg_conn, pg_schema, new_schema, caplog):
    make_source(pg_conn, pg_schema, key="")
    dst = new_schema()
    run(spark, pg_schema, dst, RELAY, caplog)
    before_rows, before_status = delivered(pg_conn, dst), status_row(pg_conn, dst)
    pg_conn.execute(f'INSERT INTO "{pg_schema}".things (id, organization_id, updated_at) '
                    f'SELECT id, organization_id, updated_at FROM "{pg_schema}".things WHERE id = 2')
    summary, records = run(spark, pg_schema, dst, RELAY, caplog, full_refresh=True, expect="ERROR")
    assert not any(relayed(records))
    assert "two different versions of key id=2" in summary.error
    assert delivered(pg_conn, dst) == before_rows
    assert status_row(pg_conn, dst) == before_status


@pytest.mark.parametrize("column", ["id", "updated_at"])
def test_a_null_key_or_last_modified_is_refused_by_name_with_nothing_changed(
        spark, pg_conn, pg_schema, new_schema, caplog, column):
    make_source(pg_conn, pg_schema, key="UNIQUE")  # a unique key that may hold NULLs
    dst = new_schema()
    run(spark, pg_schema, dst, RELAY, caplog)
    before_rows, before_status = delivered(pg_conn, dst), status_row(pg_conn, dst)
    assert len(before_rows) == 2 * len(VALUES)
    pg_conn.execute(f'UPDATE "{pg_schema}".things SET {column} = NULL WHERE id = 5')
    for full_refresh in (True, False):
        summary, records = run(spark, pg_schema, dst, RELAY, caplog, full_refresh=full_refresh, expect="ERROR")
        assert all(relayed(records))
        assert summary.error_type == "DataError"
        assert ("NULL primary key value (id)" if column == "id" else "NULL last-modified") in summary.error
        assert delivered(pg_conn, dst) == before_rows
        assert status_row(pg_conn, dst) == before_status


def test_a_retried_relay_task_stages_each_slice_once(pg_conn, pg_schema):
    """Spark retries a failed task whole: the slices it committed before failing are staged again.
    The retry deletes them first, in each slice's own transaction (a slice committed twice would be
    refused by the staging scan as a duplicate key the source does not hold)."""
    import pyarrow as pa

    from transfer_platform.core.sql import change_literal
    from transfer_platform.sources.relay import RelayRead, relay_partition

    make_source(pg_conn, pg_schema)
    staging = f'"{pg_schema}"."staging"'
    pg_conn.execute(f'CREATE TABLE {staging} (id bigint, organization_id text, updated_at timestamptz)')
    relay = RelayRead(
        source=dict(PG), search_path=None,
        window_sql=f'SELECT id, organization_id, updated_at FROM "{pg_schema}".things WHERE organization_id = '
                   f"'acme'",
        columns=(("id", "id"), ("organization_id", "organization_id"), ("updated_at", "updated_at")),
        last_modified="updated_at", bounds=(change_literal(START + timedelta(days=2)),), read_timeout=60)
    types = {"id": "bigint", "organization_id": "text", "updated_at": "timestamp with time zone"}
    copy_in = f"COPY {staging} (id, organization_id, updated_at) FROM STDIN (FORMAT binary)"
    both_slices = [pa.RecordBatch.from_pydict({"id": [0, 1]})]

    def staged() -> list[int]:
        return [r[0] for r in pg_conn.execute(f"SELECT id FROM {staging} ORDER BY id")]

    expected = [r[0] for r in pg_conn.execute(
        f"""SELECT id FROM "{pg_schema}".things WHERE organization_id = 'acme' ORDER BY id""")]
    list(relay_partition(relay, PG, staging, copy_in, types, iter(both_slices), attempt=lambda: 0))
    assert staged() == expected  # the first attempt: both slices, each once
    # the retry of a task that committed slice 0, then failed in slice 1 (its rows rolled back)
    pg_conn.execute(f"DELETE FROM {staging} WHERE updated_at >= %s", (START + timedelta(days=2),))
    assert 0 < len(staged()) < len(expected)
    list(relay_partition(relay, PG, staging, copy_in, types, iter(both_slices), attempt=lambda: 1))
    assert staged() == expected
