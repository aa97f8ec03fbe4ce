"""The MySQL destination's fresh-table path: a window into an empty target (a backfill's, a full
refresh's first) is loaded by ``LOAD DATA`` straight into a new keyed table, which then replaces
the target (no staging, no merge).

- a backfill and a full refresh take it (their ``stage`` record says ``fresh_table``), the table
  then holds exactly the rows, and the next window into the filled table is merged as before;
- a key twice, a NULL key or last-modified value in such a window is refused by name, the live
  table and the watermark as they were, nothing of the transfer left behind;
- a transfer killed (SIGKILL) while it loads the fresh table changes neither the live table nor the
  watermark; the next transfer's clean-up drops the table the dead one created and completes;
- a refresh whose first window died between its rename and its commit is emptied by the next.

The windows are written through the writer as Arrow (``write_arrow``, the path of the windows the
runner reads in this process); the Spark path is the one ``test_mysql_destination.py`` runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from transfer_platform.config.parsing import parse_config
from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import WindowLoad, arrow_schema, writer_for
from transfer_platform.errors import DataError, DuplicateKey
from transfer_platform_tests.support.cli import PACKAGE_ROOT
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.empty_table_loads import stage_records
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.mysql import MYSQL, mysql_connect, mysql_ident, new_database
from transfer_platform_tests.support.postgres import pg_connection_config

pytestmark = pytest.mark.integration
__all__ = ["stage_records"]  # the fixture, imported

START = datetime(2025, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
KILL_TIMEOUT_SECONDS = 300  # a failure bound on a loaded machine, not a wait
KILL_ROWS = 60_000  # rows of the killed window, loaded 1,000 a file: a load of many statements


@pytest.fixture
def database():
    with new_database("tp_myfresh") as name:
        yield name


COLUMNS = [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
           {"name_in_source": "organization_id", "data_type": "string"},
           {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
           {"name_in_source": "payload", "data_type": "string"}]


def config_for(database: str):
    """A MySQL destination in ``database``; windows are written through the writer, so the
    source is named but never read."""
    model = {"model_name": MODEL, "source_name": "src", "source_table": "unread.events",
             "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
             "min_start_time_epoch": int(START.timestamp()), "columns": COLUMNS}
    connection = {"host": MYSQL["host"], "port": MYSQL["port"], "database": database, "username": MYSQL["user"]}
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": "acme"}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "mysql", "connection": connection}],
    }, now=datetime(2025, 6, 1, tzinfo=UTC))


def rows(ids, *, at: datetime = START + timedelta(hours=1), payload: str = "v1") -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": k, "organization_id": "acme", "updated_at": at + timedelta(seconds=n), "payload": f"{payload}-{k}"}
         for n, k in enumerate(ids)], schema=arrow_schema(config_for("x").model(MODEL)))


def window(model, day: int, transfer_id: str, *, into_refresh: bool = False) -> WindowLoad:
    return WindowLoad(model, transfer_id, Window(START + day * DAY, START + (day + 1) * DAY), START,
                      into_refresh=into_refresh)


def query(database: str, statement: str) -> list[tuple]:
    conn = mysql_connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall())
    finally:
        conn.close()


def tables(database: str) -> list[str]:
    return sorted(r[0] for r in query(database, "SELECT TABLE_NAME FROM information_schema.TABLES "
                                                f"WHERE TABLE_SCHEMA = '{database}'"))


def held(database: str) -> tuple:
    """(id, payload) of the live table, and the status row (watermark, state, refresh, published)."""
    live = query(database, f"SELECT id, payload FROM {mysql_ident(MODEL)} ORDER BY id") if MODEL in tables(database) else None
    status = (query(database, "SELECT high_watermark, state, refresh_state, published_state FROM _transfer_status")
              if "_transfer_status" in tables(database) else None)
    return live, status


def test_a_backfill_and_a_full_refresh_load_a_fresh_table_that_replaces_the_target(database, stage_records):
    config = config_for(database)
    model = config.model(MODEL)
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t1")
        writer.write_arrow(rows(range(1, 101)), window(model, 0, "t1"))  # into the empty live table
        writer.write_arrow(rows([5, 200], at=START + DAY + timedelta(hours=1), payload="v2"), window(model, 1, "t1"))
        assert [r["fresh_table"] for r in stage_records()] == [True, False]  # then merged as before
        live, status = held(database)
        assert live == sorted([(k, f"v1-{k}") for k in range(1, 101) if k != 5] + [(5, "v2-5"), (200, "v2-200")])
        assert json.loads(status[0][1])["watermark_us"] == int((START + 2 * DAY).timestamp() * 1e6)
        # the replaced table keeps the key: a duplicate is refused by the server
        with pytest.raises(Exception, match="Duplicate entry"):
            query(database, f"INSERT INTO {mysql_ident(MODEL)} SELECT * FROM {mysql_ident(MODEL)} LIMIT 1")

        writer.prepare(model, "r1", full_refresh=True)  # the table aside is fresh too
        writer.write_arrow(rows(range(1, 51), payload="r"), window(model, 0, "r1", into_refresh=True))
        writer.write_arrow(rows([7], at=START + DAY + timedelta(hours=2), payload="r2"),
                           window(model, 1, "r1", into_refresh=True))
        assert held(database)[0] == live  # readers see the old table until the publish
        writer.publish_refresh(model, "r1")
    finally:
        writer.close()
    assert [r["fresh_table"] for r in stage_records()] == [True, False, True, False]
    assert held(database)[0] == sorted([(k, f"r-{k}") for k in range(1, 51) if k != 7] + [(7, "r2-7")])
    assert tables(database) == ["_transfer_status", MODEL]


@pytest.mark.parametrize("into_refresh", [False, True], ids=["backfill", "full_refresh"])
def test_a_key_twice_or_a_null_in_a_fresh_table_window_is_refused_by_name_with_nothing_changed(
        database, into_refresh):
    config = config_for(database)
    model = config.model(MODEL)
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t0")
        if into_refresh:  # a live table with rows, a full refresh begun aside
            writer.write_arrow(rows([1, 2]), window(model, 0, "t0"))
        before = held(database)
        writer.prepare(model, "t1", full_refresh=into_refresh)

        twice = pa.concat_tables([rows(range(1, 2001)), rows([1500], payload="again")])
        with pytest.raises(DuplicateKey, match=r"duplicate primary key in one batch: id=1500") as refused:
            writer.write_arrow(twice, window(model, 0, "t1", into_refresh=into_refresh))
        assert refused.value.key_values == {"id": 1500}

        null_key = rows([1, 2]).set_column(0, "id", pa.array([1, None], pa.int64()))
        with pytest.raises(DataError, match=r"NULL primary key value \(id\)"):
            writer.write_arrow(null_key, window(model, 0, "t1", into_refresh=into_refresh))

        null_lm = rows([1, 2]).set_column(2, "updated_at", pa.array([None, START], pa.timestamp("us", tz="UTC")))
        with pytest.raises(DataError, match=r"NULL last-modified value \(updated_at\) at key id=1"):
            writer.write_arrow(null_lm, window(model, 0, "t1", into_refresh=into_refresh))

        after = held(database)
        assert after[0] == before[0]  # the live table as it was
        assert [r[:2] for r in after[1]] == [r[:2] for r in before[1]]  # its watermark and state too
        assert not [t for t in tables(database) if t.startswith("_tp_stg_")]  # no staging left
    finally:
        writer.close()


# -- a transfer killed while it loads the fresh table ---------------------------------------------

KILLED_TRANSFER = """
import sys
import pyarrow as pa
from transfer_platform_tests.integration import test_mysql_fresh_table as t
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.mysql import load

