"""MariaDB (vendor ``mysql``) -> PostgreSQL transfers: Spark JDBC reads with the MariaDB driver.

Each test gets a fresh MariaDB database; the destination is a fresh PostgreSQL schema. Times are
fixed: the data lies on 2024-03-01..03 (00:00-22:59 of a day, so only rows placed on purpose fall
into a lookback), the backfill runs at ``NOW1`` and the incremental transfer at ``NOW2``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.errors import ConnectionFailure
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform_tests.support.config import config_for, events_model
from transfer_platform_tests.support.events import MODEL, day, make_rows, normalize
from transfer_platform_tests.support.mysql import (
    mysql_create_events,
    mysql_insert_rows,
    mysql_source,
    mysql_source_rows,
)
from transfer_platform_tests.support.postgres import destination_rows, status_row
from transfer_platform_tests.support.spark import jdbc_read_partitions
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

MIN_START = day(3, 1)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12, microseconds=250_001)
NOW2 = day(3, 5) + timedelta(hours=6)
TENANT = "acme"
OTHERS = ["globex", "ACME", "acme "]  # equal to 'acme' under MariaDB's default collation


def config(database, dst_schema, *, tenant=TENANT, parallel=1, port=None, model=None, **settings):
    source = mysql_source(database, max_concurrent_queries_per_transfer=parallel, **settings)
    if port is not None:
        source["connection"]["port"] = port
    return config_for(source, model or events_model("events", min_start=MIN_START),
                      tenant=tenant, dst_schema=dst_schema)


# -- microseconds of DATETIME(6) and TIMESTAMP(6), serial and partitioned reads -------------------


@pytest.mark.parametrize("parallel", [1, 3])
@pytest.mark.parametrize("lm_type", ["DATETIME(6)", "TIMESTAMP(6)"])
def test_last_modified_values_arrive_with_their_microseconds(
        spark, mysql_conn, mysql_database, dst_schema, pg_conn, lm_type, parallel):
    mysql_create_events(mysql_conn, lm_type=lm_type)
    rows = make_rows([TENANT, *OTHERS], 12, DATA_DAYS, seed=11)
    rows.append((9001, TENANT, day(3, 2) + timedelta(microseconds=1), "one microsecond past midnight"))
    mysql_insert_rows(mysql_conn, rows)
    cfg = config(mysql_database, dst_schema, parallel=parallel)
    expected = mysql_source_rows(mysql_conn, TENANT)
    assert len(expected) == 13
    assert all(r[2].microsecond for r in expected)

    summary = transfer(spark, cfg, NOW1)

    assert summary.status == "SUCCESS", summary.error
    assert destination_rows(pg_conn, dst_schema) == expected  # every value, microseconds included
    assert summary.rows_transferred == 13
    assert status_row(pg_conn, dst_schema)["high_watermark"] == max(r[2] for r in expected)
    if parallel > 1:  # the read really is split into that many queries
        bounds = ReadBounds(MIN_START, NOW1, Window(MIN_START, NOW1))
        frame = reader_for(cfg.source("src")).read(spark, ReadRequest(cfg.model(MODEL), TENANT, bounds))
        assert jdbc_read_partitions(frame) == parallel
        assert normalize(frame.collect()) == expected


def test_the_read_session_is_in_utc(spark, mysql_conn, mysql_database, dst_schema, pg_conn):
    """The server's own zone is UTC on this machine, so only the session's variable can show that
    the reader pins it (TIMESTAMP values are converted to the session's zone)."""
    mysql_create_events(mysql_conn, lm_type="TIMESTAMP(6)")
    mysql_insert_rows(mysql_conn, [(1, TENANT, day(3, 1) + timedelta(hours=1, microseconds=5), "x")])
    model = events_model("events", min_start=MIN_START)
    model["source_table"] = None
    model["source_query"] = ("SELECT id, organization_id, updated_at, "
                             "CONCAT(@@session.time_zone, ' ', updated_at) AS payload FROM events")

    summary = transfer(spark, config(mysql_database, dst_schema, model=model), NOW1)

    assert summary.status == "SUCCESS", summary.error
    assert destination_rows(pg_conn, dst_schema) == [
        (1, TENANT, day(3, 1) + timedelta(hours=1, microseconds=5), "+00:00 2024-03-01 01:00:00.000005")]


# -- change detection at the watermark ------------------------------------------------------------


def test_rows_at_exactly_the_watermark_are_not_skipped(spark, mysql_conn, mysql_database, dst_schema,
                                                       pg_conn):
    """No lookback here, so only ``lm >= watermark`` (not ``>``) can deliver these rows."""
    mysql_create_events(mysql_conn)
    mysql_insert_rows(mysql_conn, make_rows([TENANT, "globex"], 8, DATA_DAYS, seed=12))
    mysql_insert_rows(mysql_conn, [(9001, TENANT, NOW1, "at the watermark, committed before")])
    cfg = config(mysql_database, dst_schema, lookback_window=0)
    assert cfg.source("src").lookback_seconds == 0
    first = transfer(spark, cfg, NOW1)
    assert first.status == "SUCCESS", first.error
    assert first.state.watermark == NOW1
    assert 9001 not in [r[0] for r in destination_rows(pg_conn, dst_schema)]  # upper bound exclusive

    mysql_insert_rows(mysql_conn, [(9002, TENANT, NOW1, "at the watermark, committed after"),
                                   (9003, "globex", NOW1, "other tenant")])
    second = transfer(spark, cfg, NOW2, transfer_id="t2")

    assert second.status == "SUCCESS", second.error
    # read from the last delivered row (the seeds' rule, no lookback): it again, 9001 and 9002
    assert second.rows_transferred == 3
    assert destination_rows(pg_conn, dst_schema) == mysql_source_rows(mysql_conn, TENANT)


def test_the_five_second_lookback_rereads_late_commits(spark, mysql_conn, mysql_database, dst_schema,
                                                       pg_conn):
    mysql_create_events(mysql_conn, lm_type="TIMESTAMP(6)")
    mysql_insert_rows(mysql_conn, make_rows([TENANT, "globex"], 8, DATA_DAYS, seed=13))
    cfg = config(mysql_database, dst_schema)
    assert cfg.source("src").lookback_seconds == 5  # MySQL's default
    first = transfer(spark, cfg, NOW1)
    assert first.status == "SUCCESS"
    last = first.state.high_watermark  # the last delivered row: the next read starts 5 s before it

    late = (9001, TENANT, last - timedelta(seconds=4, microseconds=999_999), "committed late")
    too_late = (9002, TENANT, last - timedelta(seconds=5, microseconds=1), "older than the lookback")
    mysql_insert_rows(mysql_conn, [late, too_late])
    second = transfer(spark, cfg, NOW2, transfer_id="t2")

    assert second.status == "SUCCESS", second.error
    assert second.rows_transferred == 2  # the last delivered row again, and the late one
    delivered = {r[0]: r for r in destination_rows(pg_conn, dst_schema)}
    assert delivered[9001] == late
    assert 9002 not in delivered  # the documented limit of a lookback


# -- tenant ids that look like SQL, and ids MariaDB's collation confuses ----------------------------

AWKWARD_TENANTS = ["org-o'reilly\\x", "'; DROP TABLE x; --", 'what?$1 \\\' "q" `b` E\'']
DECOYS = ["org-o'reilly\\\\x", "org-o'reillyx", "org-o''reilly\\x", "org-o'reilly", "ORG-O'REILLY\\X",
          "org-o'reilly\\x ", "org-ó'reilly\\x", "' OR '1'='1", "\\", "'", "what?$1 ' \"q\" `b` E'"]


@pytest.mark.parametrize("tenant", AWKWARD_TENANTS, ids=["oreilly", "injection", "mixed"])
def test_tenant_ids_with_quotes_and_backslashes_select_exactly_that_tenant(
        spark, mysql_conn, mysql_database, dst_schema, pg_conn, tenant):
    mysql_create_events(mysql_conn)
    mysql_insert_rows(mysql_conn, make_rows(AWKWARD_TENANTS + DECOYS, 4, DATA_DAYS, seed=14))

    summary = transfer(spark, config(mysql_database, dst_schema, tenant=tenant), day(3, 4))

    assert summary.status == "SUCCESS", summary.error
    expected = mysql_source_rows(mysql_conn, tenant)
    assert len(expected) == 4
    assert destination_rows(pg_conn, dst_schema) == expected
    assert summary.rows_transferred == 4
    assert len(mysql_source_rows(mysql_conn)) == 4 * (len(AWKWARD_TENANTS) + len(DECOYS))  # no table dropped


# -- an unreachable server --------------------------------------------------------------------------


def test_an_unreachable_server_is_named_with_host_and_port(spark, mysql_database, dst_schema):
    cfg = config(mysql_database, dst_schema, port=3999)

    summary = transfer(spark, cfg, NOW1)

    assert summary.status == "ERROR"
    assert summary.error_type == "ConnectionFailure"
    assert "MySQL source 'src'" in summary.error
    assert "127.0.0.1:3999" in summary.error
    assert "Traceback" not in summary.error
    assert summary.windows == 0
    with pytest.raises(ConnectionFailure) as caught:
        reader_for(cfg.source("src")).check(destination="dst")
    assert (caught.value.host, caught.value.port) == ("127.0.0.1", 3999)
    assert "destination 'dst'" in str(caught.value)
