"""The BigQuery destination against the real service: one window of every data type written by
the writer, read back through google-cloud-bigquery with the same service account, the test's
tables dropped after. Runs only when the variables below are set (docs/development.md)."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from transfer_platform.destinations.bigquery.writer import BigqueryWriter
from transfer_platform.vendors.bigquery import BigqueryDestination
from transfer_platform_tests.support.bigquery import ROWS, select_sql, typed_model, write

PREFIX = "TRANSFER_PLATFORM_LIVE_BIGQUERY_"
NEEDED = [PREFIX + n for n in ("PROJECT", "DATASET", "CREDENTIALS")]

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not all(os.environ.get(n) for n in NEEDED),
                                 reason=f"the live BigQuery lane needs {', '.join(NEEDED)} (docs/development.md)")]


def test_a_window_of_every_type_reaches_the_real_dataset_and_reads_back() -> None:
    from google.cloud import bigquery
    from google.oauth2 import service_account

    project, dataset = os.environ[PREFIX + "PROJECT"], os.environ[PREFIX + "DATASET"]
    location = os.environ.get(PREFIX + "LOCATION")
    model = typed_model().model_copy(update={"model_name": f"tp_live_{uuid.uuid4().hex[:8]}"})
    destination = BigqueryDestination.model_validate({
        "name": "live", "recipient": "r", "vendor": "bigquery",
        "connection": {"project": project, "dataset": dataset, "location": location,
                       "credentials": "${" + PREFIX + "CREDENTIALS}"}})
    credentials = service_account.Credentials.from_service_account_info(
        json.loads(os.environ[PREFIX + "CREDENTIALS"]))
    client = bigquery.Client(project=project, credentials=credentials, location=location)
    writer = BigqueryWriter(destination)
    try:
        write(writer, model, ROWS)
        columns = [(c.destination_name, c.data_type) for c in model.columns]
        read = {r["id"]: dict(r) for r in client.query(select_sql(project, dataset, model.model_name, columns)).result()}
        assert set(read) == {r["id"] for r in ROWS}
        assert read[ROWS[0]["id"]]["s"] == ROWS[0]["s"]
    finally:
        writer.close()
        client.delete_table(f"{project}.{dataset}.{model.model_name}", not_found_ok=True)
        client.close()
