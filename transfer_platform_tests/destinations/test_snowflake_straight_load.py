"""The Snowflake destination's straight load: a window into an empty table (a backfill's first
into an empty live table, a full refresh's first into its table aside) is loaded by ``COPY INTO``
that table itself, inside the window's one transaction (no staging table, no merge). Read back
through snowflake.connector, as a recipient reads it, against the emulator:

- a backfill and a full refresh take it (their ``stage`` record says ``straight_into_target``),
  the table then holds exactly the rows, the window's result counts them, and the next window into
  the filled table is staged and merged as before;
- rows marked deleted in such a window are never delivered; with ``keep_deleted_rows`` they are;
- a key twice, a NULL key or a NULL last-modified value in such a window is refused by name, the
  table still empty to a reader, the watermark unmoved, no staging table left;
- a model with a JSON column is staged and merged (its values parsed there);
- a transfer killed (SIGKILL) after its rows were copied, before its commit, leaves the table
  empty to every other session and the watermark unmoved; the next transfer, once the dead one's
  lease ran out, delivers the window.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pyarrow as pa
import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.empty_table_loads import (
    DAY,
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
from transfer_platform_tests.support.snowflake import PASSWORD_ENV, staging_tables

pytestmark = pytest.mark.integration
__all__ = ["stage_records"]  # the fixture, imported

SCHEMA = "acme"
LEASE_SECONDS = 2  # the killed transfer's hold on the model: the next one takes it over after this


def settings(server, database: str, **options) -> dict:
    """A Snowflake destination in ``database``."""
    return {
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model_entry(MODEL, **options)],
        "recipients": [{"name": "rcpt", "id_in_provider_system": "acme"}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "snowflake",
                          "lock_lease_seconds": LEASE_SECONDS,
                          "connection": server.connection(database, SCHEMA, PASSWORD_ENV)}],
    }


@pytest.fixture
def database(snowflake_server, monkeypatch) -> str:
    name = f"TP_{uuid.uuid4().hex[:10].upper()}"
    snowflake_server.create_schema(name, SCHEMA)
    monkeypatch.setenv(PASSWORD_ENV, "snow")
    return name


def config_for(server, database: str, folder, **options):
    path = folder / f"transfer_platform_{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(settings(server, database, **options)))
    return load_config(path), path


def held(server, database: str) -> tuple:
    """(id, payload, gone) of the live table as a new session reads it, and the model's status row
    (high watermark, state, refresh state); None where the table is missing."""
    with server.connect() as conn, conn.cursor() as cursor:
        cursor.execute(f'SELECT TABLE_NAME FROM "{database}".INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = %s',
                       (SCHEMA,))
        names = {r[0] for r in cursor.fetchall()}
        live = status = None
        if MODEL in names:
            cursor.execute(f'SELECT "id", "payload", "gone" FROM "{database}"."{SCHEMA}"."{MODEL}" ORDER BY "id"')
            live = [tuple(r) for r in cursor.fetchall()]
        if "_transfer_status" in names:
            cursor.execute(f'SELECT high_watermark, state, refresh_state FROM "{database}"."{SCHEMA}".'
                           '"_transfer_status" WHERE data_model_name = %s', (MODEL,))
            status = [tuple(r) for r in cursor.fetchall()]
    return live, status


def test_a_backfill_and_a_full_refresh_copy_straight_into_the_empty_table(
        snowflake_server, database, tmp_path, stage_records) -> None:
    config, _ = config_for(snowflake_server, database, tmp_path)
    model = config.model(MODEL)
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t1")
        first = writer.write_arrow(rows(model, range(1, 101)), window(model, 0, "t1"))  # into the empty live table
        assert (first.rows_transferred, first.delta_rows_transferred, first.rows_deleted) == (100, 100, 0)
        assert first.max_last_modified == START + timedelta(hours=1, seconds=99)
        writer.write_arrow(rows(model, [5, 200], at=START + DAY + timedelta(hours=1), payload="v2"), window(model, 1, "t1"))
        assert [r["straight_into_target"] for r in stage_records()] == [True, False]  # then merged as before
        live, status = held(snowflake_server, database)
        assert live == sorted([(k, f"v1-{k}", False) for k in range(1, 101) if k != 5]
                              + [(5, "v2-5", False), (200, "v2-200", False)])
        assert json.loads(status[0][1])["watermark_us"] == int((START + 2 * DAY).timestamp() * 1e6)

        writer.prepare(model, "r1", full_refresh=True)  # the table aside is empty too
        writer.write_arrow(rows(model, range(1, 51), payload="r"), window(model, 0, "r1", into_refresh=True))
        writer.write_arrow(rows(model, [7], at=START + DAY + timedelta(hours=2), payload="r2"),
                           window(model, 1, "r1", into_refresh=True))
        assert held(snowflake_server, database)[0] == live  # readers see the old rows until the publish
        writer.publish_refresh(model, "r1")
    finally:
        writer.close()
    assert [r["straight_into_target"] for r in stage_records()] == [True, False, True, False]
    assert held(snowflake_server, database)[0] == sorted([(k, f"r-{k}", False) for k in range(1, 51) if k != 7]
                                                         + [(7, "r2-7", False)])
    assert staging_tables(snowflake_server, database, SCHEMA) == []


@pytest.mark.parametrize("keep_deleted_rows", [False, True], ids=["removed", "kept"])
def test_rows_marked_deleted_in_a_straight_window_are_never_delivered_unless_kept(
        snowflake_server, database, tmp_path, stage_records, keep_deleted_rows) -> None:
    config, _ = config_for(snowflake_server, database, tmp_path, keep_deleted_rows=keep_deleted_rows)
    model = config.model(MODEL)
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t1")
        result = writer.write_arrow(rows(model, range(1, 11), gone={3, 4}), window(model, 0, "t1"))
    finally:
        writer.close()
    assert [r["straight_into_target"] for r in stage_records()] == [True]
    kept = [(k, f"v1-{k}", k in {3, 4}) for k in range(1, 11)]
    assert held(snowflake_server, database)[0] == (kept if keep_deleted_rows else [r for r in kept if not r[2]])
    assert result.rows_transferred == 10
    assert result.rows_deleted == (2 if keep_deleted_rows else 0)  # nothing delivered was removed


def test_a_model_with_a_json_column_is_staged_and_merged(snowflake_server, database, tmp_path, stage_records) -> None:
    config, _ = config_for(snowflake_server, database, tmp_path, json_payload=True)
    model = config.model(MODEL)
    batch = rows(model, [1, 2]).set_column(3, "payload", pa.array(['{"a": 1}', '[true, "x"]']))
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t1")
        writer.write_arrow(batch, window(model, 0, "t1"))
    finally:
        writer.close()
    assert [r["straight_into_target"] for r in stage_records()] == [False]
    payloads = [json.loads(r[1]) for r in held(snowflake_server, database)[0]]
    assert payloads == [{"a": 1}, [True, "x"]]  # parsed, not kept as JSON strings


@pytest.mark.parametrize("into_refresh", [False, True], ids=["backfill", "full_refresh"])
def test_a_key_twice_or_a_null_in_a_straight_window_is_refused_by_name_with_nothing_changed(
        snowflake_server, database, tmp_path, into_refresh) -> None:
    config, _ = config_for(snowflake_server, database, tmp_path)
    model = config.model(MODEL)
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t0")
        if into_refresh:  # a live table with rows, a full refresh begun aside
            writer.write_arrow(rows(model, [1, 2]), window(model, 0, "t0"))
        writer.prepare(model, "t1", full_refresh=into_refresh)
        before = held(snowflake_server, database)

        refuses_bad_windows(writer, model, into_refresh=into_refresh)
        assert held(snowflake_server, database) == before  # the table, its watermark and state as they were
        assert staging_tables(snowflake_server, database, SCHEMA) == []
        if into_refresh:  # and the refresh's table aside is still empty: the next window goes straight in
            writer.write_arrow(rows(model, [1, 2, 3], payload="r"), window(model, 0, "t1", into_refresh=True))
            writer.publish_refresh(model, "t1")
            assert held(snowflake_server, database)[0] == [(k, f"r-{k}", False) for k in (1, 2, 3)]
    finally:
        writer.close()


# -- a transfer killed between its copy and its commit --------------------------------------------

KILLED_TRANSFER = """
import pathlib, sys, time
from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.snowflake.writer import SnowflakeWriter
from transfer_platform_tests.destinations import test_snowflake_straight_load as t

