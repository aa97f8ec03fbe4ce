"""PostgreSQL -> PostgreSQL transfers end to end: a real source table, Spark JDBC reads, the staged
upsert and ``_transfer_status``.

Times are fixed: the model starts on 2024-02-28 (so the daily grid crosses the leap day), the data
lies on 2024-03-01..03, the backfill runs at ``NOW1`` and the incremental transfer at ``NOW2``.
Generated rows fall between 00:00 and 22:59 of a day, so the only rows inside a 30 s lookback are
the ones placed there on purpose.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.config.parsing import parse_config
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.destinations.base import staging_suffix, writer_for
from transfer_platform.destinations.postgres import STAGING_PREFIX
from transfer_platform.errors import ConnectionFailure
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import WindowOutcome
from transfer_platform.transfers.runner import TransferRequest, run_transfer, transfer_model
from transfer_platform_tests.support.config import DESTINATION, events_model, pg_config
from transfer_platform_tests.support.events import (
    LOOKBACK,
    MODEL,
    create_events,
    day,
    insert_rows,
    make_rows,
    normalize,
    source_rows,
)
from transfer_platform_tests.support.postgres import (
    destination_rows,
    pg_connection_config,
    schema_exists,
    status_row,
    tables_in,
    xmins,
)
from transfer_platform_tests.support.spark import jdbc_read_partitions
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

MIN_START = day(2, 28)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 5) + timedelta(hours=6)
TENANT = "acme"
OTHERS = ["globex", "initech"]

# acme rows placed on purpose (ids far from the generated ones)
BOUNDARY_ID = 9001  # 30 s before a midnight: read by two windows of the backfill
BOUNDARY_AT = day(3, 1) + timedelta(hours=23, minutes=59, seconds=45, microseconds=123456)
OVERLAP_IDS = [9002, 9003]  # just before NOW1: re-read (not rewritten) by the next transfer
OVERLAP_AT = [NOW1 - timedelta(seconds=9, microseconds=750000),
              NOW1 - timedelta(seconds=20, microseconds=499999)]


def base_rows() -> list:
    rows = make_rows([TENANT, *OTHERS], 40, DATA_DAYS, seed=1)
    rows += [
        (BOUNDARY_ID, TENANT, BOUNDARY_AT, "boundary"),
        (OVERLAP_IDS[0], TENANT, OVERLAP_AT[0], "overlap 1"),
        (OVERLAP_IDS[1], TENANT, OVERLAP_AT[1], None),
        (9004, "globex", NOW1 - timedelta(seconds=5, microseconds=1), "other tenant, overlap"),
    ]
    return rows


@pytest.fixture
def source(pg_conn, pg_schema):
    """The ``events`` source table in ``pg_schema``, filled with ``base_rows()``."""
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, base_rows())
    return pg_schema


def tenant_ids(pg_conn, schema, tenant=TENANT, table="events") -> list[int]:
    return [r[0] for r in source_rows(pg_conn, schema, tenant, table) if r[0] is not None and r[0] < 9000]


# -- 1 and 10: backfill (serial and parallel reads) ---------------------------------------------


@pytest.mark.parametrize("parallel", [1, 3])
def test_backfill_delivers_exactly_the_tenants_rows(spark, pg_conn, source, dst_schema, parallel):
    config = pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT,
                       min_start=MIN_START, parallel=parallel)
    expected = source_rows(pg_conn, source, TENANT)
    n = len(expected)
    assert n == 43
    assert all(r[2].microsecond for r in expected)

    summary = transfer(spark, config, NOW1)

    assert summary.status == "SUCCESS", summary.error
    assert summary.windows == 6  # 02-28, 02-29, 03-01, 03-02, 03-03, 03-04 (until NOW1)
    delivered = destination_rows(pg_conn, dst_schema)
    assert delivered == expected  # every column, microseconds included
    assert {r[1] for r in delivered} == {TENANT}
    # the boundary row is read by the 03-01 window and again by the 03-02 window's lookback,
    # but it is new only once
    assert summary.rows_transferred == n + 1
    assert summary.delta_rows_transferred == n

    status = status_row(pg_conn, dst_schema)
    assert status["watermark"] == NOW1  # capped at now
    assert status["high_watermark"] == max(r[2] for r in expected) == OVERLAP_AT[0]
    assert status["last_transfer_id"] == "t1"
    state = ModelState.from_json(status["state"])
    assert (state.watermark, state.high_watermark) == (NOW1, OVERLAP_AT[0])
    assert summary.state.watermark == NOW1
    assert summary.state.high_watermark == OVERLAP_AT[0]
    assert tables_in(pg_conn, dst_schema) == ["_transfer_status", MODEL]  # no staging left

    if parallel > 1:  # the read really is split into that many queries
        model = config.model(MODEL)
        bounds = ReadBounds(MIN_START, NOW1, Window(MIN_START, NOW1))
        frame = reader_for(config.source("src")).read(spark, ReadRequest(model, TENANT, bounds))
        assert jdbc_read_partitions(frame) == parallel
        assert normalize(frame.collect()) == expected


# -- 2: incremental ------------------------------------------------------------------------------


def test_incremental_moves_changes_and_rereads_only_the_lookback(spark, pg_conn, source, dst_schema):
    config = pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    first = transfer(spark, config, NOW1)
    assert first.status == "SUCCESS", first.error
    untouched_xmin = xmins(pg_conn, dst_schema, OVERLAP_IDS)

    acme = tenant_ids(pg_conn, source)
    updated = acme[:5]
    for k, key in enumerate(updated):
        pg_conn.execute(f'UPDATE "{source}".events SET updated_at = %s, payload = %s WHERE id = %s',
                        (NOW1 + timedelta(hours=1, minutes=k, microseconds=123457 + k), f"v2 {k}", key))
    late = acme[5]  # updated 20 s before midnight: read by the 03-04 window and the 03-05 lookback
    pg_conn.execute(f'UPDATE "{source}".events SET updated_at = %s, payload = %s WHERE id = %s',
                    (day(3, 4) + timedelta(hours=23, minutes=59, seconds=40, microseconds=1), "late", late))
    inserted = [(8001 + k, TENANT, day(3, 5) + timedelta(hours=1, seconds=k, microseconds=999_999 - k),
                 f"new {k}") for k in range(3)]
    insert_rows(pg_conn, source, inserted)
    for key in tenant_ids(pg_conn, source, "globex")[:2]:
        pg_conn.execute(f'UPDATE "{source}".events SET updated_at = %s, payload = %s WHERE id = %s',
                        (NOW1 + timedelta(hours=2), "globex v2", key))

    second = transfer(spark, config, NOW2, transfer_id="t2")

    assert second.status == "SUCCESS", second.error
    assert second.windows == 2  # the rest of 03-04, then 03-05 until NOW2
    changed = len(updated) + 1 + len(inserted)
    # re-read: the 2 rows in [NOW1 - 30 s, NOW1) and the late row again in the 03-05 lookback
    assert second.rows_transferred == changed + len(OVERLAP_IDS) + 1
    assert second.delta_rows_transferred == changed
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, source, TENANT)
    status = status_row(pg_conn, dst_schema)
    assert status["watermark"] == NOW2
    assert status["high_watermark"] == inserted[-1][2]  # the newest acme change
    assert status["last_transfer_id"] == "t2"
    # the lookback overlap was read again but identical rows are not rewritten
    assert xmins(pg_conn, dst_schema, OVERLAP_IDS) == untouched_xmin


# -- 3: the destination never goes back in time ---------------------------------------------------


def test_an_older_source_version_never_replaces_a_newer_destination_row(spark, pg_conn, source, dst_schema):
    config = pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    keep, tie, replace = tenant_ids(pg_conn, source)[:3]
    dst_newer = day(3, 4) + timedelta(hours=20, microseconds=654321)
    tie_at = day(3, 4) + timedelta(hours=16, microseconds=500000)
    src_newer = day(3, 4) + timedelta(hours=17, microseconds=7)

    def set_row(schema, table, key, at, payload):
        pg_conn.execute(f'UPDATE "{schema}"."{table}" SET updated_at = %s, payload = %s WHERE id = %s',
                        (at, payload, key))

    set_row(dst_schema, MODEL, keep, dst_newer, "destination newer")
    set_row(source, "events", keep, day(3, 4) + timedelta(hours=15, microseconds=111111), "source older")
    set_row(dst_schema, MODEL, tie, tie_at, "destination, same time")
    set_row(source, "events", tie, tie_at, "source, same time")
    set_row(source, "events", replace, src_newer, "source newer")

    summary = transfer(spark, config, NOW2, transfer_id="t2")

    assert summary.status == "SUCCESS", summary.error
    delivered = {r[0]: r for r in destination_rows(pg_conn, dst_schema)}
    assert delivered[keep][2:] == (dst_newer, "destination newer")
    assert delivered[tie][2:] == (tie_at, "source, same time")  # equally new and different: replaced
    assert delivered[replace][2:] == (src_newer, "source newer")
    others = [r for r in source_rows(pg_conn, source, TENANT) if r[0] != keep]
    assert [r for r in delivered.values() if r[0] != keep] == others


# -- 4: tenant ids that look like SQL ------------------------------------------------------------

AWKWARD_TENANTS = ["o'reilly\\x", "'; DROP TABLE x; --", "what?$1 \\' \"q\" E'"]
DECOYS = ["o'reilly\\\\x", "o'reillyx", "o''reilly\\x", "o'reilly", "oreilly\\x", "x", "'", "\\",
          "' OR '1'='1", "what?$1 ' \"q\" E'"]


@pytest.mark.parametrize("tenant", AWKWARD_TENANTS)
def test_tenant_ids_with_quotes_and_backslashes_select_exactly_that_tenant(
        spark, pg_conn, pg_schema, dst_schema, tenant):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows(AWKWARD_TENANTS + DECOYS, 4, DATA_DAYS, seed=4))
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=tenant,
                       min_start=day(3, 1))

    summary = transfer(spark, config, day(3, 4))

    assert summary.status == "SUCCESS", summary.error
    expected = source_rows(pg_conn, pg_schema, tenant)
    assert len(expected) == 4
    assert destination_rows(pg_conn, dst_schema) == expected
    assert summary.rows_transferred == 4
    assert pg_conn.execute(f'SELECT count(*) FROM "{pg_schema}".events').fetchone()[0] == 4 * (
        len(AWKWARD_TENANTS) + len(DECOYS))


# -- 5: bad rows are refused and change nothing ----------------------------------------------------


@pytest.mark.parametrize(("problem", "parallel"),
                         [("duplicate", 1), ("null", 1), ("null", 3), ("null_key", 1)])
def test_a_bad_batch_is_refused_and_changes_nothing(spark, pg_conn, pg_schema, dst_schema, problem, parallel):
    create_events(pg_conn, pg_schema, "events_nopk", primary_key=False)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 15, DATA_DAYS, seed=5), "events_nopk")
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT,
                       min_start=day(3, 1), table="events_nopk", parallel=parallel)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    before = (destination_rows(pg_conn, dst_schema), status_row(pg_conn, dst_schema),
              tables_in(pg_conn, dst_schema))
    assert len(before[0]) == 15

    if problem == "duplicate":
        key = tenant_ids(pg_conn, pg_schema, table="events_nopk")[2]
        # two versions of a key with the same last-modified value: which is current cannot be told
        insert_rows(pg_conn, pg_schema, [
            (key, TENANT, NOW1 + timedelta(hours=1, microseconds=1), "dup a"),
            (key, TENANT, NOW1 + timedelta(hours=1, microseconds=1), "dup b"),
        ], "events_nopk")
        expected_words = ["two different versions of key", f"id={key}", "payload='dup a'", "payload='dup b'"]
    elif problem == "null":
        key = 7777
        insert_rows(pg_conn, pg_schema, [(key, TENANT, None, "no time")], "events_nopk")
        expected_words = ["NULL last-modified value (updated_at)", f"id={key}"]
    else:
        insert_rows(pg_conn, pg_schema, [(None, TENANT, NOW1 + timedelta(hours=1), "no key")], "events_nopk")
        expected_words = ["NULL primary key value (id)", "id=None"]
    # an innocent change in the same window: it must not land either
    innocent = tenant_ids(pg_conn, pg_schema, table="events_nopk")[0]
    pg_conn.execute(f'UPDATE "{pg_schema}".events_nopk SET updated_at = %s, payload = %s WHERE id = %s',
                    (NOW1 + timedelta(hours=3), "innocent", innocent))

    summary = transfer(spark, config, NOW2, transfer_id="t2")

    assert summary.status == "ERROR"
    assert summary.error_type == "DataError"
    assert f"model '{MODEL}'" in summary.error
    assert f"destination '{DESTINATION}'" in summary.error
    for words in expected_words:
        assert words in summary.error
    assert summary.windows == 0
    after = (destination_rows(pg_conn, dst_schema), status_row(pg_conn, dst_schema),
             tables_in(pg_conn, dst_schema))
    assert after == before  # rows, watermark, state and updated_at untouched; no staging left


def test_a_failing_model_does_not_stop_the_others(spark, pg_conn, source, dst_schema):
    """A value the model's type cannot take fails while Spark stages the batch: that model gets a
    DataError naming it, the next model is still transferred."""
    good = events_model(f"{source}.events", min_start=day(3, 3))
    bad = {**good, "model_name": "events_bad",
           "columns": [{**c, "data_type": "integer"} if c["name_in_source"] == "payload" else c
                       for c in good["columns"]]}
    config = parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [bad, good],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config(dst_schema)}],
    }, now=NOW1)
    writer = writer_for(config.destination(DESTINATION))
    try:
        summaries = run_transfer(TransferRequest(spark=spark, config=config,
                                                 order=TransferOrder(destination=DESTINATION), writer=writer,
                                                 transfer_id="t1", now=NOW1), config.models)
    finally:
        writer.close()

    failed, succeeded = summaries
    assert failed.status == "ERROR"
    assert failed.error_type == "DataError"
    assert "model 'events_bad'" in failed.error
    assert f"destination '{DESTINATION}'" in failed.error
    assert "Traceback" not in failed.error
    assert pg_conn.execute(f'SELECT count(*) FROM "{dst_schema}".events_bad').fetchone()[0] == 0
    assert status_row(pg_conn, dst_schema, "events_bad") is None
    assert succeeded.status == "SUCCESS", succeeded.error
    assert destination_rows(pg_conn, dst_schema) == [
        r for r in source_rows(pg_conn, source, TENANT) if r[2] >= day(3, 3)]
    assert sorted(tables_in(pg_conn, dst_schema)) == ["_transfer_status", "events", "events_bad"]


# -- 6: unreachable databases ------------------------------------------------------------------


@pytest.mark.parametrize("side", ["source", "destination"])
def test_an_unreachable_database_is_named_with_host_and_port(spark, pg_conn, pg_schema, dst_schema, side):
    create_events(pg_conn, pg_schema)  # the source's model fits: only the unreachable side fails
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=day(3, 1),
                       **{f"{'source' if side == 'source' else 'dst'}_port": 5999})

    summary = transfer(spark, config, NOW1)

    assert summary.status == "ERROR"
    assert summary.error_type == "ConnectionFailure"
    assert "127.0.0.1:5999" in summary.error
    assert "Traceback" not in summary.error
    assert summary.windows == 0
    if side == "source":
        assert "PostgreSQL source 'src'" in summary.error
        assert not schema_exists(pg_conn, dst_schema)  # nothing was prepared
        with pytest.raises(ConnectionFailure) as caught:
            reader_for(config.source("src")).check()
        assert (caught.value.host, caught.value.port) == ("127.0.0.1", 5999)
    else:
        assert f"PostgreSQL destination '{DESTINATION}'" in summary.error


# -- 7: a failing window keeps the windows before it -------------------------------------------


def test_a_failing_window_keeps_earlier_windows_and_the_next_transfer_resumes(
        spark, pg_conn, pg_schema, dst_schema):
    days = [day(3, d) for d in range(1, 6)]
    now = day(3, 6)
    create_events(pg_conn, pg_schema, "events_nopk", primary_key=False)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 25, days, seed=7), "events_nopk")
    rows = source_rows(pg_conn, pg_schema, TENANT, "events_nopk")
    key, _, at, _ = next(r for r in rows if r[2] >= day(3, 3) and r[2] < day(3, 4))
    # another version of the key with its last-modified value: a conflict, refused
    insert_rows(pg_conn, pg_schema, [(key, TENANT, at, "dup")], "events_nopk")
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT,
                       min_start=day(3, 1), table="events_nopk")

    failed = transfer(spark, config, now)

    assert failed.status == "ERROR"
    assert f"id={key}" in failed.error
    assert failed.windows == 2  # 03-01 and 03-02 committed, 03-03 refused
    assert failed.state.watermark == day(3, 3)
    status = status_row(pg_conn, dst_schema)
    assert status["watermark"] == day(3, 3)
    assert destination_rows(pg_conn, dst_schema) == [r for r in rows if r[2] < day(3, 3)]
    assert tables_in(pg_conn, dst_schema) == ["_transfer_status", MODEL]

    pg_conn.execute(f'DELETE FROM "{pg_schema}".events_nopk WHERE payload = %s', ("dup",))
    writer = writer_for(config.destination(DESTINATION))
    try:
        request = TransferRequest(spark=spark, config=config, order=TransferOrder(destination=DESTINATION),
                                  writer=writer, transfer_id="t2", now=now)
        items = list(transfer_model(request, config.model(MODEL)))
    finally:
        writer.close()

    assert isinstance(items[0], ModelState)
    assert items[0].watermark == day(3, 3)  # the state the resumed transfer starts from
    outcomes = items[1:]
    assert all(isinstance(o, WindowOutcome) for o in outcomes)
    assert [o.partition_key for o in outcomes] == ["2024-03-03", "2024-03-04", "2024-03-05"]
    # from the last delivered row minus the lookback (the seeds' rule): that row again, then 03-03 on
    reread_from = items[0].high_watermark - LOOKBACK
    assert reread_from < day(3, 3)
    assert sum(o.result.rows_transferred for o in outcomes) == sum(r[2] >= reread_from for r in rows)
    assert outcomes[-1].result.state.watermark == now
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT, "events_nopk")
    assert status_row(pg_conn, dst_schema)["watermark"] == now


# -- 9: a dead transfer's staging table is cleaned up ---------------------------------------------


def test_a_dead_transfers_staging_table_is_dropped(spark, pg_conn, source, dst_schema):
    pg_conn.execute(f'CREATE SCHEMA "{dst_schema}"')
    leftover = STAGING_PREFIX + staging_suffix(MODEL, "deadbeef")
    other_model = STAGING_PREFIX + staging_suffix("other_model", "deadbeef")
    for name in (leftover, other_model):
        pg_conn.execute(f'CREATE UNLOGGED TABLE "{dst_schema}"."{name}" (id bigint)')
    config = pg_config(source_schema=source, dst_schema=dst_schema, tenant=TENANT, min_start=day(3, 3))

    summary = transfer(spark, config, NOW1)

    assert summary.status == "SUCCESS", summary.error
    tables = tables_in(pg_conn, dst_schema)
    assert leftover not in tables
    assert other_model in tables  # another model's staging is not ours to drop
    assert tables == sorted(["_transfer_status", MODEL, other_model])
    # nothing before the configured start, not even inside the lookback
    assert destination_rows(pg_conn, dst_schema) == [
        r for r in source_rows(pg_conn, source, TENANT) if r[2] >= day(3, 3)]


def test_a_value_the_destination_refuses_fails_the_window_with_its_reason(spark, pg_conn, source, dst_schema):
    """A payload that is not JSON, for a ``json`` column: PostgreSQL refuses it during the staging
    COPY (in a Spark Python worker); the error names the model and PostgreSQL's reason, without a
    traceback, and nothing is delivered."""
    model = events_model(f"{source}.events", min_start=day(3, 3))
    model["columns"] = [{**c, "data_type": "json"} if c["name_in_source"] == "payload" else c
                        for c in model["columns"]]
    config = parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config(dst_schema)}],
    }, now=NOW1)

    summary = transfer(spark, config, NOW1)

    assert summary.status == "ERROR"
    assert summary.error_type == "DataError"
    assert f"model '{MODEL}'" in summary.error
    assert "COPY into the staging table failed: invalid input syntax for type json" in summary.error
    assert "Traceback" not in summary.error
    assert destination_rows(pg_conn, dst_schema) == []
    assert tables_in(pg_conn, dst_schema) == ["_transfer_status", MODEL]
