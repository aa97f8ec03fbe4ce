"""Crash safety: a transfer killed with SIGKILL in the middle of its load changes nothing visible.

The transfer runs as the real command line (``python -m transfer_platform.cli transfer``) in its own
process group (its JVM is a child process); the test watches the destination from outside, kills
the whole group once the window's staging table holds rows (or, were a writer to skip staging, once
rows reach the destination table), then shows that

- the destination table holds none of the half-loaded batch (same rows as before the crash) and
  ``_transfer_status`` did not move (or, in a multi-window backfill, stays at the end of the last
  committed window, whose rows stay);
- the dead transfer's staging table is still there, and the next transfer drops it;
- after that next transfer the destination equals the tenant's source rows.

Reads and writes are split into 4 JDBC queries (``max_concurrent_queries_per_transfer``) so the
staging table fills partition by partition (Spark commits each partition's inserts at its end):
the kill lands while some partitions are committed in staging and others are still loading.
The command line takes its "now" from the wall clock, so data is placed relative to it. An
incremental's window streamed by the transfer's own process (one binary ``COPY``, no Spark) is
killed while that ``COPY`` runs, seen from ``pg_stat_activity``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from transfer_platform.config.loading import load_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Window
from transfer_platform.destinations.postgres import STAGING_PREFIX
from transfer_platform_tests.support.cli import (
    PACKAGE_ROOT,
    TENANT,
    add_rows,
    write_config,
)
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.events import LOOKBACK, MODEL, create_events, source_rows
from transfer_platform_tests.support.postgres import (
    destination_rows,
    status_row,
    tables_in,
)
from transfer_platform_tests.support.processes import group_alive, transfer_killed_when
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

OTHER = "globex"
BATCH = 300_000  # rows in the window that is killed: long enough a load to catch (~seconds)
DAY = timedelta(days=1)
KILL_TIMEOUT_SECONDS = 600  # a failure bound (a JVM starts slowly on a loaded machine), not a wait
WATCH_INTERVAL_SECONDS = 0.02


# -- the transfer in another process --------------------------------------------------------------


@dataclass
class Killed:
    staging_table: str | None  # the dead transfer's staging table
    staged_rows: int  # rows committed in it when the kill was sent


@pytest.fixture
def cli_transfer(tmp_path: Path) -> Iterator[Callable[[Path], subprocess.Popen]]:
    """Start ``transfer-platform transfer`` in its own session; kill its group if a test leaves it."""
    started: list[subprocess.Popen] = []

    def start(config_path: Path, *extra: str) -> subprocess.Popen:
        env = {**os.environ, "TRANSFER_PLATFORM_LOG_LEVEL": "INFO"}
        env.pop("DAGSTER_HOME", None)  # no reporting to a Dagster instance
        # the same transfer_platform as this process imported (a checkout may shadow the install)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
        with open(tmp_path / "cli.out", "wb") as out, open(tmp_path / "cli.err", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "transfer_platform.cli", "--config", str(config_path),
                 "transfer", DESTINATION, *extra],
                cwd=tmp_path, env=env, stdout=out, stderr=err, start_new_session=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def cli_output(tmp_path: Path) -> str:
    return "\n".join((tmp_path / name).read_text(errors="replace")[-3000:] for name in ("cli.out", "cli.err"))


def row_count(conn: psycopg.Connection, schema: str, table: str) -> int:
    """Committed rows of ``schema.table``; 0 if it does not exist (yet, or any more)."""
    name = f'"{schema}"."{table}"'
    try:
        if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is None:
            return 0
        return conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
    except psycopg.errors.UndefinedTable:  # dropped between the two queries
        return 0


def staging_table(conn: psycopg.Connection, schema: str) -> str | None:
    row = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s AND starts_with(tablename, %s)",
                       (schema, STAGING_PREFIX)).fetchone()
    return None if row is None else row[0]


def kill_while_loading(conn: psycopg.Connection, proc: subprocess.Popen, dst_schema: str, tmp_path: Path,
                       *, delivered_before: int, ready: Callable[[], bool] = lambda: True) -> Killed:
    """Watch the destination; once ``ready()`` holds and the load is under way (the staging table
    holds rows, or rows reach the destination table, as they would if a writer skipped staging),
    SIGKILL the transfer's whole process group (Python and its JVM) and wait until none of it runs."""
    launched = time.monotonic()
    while True:
        assert proc.poll() is None, (
            f"the transfer ended (exit {proc.returncode}) before it could be killed mid-load; "
            f"make the batch larger:\n{cli_output(tmp_path)}")
        assert time.monotonic() - launched < KILL_TIMEOUT_SECONDS, (
            f"no load seen within {KILL_TIMEOUT_SECONDS} s:\n{cli_output(tmp_path)}")
        if ready():
            staging = staging_table(conn, dst_schema)
            staged = row_count(conn, dst_schema, staging) if staging else 0
            if staged > 0 or row_count(conn, dst_schema, MODEL) > delivered_before:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = Killed(staging, staged)
                break
        time.sleep(WATCH_INTERVAL_SECONDS)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while group_alive(proc.pid):
        assert time.monotonic() < deadline, "the transfer's JVM outlived the kill of its process group"
        time.sleep(0.1)
    return killed