config = load_config(sys.argv[1])
marker = pathlib.Path(sys.argv[2])
model = config.model(t.MODEL)
refuse = SnowflakeWriter._refuse

def copied_then_stuck(self, staging, load):  # the rows are in the table, the transaction open
    refuse(self, staging, load)
    marker.write_text(staging.name)
    while True:
        time.sleep(1)

SnowflakeWriter._refuse = copied_then_stuck
writer = writer_for(config.destination(t.DESTINATION))
writer.prepare(model, "killed")
writer.write_arrow(t.rows(model, range(1, 5001), payload="killed"), t.window(model, 0, "killed"))
print("the transfer ended before it was killed", flush=True)
"""


def test_a_transfer_killed_between_its_copy_and_its_commit_changes_nothing_and_the_next_one_delivers(
        snowflake_server, database, tmp_path) -> None:
    config, path = config_for(snowflake_server, database, tmp_path)
    model = config.model(MODEL)
    copied = killed_when_marked(tmp_path, KILLED_TRANSFER, str(path))
    assert copied == MODEL  # killed after the rows were copied into the table itself
    live, status = held(snowflake_server, database)
    assert live == []  # another session never saw the uncommitted rows
    assert status in (None, []) or status[0][0] is None  # the watermark did not move

    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "next")  # waits for the dead transfer's lease to run out
        writer.write_arrow(rows(model, range(1, 1001), payload="next"), window(model, 0, "next"))
    finally:
        writer.close()
    assert held(snowflake_server, database)[0] == [(k, f"next-{k}", False) for k in range(1, 1001)]
    assert staging_tables(snowflake_server, database, SCHEMA) == []