database, into_refresh = sys.argv[1], sys.argv[2] == "1"
config = t.config_for(database)
model = config.model(t.MODEL)
writer = writer_for(config.destination(t.DESTINATION))
writer.prepare(model, "killed", full_refresh=into_refresh)
batch = t.rows(range(1, t.KILL_ROWS + 1), payload="killed")
from transfer_platform.destinations.mysql import writer as module
# many small files, so that the kill lands between two of them
module.load_batches = lambda conn, sql, batches, folder=None: load.load_batches(
    conn, sql, pa.Table.from_batches(list(batches)).to_batches(1000), folder)
writer.write_arrow(batch, t.window(model, 1, "killed", into_refresh=into_refresh))
print("the transfer ended before it was killed", flush=True)
"""


def fresh_table_rows(database: str) -> tuple[str, int] | None:
    found = [t for t in tables(database) if t.startswith("_tp_stg_")]
    if not found:
        return None
    try:
        return found[0], query(database, f"SELECT count(*) FROM {mysql_ident(found[0])}")[0][0]
    except Exception:  # dropped meanwhile  # noqa: BLE001
        return None


@pytest.mark.parametrize("into_refresh", [False, True], ids=["backfill", "full_refresh"])
def test_a_transfer_killed_while_loading_a_fresh_table_changes_nothing_and_the_next_one_completes(
        database, tmp_path, into_refresh):
    config = config_for(database)
    model = config.model(MODEL)
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t0")
        if into_refresh:
            writer.write_arrow(rows([1, 2], payload="old"), window(model, 0, "t0"))
    finally:
        writer.close()
    before = held(database)

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    with open(tmp_path / "out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", KILLED_TRANSFER, database, "1" if into_refresh else "0"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        launched = time.monotonic()
        while True:  # kill once the fresh table holds some of the rows
            assert proc.poll() is None, (tmp_path / "out").read_text()[-3000:]
            assert time.monotonic() - launched < KILL_TIMEOUT_SECONDS
            loading = fresh_table_rows(database)
            if loading and loading[1] > 0:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    left = fresh_table_rows(database)
    assert left is not None  # killed mid-load: its table is left, part loaded
    assert 0 < left[1] < KILL_ROWS
    key = query(database, "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = "
                          f"'{database}' AND TABLE_NAME = '{left[0]}' AND CONSTRAINT_NAME = 'PRIMARY'")
    assert key == [("id",)]  # the fresh table (a staging table has no key)
    live, status = held(database)
    assert live == before[0]  # the live table as it was
    assert [r[:2] for r in status] == [r[:2] for r in before[1]]  # the watermark did not move

    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "next", full_refresh=into_refresh)
        assert left[0] not in tables(database)  # the clean-up dropped the dead transfer's table
        writer.write_arrow(rows(range(1, 1001), payload="next"), window(model, 1, "next", into_refresh=into_refresh))
        if into_refresh:
            writer.publish_refresh(model, "next")
    finally:
        writer.close()
    assert held(database)[0] == [(k, f"next-{k}") for k in range(1, 1001)]
    assert tables(database) == ["_transfer_status", MODEL]


def test_a_refresh_whose_first_window_died_after_its_rename_is_emptied_by_the_next(database, monkeypatch):
    from transfer_platform.destinations.mysql.writer import MysqlWriter

    config = config_for(database)
    model = config.model(MODEL)
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t0")
        writer.write_arrow(rows([1, 2], payload="old"), window(model, 0, "t0"))
        writer.prepare(model, "r1", full_refresh=True)
        recorded = MysqlWriter._set_state

        def killed(self, model, column, state):  # the process dies between the rename and the commit
            if column == "refresh_state" and state is not None and state.watermark is not None:
                raise RuntimeError("killed after the rename")
            recorded(self, model, column, state)

        monkeypatch.setattr(MysqlWriter, "_set_state", killed)
        with pytest.raises(RuntimeError, match="killed after the rename"):
            writer.write_arrow(rows([3, 4], payload="lost"), window(model, 0, "r1", into_refresh=True))
        monkeypatch.setattr(MysqlWriter, "_set_state", recorded)
    finally:
        writer.close()
    aside = [t for t in tables(database) if t.startswith("_tp_refresh_")]
    assert aside
    assert query(database, f"SELECT count(*) FROM {mysql_ident(aside[0])}")[0][0] == 2

    writer = writer_for(config.destination(DESTINATION))
    try:
        prepared = writer.prepare(model, "r2")  # carries the refresh on, from no window
        assert prepared.refresh is not None
        assert prepared.refresh.watermark is None
        assert query(database, f"SELECT count(*) FROM {mysql_ident(aside[0])}")[0][0] == 0  # emptied
        writer.write_arrow(rows([3], payload="new"), window(model, 0, "r2", into_refresh=True))
        writer.publish_refresh(model, "r2")
    finally:
        writer.close()
    assert held(database)[0] == [(3, "new-3")]
