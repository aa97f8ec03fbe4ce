"""The BigQuery destination against its emulator, without Spark: every model data_type written by
the writer and read back through google-cloud-bigquery as the recipient reads it; a wrong endpoint,
a missing dataset and a bad service-account key each refused in one line naming the vendor, the
object and the fix, nothing changed, no secret shown."""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import replace
from datetime import timedelta

import pyarrow as pa
import pytest

from transfer_platform.destinations.base import arrow_schema
from transfer_platform.destinations.bigquery.writer import BigqueryWriter
from transfer_platform.errors import ConfigError, ConnectionFailure, SchemaMismatch
from transfer_platform.vendors.bigquery import BigqueryDestination
from transfer_platform_tests.support.bigquery import (
    ROWS,
    T0,
    TRICKY,
    bigquery_rows,
    bigquery_watermark,
    load,
    new_dataset,
    typed_model,
    write,
)

pytestmark = pytest.mark.integration

SECRET_ENV = "TP_TEST_BIGQUERY_KEY"


def destination(server, dataset: str, **connection) -> BigqueryDestination:
    return BigqueryDestination.model_validate({
        "name": "bq", "recipient": "r", "vendor": "bigquery",
        "connection": {"project": server.project, "dataset": dataset, "api_endpoint": server.endpoint, **connection}})


def test_every_data_type_is_read_back_as_written(bigquery_server) -> None:
    dataset = new_dataset(bigquery_server)
    model = typed_model()
    writer = BigqueryWriter(destination(bigquery_server, dataset))
    try:
        write(writer, model, ROWS)
    finally:
        writer.close()

    read = bigquery_rows(bigquery_server, dataset, "typed", [(c.destination_name, c.data_type) for c in model.columns])
    by_key = {r["id"]: r for r in read}
    assert set(by_key) == {r["id"] for r in ROWS}
    for row in ROWS:
        got = by_key[row["id"]]
        for column, value in row.items():
            expected = json.loads(value) if column == "doc" and value is not None else value
            assert got[column] == expected, column
            assert type(got[column]) is type(expected), column
    assert bigquery_watermark(bigquery_server, dataset, "typed") == T0 + timedelta(days=1)


