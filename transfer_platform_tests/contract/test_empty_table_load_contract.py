"""Empty-table loads, whatever the vendor: a window into an empty table (a backfill's first into
the empty live table, a full refresh's first into its table aside) is loaded by the strategy the
vendor's record declares (``empty_table_load``: ``swap``, ``create-and-rename``,
``clone-and-exchange``, ``copy-into``), each row written once instead of staged and merged.

Every destination vendor of the registry that declares one is in it; how to tell the load was
taken, what a transfer leaves behind, and where to stop a writer in the middle of the load is its
harness in ``support/harnesses.py`` (``EMPTY_TABLE_LOADS``): a vendor without one fails here.
Windows are written through the writer's public methods (``prepare``, ``write_arrow``,
``publish_refresh``); what the destination holds is read through the vendor's own client, as the
recipient reads it:

- a backfill and a full refresh take it, the table then holds exactly the rows, the window's result
  counts them, the next window into the filled table is merged as before, and a table built aside
  is seen by readers only once published; a keyed load leaves the server's key on the table;
- rows marked deleted in such a window are never delivered; with ``keep_deleted_rows`` they are;
- a key twice, a NULL key or last-modified value (and what the vendor's types cannot hold) in such
  a window is refused by name, the table, its watermark and state as they were, nothing left
  behind; the refresh's table aside is still empty, so its next window takes the load;
- a writer killed (SIGKILL) in the middle of the load (its rows loaded, the window not committed)
  changes neither the table nor the watermark, and the next transfer removes what it left and
  delivers the window.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import WindowLoad, arrow_schema, writer_for
from transfer_platform.errors import DataError, DuplicateKey
from transfer_platform.vendors import DESTINATIONS
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.destinations import Place, TestDestination
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.harnesses import (
    EMPTY_TABLE_LOADS,
    EmptyLoadHarness,
    killed_when_marked,
    made,
    missing,
    run_python,
)
from transfer_platform_tests.support.postgres import pg_connection_config

START = datetime(2025, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
COLUMNS = [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
           {"name_in_source": "organization_id", "data_type": "string"},
           {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
           {"name_in_source": "payload", "data_type": "string"},
           {"name_in_source": "born", "data_type": "date"},
           {"name_in_source": "gone", "data_type": "boolean", "is_deleted_marker": True}]

#: the vendors that declare an empty-table load (the registry's)
VENDORS = [name for name, record in DESTINATIONS.items() if record.empty_table_load is not None]


def test_every_vendor_that_declares_an_empty_table_load_has_a_harness() -> None:
    assert missing(EMPTY_TABLE_LOADS, VENDORS) == [], (
        "add its harness to transfer_platform_tests/support/harnesses.py (EMPTY_TABLE_LOADS)")


# -- the model, its windows, the destination ------------------------------------------------------


def rows(model, ids, *, at: datetime = START + timedelta(hours=1), payload: str = "v1", gone=()) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": k, "organization_id": "acme", "updated_at": at + timedelta(seconds=n), "payload": f"{payload}-{k}",
          "born": date(2020, 1, 1), "gone": k in gone} for n, k in enumerate(ids)], schema=arrow_schema(model))


def window(model, day: int, transfer_id: str, *, into_refresh: bool = False) -> WindowLoad:
    return WindowLoad(model, transfer_id, Window(START + day * DAY, START + (day + 1) * DAY), START,
                      into_refresh=into_refresh)


def harness_of(vendor: str) -> EmptyLoadHarness:
    assert vendor in EMPTY_TABLE_LOADS, f"{vendor} declares an empty-table load but has no harness (EMPTY_TABLE_LOADS)"
    return EMPTY_TABLE_LOADS[vendor]


def destination_of(make, request, new_schema, tmp_path, monkeypatch) -> TestDestination:
    place = Place(new_schema(), tmp_path / "destination", lambda: request.getfixturevalue("s3"),
                  lambda: request.getfixturevalue("azure_blob"), request.getfixturevalue)
    return made(make, place, monkeypatch)


def config_for(destination: TestDestination, harness: EmptyLoadHarness, folder, *, keep_deleted_rows: bool = False):
    """The model (its windows written through the writer: the source is named, never read) into
    ``destination``; the configuration and its file."""
    model = {"model_name": MODEL, "source_name": "src", "source_table": "unread.events",
             "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
             "min_start_time_epoch": int(START.timestamp()), "keep_deleted_rows": keep_deleted_rows,
             "columns": COLUMNS}
    path = folder / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": "acme"}],
        "destinations": [{**destination.entry(DESTINATION, "rcpt"), **harness.settings}],
    }))
    return load_config(path), path


def held(destination: TestDestination, model) -> list[tuple] | None:
    """(id, payload, gone) of the table as the recipient reads it; None without the table."""
    found = destination.rows(model)
    return None if found is None else [(r["id"], r["payload"], r["gone"]) for r in found]


def state_of(writer, model) -> tuple:
    state = writer.committed_state(model).state
    return state.watermark, state.high_watermark


@pytest.fixture(params=VENDORS)
def vendor(request) -> str:
    return request.param


@pytest.fixture
def destination(vendor, request, new_schema, tmp_path, monkeypatch) -> TestDestination:
    return destination_of(harness_of(vendor).make, request, new_schema, tmp_path, monkeypatch)


@pytest.fixture
def stage_records(caplog) -> Callable[[], list[dict]]:
    """The ``stage`` phase records logged so far."""
    caplog.set_level(logging.INFO, logger="transfer_platform.phases")

    def records() -> list[dict]:
        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "transfer_platform.phases"]
        return [r for r in lines if r["phase"] == "stage"]

    return records


def written(harness: EmptyLoadHarness, destination: TestDestination, table: str, write) -> tuple:
    """``write()``'s result, and whether it replaced ``table`` (its identity changed)."""
    before = harness.table_id(destination, table)
    result = write()
    after = harness.table_id(destination, table)
    return result, before is not None and after != before


