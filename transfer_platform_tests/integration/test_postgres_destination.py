"""The PostgreSQL destination's own behaviour (the contracts of ``contract/`` hold for it too).

- the empty-target fast path (the ``swap`` empty-table load, see
  ``contract/test_empty_table_load_contract.py``): the replaced table is logged with the usual key
  name; anything a user attached to the empty target (a view, an index, a trigger, a grant, a
  comment) turns it off, and the batch is merged as usual; a bad first batch, read by a transfer,
  is refused by name and leaves the empty target as it was;
- a transfer killed with SIGKILL (see ``contract/test_crash_safety_contract.py``) in the third
  daily window of a backfill keeps the two windows committed before it; in the middle of a full
  refresh's relay (binary COPY from the source, slice by slice, into the staging table of the
  refresh's table built aside) or of an incremental window streamed by its own process (one binary
  ``COPY``, no Spark), it changes neither the live table nor the watermark; the next transfer
  drops the dead transfer's staging table and delivers the tenant's source rows.

The command line takes its "now" from the wall clock, so data is placed relative to it; reads and
writes are split into 4 JDBC queries so that a staging table fills partition by partition.
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
from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Window
from transfer_platform.destinations.postgres.dialect import PostgresDialect
from transfer_platform_tests.support.cli import PACKAGE_ROOT, TENANT, add_rows, write_config
from transfer_platform_tests.support.config import DESTINATION, pg_config
from transfer_platform_tests.support.events import (
    MODEL,
    create_events,
    day,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.harnesses import STAGING as STAGING_PREFIX
from transfer_platform_tests.support.postgres import destination_rows, status_row, tables_in
from transfer_platform_tests.support.processes import group_alive, transfer_killed_when
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration


# -- the empty-target fast path -------------------------------------------------------------------

DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 5) + timedelta(hours=6)


@pytest.fixture
def config(pg_conn, pg_schema, dst_schema):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 30, DATA_DAYS, seed=11))
    return pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=day(3, 1))


def precreate_target(pg_conn, config, dst_schema) -> int:
    """The target as the platform creates it; returns its OID."""
    model: ModelConfig = config.model(MODEL)
    pg_conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{dst_schema}"')
    pg_conn.execute(PostgresDialect().target_ddl(f'"{dst_schema}"."{MODEL}"', model))
    return oid(pg_conn, dst_schema)


def oid(pg_conn, schema: str, table: str = MODEL) -> int:
    return pg_conn.execute("SELECT %s::regclass::oid", (f'"{schema}"."{table}"',)).fetchone()[0]


def table_facts(pg_conn, schema: str) -> tuple:
    return pg_conn.execute(
        "SELECT c.relpersistence, k.conname FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid "
        "AND k.contype = 'p' WHERE c.oid = %s::regclass", (f'"{schema}"."{MODEL}"',)).fetchone()


def test_an_empty_target_is_replaced_by_the_loaded_staging_table(spark, pg_conn, pg_schema, dst_schema, config):
    before = precreate_target(pg_conn, config, dst_schema)

    assert transfer(spark, config, NOW1).status == "SUCCESS"

    assert oid(pg_conn, dst_schema) != before  # the fast path ran: the table is the staging table
    assert table_facts(pg_conn, dst_schema) == ("p", "events_pkey")  # logged, the usual key name
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert tables_in(pg_conn, dst_schema) == ["_transfer_status", MODEL]
    # the replaced table behaves as the original: its key refuses a duplicate, merges go on
    with pytest.raises(Exception, match="duplicate key value"):
        pg_conn.execute(f'INSERT INTO "{dst_schema}"."{MODEL}" SELECT * FROM "{dst_schema}"."{MODEL}" LIMIT 1')
    first = source_rows(pg_conn, pg_schema, TENANT)[0][0]
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = %s, updated_at = %s WHERE id = %s',
                    ("changed", NOW1 + timedelta(hours=1), first))
    replaced = oid(pg_conn, dst_schema)
    assert transfer(spark, config, NOW2, transfer_id="t2").status == "SUCCESS"
    assert oid(pg_conn, dst_schema) == replaced  # a non-empty target is merged into, never replaced
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)


ATTACHMENTS = {
    "view": 'CREATE VIEW "{s}".events_view AS SELECT id FROM "{s}".events',
    "index": 'CREATE INDEX events_payload ON "{s}".events (payload)',
    "trigger": ('CREATE FUNCTION "{s}".noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$; '
                'CREATE TRIGGER events_noop BEFORE INSERT ON "{s}".events FOR EACH ROW EXECUTE FUNCTION "{s}".noop()'),
    "grant": 'GRANT SELECT ON "{s}".events TO PUBLIC',
    "comment": "COMMENT ON TABLE \"{s}\".events IS 'delivered by transfer_platform'",
}


@pytest.mark.parametrize("attachment", sorted(ATTACHMENTS))
def test_an_empty_target_with_something_attached_is_merged_into(
        spark, pg_conn, pg_schema, dst_schema, config, attachment):
    before = precreate_target(pg_conn, config, dst_schema)
    pg_conn.execute(ATTACHMENTS[attachment].format(s=dst_schema))

    assert transfer(spark, config, NOW1).status == "SUCCESS"

    assert oid(pg_conn, dst_schema) == before  # the same table, with what was attached to it
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    attached = {
        "view": "SELECT count(*) FROM \"{s}\".events_view",
        "index": "SELECT count(*) FROM pg_indexes WHERE schemaname = '{s}' AND indexname = 'events_payload'",
        "trigger": "SELECT count(*) FROM pg_trigger WHERE tgname = 'events_noop'",
        "grant": "SELECT count(*) FROM information_schema.role_table_grants WHERE table_schema = '{s}' "
                 "AND grantee = 'PUBLIC'",
        "comment": "SELECT count(*) FROM pg_description WHERE objoid = '\"{s}\".events'::regclass",
    }[attachment].format(s=dst_schema)
    assert pg_conn.execute(attached).fetchone()[0] >= 1


@pytest.mark.parametrize("problem", ["duplicate", "null_key", "null_last_modified"])
def test_a_bad_first_batch_is_refused_by_name_and_leaves_the_empty_target(
        spark, pg_conn, pg_schema, dst_schema, config, problem):
    pg_conn.execute(f'ALTER TABLE "{pg_schema}".events DROP CONSTRAINT events_pkey, ALTER id DROP NOT NULL')
    # in the first window (3-1), so that no earlier window has filled the target
    key, _, when, _ = next(r for r in source_rows(pg_conn, pg_schema, TENANT) if r[2] < day(3, 2))
    bad = {
        "duplicate": (key, TENANT, when, "dup"),  # another version with the same last-modified value
        "null_key": (None, TENANT, day(3, 1) + timedelta(hours=2), "no key"),
        "null_last_modified": (4242, TENANT, None, "no time"),
    }[problem]
    insert_rows(pg_conn, pg_schema, [bad])
    before = precreate_target(pg_conn, config, dst_schema)

    summary = transfer(spark, config, NOW1)

    assert summary.status == "ERROR"
    assert summary.error_type == "DataError"
    expected = {"duplicate": f"two different versions of key id={key} have the same, latest last-modified value",
                "null_key": "NULL primary key value (id)",
                "null_last_modified": "NULL last-modified value (updated_at) at key id=4242"}[problem]
    assert expected in summary.error
    assert oid(pg_conn, dst_schema) == before  # the same, still empty, table
    assert destination_rows(pg_conn, dst_schema) == []
    assert tables_in(pg_conn, dst_schema) == ["_transfer_status", MODEL]  # no staging table left
    state = status_row(pg_conn, dst_schema)
    assert state is None or state["watermark"] is None


# -- a transfer killed with SIGKILL --------------------------------------------------------------

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
