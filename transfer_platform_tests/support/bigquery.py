"""The BigQuery test destination: a fresh dataset of the session's emulator, and a reader of
what it holds through google-cloud-bigquery (never through the writer)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from transfer_platform.config.models import ColumnConfig, ModelConfig
from transfer_platform.core.timeutil import utc
from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import WindowLoad, arrow_schema

if TYPE_CHECKING:
    from transfer_platform.destinations.bigquery.writer import BigqueryWriter
    from transfer_platform_tests.support.destinations import Place, TestDestination


def select_sql(project: str, dataset: str, table: str, columns: list[tuple[str, str]]) -> str:
    """A recipient's query of ``columns`` ((name, data_type)): JSON as its text and NUMERIC as
    text (the emulator serializes a NUMERIC result through a double: docs/destinations.md)."""
    def one(name: str, data_type: str) -> str:
        quoted = f"`{name}`"
        if data_type == "json":
            return f"TO_JSON_STRING({quoted}) AS {quoted}"
        return f"CAST({quoted} AS STRING) AS {quoted}" if data_type == "decimal" else quoted
    return f"SELECT {', '.join(one(n, t) for n, t in columns)} FROM `{project}.{dataset}.{table}`"


def bigquery_rows(server: Any, dataset: str, table: str, columns: list[tuple[str, str]]) -> list[dict] | None:
    """The table's rows as the recipient reads them; None if it does not exist."""
    from google.api_core.exceptions import NotFound

    client = server.client()
    try:
        try:
            present = {f.name for f in client.get_table(f"{server.project}.{dataset}.{table}").schema}
        except NotFound:
            return None
        chosen = [(n, t) for n, t in columns if n in present]
        rows = client.query(select_sql(server.project, dataset, table, chosen)).result()
        types = dict(chosen)
        return [{k: (Decimal(v) if types[k] == "decimal" and v is not None else
                     json.loads(v) if types[k] == "json" and v is not None else
                     utc(v) if isinstance(v, datetime) else v) for k, v in row.items()} for row in rows]
    finally:
        client.close()


def bigquery_watermark(server: Any, dataset: str, model_name: str):
    client = server.client()
    try:
        rows = list(client.query(f"SELECT transfer_last_updated_at FROM `{server.project}.{dataset}._transfer_status` "
                                 f"WHERE data_model_name = '{model_name}'").result())
        return utc(rows[0][0]) if rows and rows[0][0] is not None else None
    finally:
        client.close()


def new_dataset(server: Any) -> str:
    name = f"rcpt_{uuid.uuid4().hex[:12]}"
    server.create_dataset(name)
    return name


def bigquery(place: Place) -> TestDestination:
    from transfer_platform_tests.support.destinations import TestDestination, _clean

    server = place.fixture("bigquery_server")
    dataset = new_dataset(server)

    def read(model: ModelConfig) -> list[dict] | None:
        rows = bigquery_rows(server, dataset, model.model_name,
                             [(c.destination_name, c.data_type) for c in model.columns])
        return None if rows is None else _clean(rows, model)

    block = {"vendor": "bigquery", "connection": {"project": server.project, "dataset": dataset,
                                                  "api_endpoint": server.endpoint}}
    return TestDestination("bigquery", "bigquery", block, read, {"dataset": dataset, "server": server})


# -- a model of every data type, its rows, a window written through the writer alone ---------------

T0 = datetime(2024, 3, 1, tzinfo=UTC)
TRICKY = "it's \"quoted\", back\\slash,\nnew line\r\n, unicode é ✓ 𝄞, tab\t, ''"


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


def load(model: ModelConfig, transfer_id: str) -> WindowLoad:
    return WindowLoad(model, transfer_id, Window(T0 - timedelta(days=1), T0 + timedelta(days=1)), T0 - timedelta(days=1))


def write(writer: BigqueryWriter, model: ModelConfig, rows: list[dict], transfer_id: str = "t1") -> None:
    writer.prepare(model, transfer_id)
    writer.write_arrow(pa.Table.from_pylist(rows, schema=arrow_schema(model)), load(model, transfer_id))