# -- the contract -----------------------------------------------------------------------------------


@pytest.mark.integration
class TestEmptyTableLoadContract:
    def test_a_backfill_and_a_full_refresh_load_the_empty_table_then_merge(
            self, vendor, destination, tmp_path, stage_records) -> None:
        harness = harness_of(vendor)
        config, _ = config_for(destination, harness, tmp_path)
        model = config.model(MODEL)
        writer = writer_for(config.destination(DESTINATION))
        replaced = []
        try:
            writer.prepare(model, "t1")
            first, swapped = written(harness, destination, MODEL, lambda: writer.write_arrow(
                rows(model, range(1, 101)), window(model, 0, "t1")))  # into the empty live table
            replaced.append(swapped)
            assert (first.rows_transferred, first.delta_rows_transferred, first.rows_deleted) == (100, 100, 0)
            assert first.max_last_modified == START + timedelta(hours=1, seconds=99)
            _, swapped = written(harness, destination, MODEL, lambda: writer.write_arrow(
                rows(model, [5, 200], at=START + DAY + timedelta(hours=1), payload="v2"), window(model, 1, "t1")))
            replaced.append(swapped)
            taken = [harness.took(r, x) for r, x in zip(stage_records(), replaced, strict=True)]
            assert taken == [True, False]  # then merged as before
            live = held(destination, model)
            assert live == sorted([(k, f"v1-{k}", False) for k in range(1, 101) if k != 5]
                                  + [(5, "v2-5", False), (200, "v2-200", False)])
            assert writer.committed_state(model).state.watermark == START + 2 * DAY
            if harness.insert_duplicate is not None:  # the loaded table keeps the server's key
                with pytest.raises(Exception, match="(?i)duplicate"):
                    harness.insert_duplicate(destination)

            writer.prepare(model, "r1", full_refresh=True)  # the table aside is empty too
            aside = writer.refresh_table_name(model)
            for day, batch in ((0, rows(model, range(1, 51), payload="r")),
                               (1, rows(model, [7], at=START + DAY + timedelta(hours=2), payload="r2"))):
                _, swapped = written(harness, destination, aside, lambda batch=batch, day=day: writer.write_arrow(
                    batch, window(model, day, "r1", into_refresh=True)))
                replaced.append(swapped)
            assert held(destination, model) == live  # readers see the old rows until the publish
            writer.publish_refresh(model, "r1")
        finally:
            writer.close()
        assert [harness.took(r, x) for r, x in zip(stage_records(), replaced, strict=True)] == [True, False, True, False]
        assert held(destination, model) == sorted([(k, f"r-{k}", False) for k in range(1, 51) if k != 7]
                                                  + [(7, "r2-7", False)])
        assert harness.leftovers(destination) == []

    @pytest.mark.parametrize("keep_deleted_rows", [False, True], ids=["removed", "kept"])
    def test_rows_marked_deleted_in_an_empty_table_window_are_never_delivered_unless_kept(
            self, vendor, destination, tmp_path, stage_records, keep_deleted_rows) -> None:
        harness = harness_of(vendor)
        config, _ = config_for(destination, harness, tmp_path, keep_deleted_rows=keep_deleted_rows)
        model = config.model(MODEL)
        writer = writer_for(config.destination(DESTINATION))
        try:
            writer.prepare(model, "t1")
            result, swapped = written(harness, destination, MODEL, lambda: writer.write_arrow(
                rows(model, range(1, 11), gone={3, 4}), window(model, 0, "t1")))
        finally:
            writer.close()
        assert [harness.took(r, swapped) for r in stage_records()] == [True]
        kept = [(k, f"v1-{k}", k in {3, 4}) for k in range(1, 11)]
        assert held(destination, model) == (kept if keep_deleted_rows else [r for r in kept if not r[2]])
        assert result.rows_transferred == 10
        assert result.rows_deleted == (2 if keep_deleted_rows else 0)  # nothing delivered was removed

    @pytest.mark.parametrize("into_refresh", [False, True], ids=["backfill", "full_refresh"])
    def test_a_key_twice_or_a_null_in_an_empty_table_window_is_refused_by_name_with_nothing_changed(
            self, vendor, destination, tmp_path, stage_records, into_refresh) -> None:
        harness = harness_of(vendor)
        config, _ = config_for(destination, harness, tmp_path)
        model = config.model(MODEL)
        writer = writer_for(config.destination(DESTINATION))
        try:
            writer.prepare(model, "t0")
            if into_refresh:  # a live table with rows, a full refresh begun aside
                writer.write_arrow(rows(model, [1, 2]), window(model, 0, "t0"))
            writer.prepare(model, "t1", full_refresh=into_refresh)
            before = held(destination, model), state_of(writer, model), harness.leftovers(destination)

            load = window(model, 0, "t1", into_refresh=into_refresh)
            twice = pa.concat_tables([rows(model, range(1, 2001)), rows(model, [1500], payload="again")])
            with pytest.raises(DuplicateKey, match=r"duplicate primary key in one batch: id=1500") as refused:
                writer.write_arrow(twice, load)
            assert refused.value.key_values == {"id": 1500}
            null_key = rows(model, [1, 2]).set_column(0, "id", pa.array([1, None], pa.int64()))
            with pytest.raises(DataError, match=r"NULL primary key value \(id\)"):
                writer.write_arrow(null_key, load)
            null_lm = rows(model, [1, 2]).set_column(2, "updated_at", pa.array([None, START], pa.timestamp("us", tz="UTC")))
            with pytest.raises(DataError, match=r"NULL last-modified value \(updated_at\) at key id=1"):
                writer.write_arrow(null_lm, load)
            for column, value, message in harness.refusals:  # what the vendor's types cannot hold
                batch = rows(model, [1, 2])
                position = batch.schema.get_field_index(column)
                bad = batch.set_column(position, column, pa.array([batch.column(position)[0].as_py(),
                                                                   date.fromisoformat(value)]))
                with pytest.raises(DataError, match=message):
                    writer.write_arrow(bad, load)

            assert (held(destination, model), state_of(writer, model), harness.leftovers(destination)) == before
            if into_refresh:  # the refresh's table aside is still empty: the next window takes the load
                stage_records_before = len(stage_records())
                aside = writer.refresh_table_name(model)
                _, swapped = written(harness, destination, aside, lambda: writer.write_arrow(
                    rows(model, [1, 2, 3], payload="r"), window(model, 0, "t1", into_refresh=True)))
                assert harness.took(stage_records()[stage_records_before], swapped)
                writer.publish_refresh(model, "t1")
                assert held(destination, model) == [(k, f"r-{k}", False) for k in (1, 2, 3)]
        finally:
            writer.close()

    @pytest.mark.parametrize("into_refresh", [False, True], ids=["backfill", "full_refresh"])
    def test_a_writer_killed_in_the_middle_of_the_load_changes_nothing_and_the_next_one_delivers(
            self, vendor, request, new_schema, tmp_path, monkeypatch, into_refresh) -> None:
        harness = harness_of(vendor)
        destination = destination_of(harness.alone or harness.make, request, new_schema, tmp_path, monkeypatch)
        config, path = config_for(destination, harness, tmp_path)
        model = config.model(MODEL)
        leftovers = harness.alone_leftovers or harness.leftovers

        def watermark():
            return harness.alone_watermark(destination, config)

        run_python(WRITER, str(path), vendor, "before", "1" if into_refresh else "0", cwd=tmp_path)
        before = held(destination, model), watermark()

        statement = killed_when_marked(tmp_path, WRITER, str(path), vendor, "killed", "1" if into_refresh else "0")
        assert harness.pause.pattern.strip("^$") in statement  # killed where its harness says: rows loaded

        assert (held(destination, model), watermark()) == before  # the table and the watermark as they were
        if DESTINATIONS[vendor].empty_table_load != "copy-into":  # (copy-into loads into the table itself)
            assert leftovers(destination), "the killed writer's table was not left behind"

        run_python(WRITER, str(path), vendor, "next", "1" if into_refresh else "0", cwd=tmp_path)
        assert held(destination, model) == [(k, f"next-{k}", False) for k in range(1, 1001)]
        assert leftovers(destination) == []