def run_next_transfer(spark, config: PlatformConfig, dst_schema: str, conn: psycopg.Connection,
                      killed: Killed):
    """The next transfer, in this process: it drops the dead transfer's staging table."""
    # the dead transfer left its staging table, with the partitions it had committed
    assert killed.staging_table in tables_in(conn, dst_schema)
    assert row_count(conn, dst_schema, killed.staging_table) >= killed.staged_rows
    now = datetime.now(UTC)
    summary = transfer(spark, config, now, transfer_id="after-crash")
    assert summary.status == "SUCCESS", summary.error
    assert tables_in(conn, dst_schema) == ["_transfer_status", MODEL]
    return summary, now


def backfilled(spark, pg_conn, pg_schema: str, dst_schema: str, tmp_path: Path) -> tuple:
    """Two tenants' 500 rows each in the source, the tenant's delivered by a backfill 10 minutes
    ago: (backfill moment, min_start, configuration file, configuration)."""
    backfill_at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    min_start = backfill_at - timedelta(hours=1)
    create_events(pg_conn, pg_schema)
    for k, tenant in enumerate((TENANT, OTHER)):
        add_rows(pg_conn, pg_schema, tenant=tenant, first_id=1 + k * 1000, count=500, start=min_start,
                 span=timedelta(minutes=58), payload=f"{tenant} v1 ")
    config_path = write_config(tmp_path / "transfer_platform.yaml", source_schema=pg_schema,
                               dst_schema=dst_schema, min_start=min_start, window_seconds=None)
    config = load_config(config_path)
    assert transfer(spark, config, backfill_at, transfer_id="backfill").status == "SUCCESS"
    return backfill_at, min_start, config_path, config


# -- the tests ------------------------------------------------------------------------------------


