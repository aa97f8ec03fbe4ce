"""The DuckDB destination as its recipient meets it: a database file opened afterwards by another
process with the duckdb package.

- a file held by another process (a reader, read-only or not) when a transfer starts: the
  transfer is refused with DuckDB's own "locked" message (the holder's PID), the file and the
  fix named; nothing is written, and the next transfer, once the file is free, delivers;
- while a transfer holds the file, another process cannot open it, not even read-only (DuckDB's
  lock), and names the transferring process; once the transfer ends, it reads every commit;
- every type round-trips exactly: DECIMAL(38,9) at its limits, microsecond UTC timestamps, JSON
  text, text with quotes and non-ASCII characters, booleans, doubles, dates, NULLs;
- after a backfill, updates and soft deletes, a fresh process reads exactly the source's rows.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.core.timeutil import utc
from transfer_platform.destinations.base import writer_for
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.destinations import (
    duckdb_delivered,
    duckdb_in_another_process,
    duckdb_watermark,
)
from transfer_platform_tests.support.events import (
    MODEL,
    create_events,
    day,
    insert_rows,
    normalize,
    source_rows,
)
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer
from transfer_platform_tests.support.typed import TYPED_COLUMNS

pytestmark = pytest.mark.integration

TENANT = "acme"
MIN_START = day(3, 1)
BASE = day(3, 1) + timedelta(hours=1, microseconds=123_457)
NOW1, NOW2 = day(3, 2) + timedelta(hours=1), day(3, 2) + timedelta(hours=2)


def config_for(source_schema: str, path: Path, *, table: str = "events", columns: list | None = None,
               marker: bool = False) -> PlatformConfig:
    model = events_model(f"{source_schema}.{table}", min_start=MIN_START)
    if columns is not None:
        model["columns"] = columns
    if marker:
        model["columns"].append({"name_in_source": "is_deleted", "data_type": "boolean", "is_deleted_marker": True})
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "duckdb",
                          "connection": {"path": str(path)}}],
    }, now=day(6, 1))


class Holder:
    """Another process that holds the file open (read-write, or read-only) until stopped."""

    def __init__(self, path: Path, *, read_only: bool) -> None:
        code = ("import sys, duckdb; c = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == 'ro'); "
                "print('open', flush=True); sys.stdin.read()")
        self.process = subprocess.Popen([sys.executable, "-c", code, str(path), "ro" if read_only else "rw"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout.readline().strip() == "open"  # waits until it holds the file

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "reader"])
def test_a_file_held_by_another_process_refuses_the_transfer_naming_it_and_writes_nothing(
        spark, pg_conn, pg_schema, tmp_path, read_only) -> None:
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [(k, TENANT, BASE + timedelta(minutes=k), f"v1-{k}") for k in range(1, 4)])
    path = tmp_path / "acme.duckdb"
    config = config_for(pg_schema, path)
    assert transfer(spark, config, NOW1, "t1").status == "SUCCESS"
    before = duckdb_delivered(path)
    insert_rows(pg_conn, pg_schema, [(9, TENANT, NOW1 + timedelta(minutes=1), "new")])

    holder = Holder(path, read_only=read_only)
    try:
        refused = transfer(spark, config, NOW2, "t2", tuning=Tuning(lock_wait_seconds=0.5))
    finally:
        holder.stop()

    assert refused.status == "ERROR"
    assert "locked by another process" in refused.error
    assert f"PID {holder.process.pid}" in refused.error  # DuckDB's own message, kept
    assert str(path) in refused.error
    assert "Fix:" in refused.error
    assert duckdb_delivered(path) == before
    assert duckdb_watermark(path) == NOW1

    assert transfer(spark, config, NOW2, "t3").status == "SUCCESS"  # the file free again
    assert duckdb_delivered(path) == source_rows(pg_conn, pg_schema, TENANT)


def test_while_a_transfer_holds_the_file_no_other_process_opens_it_and_afterwards_it_reads_every_commit(
        spark, pg_conn, pg_schema, tmp_path) -> None:
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [(k, TENANT, BASE + timedelta(minutes=k), f"v1-{k}") for k in range(1, 4)])
    path = tmp_path / "acme.duckdb"
    config = config_for(pg_schema, path)
    assert transfer(spark, config, NOW1, "t1").status == "SUCCESS"
    assert duckdb_delivered(path) == source_rows(pg_conn, pg_schema, TENANT)  # between transfers: readable

    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(config.model(MODEL), "a-transfer")  # a transfer under way holds the file
        import os

        with pytest.raises(RuntimeError, match=rf"Could not set lock on file .*PID {os.getpid()}"):
            duckdb_delivered(path)
    finally:
        writer.close()

    assert duckdb_delivered(path) == source_rows(pg_conn, pg_schema, TENANT)


TYPED_ROWS = [
    (1, TENANT, BASE, Decimal("12345678901234567890123456789.123456789"), '{"a": [1, 2.5, "x\\"y"], "é": null}',
     "quotes ' \" \\ and é, 😀", True, 0.1, date(1970, 1, 1)),
    (2, TENANT, BASE + timedelta(microseconds=1), Decimal("-99999999999999999999999999999.999999999"), "[]",
     "", False, -1.5e300, date(2999, 12, 31)),
    (3, TENANT, BASE + timedelta(hours=20, microseconds=999_998), Decimal("-0.000000001"), '"text"', None, None,
     None, None),
    (4, TENANT, BASE + timedelta(hours=3), None, None, "NULL", True, 2.0 ** -1074, date(2024, 2, 29)),
]


def test_every_type_round_trips_exactly(spark, pg_conn, pg_schema, tmp_path) -> None:
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".typed (id bigint, organization_id text, updated_at timestamptz, '
                    "amount numeric(38,9), doc jsonb, note text, flag boolean, ratio double precision, born date)")
    with pg_conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{pg_schema}".typed VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)', TYPED_ROWS)
    path = tmp_path / "acme.duckdb"
    config = config_for(pg_schema, path, table="typed", columns=TYPED_COLUMNS)

    assert transfer(spark, config, NOW1, "t1").status == "SUCCESS"

    names = "id, organization_id, updated_at, amount, doc, note, flag, ratio, born"
    want = pg_conn.execute(f'SELECT {names.replace("doc", "doc::text")} FROM "{pg_schema}".typed ORDER BY id').fetchall()
    got = duckdb_in_another_process(path, f"SELECT {names.replace('doc', 'doc::VARCHAR')} FROM main.events ORDER BY id")
    assert [tuple(utc(v) if k == 2 else v for k, v in enumerate(r)) for r in got] == \
           [tuple(utc(v) if k == 2 else v for k, v in enumerate(r)) for r in want]
    assert [r[2].microsecond for r in got] == [123_457, 123_458, 123_455, 123_457]
    types = dict(duckdb_in_another_process(path, "SELECT column_name, data_type FROM duckdb_columns() "
                                                 "WHERE table_name = 'events'"))
    assert types == {"id": "BIGINT", "organization_id": "VARCHAR", "updated_at": "TIMESTAMP WITH TIME ZONE",
                     "amount": "DECIMAL(38,9)", "doc": "JSON", "note": "VARCHAR", "flag": "BOOLEAN",
                     "ratio": "DOUBLE", "born": "DATE"}


#: windows read together into this process (Arrow, the default for small ones), or each read
#: alone and staged as Parquet files by Spark's executors (``run_rows`` 0: every window "large")
PATHS = {"together": Tuning(), "staged": Tuning(run_rows=0)}


@pytest.mark.parametrize("path_kind", list(PATHS))
def test_a_fresh_process_reads_exactly_the_source_rows_after_updates_and_soft_deletes(
        spark, pg_conn, pg_schema, tmp_path, path_kind) -> None:
    tuning = PATHS[path_kind]
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint, organization_id text, updated_at timestamptz, '
                    "payload text, is_deleted boolean NOT NULL DEFAULT false)")
    rows = [(k, TENANT if k % 4 else "other", BASE + timedelta(minutes=k, microseconds=k), f"v1-{k}")
            for k in range(1, 41)]
    with pg_conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{pg_schema}".events (id, organization_id, updated_at, payload) '
                        "VALUES (%s, %s, %s, %s)", rows)
    path = tmp_path / "acme.duckdb"
    config = config_for(pg_schema, path, marker=True)
    assert transfer(spark, config, NOW1, "t1", tuning=tuning).status == "SUCCESS"

    later = NOW1 + timedelta(minutes=1)
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = payload || \'-v2\', updated_at = %s '
                    "WHERE id IN (1, 2, 3)", (later,))
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET is_deleted = true, updated_at = %s WHERE id IN (5, 6)',
                    (later,))
    assert transfer(spark, config, NOW2, "t2", tuning=tuning).status == "SUCCESS"

    want = normalize(pg_conn.execute(f'SELECT id, organization_id, updated_at, payload FROM "{pg_schema}".events '
                                     "WHERE organization_id = %s AND NOT is_deleted", (TENANT,)).fetchall())
    assert duckdb_delivered(path) == want
    assert {r[0] for r in want} >= {1, 2, 3}
    assert not {5, 6} & {r[0] for r in want}
    assert duckdb_watermark(path) == NOW2


@pytest.mark.parametrize("path_kind", list(PATHS))
def test_a_key_twice_or_a_null_key_in_a_window_is_refused_by_name_and_nothing_is_written(
        spark, pg_conn, pg_schema, tmp_path, path_kind) -> None:
    create_events(pg_conn, pg_schema, primary_key=False)
    insert_rows(pg_conn, pg_schema, [(k, TENANT, BASE + timedelta(minutes=k), f"v1-{k}") for k in range(1, 30)])
    path = tmp_path / "acme.duckdb"
    config = config_for(pg_schema, path)
    assert transfer(spark, config, NOW1, "t1", tuning=PATHS[path_kind]).status == "SUCCESS"
    before = duckdb_delivered(path)
    later = NOW1 + timedelta(minutes=5)
    # the same key and last-modified value, far apart in the source (not next to each other)
    insert_rows(pg_conn, pg_schema, [(7, TENANT, later, "one"), *[(k, TENANT, later, "new") for k in range(40, 60)],
                                     (7, TENANT, later, "another")])

    refused = transfer(spark, config, NOW2, "t2", tuning=PATHS[path_kind])

    assert refused.status == "ERROR"
    assert "two different versions of key id=7 have the same, latest last-modified value" in refused.error
    assert duckdb_delivered(path) == before
    assert duckdb_watermark(path) == NOW1

    pg_conn.execute(f'UPDATE "{pg_schema}".events SET id = NULL WHERE payload = %s', ("another",))
    refused = transfer(spark, config, NOW2, "t3", tuning=PATHS[path_kind])
    assert refused.status == "ERROR"
    assert "NULL primary key" in refused.error
    assert duckdb_delivered(path) == before


def test_a_staged_window_holding_a_key_twice_apart_is_refused_before_anything_is_written(
        spark, pg_conn, pg_schema, tmp_path) -> None:
    """The writer's own check, for a frame whose copies of a key are not next to each other
    (the transfer's choice of one version per key usually puts them side by side first)."""
    from transfer_platform.core.windows import Window
    from transfer_platform.destinations.base import WindowLoad
    from transfer_platform.errors import DuplicateKey

    path = tmp_path / "acme.duckdb"
    config = config_for(pg_schema, path)
    model = config.model(MODEL)
    rows = [(7, TENANT, BASE, "one"), *[(k, TENANT, BASE, "x") for k in range(10, 60)], (7, TENANT, BASE, "two")]
    frame = spark.createDataFrame(rows, "id bigint, organization_id string, updated_at timestamp, payload string")
    load = WindowLoad(model=model, transfer_id="t1", progress=Window(MIN_START, NOW1), configured_start=MIN_START)
    writer = writer_for(config.destination(DESTINATION), Tuning())
    try:
        writer.prepare(model, "t1")
        with pytest.raises(DuplicateKey, match="id=7 appears 2 times"):
            writer.write_window(frame.repartition(3), load)
    finally:
        writer.close()
    assert duckdb_delivered(path) == []
    assert not list((tmp_path / "acme.duckdb.tp" / "staging").rglob("*.parquet"))  # staging removed