#: a writer in a process of its own (argv: configuration, vendor, what, into a refresh): ``before``
#: makes the table (with a full refresh, two rows in it), ``killed`` loads a window until the
#: harness's pause (then waits for its SIGKILL; the marker file is the last argument), ``next``
#: delivers a window of 1,000 rows as the next transfer
WRITER = """
import pathlib, sys
from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform_tests.contract import test_empty_table_load_contract as t
from transfer_platform_tests.support.harnesses import EMPTY_TABLE_LOADS, pause_at

config = load_config(sys.argv[1])
vendor, what, into_refresh = sys.argv[2], sys.argv[3], sys.argv[4] == "1"
model = config.model(t.MODEL)
writer = writer_for(config.destination(t.DESTINATION))
try:
    if what == "before":
        writer.prepare(model, "t0")
        if into_refresh:
            writer.write_arrow(t.rows(model, [1, 2], payload="old"), t.window(model, 0, "t0"))
    elif what == "killed":
        writer.prepare(model, "killed", full_refresh=into_refresh)
        pause_at(EMPTY_TABLE_LOADS[vendor].pause, pathlib.Path(sys.argv[5]))
        writer.write_arrow(t.rows(model, range(1, 5001), payload="killed"), t.window(model, 1, "killed", into_refresh=into_refresh))
        print("the writer ended before it was killed", flush=True)
    else:
        writer.prepare(model, "next", full_refresh=into_refresh)
        writer.write_arrow(t.rows(model, range(1, 1001), payload="next"), t.window(model, 1, "next", into_refresh=into_refresh))
        if into_refresh:
            writer.publish_refresh(model, "next")
finally:
    writer.close()
"""