def test_a_transfer_killed_mid_load_changes_neither_rows_nor_watermark(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, cli_transfer):
    backfill_at, min_start, config_path, config = backfilled(spark, pg_conn, pg_schema, dst_schema, tmp_path)
    before_rows = destination_rows(pg_conn, dst_schema)
    before_status = status_row(pg_conn, dst_schema)
    assert len(before_rows) == 500
    assert before_status["watermark"] == backfill_at

    # the batch: new rows from 25 s before the watermark (late commits) to 9.5 minutes after it,
    # updates of rows already delivered, and another tenant's rows
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=10_000_000, count=BATCH,
             start=backfill_at - timedelta(seconds=25), span=timedelta(minutes=9, seconds=30),
             payload="batch ")
    pg_conn.execute(f"UPDATE \"{pg_schema}\".events SET updated_at = %s + id * interval '1 microsecond', "
                    "payload = 'updated' WHERE organization_id = %s AND id <= 200",
                    (backfill_at + timedelta(minutes=1), TENANT))
    add_rows(pg_conn, pg_schema, tenant=OTHER, first_id=20_000_000, count=1000,
             start=backfill_at, span=timedelta(minutes=5), payload="other ")

    proc = cli_transfer(config_path)
    killed = kill_while_loading(pg_conn, proc, dst_schema, tmp_path, delivered_before=len(before_rows))

    assert destination_rows(pg_conn, dst_schema) == before_rows  # none of the half-loaded batch
    assert status_row(pg_conn, dst_schema) == before_status  # the watermark did not move
    batch_rows = BATCH + 200
    assert 0 < killed.staged_rows < batch_rows  # killed while staging: part of the batch loaded

    summary, now = run_next_transfer(spark, config, dst_schema, pg_conn, killed)

    # it reads from the last delivered row minus the lookback (the seeds' rule): the batch, and the
    # delivered rows of that last half minute again
    high = before_status["high_watermark"]
    reread = [r for r in before_rows if r[2] >= high - LOOKBACK and r[0] > 200]
    assert 0 < len(reread) < 20
    assert summary.rows_transferred == batch_rows + len(reread)
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert status_row(pg_conn, dst_schema)["watermark"] == now


def test_a_backfill_killed_in_a_later_window_keeps_the_windows_committed_before_it(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, cli_transfer):
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    min_start = today - 3 * DAY  # daily windows: day -3, day -2, day -1 (the big one), today
    killed_window = today - DAY
    create_events(pg_conn, pg_schema)
    for k, tenant in enumerate((TENANT, OTHER)):
        add_rows(pg_conn, pg_schema, tenant=tenant, first_id=1 + k * 1000, count=400, start=min_start,
                 span=2 * DAY, payload=f"{tenant} early ")
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=10_000_000, count=BATCH, start=killed_window,
             span=DAY, payload="day -1 ")
    config_path = write_config(tmp_path / "transfer_platform.yaml", source_schema=pg_schema,
                               dst_schema=dst_schema, min_start=min_start, window_seconds=86400)

    def two_windows_committed() -> bool:
        if not pg_conn.execute("SELECT to_regclass(%s)", (f'"{dst_schema}"._transfer_status',)).fetchone()[0]:
            return False
        status = status_row(pg_conn, dst_schema)
        return status is not None and status["watermark"] == killed_window

    proc = cli_transfer(config_path)
    committed = [r for r in source_rows(pg_conn, pg_schema, TENANT) if r[2] < killed_window]
    assert len(committed) == 400
    killed = kill_while_loading(pg_conn, proc, dst_schema, tmp_path, delivered_before=len(committed),
                                ready=two_windows_committed)

    assert destination_rows(pg_conn, dst_schema) == committed  # the first two windows stay, no more
    status = status_row(pg_conn, dst_schema)
    assert status["watermark"] == killed_window  # the end of the last committed window
    assert ModelState.from_json(status["state"]).completed == (Window(min_start, killed_window),)
    assert status["high_watermark"] == max(r[2] for r in committed)
    assert 0 < killed.staged_rows < BATCH  # killed while staging the third window

    config = load_config(config_path)
    summary, now = run_next_transfer(spark, config, dst_schema, pg_conn, killed)

    assert summary.windows == (now - killed_window) // DAY + 1  # resumed at the killed window
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert status_row(pg_conn, dst_schema)["watermark"] == now


