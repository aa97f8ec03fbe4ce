"""The ClickHouse destination's straight load: a window into an empty table (a backfill's first
into an empty table, a full refresh's first into its table aside) is not staged: its rows, held
as Arrow, are checked in this process and inserted straight into the clone its commit swaps in.
Read back through clickhouse-connect as a recipient reads it (``FINAL``), on chDB:

- a backfill and a full refresh take it (their ``stage`` record says ``straight_into_target``),
  the table then holds exactly the rows, the window's result counts them, and the next window
  into the filled table is staged and merged as before;
- rows marked deleted in such a window are never delivered; with ``keep_deleted_rows`` they are;
- a key twice, a NULL key or last-modified value, a date out of ClickHouse's range in such a
  window is refused by name, the table still empty, the watermark unmoved, no table left behind;
- a transfer killed (SIGKILL) while it inserts such a window into the clone leaves the table
  empty and the watermark unmoved to a reader opening the folder after it; the next transfer drops
  the clone and delivers the window.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import date, timedelta

import pyarrow as pa
import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.errors import DataError
from transfer_platform_tests.support.cli import PACKAGE_ROOT
from transfer_platform_tests.support.clickhouse import chdb_in_another_process, q
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.empty_table_loads import (
    DAY,
    KILL_TIMEOUT_SECONDS,
    START,
    killed_when_marked,
    model_entry,
    refuses_bad_windows,
    rows,
    stage_records,
    window,
)
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.postgres import pg_connection_config

pytestmark = pytest.mark.integration
__all__ = ["stage_records"]  # the fixture, imported


def config_for(folder, database: str, tmp_path, *, keep_deleted_rows: bool = False):
    """A ClickHouse destination in ``database`` of the chDB ``folder``."""
    path = tmp_path / f"transfer_platform_{database}.yaml"
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model_entry(MODEL, keep_deleted_rows=keep_deleted_rows)],
        "recipients": [{"name": "rcpt", "id_in_provider_system": "acme"}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "clickhouse",
                          "connection": {"path": str(folder), "database": database}}],
    }))
    return load_config(path), path


def writer_in_new_database(clickhouse_server, tmp_path, **options):
    database = clickhouse_server.new_database()
    config, _ = config_for(clickhouse_server.path, database, tmp_path, **options)
    return database, config.model(MODEL), writer_for(config.destination(DESTINATION))


def held(client, database: str) -> tuple:
    """(id, payload, gone) of the live table as a recipient reads it (None without it), the
    tables' comments (the states), and the transfer's own tables left in the database."""
    db = q(database)
    names = {r[0] for r in client.query(f"SELECT name FROM system.tables WHERE database = '{database}'").result_rows}
    live = (sorted(client.query(f"SELECT id, payload, gone FROM {db}.{q(MODEL)} FINAL").result_rows)
            if MODEL in names else None)
    states = sorted(client.query(  # each table's comment: the live table's state, the refresh's progress
        f"SELECT name, comment FROM system.tables WHERE database = '{database}' AND NOT startsWith(name, "
        "'_tp_lock_') AND engine != 'View'").result_rows)
    return live, states, sorted(n for n in names if n.startswith("_tp_stg_"))


def test_a_backfill_and_a_full_refresh_insert_straight_into_the_swapped_in_clone(
        clickhouse_server, tmp_path, stage_records) -> None:
    database, model, writer = writer_in_new_database(clickhouse_server, tmp_path)
    client = clickhouse_server.client()
    try:
        writer.prepare(model, "t1")
        first = writer.write_arrow(rows(model, range(1, 101)), window(model, 0, "t1"))  # into the empty table
        assert (first.rows_transferred, first.delta_rows_transferred, first.rows_deleted) == (100, 100, 0)
        assert first.max_last_modified == START + timedelta(hours=1, seconds=99)
        assert first.volume_bytes > 0  # the clone's parts
        writer.write_arrow(rows(model, [5, 200], at=START + DAY + timedelta(hours=1), payload="v2"),
                           window(model, 1, "t1"))
        assert [r["straight_into_target"] for r in stage_records()] == [True, False]  # then merged as before
        live, status, left = held(client, database)
        assert live == sorted([(k, f"v1-{k}", False) for k in range(1, 101) if k != 5]
                              + [(5, "v2-5", False), (200, "v2-200", False)])
        assert json.loads(dict(status)[MODEL])["state"]["watermark_us"] == int((START + 2 * DAY).timestamp() * 1e6)

        writer.prepare(model, "r1", full_refresh=True)  # the table aside is empty too
        writer.write_arrow(rows(model, range(1, 51), payload="r"), window(model, 0, "r1", into_refresh=True))
        writer.write_arrow(rows(model, [7], at=START + DAY + timedelta(hours=2), payload="r2"),
                           window(model, 1, "r1", into_refresh=True))
        assert held(client, database)[0] == live  # readers see the old rows until the publish
        writer.publish_refresh(model, "r1")
    finally:
        writer.close()
    assert [r["straight_into_target"] for r in stage_records()] == [True, False, True, False]
    live, _, left = held(client, database)
    assert live == sorted([(k, f"r-{k}", False) for k in range(1, 51) if k != 7] + [(7, "r2-7", False)])
    assert left == []


@pytest.mark.parametrize("keep_deleted_rows", [False, True], ids=["removed", "kept"])
def test_rows_marked_deleted_in_a_straight_window_are_never_delivered_unless_kept(
        clickhouse_server, tmp_path, stage_records, keep_deleted_rows) -> None:
    database, model, writer = writer_in_new_database(clickhouse_server, tmp_path, keep_deleted_rows=keep_deleted_rows)
    try:
        writer.prepare(model, "t1")
        result = writer.write_arrow(rows(model, range(1, 11), gone={3, 4}), window(model, 0, "t1"))
    finally:
        writer.close()
    assert [r["straight_into_target"] for r in stage_records()] == [True]
    kept = [(k, f"v1-{k}", k in {3, 4}) for k in range(1, 11)]
    client = clickhouse_server.client()
    assert held(client, database)[0] == (kept if keep_deleted_rows else [r for r in kept if not r[2]])
    # not even as hidden rows: what a reader without FINAL sees is the same
    plain = sorted(client.query(f"SELECT id FROM {q(database)}.{q(MODEL)}").result_rows)
    assert plain == [(r[0],) for r in (kept if keep_deleted_rows else [r for r in kept if not r[2]])]
    assert result.rows_transferred == 10
    assert result.rows_deleted == (2 if keep_deleted_rows else 0)  # nothing delivered was removed


@pytest.mark.parametrize("into_refresh", [False, True], ids=["backfill", "full_refresh"])
def test_a_key_twice_a_null_or_a_date_out_of_range_in_a_straight_window_is_refused_by_name_with_nothing_changed(
        clickhouse_server, tmp_path, into_refresh) -> None:
    database, model, writer = writer_in_new_database(clickhouse_server, tmp_path)
    client = clickhouse_server.client()
    try:
        writer.prepare(model, "t0")
        if into_refresh:  # a live table with rows, a full refresh begun aside
            writer.write_arrow(rows(model, [1, 2]), window(model, 0, "t0"))
        writer.prepare(model, "t1", full_refresh=into_refresh)
        before = held(client, database)
        refuses_bad_windows(writer, model, into_refresh=into_refresh)
        early = rows(model, [1, 2]).set_column(4, "born", pa.array([date(2020, 1, 1), date(1850, 1, 1)]))
        with pytest.raises(DataError, match=r"column 'born' holds 1850-01-01, outside 1900-01-01 to 2299-12-31"):
            writer.write_arrow(early, window(model, 0, "t1", into_refresh=into_refresh))

        assert held(client, database) == before  # the table, its state, no table left behind
        if into_refresh:  # and the refresh's table aside is still empty: the next window goes straight in
            writer.write_arrow(rows(model, [1, 2, 3], payload="r"), window(model, 0, "t1", into_refresh=True))
            writer.publish_refresh(model, "t1")
            assert held(client, database)[0] == [(k, f"r-{k}", False) for k in (1, 2, 3)]
    finally:
        writer.close()


# -- a transfer killed while it fills the clone ----------------------------------------------------

KILLED_TRANSFER = """
import pathlib, sys, time
from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.clickhouse import writer as module
from transfer_platform.destinations.clickhouse.writer import ClickhouseWriter
from transfer_platform_tests.destinations import test_clickhouse_straight_load as t