def test_a_second_window_merges_on_the_key_with_the_tie_break(bigquery_server) -> None:
    dataset = new_dataset(bigquery_server)
    model = typed_model()
    writer = BigqueryWriter(destination(bigquery_server, dataset))
    try:
        write(writer, model, ROWS)
        older = {**ROWS[1], "updated_at": ROWS[1]["updated_at"] - timedelta(microseconds=1), "s": "older"}
        same_changed = {**ROWS[2], "s": "same time, new value"}
        write(writer, model, [older, same_changed], "t2")
    finally:
        writer.close()
    read = {r["id"]: r["s"] for r in bigquery_rows(bigquery_server, dataset, "typed", [("id", "string"),
                                                                                      ("s", "string")])}
    assert read == {ROWS[0]["id"]: TRICKY, "k2": "", "k3": "same time, new value"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_endpoint_is_one_line_naming_it_and_the_fix(bigquery_server, monkeypatch) -> None:
    # the client retries a refused connection for BIGQUERY_RETRY_SECONDS (20 s) before giving up:
    # what this test checks is the message after it, not the length of the retries
    monkeypatch.setattr("transfer_platform.destinations.sql.session.BIGQUERY_RETRY_SECONDS", 2.0)
    writer = BigqueryWriter(destination(bigquery_server, "any", api_endpoint=f"http://127.0.0.1:{_free_port()}"))
    try:
        with pytest.raises(ConnectionFailure) as refused:
            writer.prepare(typed_model(), "t1")
    finally:
        writer.close()
    message = str(refused.value)
    assert "\n" not in message
    assert "BigQuery destination 'bq'" in message
    assert "127.0.0.1" in message
    assert "Fix:" in message


def test_a_missing_dataset_is_named_with_the_fix_and_nothing_is_created(bigquery_server) -> None:
    writer = BigqueryWriter(destination(bigquery_server, "no_such_dataset"))
    try:
        with pytest.raises(ConnectionFailure) as refused:
            writer.prepare(typed_model(), "t1")
    finally:
        writer.close()
    message = str(refused.value)
    assert "\n" not in message
    assert "dataset tp-test-project.no_such_dataset not found" in message
    assert "create the dataset no_such_dataset" in message
    client = bigquery_server.client()
    try:
        assert "no_such_dataset" not in [d.dataset_id for d in client.list_datasets()]
    finally:
        client.close()


def test_a_bad_service_account_key_is_refused_without_showing_it(bigquery_server, monkeypatch, caplog) -> None:
    secret = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----SECRETSECRET"}'
    monkeypatch.setenv(SECRET_ENV, secret)
    dataset = new_dataset(bigquery_server)
    writer = BigqueryWriter(destination(bigquery_server, dataset, credentials=f"${{{SECRET_ENV}}}"))
    caplog.set_level(logging.DEBUG)
    try:
        with pytest.raises(ConfigError) as refused:
            writer.prepare(typed_model(), "t1")
    finally:
        writer.close()
    assert "connection.credentials" in str(refused.value)
    assert "SECRETSECRET" not in str(refused.value)
    assert "SECRETSECRET" not in caplog.text
    assert bigquery_rows(bigquery_server, dataset, "typed", [("id", "string")]) is None  # nothing written


class Died(BaseException):
    """The transfer's process dying at a chosen point (raised by the writer's own step)."""


def test_a_transfer_dying_between_the_merge_and_the_watermark_is_redelivered_exactly(
        bigquery_server, monkeypatch) -> None:
    dataset = new_dataset(bigquery_server)
    model = typed_model()
    columns = [(c.destination_name, c.data_type) for c in model.columns]
    writer = BigqueryWriter(destination(bigquery_server, dataset))
    try:
        write(writer, model, ROWS[:1])
    finally:
        writer.close()
    before = bigquery_watermark(bigquery_server, dataset, "typed")
    window = [{**ROWS[0], "updated_at": ROWS[0]["updated_at"] + timedelta(days=2), "s": "v2"}, *ROWS[1:]]

    def die(*args, **kwargs) -> None:
        raise Died

    writer = BigqueryWriter(destination(bigquery_server, dataset))
    monkeypatch.setattr(writer, "_record_state", die)  # after the window's MERGE, before its watermark
    with pytest.raises(Died):
        write(writer, model, window, "t2")
    writer._locked.clear()  # a dead process releases nothing: its lock row stays
    writer._conn.close()
    merged = bigquery_rows(bigquery_server, dataset, "typed", columns)
    assert len(merged) == 3  # the rows of the one MERGE, all of them
    assert bigquery_watermark(bigquery_server, dataset, "typed") == before  # the watermark did not move

    writer = BigqueryWriter(destination(bigquery_server, dataset))
    try:
        monkeypatch.setattr("transfer_platform.destinations.bigquery.writer.process_gone",  # the holder above
                            lambda host, pid: True)  # was this process's: taken over as a dead one's
        write(writer, model, window, "t3")  # the next transfer reads the window again
    finally:
        writer.close()
    assert sorted(map(str, bigquery_rows(bigquery_server, dataset, "typed", columns))) == sorted(map(str, merged))
    assert bigquery_watermark(bigquery_server, dataset, "typed") == T0 + timedelta(days=1)


def test_test_connection_passes_every_step_on_the_emulator(bigquery_server) -> None:
    dataset = new_dataset(bigquery_server)
    writer = BigqueryWriter(destination(bigquery_server, dataset))
    try:
        checks = writer.probe([typed_model()], "bq")
    finally:
        writer.close()
    assert [c.outcome for c in checks] == ["PASS"] * 5, checks  # reach, dataset, tables, load job, DML
    client = bigquery_server.client()
    try:
        assert not list(client.list_tables(f"{bigquery_server.project}.{dataset}"))  # the probe's table dropped
    finally:
        client.close()


def test_a_changed_primary_key_is_refused_until_a_full_refresh_rebuilds_the_table(bigquery_server) -> None:
    dataset = new_dataset(bigquery_server)
    model = typed_model()
    rekeyed = model.model_copy(update={"columns": [c.model_copy(update={"is_primary_key": c.destination_name in
                                                                         ("id", "n")}) for c in model.columns]})
    writer = BigqueryWriter(destination(bigquery_server, dataset))
    try:
        write(writer, model, ROWS)
        with pytest.raises(SchemaMismatch, match=r"the primary key of .* is \(id\) but the model's is \(id, n\)"):
            writer.prepare(rekeyed, "t2")
        writer.prepare(rekeyed, "t3", full_refresh=True)
        rows = [r for r in ROWS if r["n"] is not None]
        batch = pa.Table.from_pylist(rows, schema=arrow_schema(rekeyed))
        writer.write_arrow(batch, replace(load(rekeyed, "t3"), into_refresh=True))
        writer.publish_refresh(rekeyed, "t3")
        writer.prepare(rekeyed, "t4")  # the rebuilt table's key is the model's now
    finally:
        writer.close()
    assert len(bigquery_rows(bigquery_server, dataset, "typed", [("id", "string")])) == 2
