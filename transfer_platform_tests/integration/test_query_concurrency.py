"""``max_concurrent_queries_per_transfer`` bounds the queries a run holds open at once against a
source (partitioned JDBC reads) and a destination (the staging COPYs): watched in
``pg_stat_activity`` while a transfer runs, with Spark free to run two tasks at once. (Reading and
staging are one pipelined Spark stage, so a destination limit below the source's also slows the
read: the tighter of the two wins.)"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from transfer_platform_tests.support.config import pg_config
from transfer_platform_tests.support.events import create_events, day
from transfer_platform_tests.support.postgres import pg_connect
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

ROWS = 200_000


def watch_jdbc_queries(source_schema: str, dst_schema: str, stop: threading.Event, peaks: dict) -> None:
    """Sample the connections holding this test's read open (Spark JDBC; names the source schema)
    and its staging write (the COPYs of Spark's Python workers; name the destination schema)."""
    with pg_connect(autocommit=True) as conn:
        while not stop.is_set():
            for kind, client, pattern, schema in (
                    ("read", "PostgreSQL JDBC%%", "%tp_batch%", source_schema),
                    ("write", "transfer_platform", "COPY %_tp_stg_%", dst_schema)):
                (count,) = conn.execute(
                    # a streamed read is 'idle in transaction' between two fetches: still open;
                    # PostgreSQL's own parallel workers (same query text) are not connections
                    "SELECT count(*) FROM pg_stat_activity WHERE state IN ('active', 'idle in transaction') "
                    "AND backend_type = 'client backend' "
                    "AND application_name LIKE %s AND query LIKE %s AND query LIKE %s",
                    (client, pattern, f"%{schema}%")).fetchone()
                peaks[kind] = max(peaks.get(kind, 0), count)
            stop.wait(0.02)


@pytest.mark.parametrize(("source_limit", "destination_limit"), [(1, 2), (2, 1), (2, 2)])
def test_concurrent_queries_never_exceed_the_setting(spark, pg_conn, pg_schema, dst_schema,
                                                      source_limit, destination_limit):
    create_events(pg_conn, pg_schema)
    pg_conn.execute(
        f'INSERT INTO "{pg_schema}".events SELECT g, %s, %s::timestamptz + g * interval \'1 second\', '
        "repeat('x', 80) FROM generate_series(1, %s) g", ("acme", day(3, 1), ROWS))
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant="acme", min_start=day(3, 1),
                       parallel=source_limit)
    model = config.model("events").model_copy(update={"max_transfer_time_window_seconds": None})
    destination = config.destinations[0].model_copy(update={"max_concurrent_queries_per_transfer": destination_limit})
    config = config.model_copy(update={"models": [model], "destinations": [destination]})
    stop, peaks = threading.Event(), {}
    watcher = threading.Thread(target=watch_jdbc_queries, args=(pg_schema, dst_schema, stop, peaks))
    watcher.start()
    try:
        summary = transfer(spark, config, day(3, 1) + timedelta(seconds=ROWS + 10))
    finally:
        stop.set()
        watcher.join()
    assert summary.status == "SUCCESS", summary.error
    assert summary.rows_transferred == ROWS
    assert 1 <= peaks["read"] <= source_limit, peaks
    assert 1 <= peaks["write"] <= destination_limit, peaks
    if (source_limit, destination_limit) == (2, 2):  # the watch does see parallel queries
        assert 2 in (peaks["read"], peaks["write"]), peaks