config = load_config(sys.argv[1])
marker = pathlib.Path(sys.argv[2])
model = config.model(t.MODEL)
insert = ClickhouseWriter._insert

def half_then_stuck(self, batch, into, model):  # the clone holds part of the window
    insert(self, batch, into, model)
    if into.endswith("_swap`"):
        marker.write_text(into)
        while True:
            time.sleep(1)

ClickhouseWriter._insert = half_then_stuck
module.CLONE_BLOCK_ROWS = 1000  # the clone filled in several inserts
writer = writer_for(config.destination(t.DESTINATION))
writer.prepare(model, "killed")
writer.write_arrow(t.rows(model, range(1, 5001), payload="killed"), t.window(model, 0, "killed"))
print("the transfer ended before it was killed", flush=True)
"""

NEXT_TRANSFER = """
import sys
from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform_tests.destinations import test_clickhouse_straight_load as t

config = load_config(sys.argv[1])
model = config.model(t.MODEL)
writer = writer_for(config.destination(t.DESTINATION))
try:
    writer.prepare(model, "next")
    writer.write_arrow(t.rows(model, range(1, 1001), payload="next"), t.window(model, 0, "next"))
finally:
    writer.close()
"""


def test_a_transfer_killed_while_filling_the_clone_changes_nothing_and_the_next_one_delivers(tmp_path) -> None:
    folder, database = tmp_path / "chdb", "acme_ch"
    _, path = config_for(folder, database, tmp_path)
    filled = killed_when_marked(tmp_path, KILLED_TRANSFER, str(path))

    def read(sql: str) -> list[tuple]:  # a recipient opening the folder after the writer's process ended
        return chdb_in_another_process(folder, sql)

    clone = filled.split(".")[-1].strip("`")
    assert read(f"SELECT count() FROM {database}.{q(clone)}") == [(1000,)]  # killed with part of it inserted
    assert read(f"SELECT count() FROM {database}.events FINAL") == [(0,)]  # the table as it was: empty
    assert read(f"SELECT state FROM {database}._transfer_status WHERE data_model_name = '{MODEL}'") in ([], [(None,)])

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-c", textwrap.dedent(NEXT_TRANSFER), str(path)], env=env, check=True,
                   timeout=KILL_TIMEOUT_SECONDS)
    assert read(f"SELECT id, payload FROM {database}.events FINAL ORDER BY id") == [
        (k, f"next-{k}") for k in range(1, 1001)]
    assert read(f"SELECT name FROM system.tables WHERE database = '{database}' AND startsWith(name, '_tp_stg_')") == []
