"""Precision end to end against the real PostgreSQL: ties, microseconds, epoch 0, late commits.

The traps of DESIGN_NOTES section 2, each with a row placed on it:

- a row stamped exactly at the stored watermark (inside a window and on a window edge), committed
  after the transfer that stored it, is read by the next one even with ``lookback_window: 0``
  (``>=``, not ``>``; the watermark keeps its microseconds, it is not rounded up);
- a row stamped exactly at the high watermark is delivered, and not counted as a delta row;
- microseconds survive in ``timestamptz`` and ``timestamp`` (without time zone) columns, at and
  1 µs either side of window edges and of the edges of a parallel (split) read;
- epoch 0 is a value: a model starting at 1970-01-01T00:00:00Z with rows on it and 1 µs after it;
- a late commit inside the lookback is delivered, one older than the lookback is not (the known
  limit: the integrity check's comparison of (key, last-modified) finds exactly that row);
- ``rows_transferred``, ``delta_rows_transferred`` and ``most_recent_last_updated_at`` in a
  crafted scenario, per the seed's definitions (the lookback overlap is counted in rows, never in
  delta rows; a delta row is strictly newer than the previous high watermark).

Every test compares the destination with the tenant's source rows, every column, microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from deltalake import DeltaTable

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.core.planning import windowing_for
from transfer_platform.core.timeutil import EPOCH, isoformat, utc
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.delta import read_state
from transfer_platform.errors import TransferPlatformError
from transfer_platform.orchestration.catalog.partitions import partitions_for
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import ModelSummary, WindowOutcome
from transfer_platform.transfers.runner import TransferRequest, run_transfer, transfer_model
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.destinations import ONE_ROW_PER_KEY
from transfer_platform_tests.support.events import (
    COLUMNS,
    MODEL,
    Row,
    create_events,
    insert_rows,
    normalize,
    source_rows,
)
from transfer_platform_tests.support.postgres import (
    destination_rows,
    pg_connection_config,
    status_row,
)
from transfer_platform_tests.support.spark import rows_by_partition

pytestmark = pytest.mark.integration

TENANT = "acme"
OTHER = "globex"
US = timedelta(microseconds=1)
START = datetime(2024, 3, 4, tzinfo=UTC)
LATER_START = datetime(2024, 3, 4, 10, tzinfo=UTC)  # fewer windows before a midday "now"
HOURLY = 3_600


def at(hour: int, minute: int = 0, second: int = 0, micro: int = 0, *, day: int = 4) -> datetime:
    return datetime(2024, 3, day, hour, minute, second, micro, tzinfo=UTC)


# -- destinations, configurations, transfers (as in test_window_sizes, kept local) ------------


@dataclass(frozen=True)
class Destination:
    """Where a test delivers: a PostgreSQL schema or a folder of Delta tables."""

    kind: str
    schema: str
    path: Path

    def block(self) -> dict:
        if self.kind == "delta":
            return {"name": DESTINATION, "vendor": "delta", "recipient": "rcpt",
                    "connection": {"path": str(self.path)}}
        return {"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                "connection": pg_connection_config(self.schema)}

    def rows(self, conn: psycopg.Connection) -> list[Row]:
        if self.kind == "delta":
            table = DeltaTable(str(self.path / MODEL)).to_pyarrow_table()
            return normalize(tuple(r[c] for c in COLUMNS) for r in table.to_pylist())
        return destination_rows(conn, self.schema)

    def state(self, conn: psycopg.Connection) -> ModelState:
        if self.kind == "delta":
            return read_state(DeltaTable(str(self.path / MODEL)))
        status = status_row(conn, self.schema)
        state = ModelState.from_json(status["state"])
        assert (status["watermark"], status["high_watermark"]) == (state.watermark, state.high_watermark)
        return state


@pytest.fixture(params=["postgres"])
def destination(request, dst_schema, tmp_path) -> Destination:
    return Destination(request.param, dst_schema, tmp_path / "delta")


def make_config(source_schema: str, destination: Destination, *, start: datetime = START,
                window: int | None = HOURLY, lookback: int | str | None = 0, table: str = "events",
                parallel: int = 1, extra_columns: tuple[str, ...] = ()) -> PlatformConfig:
    model = events_model(f"{source_schema}.{table}", min_start=start)
    if window is None:
        del model["max_transfer_time_window_seconds"]
    else:
        model["max_transfer_time_window_seconds"] = window
    model["columns"] += [{"name_in_source": c, "data_type": "timestamp"} for c in extra_columns]
    source = {"name": "src", "vendor": "postgres", "connection": pg_connection_config(),
              "max_concurrent_queries_per_transfer": parallel}
    if lookback is not None:  # None: the vendor's default (30 s for postgres)
        source["lookback_window"] = lookback
    return parse_config({
        "sources": [source],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [destination.block()],
    }, now=start + timedelta(days=30))


def transfer(spark, config: PlatformConfig, now: datetime, transfer_id: str) -> ModelSummary:
    writer = writer_for(config.destination(DESTINATION))
    try:
        (summary,) = run_transfer(
            TransferRequest(spark=spark, config=config, order=TransferOrder(destination=DESTINATION),
                            writer=writer, transfer_id=transfer_id, now=now), config.models)
    finally:
        writer.close()
    assert summary.status == "SUCCESS", summary.error
    return summary


def reads_of(spark, config: PlatformConfig, now: datetime, transfer_id: str,
             partitions: list[Window] | None = None) -> list[WindowOutcome]:
    """A transfer, window by window: what each read asked for and moved."""
    writer = writer_for(config.destination(DESTINATION))
    request = TransferRequest(spark=spark, config=config, order=TransferOrder(destination=DESTINATION),
                              writer=writer, transfer_id=transfer_id, now=now)
    try:
        items = list(transfer_model(request, config.model(MODEL), partitions=partitions))
    except TransferPlatformError as exc:
        pytest.fail(f"transfer {transfer_id} failed: {exc}")
    finally:
        writer.close()
    return [item for item in items if isinstance(item, WindowOutcome)]


def bounds(outcomes: list[WindowOutcome]) -> list[tuple[datetime, datetime]]:
    return [(o.planned.bounds.lower, o.planned.bounds.upper) for o in outcomes]


def rows_at(moments: list[datetime], first_id: int, payload: str = "v1") -> list[Row]:
    """A tenant row and another tenant's row at each moment (the other tenant's never arrive)."""
    rows = []
    for k, moment in enumerate(moments):
        rows.append((first_id + 2 * k, TENANT, moment, f"{payload} {moment.isoformat()}"))
        rows.append((first_id + 2 * k + 1, OTHER, moment, f"{OTHER} {payload}"))
    return rows


def tenant_source(conn: psycopg.Connection, schema: str, lower: datetime, upper: datetime,
                  table: str = "events") -> list[Row]:
    return [r for r in source_rows(conn, schema, TENANT, table) if lower <= r[2] < upper]


def update_row(conn: psycopg.Connection, schema: str, key: int, moment: datetime, payload: str) -> None:
    conn.execute(f'UPDATE "{schema}".events SET updated_at = %s, payload = %s WHERE id = %s',
                 (moment, payload, key))


def key_and_time(rows: list[Row]) -> set[tuple[int, datetime]]:
    """What the integrity check compares: (primary key, last-modified)."""
    return {(r[0], r[2]) for r in rows}


# -- rows stamped exactly at the watermark or the high watermark ----------------------------


@pytest.mark.parametrize(
    ("now1", "destination"),
    [
        pytest.param(at(12, 34, 56, 789_012), "postgres", id="inside-a-window"),
        pytest.param(at(13), "postgres", id="on-a-window-edge"),
        pytest.param(at(12, 34, 56, 789_012), "delta", id="inside-a-window-delta"),
        pytest.param(at(13), "delta", id="on-a-window-edge-delta"),
    ],
    indirect=["destination"],
)
def test_a_row_stamped_exactly_at_the_watermark_is_delivered_without_lookback(
        spark, pg_conn, pg_schema, destination, now1):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, rows_at([at(10, 15), now1 - US, now1 - timedelta(hours=2)], 1))
    config = make_config(pg_schema, destination, start=LATER_START, lookback=0)

    transfer(spark, config, now1, "t1")

    assert destination.state(pg_conn).watermark == now1  # to the microsecond, not rounded
    assert destination.rows(pg_conn) == tenant_source(pg_conn, pg_schema, LATER_START, now1)
    # committed after the transfer, stamped exactly at the watermark: a new row and an update
    insert_rows(pg_conn, pg_schema, rows_at([now1], 101, "at the watermark"))
    update_row(pg_conn, pg_schema, 1, now1, "updated, at the watermark")
    now2 = now1 + timedelta(hours=2)

    outcomes = reads_of(spark, config, now2, "t2")

    # lookback 0: the read starts at the last delivered row (now1 - 1 us), the seeds' rule
    assert outcomes[0].planned.bounds.lower == now1 - US
    assert sum(o.result.rows_transferred for o in outcomes) == 3  # it again, those two, nothing else
    assert sum(o.result.delta_rows_transferred for o in outcomes) == 2
    assert destination.rows(pg_conn) == source_rows(pg_conn, pg_schema, TENANT)
    assert destination.state(pg_conn).high_watermark == now1


@pytest.mark.parametrize("destination", ONE_ROW_PER_KEY, indirect=True)
def test_a_late_row_stamped_at_the_high_watermark_is_delivered_but_is_no_delta(
        spark, pg_conn, pg_schema, destination):
    """The high watermark is the newest last-modified delivered; a row committed later with that
    same value (inside the 30 s default lookback) still arrives. Per the seed's definition it is
    not a delta row: only values strictly newer than the high watermark are."""
    now1 = at(12, 0, 20)
    high = now1 - timedelta(seconds=10, microseconds=1)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, rows_at([at(11, 30), high], 1))
    config = make_config(pg_schema, destination, start=LATER_START, lookback=None)  # default: 30 s
    transfer(spark, config, now1, "t1")
    assert destination.state(pg_conn).high_watermark == high

    insert_rows(pg_conn, pg_schema, rows_at([high], 101, "late, same time"))
    summary = transfer(spark, config, now1 + timedelta(minutes=5), "t2")

    assert destination.rows(pg_conn) == source_rows(pg_conn, pg_schema, TENANT)
    assert (summary.rows_transferred, summary.delta_rows_transferred) == (2, 0)  # both at `high`
    assert summary.state.high_watermark == high


# -- microseconds in both kinds of timestamp columns ---------------------------------------


def _split_edges(lower: datetime, upper: datetime, parts: int) -> list[datetime]:
    """Where Spark splits a JDBC read on a timestamp column into ``parts`` queries (its stride,
    in microseconds; checked against the real split below)."""
    lo, hi = ((t - EPOCH) // US for t in (lower, upper))
    stride = (hi - lo) // parts
    return [EPOCH + US * (lo + i * stride) for i in range(1, parts)]


def _stored(moment: datetime | None, column_type: str) -> datetime | None:
    """A UTC value as the source column holds it: naive in a ``timestamp`` column."""
    return moment.replace(tzinfo=None) if moment is not None and column_type == "timestamp" else moment


@pytest.mark.parametrize("parallel", [1, 3], ids=["one-query", "split-in-3"])
@pytest.mark.parametrize(("lm_type", "other_type"),
                         [("timestamptz", "timestamp"), ("timestamp", "timestamptz")])
def test_microseconds_arrive_intact_in_timestamptz_and_timestamp_columns(
        spark, pg_conn, pg_schema, destination, lm_type, other_type, parallel):
    now = at(3, 17, 3, 123_457)
    splits = _split_edges(at(3), now, 3)  # the last window's split points (parallel reads)
    edges = [START + timedelta(hours=h) for h in range(4)] + splits  # and the hourly windows' edges
    moments = sorted({m for e in edges for m in (e - US, e, e + US)} | {
        at(1, 2, 3, 1), at(1, 2, 3, 999_999), at(2, 59, 59, 999_999), now - US, now})
    others = [datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
              datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC), datetime(1900, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
              datetime(2038, 1, 19, 3, 14, 7, 999_999, tzinfo=UTC),
              datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), None]
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint PRIMARY KEY, organization_id text, '
                    f"updated_at {lm_type}, payload text, other_at {other_type})")
    rows = [(2 * i + j + 1, tenant, _stored(moment, lm_type), f"p{i}",
             _stored(others[i % len(others)], other_type))
            for i, moment in enumerate(moments) for j, tenant in enumerate((TENANT, OTHER))]
    with pg_conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{pg_schema}".events VALUES (%s, %s, %s, %s, %s)', rows)
    config = make_config(pg_schema, destination, parallel=parallel, extra_columns=("other_at",))
    if parallel > 1:  # the rows around each split point really straddle two of Spark's queries
        last = ReadBounds(at(3), now, Window(at(3), now))
        frame = reader_for(config.source("src")).read(spark, ReadRequest(config.model(MODEL), TENANT, last))
        by_partition = rows_by_partition(frame, "unix_micros(updated_at) AS us")
        parts = [set(by_partition.get(i, ())) for i in range(parallel)]
        for i, edge in enumerate(splits):
            assert (edge - EPOCH) // US in parts[i + 1]
            assert (edge - US - EPOCH) // US in parts[i]

    summary = transfer(spark, config, now, "t1")

    def table(schema: str, where: str = "") -> list[tuple]:
        got = pg_conn.execute(f"SELECT id, organization_id, updated_at, payload, other_at "
                              f'FROM "{schema}".events {where} ORDER BY id').fetchall()
        return [(i, o, utc(u), p, None if x is None else utc(x)) for i, o, u, p, x in got]

    expected = [r for r in table(pg_schema, f"WHERE organization_id = '{TENANT}'") if START <= r[2] < now]
    assert len(expected) == len(moments) - 2  # all but the one before the start and the one at now
    assert {r[4] for r in expected} == set(others)  # every extreme value is in the batch
    assert table(destination.schema) == expected
    assert summary.rows_transferred == len(expected)  # no lookback: each row read once
    assert summary.state.high_watermark == now - US


# -- epoch 0 is a value -----------------------------------------------------------------------


@pytest.mark.parametrize("destination", ONE_ROW_PER_KEY, indirect=True)
def test_a_watermark_at_epoch_zero_is_a_value_not_unset(spark, pg_conn, pg_schema, destination):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [(1, TENANT, EPOCH, "at epoch 0"), (2, TENANT, EPOCH + US, "1 µs later"),
                                     (3, OTHER, EPOCH, "other tenant")])
    config = make_config(pg_schema, destination, start=EPOCH, window=60, lookback=None)
    partitions = partitions_for(windowing_for(config, DESTINATION, config.model(MODEL)))
    assert partitions.get_first_partition_key() == "1970-01-01T00:00"

    # the first transfer ends 1 µs after the epoch: it moves the row at 0 only
    first = transfer(spark, config, EPOCH + US, "t1")

    assert destination.rows(pg_conn) == [(1, TENANT, EPOCH, "at epoch 0")]
    state = destination.state(pg_conn)
    assert (state.watermark, state.high_watermark) == (EPOCH + US, EPOCH)
    assert '"high_watermark_us": 0' in state.to_json()
    assert first.as_dict()["most_recent_last_updated_at"] == "1970-01-01T00:00:00.000000+00:00"

    # the second re-reads the row at 0 (lookback) and the one at 1 µs; only that one is new
    second = transfer(spark, config, EPOCH + timedelta(minutes=2), "t2")

    assert (second.rows_transferred, second.delta_rows_transferred) == (2, 1)
    assert destination.rows(pg_conn) == source_rows(pg_conn, pg_schema, TENANT)
    assert destination.state(pg_conn).high_watermark == EPOCH + US

    # later transfers read from the last delivered row minus the lookback: the third from the
    # epoch again (that row is at 1 us; the start clips the lookback), the fourth not
    late = EPOCH + timedelta(minutes=4, seconds=50)
    insert_rows(pg_conn, pg_schema, [(4, TENANT, late, "near the third transfer's now")])
    third = reads_of(spark, config, EPOCH + timedelta(minutes=5), "t3")
    fourth = reads_of(spark, config, EPOCH + timedelta(minutes=5, seconds=20), "t4")

    assert bounds(third)[0][0] == EPOCH
    assert sum(o.result.rows_transferred for o in third) == 3
    assert sum(o.result.delta_rows_transferred for o in third) == 1
    assert bounds(fourth) == [(EPOCH + timedelta(minutes=4, seconds=20),
                               EPOCH + timedelta(minutes=5, seconds=20))]
    # nothing new: only the lookback overlap is counted, and it is no delta
    assert [(o.result.rows_transferred, o.result.delta_rows_transferred) for o in fourth] == [(1, 0)]
    assert destination.rows(pg_conn) == source_rows(pg_conn, pg_schema, TENANT)


# -- late commits ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lookback", "seconds"),
    [pytest.param(None, 30, id="postgres-default-30s"), pytest.param("PT45S", 45, id="PT45S"),
     pytest.param(120, 120, id="120s"), pytest.param(0, 0, id="none")],
)
def test_a_late_commit_inside_the_lookback_arrives_and_one_older_does_not(
        spark, pg_conn, pg_schema, destination, lookback, seconds):
    now1 = at(12, 0, 7, 250_000)
    back = timedelta(seconds=seconds)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, rows_at([at(10), at(11, 59)], 1))
    config = make_config(pg_schema, destination, start=LATER_START, lookback=lookback)
    transfer(spark, config, now1, "t1")

    # committed after the first transfer, stamped before its "now"; the reference reads from the
    # last delivered row (11:59) minus the lookback
    last = at(11, 59)
    inside = [last - back, last - back + US, now1 - US]  # the lookback's edge is inclusive
    if seconds == 0:
        inside = [last, now1]  # without lookback: from the last delivered value itself
    too_old = last - back - US
    insert_rows(pg_conn, pg_schema, rows_at([*inside, too_old], 101, "late"))
    update_row(pg_conn, pg_schema, 1, too_old, "late update, too old")
    transfer(spark, config, now1 + timedelta(minutes=10), "t2")

    source = source_rows(pg_conn, pg_schema, TENANT)
    delivered = destination.rows(pg_conn)
    # the known limit: what the integrity check reports as missing (new row) and stale (update)
    assert key_and_time(source) - key_and_time(delivered) == {
        (101 + 2 * len(inside), too_old), (1, too_old)}
    assert [r for r in delivered if r[0] != 1] == [r for r in source if r[2] != too_old]
    assert next(r for r in delivered if r[0] == 1)[2:] == (at(10), f"v1 {at(10).isoformat()}")


# -- metrics ------------------------------------------------------------------------------------


def test_metrics_count_the_lookback_in_rows_but_not_in_delta_rows(spark, pg_conn, pg_schema, destination):
    """Hourly windows from 00:00, the postgres default lookback (30 s). Row ids in comments."""
    a, b, c, d, e = at(0, 10, 0, 1), at(1, 59, 45, 500_000), at(2, 30), at(2, 59, 59, 999_999), at(3, 0, 5, 123_456)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, rows_at([a, b, c, d, e], 1))  # tenant ids 1, 3, 5, 7, 9
    config = make_config(pg_schema, destination, lookback=None)
    now1 = at(3, 0, 10)

    first = reads_of(spark, config, now1, "t1")

    assert bounds(first) == [(START, at(1)), (at(0, 59, 30), at(2)), (at(1, 59, 30), at(3)),
                             (at(2, 59, 30), now1)]
    # b is read again by the lookback of the 02:00 window, d by that of the 03:00 window
    assert [o.result.rows_transferred for o in first] == [1, 1, 3, 2]
    assert [o.result.delta_rows_transferred for o in first] == [1, 1, 2, 1]
    assert first[-1].result.state.high_watermark == e

    # the next read starts at the last delivered row (e) minus the lookback: 03:00:05.123456 - 30 s
    f, g, h, i, j = at(3, 10, 10), e, at(2, 59, 50), e - timedelta(seconds=30) - US, at(3, 59, 45)
    insert_rows(pg_conn, pg_schema, [(101, TENANT, f, "new"), (102, TENANT, g, "late, = high watermark"),
                                     (103, TENANT, h, "late, inside the lookback"),
                                     (104, TENANT, i, "late, 1 µs too old"), (105, TENANT, j, "new")])
    update_row(pg_conn, pg_schema, 5, at(3, 20), "c, updated")  # newer than the high watermark
    update_row(pg_conn, pg_schema, 1, e - timedelta(seconds=30), "a, late update on the edge")

    second = transfer(spark, config, at(4), "t2")

    # read: [e - 30 s, 04:00) = a', d, e, g, h, f, c', j; i is 1 µs too old
    assert (second.windows, second.rows_transferred, second.delta_rows_transferred) == (1, 8, 3)
    assert second.state.high_watermark == j
    assert second.as_dict()["most_recent_last_updated_at"] == isoformat(j) == "2024-03-04T03:59:45.000000+00:00"
    assert second.as_dict()["watermark"] == "2024-03-04T04:00:00.000000+00:00"
    assert destination.rows(pg_conn) == [r for r in source_rows(pg_conn, pg_schema, TENANT) if r[0] != 104]

    # nothing new: the next transfer reads only the lookback overlap (j), which is no delta
    third = transfer(spark, config, at(4, 30), "t3")
    assert (third.rows_transferred, third.delta_rows_transferred) == (1, 0)
    assert third.state.high_watermark == j

    # re-moving an old window (a Dagster partition chosen again): rows, but no delta rows
    (old,) = reads_of(spark, config, at(5), "t4", partitions=[Window(at(1), at(2))])
    assert (old.result.rows_transferred, old.result.delta_rows_transferred) == (1, 0)  # b
    assert old.result.state.watermark == at(4, 30)  # an old window does not move it back
