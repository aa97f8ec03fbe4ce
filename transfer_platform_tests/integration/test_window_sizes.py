"""Window sizes end to end against the real PostgreSQL: no row skipped, none read twice.

For window sizes from 1 s to a week (some that divide no minute, ISO-8601 ones too) and a
configured start at an odd second, a backfill makes exactly the reads the documented grid gives:
partitions on the largest cron grid not above the window (weeks start on Mondays), reads of the
window size inside a minute when the window is below one, the first read clipped to the start and
the last to "now". The expected reads come from :func:`read_edges`, an oracle written here from the
docs/design.md (Windows), not from the planner. Rows sit on every read boundary and 1 µs either side of it: each
arrives exactly once (with no lookback the reads' row counts add up to the rows delivered), and
nothing before the start or at/after "now" is read.

Also: the recipient's start overrides the model's, a failure in window k resumes at window k,
empty windows are recorded (the watermark passes them; Dagster records one materialization per
partition, empty ones included).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import dagster as dg
import psycopg
import pytest
import yaml
from deltalake import DeltaTable

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.core.planning import windowing_for
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Window
from transfer_platform.definitions import build_definitions
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.delta import read_state
from transfer_platform.errors import DataError, TransferPlatformError
from transfer_platform.orchestration.catalog.partitions import partitions_for
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import WindowOutcome
from transfer_platform.transfers.runner import TransferRequest, transfer_model
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

pytestmark = pytest.mark.integration

TENANT = "acme"
OTHER = "globex"
US = timedelta(microseconds=1)
MINUTE, HOUR, DAY, WEEK = 60, 3_600, 86_400, 7 * 86_400
FIRST_MONDAY = datetime(1970, 1, 5, tzinfo=UTC)  # weekly partitions start on Mondays
START = datetime(2024, 3, 6, 10, 20, 17, tzinfo=UTC)  # a Wednesday, at an odd second
LATE_START = START + timedelta(seconds=30)  # sub-minute windows: a short span still crosses a minute
NOT_ON_A_TICK = timedelta(microseconds=250_001)


# -- the oracle: the reads the documentation promises ----------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    window: int | str  # max_transfer_time_window_seconds as written in the configuration
    seconds: int  # the same, in seconds
    grid: int  # the documented partition grid, in seconds
    span: timedelta  # from the configured start to the backfill's "now" (plus NOT_ON_A_TICK)
    lookback: int = 0
    start: datetime = START

    @property
    def piece(self) -> int:
        """The length of one read: the window below a minute, else the grid."""
        return min(self.seconds, self.grid)


CASES = [
    Case("1s", 1, 1, MINUTE, timedelta(seconds=20), start=LATE_START),
    Case("7s", 7, 7, MINUTE, timedelta(seconds=40), lookback=5, start=LATE_START),
    Case("59s", 59, 59, MINUTE, timedelta(minutes=2, seconds=30)),
    Case("60s", 60, 60, MINUTE, timedelta(minutes=3)),
    Case("90s", 90, 90, MINUTE, timedelta(minutes=3), lookback=30),
    Case("PT90S", "PT90S", 90, MINUTE, timedelta(minutes=3)),
    Case("3600s", 3_600, 3_600, HOUR, timedelta(hours=4), lookback=30),
    Case("5400s", 5_400, 5_400, HOUR, timedelta(hours=3)),
    Case("86400s", 86_400, 86_400, DAY, timedelta(days=4)),
    Case("604800s", 604_800, 604_800, WEEK, timedelta(weeks=3), lookback=300),
    Case("P7D", "P7D", 604_800, WEEK, timedelta(weeks=2, days=3)),
]
BY_ID = {case.id: case for case in CASES}


def grid_floor(moment: datetime, grid: int) -> datetime:
    anchor = FIRST_MONDAY if grid == WEEK else EPOCH
    step = timedelta(seconds=grid)
    return anchor + (moment - anchor) // step * step


def read_edges(case: Case, start: datetime, end: datetime) -> list[datetime]:
    """``[start, e1, e2, ..., end]``: where one read must stop and the next begin."""
    inner = set()
    tick = grid_floor(start, case.grid)
    while tick < end:
        for offset in range(0, case.grid, case.piece):
            edge = tick + timedelta(seconds=offset)
            if start < edge < end:
                inner.add(edge)
        tick += timedelta(seconds=case.grid)
    return [start, *sorted(inner), end]


def expected_reads(edges: list[datetime], lookback: int, configured_start: datetime = START):
    """``(lower, upper)`` of each read: one lookback before its edge, never before the start."""
    back = timedelta(seconds=lookback)
    return [(max(a - back, configured_start), b) for a, b in pairwise(edges)]


def resumed_reads(reads: list[tuple[datetime, datetime]], high: datetime | None, lookback: int,
                  configured_start: datetime = START) -> list[tuple[datetime, datetime]]:
    """The reads of an incremental transfer: the first starts at the greatest value delivered
    minus the lookback (the change-detection seed), the configured start if none was; the others
    one lookback before their edge."""
    if not reads:
        return reads
    anchor = configured_start if high is None else high - timedelta(seconds=lookback)
    return [(max(anchor, configured_start), reads[0][1]), *reads[1:]]


def placed_rows(moments: Iterable[datetime], first_id: int = 1) -> list[Row]:
    """One row of the tenant and one of another tenant at each moment."""
    rows, key = [], first_id
    for moment in sorted(set(moments)):
        for tenant in (TENANT, OTHER):
            rows.append((key, tenant, moment, f"{tenant} {moment.isoformat()} '\\"))
            key += 1
    return rows


def around(edges: Iterable[datetime]) -> set[datetime]:
    return {m for e in edges for m in (e - US, e, e + US)}


def tenant_between(rows: list[Row], lower: datetime, upper: datetime) -> list[Row]:
    return normalize(r for r in rows if r[1] == TENANT and lower <= r[2] < upper)


# -- running transfers ----------------------------------------------------------------------


@dataclass
class Run:
    state: ModelState  # the committed state the transfer started from
    outcomes: list[WindowOutcome]
    error: TransferPlatformError | None

    @property
    def reads(self) -> list[tuple[datetime, datetime]]:
        return [(o.planned.bounds.lower, o.planned.bounds.upper) for o in self.outcomes]

    @property
    def rows_per_read(self) -> list[int]:
        return [o.result.rows_transferred for o in self.outcomes]

    @property
    def delta_rows(self) -> int:
        return sum(o.result.delta_rows_transferred for o in self.outcomes)


def run_model(spark, config: PlatformConfig, now: datetime, transfer_id: str = "t1",
              model: str = MODEL) -> Run:
    writer = writer_for(config.destination(DESTINATION))
    request = TransferRequest(spark=spark, config=config, order=TransferOrder(destination=DESTINATION),
                              writer=writer, transfer_id=transfer_id, now=now)
    items: list = []
    error = None
    try:
        for item in transfer_model(request, config.model(model)):
            items.append(item)
    except TransferPlatformError as exc:
        error = exc
    finally:
        writer.close()
    return Run(items[0], items[1:], error)


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

    def rows(self, conn: psycopg.Connection, model: str = MODEL) -> list[Row]:
        if self.kind == "delta":
            table = DeltaTable(str(self.path / model)).to_pyarrow_table()
            return normalize(tuple(r[c] for c in COLUMNS) for r in table.to_pylist())
        return destination_rows(conn, self.schema, model)

    def state(self, conn: psycopg.Connection, model: str = MODEL) -> ModelState:
        if self.kind == "delta":
            return read_state(DeltaTable(str(self.path / model)))
        status = status_row(conn, self.schema, model)
        state = ModelState.from_json(status["state"])
        # the readable columns of _transfer_status say the same as the state
        assert (status["watermark"], status["high_watermark"]) == (state.watermark, state.high_watermark)
        return state


@pytest.fixture(params=["postgres"])
def destination(request, dst_schema, tmp_path) -> Destination:
    return Destination(request.param, dst_schema, tmp_path / "delta")


def make_config(source_schema: str, destination: Destination, *, window: int | str | None,
                start: datetime, lookback: int | str = 0, recipient_start: int | None = None,
                table: str = "events", whole_model: str | None = None,
                windowed: bool = True) -> PlatformConfig:
    """One postgres source, the ``events`` model (and optionally ``whole_model``: the same table
    without a window size), one recipient, one destination."""
    models = []
    if windowed:
        model = events_model(f"{source_schema}.{table}", min_start=start)
        model["max_transfer_time_window_seconds"] = window
        models.append(model)
    if whole_model:
        whole = events_model(f"{source_schema}.{table}", min_start=start)
        del whole["max_transfer_time_window_seconds"]
        models.append({**whole, "model_name": whole_model})
    recipient = {"name": "rcpt", "id_in_provider_system": TENANT}
    if recipient_start is not None:
        recipient["default_full_refresh_min_start_time_epoch"] = recipient_start
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config(),
                     "lookback_window": lookback}],
        "models": models,
        "recipients": [recipient],
        "destinations": [destination.block()],
    }, now=start + timedelta(days=60))


# -- every window size: boundaries, start, "now" --------------------------------------------

SIZE_PARAMS = [pytest.param(case, "postgres", id=case.id) for case in CASES] + [
    pytest.param(BY_ID["7s"], "delta", id="7s-delta"),
    pytest.param(BY_ID["86400s"], "delta", id="86400s-delta"),
]


@pytest.mark.parametrize(("case", "destination"), SIZE_PARAMS, indirect=["destination"])
def test_every_row_arrives_exactly_once_whatever_the_window(spark, pg_conn, pg_schema, destination, case):
    start = case.start
    now = start + case.span + NOT_ON_A_TICK
    now2 = now + timedelta(seconds=case.piece) * 3 / 2
    edges = read_edges(case, start, now)
    edges2 = read_edges(case, now, now2)
    assert len(edges) >= 4  # the test crosses several windows
    moments = around(edges[:-1]) | around(edges2)  # both transfers' edges, "now" and "now2" included
    moments |= {start - timedelta(seconds=1), grid_floor(start, case.grid),  # before the start
                start - timedelta(seconds=case.lookback), start - timedelta(seconds=case.lookback) + US}
    moments |= {a + (b - a) / 2 for a, b in pairwise(edges + edges2[1:])}  # inside each read
    rows = placed_rows(moments)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, rows)
    config = make_config(pg_schema, destination, window=case.window, start=start, lookback=case.lookback)

    first = run_model(spark, config, now)

    assert first.error is None, first.error
    assert first.state == ModelState()
    assert first.reads == expected_reads(edges, case.lookback, start)
    expected = tenant_between(rows, start, now)
    assert destination.rows(pg_conn) == expected  # every column, microseconds included
    # each read selected exactly the tenant's rows inside its bounds; the reads' counts only
    # exceed the rows delivered by the lookback overlap (none without a lookback)
    assert first.rows_per_read == [len(tenant_between(rows, lo, hi)) for lo, hi in first.reads]
    if case.lookback == 0:
        assert sum(first.rows_per_read) == len(expected)
    assert first.delta_rows == len(expected)
    state = destination.state(pg_conn)
    assert state.watermark == now
    assert state.high_watermark == now - US
    assert state.completed == (Window(start, now),)

    # the next transfer picks up the rows at and after the last delivered one (now - 1 us), the
    # lookback included
    second = run_model(spark, config, now2, transfer_id="t2")

    assert second.error is None, second.error
    assert second.state.watermark == now
    assert second.reads == resumed_reads(expected_reads(edges2, case.lookback, start), now - US,
                                         case.lookback, start)
    assert second.rows_per_read == [len(tenant_between(rows, lo, hi)) for lo, hi in second.reads]
    assert second.delta_rows == len(tenant_between(rows, now, now2))
    assert destination.rows(pg_conn) == tenant_between(rows, start, now2)
    assert destination.state(pg_conn).watermark == now2


# -- the recipient's start ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recipient_start", "windowed"),
    [
        pytest.param(START + timedelta(hours=2, seconds=26), True, id="later-than-the-model"),
        pytest.param(START - timedelta(hours=5, seconds=8), True, id="earlier-than-the-model"),
        pytest.param(EPOCH, False, id="epoch-0-unpartitioned-only"),
    ],
)
def test_the_recipients_start_overrides_the_models(spark, pg_conn, pg_schema, destination,
                                                    recipient_start, windowed):
    """``default_full_refresh_min_start_time_epoch`` applies to every model of the recipient,
    with or without a window size (epoch 0 included: it is a value, not "unset")."""
    hourly = BY_ID["3600s"]
    now = START + timedelta(hours=6) + NOT_ON_A_TICK
    moments = around([START, recipient_start, now, EPOCH + timedelta(hours=1)])
    if windowed:
        moments |= around(read_edges(hourly, min(START, recipient_start), now))
    moments |= {START - timedelta(days=30), START + timedelta(hours=3, minutes=33)}
    rows = placed_rows(moments)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, rows)
    config = make_config(pg_schema, destination, window=hourly.window, start=START, lookback=30,
                         recipient_start=int((recipient_start - EPOCH).total_seconds()),
                         whole_model="events_all", windowed=windowed)
    models = [MODEL, "events_all"] if windowed else ["events_all"]
    expected = tenant_between(rows, recipient_start, now)
    assert expected != tenant_between(rows, START, now)  # the override makes a difference

    for model in models:
        run = run_model(spark, config, now, model=model)

        assert run.error is None, run.error
        assert run.reads[0][0] == recipient_start  # the first read starts at the override
        if model == MODEL:
            assert run.reads == expected_reads(read_edges(hourly, recipient_start, now), 30,
                                               configured_start=recipient_start)
            partitions = partitions_for(windowing_for(config, DESTINATION, config.model(MODEL)))
            first = partitions.time_window_for_partition_key(partitions.get_first_partition_key())
            assert first.start <= recipient_start < first.end
        else:
            assert run.reads == [(recipient_start, now)]
        assert destination.rows(pg_conn, model) == expected
        state = destination.state(pg_conn, model)
        assert state.completed == (Window(recipient_start, now),)
        assert state.watermark == now


# -- a failure in window k --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "lookback", "failing"),
    [
        pytest.param(BY_ID["7s"], 3, 4, id="7s-chunk-inside-a-minute"),
        pytest.param(BY_ID["3600s"], "PT30S", 2, id="hourly"),
    ],
)
def test_after_a_failure_in_window_k_the_next_transfer_resumes_at_window_k(
        spark, pg_conn, pg_schema, destination, case, lookback, failing):
    """Window k (index ``failing``) holds two versions of a key with the same last-modified value
    (a conflict): windows before k commit, k is refused;
    once the source is fixed the next transfer starts at window k (one lookback before it) and
    the destination ends equal to the source."""
    back = 30 if lookback == "PT30S" else lookback
    start = case.start
    now = start + case.span + NOT_ON_A_TICK
    edges = read_edges(case, start, now)
    broken_from, broken_until = edges[failing], edges[failing + 1]
    moments = around(edges[:-1]) | {a + (b - a) / 3 for a, b in pairwise(edges)}
    moments |= {broken_from - timedelta(seconds=back), broken_from - timedelta(seconds=back) - US}
    rows = placed_rows(moments)
    create_events(pg_conn, pg_schema, "events_nopk", primary_key=False)
    insert_rows(pg_conn, pg_schema, rows, "events_nopk")
    key, _, at, _ = next(r for r in rows if r[1] == TENANT and broken_from < r[2] < broken_until)
    duplicate = (key, TENANT, at, "the same key again")
    insert_rows(pg_conn, pg_schema, [duplicate], "events_nopk")
    config = make_config(pg_schema, destination, window=case.window, start=start, lookback=lookback,
                         table="events_nopk")
    reads = expected_reads(edges, back, start)

    failed = run_model(spark, config, now)

    assert isinstance(failed.error, DataError)
    assert f"id={key}" in str(failed.error)
    assert failed.reads == reads[:failing]  # windows 0..k-1 committed, in order
    after_failure = destination.state(pg_conn)
    assert after_failure.watermark == broken_from
    assert after_failure.high_watermark == broken_from - US  # the last row delivered
    assert destination.rows(pg_conn) == tenant_between(rows, start, broken_from)

    pg_conn.execute(f'DELETE FROM "{pg_schema}".events_nopk WHERE payload = %s', (duplicate[3],))
    resumed = run_model(spark, config, now, transfer_id="t2")

    assert resumed.error is None, resumed.error
    assert resumed.state.watermark == broken_from
    # window k is the first read, from the last delivered row minus the lookback; nothing before
    # that is read again
    assert resumed.reads == resumed_reads(reads[failing:], broken_from - US, back, start)
    assert resumed.reads[0][0] == broken_from - US - timedelta(seconds=back)
    assert resumed.rows_per_read == [len(tenant_between(rows, lo, hi)) for lo, hi in resumed.reads]
    assert sum(resumed.rows_per_read) < len(tenant_between(rows, start, now))
    fixed_source = [r for r in source_rows(pg_conn, pg_schema, TENANT, "events_nopk") if start <= r[2] < now]
    assert destination.rows(pg_conn) == fixed_source == tenant_between(rows, start, now)
    state = destination.state(pg_conn)
    assert (state.watermark, state.completed) == (now, (Window(start, now),))


# -- empty windows ------------------------------------------------------------------------------


@pytest.mark.parametrize("destination", ONE_ROW_PER_KEY, indirect=True)
def test_a_backfill_over_empty_windows_records_each_and_ends_at_now(spark, pg_conn, pg_schema, destination):
    case = BY_ID["3600s"]
    now = START + timedelta(hours=12) + NOT_ON_A_TICK
    edges = read_edges(case, START, now)
    busy = [edges[3], edges[8]]  # rows in two windows only
    rows = placed_rows([t + timedelta(minutes=m, microseconds=7) for t in busy for m in (1, 30)])
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, rows)
    config = make_config(pg_schema, destination, window=case.window, start=START)

    run = run_model(spark, config, now)

    assert run.error is None, run.error
    assert run.reads == expected_reads(edges, 0)
    assert run.rows_per_read == [2 if lo in busy else 0 for lo, _ in run.reads]
    # every window, empty or not, commits and moves the watermark to its end
    assert [o.result.state.watermark for o in run.outcomes] == edges[1:]
    assert destination.rows(pg_conn) == tenant_between(rows, START, now)
    state = destination.state(pg_conn)
    assert (state.watermark, state.completed) == (now, (Window(START, now),))
    assert state.high_watermark == max(r[2] for r in rows)


def _dagster_config(tmp_path: Path, source_schema: str, destination: Destination, *, window: int,
                    start: datetime) -> Path:
    model = events_model(f"{source_schema}.events", min_start=start)
    model["max_transfer_time_window_seconds"] = window
    config = {
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config(),
                     "lookback_window": 0}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [destination.block()],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _recent_start() -> datetime:
    """Minute partitions must start recently (at most 100,000 partitions up to the real clock,
    which the Dagster asset uses): yesterday, at 17 s past a minute."""
    yesterday = datetime.now(UTC) - timedelta(days=1)
    return yesterday.replace(second=17, microsecond=0)


def _materialize(defs: dg.Definitions, instance: dg.DagsterInstance, keys: list[str]):
    """One run over the partition range ``keys[0]..keys[-1]`` (a single-run backfill)."""
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance, asset_selection=[ASSET_KEY], raise_on_error=False,
        tags={"dagster/asset_partition_range_start": keys[0],
              "dagster/asset_partition_range_end": keys[-1]})


ASSET_KEY = dg.AssetKey(["rcpt", DESTINATION, MODEL])
MINUTE_FMT, DAY_FMT = "%Y-%m-%dT%H:%M", "%Y-%m-%d"


@pytest.mark.parametrize(
    ("window", "partitions"),
    [pytest.param(86_400, 7, id="daily"), pytest.param(20, 5, id="20s-chunks-in-minute-partitions")],
)
def test_a_dagster_range_records_one_materialization_per_partition_empty_ones_included(
        spark, pg_conn, pg_schema, destination, tmp_path, window, partitions):
    start = START if window == 86_400 else _recent_start()
    grid = max(window, MINUTE)
    first = grid_floor(start, grid)
    windows = [Window(first + timedelta(seconds=grid * i), first + timedelta(seconds=grid * (i + 1)))
               for i in range(partitions)]
    busy = [windows[1], windows[3]]
    moments = around([start, windows[-1].end])  # the start and the range's end, 1 µs either side
    moments |= {w.start + timedelta(seconds=grid / 2) + US * k for w in busy for k in range(3)}
    rows = placed_rows(moments)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, rows)
    defs = build_definitions(str(_dagster_config(tmp_path, pg_schema, destination, window=window,
                                                 start=start)))
    keys = [w.start.strftime(DAY_FMT if window == 86_400 else MINUTE_FMT) for w in windows]
    per_partition = [len(tenant_between(rows, max(w.start, start), w.end)) for w in windows]
    assert per_partition.count(0) == partitions - 4  # rows in the first, two busy and the last

    with dg.instance_for_test() as instance:
        result = _materialize(defs, instance, keys)

        assert result.success
        events = result.asset_materializations_for_node(f"transfer__{DESTINATION}")
        assert [e.partition for e in events] == keys  # one per partition, in order, none twice
        assert instance.get_materialized_partitions(ASSET_KEY) == set(keys)
        assert len(instance.fetch_materializations(ASSET_KEY, limit=100).records) == partitions
        assert [e.metadata["rows_transferred"].value for e in events] == per_partition
    assert destination.rows(pg_conn) == tenant_between(rows, start, windows[-1].end)
    state = destination.state(pg_conn)
    assert (state.watermark, state.completed) == (windows[-1].end, (Window(start, windows[-1].end),))


def test_a_chunked_partitions_materialization_counts_every_chunk(
        spark, pg_conn, pg_schema, destination, tmp_path):
    start = _recent_start()
    partition = grid_floor(start, MINUTE) + timedelta(minutes=1)  # chunks [0, 20) [20, 40) [40, 60)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [(1, TENANT, partition + timedelta(seconds=5), "in the first chunk")])
    defs = build_definitions(str(_dagster_config(tmp_path, pg_schema, destination, window=20,
                                                 start=start)))

    with dg.instance_for_test() as instance:
        result = _materialize(defs, instance, [partition.strftime(MINUTE_FMT)])

        assert result.success
        (event,) = result.asset_materializations_for_node(f"transfer__{DESTINATION}")
        assert destination.rows(pg_conn) == [(1, TENANT, partition + timedelta(seconds=5),
                                              "in the first chunk")]
        assert event.metadata["rows_transferred"].value == 1  # reported: 0 (the last chunk's)