def test_a_full_refresh_killed_mid_relay_changes_neither_the_live_table_nor_the_watermark(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, cli_transfer):
    """The window is relayed (sources/relay.py: binary COPY from the source, slice by slice, into
    the staging table of the refresh's table built aside); killed once a slice has committed."""
    backfill_at, min_start, config_path, config = backfilled(spark, pg_conn, pg_schema, dst_schema, tmp_path)
    before_rows = destination_rows(pg_conn, dst_schema)
    before_status = status_row(pg_conn, dst_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=10_000_000, count=BATCH,
             start=min_start, span=timedelta(minutes=58), payload="batch ")

    proc = cli_transfer(config_path, "--full-refresh")
    killed = kill_while_loading(pg_conn, proc, dst_schema, tmp_path, delivered_before=len(before_rows))

    assert '"relayed": true' in cli_output(tmp_path)
    assert 0 < killed.staged_rows < BATCH + 500  # killed while relaying: some slices committed
    assert destination_rows(pg_conn, dst_schema) == before_rows
    assert status_row(pg_conn, dst_schema) == before_status

    summary, now = run_next_transfer(spark, config, dst_schema, pg_conn, killed)  # finishes the refresh

    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert status_row(pg_conn, dst_schema)["watermark"] == now


#: the transfer of a streamed window, in a process of its own: no Spark (a start exits the
#: process), each window up to a million rows read directly, so the incremental's window of
#: ``BATCH`` rows is streamed (sources/direct.py ``copy_out`` into ``write_streamed``)
STREAMED_TRANSFER = """
import sys
from datetime import UTC, datetime

from transfer_platform.config.loading import load_config
from transfer_platform.runtime.spark_session import LazySession
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.transfers import transfer

summary = transfer(LazySession(lambda: sys.exit("a streamed transfer started Spark")), load_config(sys.argv[1]),
                   datetime.now(UTC), transfer_id="killed", tuning=Tuning(run_rows=1_000_000))
print(summary)
"""


def streaming_into(conn: psycopg.Connection, schema: str) -> str | None:
    """The staging table a binary ``COPY`` is streaming into right now, if any."""
    staging = staging_table(conn, schema)
    if staging is None:
        return None
    (active,) = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s",
        (f'COPY "{schema}"."{staging}" %FROM STDIN (FORMAT binary)',)).fetchone()
    return staging if active else None


def test_a_streamed_window_killed_mid_copy_changes_neither_rows_nor_watermark(
        spark, pg_conn, pg_schema, dst_schema, tmp_path):
    """An incremental's window streamed from the source into the staging table by the transfer's
    own process, killed (SIGKILL) while its one ``COPY`` runs: the live table and the watermark are
    as they were; the next transfer drops the staging table it left and delivers every row."""
    backfill_at, _, config_path, config = backfilled(spark, pg_conn, pg_schema, dst_schema, tmp_path)
    before_rows, before_status = destination_rows(pg_conn, dst_schema), status_row(pg_conn, dst_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=10_000_000, count=BATCH,
             start=backfill_at + timedelta(seconds=1), span=timedelta(minutes=9), payload="batch ")
    add_rows(pg_conn, pg_schema, tenant=OTHER, first_id=20_000_000, count=1000,
             start=backfill_at, span=timedelta(minutes=5), payload="other ")

    seen = []  # the staging table its COPY was streaming into when it was killed

    def streaming() -> bool:
        seen.append(streaming_into(pg_conn, dst_schema))
        return seen[-1] is not None

    transfer_killed_when(config_path, DESTINATION, tmp_path, streaming, timeout=KILL_TIMEOUT_SECONDS,
                         poll=WATCH_INTERVAL_SECONDS, script=STREAMED_TRANSFER)
    staging = seen[-1]

    assert destination_rows(pg_conn, dst_schema) == before_rows  # none of the window
    assert status_row(pg_conn, dst_schema) == before_status  # the watermark did not move
    summary, now = run_next_transfer(spark, config, dst_schema, pg_conn, Killed(staging, 0))
    assert summary.rows_transferred >= BATCH
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert status_row(pg_conn, dst_schema)["watermark"] == now
