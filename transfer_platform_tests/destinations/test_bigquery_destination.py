"""The BigQuery destination against its emulator, without Spark: every model data_type written by
the writer and read back through google-cloud-bigquery as the recipient reads it; a wrong endpoint,
a missing dataset and a bad service-account key each refused in one line naming the vendor, the
object and the fix, nothing changed, no secret shown."""

from __future__ import annotations

import json
import logging
import socket
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import WindowLoad, arrow_schema
from transfer_platform.destinations.bigquery.writer import BigqueryWriter
from transfer_platform.errors import ConfigError, ConnectionFailure
from transfer_platform.vendors.bigquery import BigqueryDestination
from transfer_platform_tests.support.bigquery import bigquery_rows, bigquery_watermark, new_dataset

pytestmark = pytest.mark.integration

T0 = datetime(2024, 3, 1, tzinfo=UTC)
TRICKY = "it's \"quoted\", back\\slash,\nnew line\r\n, unicode é ✓ 𝄞, tab\t, ''"
SECRET_ENV = "TP_TEST_BIGQUERY_KEY"


def typed_model() -> ModelConfig:
    return ModelConfig(model_name="typed", source_name="src", source_table="t", columns=[
        ColumnConfig(name_in_source="id", data_type="string", is_primary_key=True),
        ColumnConfig(name_in_source="updated_at", data_type="timestamp", is_last_modified=True),
        ColumnConfig(name_in_source="n", data_type="integer"),
        ColumnConfig(name_in_source="f", data_type="float"),
        ColumnConfig(name_in_source="b", data_type="boolean"),
        ColumnConfig(name_in_source="d", data_type="date"),
        ColumnConfig(name_in_source="amount", data_type="decimal"),
        ColumnConfig(name_in_source="doc", data_type="json"),
        ColumnConfig(name_in_source="s", data_type="string")])


ROWS = [
    {"id": "k'1 \"x\"\n", "updated_at": T0 + timedelta(microseconds=123456), "n": -9223372036854775808,
     "f": 0.1, "b": True, "d": date(1, 1, 1), "amount": Decimal("12345678901234567890123456789.123456789"),
     "doc": json.dumps({"a": [1, "two\n", None], "é": {"x": True}}), "s": TRICKY},
    {"id": "k2", "updated_at": T0 + timedelta(seconds=1, microseconds=1), "n": 9223372036854775807,
     "f": -1.7976931348623157e308, "b": False, "d": date(9999, 12, 31), "amount": Decimal("-0.000000001"),
     "doc": "[]", "s": ""},
    {"id": "k3", "updated_at": T0, "n": None, "f": None, "b": None, "d": None, "amount": None, "doc": None,
     "s": None},
]


def destination(server, dataset: str, **connection) -> BigqueryDestination:
    return BigqueryDestination.model_validate({
        "name": "bq", "recipient": "r", "vendor": "bigquery",
        "connection": {"project": server.project, "dataset": dataset, "api_endpoint": server.endpoint, **connection}})


def load(model: ModelConfig, transfer_id: str) -> WindowLoad:
    return WindowLoad(model, transfer_id, Window(T0 - timedelta(days=1), T0 + timedelta(days=1)), T0 - timedelta(days=1))


def write(writer: BigqueryWriter, model: ModelConfig, rows: list[dict], transfer_id: str = "t1") -> None:
    writer.prepare(model, transfer_id)
    writer.write_arrow(pa.Table.from_pylist(rows, schema=arrow_schema(model)), load(model, transfer_id))


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


def test_an_unreachable_endpoint_is_one_line_naming_it_and_the_fix(bigquery_server) -> None:
    writer = BigqueryWriter(destination(bigquery_server, "any", api_endpoint=f"http://127.0.0.1:{_free_port()}"))
    try:
        with pytest.raises(ConnectionFailure) as refused:
            writer.prepare(typed_model(), "t1")
    finally:
        writer.close()
    message = str(refused.value)
    assert "\n" not in message
    assert "BigQuery destination 'bq'" in message and "127.0.0.1" in message and "Fix:" in message


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
    assert "SECRETSECRET" not in str(refused.value) and "SECRETSECRET" not in caplog.text
    assert bigquery_rows(bigquery_server, dataset, "typed", [("id", "string")]) is None  # nothing written
