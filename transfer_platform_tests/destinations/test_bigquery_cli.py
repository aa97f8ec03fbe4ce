"""The command line against BigQuery (the emulator): ``test-connection`` passes; a missing dataset
and a wrong service-account key each make ``test-connection`` and ``transfer`` exit 1 with a line
naming BigQuery, the object and the fix, nothing written, the key never shown."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from transfer_platform.cli import main
from transfer_platform_tests.support.bigquery import new_dataset

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC)
#: the rows' last-modified value: noon yesterday, far from the daily windows' edges (each UTC
#: midnight, read from the lake's 5-minute lookback before it: a row there would be read twice)
CHANGED_AT = NOW.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(hours=12)
KEY_ENV = "TP_TEST_BIGQUERY_CLI_KEY"
SECRET = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----NEVERSHOWN"}'


def _config(tmp_path: Path, server, dataset: str, **connection) -> str:
    folder = tmp_path / "lake" / "items"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "organization_id": ["a", "a"],
                             "updated_at": pa.array([CHANGED_AT] * 2, pa.timestamp("us", tz="UTC"))}),
                   folder / "part-0.parquet")
    config = {
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}}],
        "models": [{"model_name": "items", "source_name": "lake", "source_table": "items",
                    "organization_column": "organization_id", "max_transfer_time_window_seconds": "P1D",
                    "min_start_time_epoch": int((NOW - timedelta(days=2)).timestamp()), "columns": [
                        {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                        {"name_in_source": "organization_id", "data_type": "string"},
                        {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True}]}],
        "recipients": [{"name": "acme", "id_in_provider_system": "a"}],
        "destinations": [{"name": "acme_bq", "recipient": "acme", "vendor": "bigquery",
                          "connection": {"project": server.project, "dataset": dataset,
                                         "api_endpoint": server.endpoint, **connection}}],
    }
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_test_connection_and_a_transfer_then_a_missing_dataset_and_a_bad_key_exit_1(
        tmp_path: Path, spark, capsys, monkeypatch, bigquery_server) -> None:
    dataset = new_dataset(bigquery_server)
    config = _config(tmp_path, bigquery_server, dataset)
    assert main(["--config", config, "test-connection", "acme_bq"]) == 0
    capsys.readouterr()
    assert main(["--config", config, "transfer", "acme_bq"]) == 0
    assert json.loads(capsys.readouterr().out)["models"][0]["rows_transferred"] == 2

    missing = _config(tmp_path, bigquery_server, "no_such_dataset")
    assert main(["--config", missing, "test-connection", "acme_bq"]) == 1
    assert "dataset tp-test-project.no_such_dataset not found" in capsys.readouterr().out
    assert main(["--config", missing, "transfer", "acme_bq"]) == 1
    err = capsys.readouterr().err
    assert "BigQuery destination 'acme_bq'" in err
    assert "create the dataset no_such_dataset" in err

    monkeypatch.setenv(KEY_ENV, SECRET)
    bad_key = _config(tmp_path, bigquery_server, dataset, credentials=f"${{{KEY_ENV}}}")
    assert main(["--config", bad_key, "transfer", "acme_bq"]) == 1
    captured = capsys.readouterr()
    assert "connection.credentials" in captured.err
    assert "NEVERSHOWN" not in captured.out + captured.err
