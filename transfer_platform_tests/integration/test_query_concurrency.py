"""``max_concurrent_queries_per_transfer`` bounds the queries a run holds open at once against a
source (a large window's reads: the relay's ``COPY ... TO STDOUT`` slices, or Spark's partitioned
JDBC reads) and a destination (the staging COPYs): watched in ``pg_stat_activity`` while a transfer
runs, with Spark free to run two tasks at once. (Reading and staging are one pipelined Spark stage,
so a destination limit below the source's also slows the read: the tighter of the two wins.)"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.support.config import pg_config
from transfer_platform_tests.support.events import create_events, day
from transfer_platform_tests.support.postgres import pg_connect
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

ROWS = 200_000


def watch_jdbc_queries(source_schema: str, dst_schema: str, stop: threading.Event, peaks: dict) -> None:
    """Sample the connections holding this test's read open (a relayed slice's ``COPY (...) TO
    STDOUT`` or a Spark JDBC read; each names the source schema) and its staging write (the COPYs
    of Spark's Python workers; name the destination schema)."""
    with pg_connect(autocommit=True) as conn:
        while not stop.is_set():
            for kind, clients, patterns, schema in (
                    ("read", ("PostgreSQL JDBC%%", "transfer_platform%%"), ("%tp_batch%", "COPY (%TO STDOUT%"),
                     source_schema),
                    ("write", ("transfer_platform%%", "transfer_platform%%"), ("COPY %_tp_stg_%", "COPY %_tp_stg_%"),
                     dst_schema)):
                (count,) = conn.execute(
                    # a streamed read is 'idle in transaction' between two fetches: still open;
                    # PostgreSQL's own parallel workers (same query text) are not connections
                    "SELECT count(*) FROM pg_stat_activity WHERE state IN ('active', 'idle in transaction') "
                    "AND backend_type = 'client backend' AND query LIKE %s "
                    "AND ((application_name LIKE %s AND query LIKE %s) OR (application_name LIKE %s AND query LIKE %s))",
                    (f"%{schema}%", clients[0], patterns[0], clients[1], patterns[1])).fetchone()
                peaks[kind] = max(peaks.get(kind, 0), count)
            stop.wait(0.02)


@pytest.mark.parametrize(("source_limit", "destination_limit", "tuning"),
                         [(1, 2, DEFAULT), (2, 1, DEFAULT), (2, 2, Tuning(relay_windows=False))],
                         ids=["1-2-relayed", "2-1-relayed", "2-2-spark-reader"])
def test_concurrent_queries_never_exceed_the_setting(spark, pg_conn, pg_schema, dst_schema,
                                                      source_limit, destination_limit, tuning):
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
        summary = transfer(spark, config, day(3, 1) + timedelta(seconds=ROWS + 10), tuning=tuning)
    finally:
        stop.set()
        watcher.join()
    assert summary.status == "SUCCESS", summary.error
    assert summary.rows_transferred == ROWS
    assert 1 <= peaks["read"] <= source_limit, peaks
    assert 1 <= peaks["write"] <= destination_limit, peaks
    if (source_limit, destination_limit) == (2, 2):  # the watch does see parallel queries (JDBC
        # reads stay open for the whole stage; a relayed slice's COPY can end before the other starts)
        assert 2 in (peaks["read"], peaks["write"]), peaks
