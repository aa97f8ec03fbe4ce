"""The BigQuery test destination: a fresh dataset of the session's emulator, and a reader of
what it holds through google-cloud-bigquery (never through the writer)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from transfer_platform.core.timeutil import utc

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
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
