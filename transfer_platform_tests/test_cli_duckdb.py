"""The command line against a DuckDB destination: ``test-connection`` (the folder writable, the file
not locked by another process), ``transfer --dry-run`` (nothing created), a transfer, then
``integrity`` (the delivered rows equal the source's)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from transfer_platform.cli import main

NOW = datetime.now(UTC)
COLUMNS = [
    {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
    {"name_in_source": "organization_id", "data_type": "string"},
    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
    {"name_in_source": "amount", "data_type": "decimal"},
]


def _setup(tmp_path: Path) -> tuple[str, Path]:
    folder = tmp_path / "lake" / "items"
    folder.mkdir(parents=True)
    stamps = [NOW - timedelta(days=2, microseconds=7), NOW - timedelta(hours=1), NOW - timedelta(hours=2)]
    pq.write_table(pa.table({
        "id": pa.array([1, 2, 3], pa.int64()), "organization_id": ["a", "a", "b"],
        "updated_at": pa.array(stamps, pa.timestamp("us", tz="UTC")),
        "amount": pa.array(["1.000000001", "-2.5", "3"], pa.string()).cast(pa.decimal128(38, 9))}),
        folder / "part-0.parquet")
    config = {
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}}],
        "models": [{"model_name": "items", "source_name": "lake", "source_table": "items",
                    "organization_column": "organization_id", "max_transfer_time_window_seconds": "P1D",
                    "min_start_time_epoch": int((NOW - timedelta(days=3)).timestamp()), "columns": COLUMNS}],
        "recipients": [{"name": "acme", "id_in_provider_system": "a"}],
        "destinations": [{"name": "acme_duckdb", "recipient": "acme", "vendor": "duckdb",
                          "connection": {"path": "warehouse/acme.duckdb"}}],
    }
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path), tmp_path / "warehouse" / "acme.duckdb"


@pytest.mark.integration
def test_test_connection_dry_run_transfer_and_integrity_against_a_duckdb_file(tmp_path: Path, spark, capsys) -> None:
    config, database = _setup(tmp_path)

    assert main(["--config", config, "test-connection", "acme_duckdb"]) == 0
    out = capsys.readouterr().out
    assert "does not exist yet" in out
    assert not database.parent.exists()  # the probe's folder removed again

    assert main(["--config", config, "transfer", "acme_duckdb", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["status"], plan["rows"]) == ("PLANNED", 2)
    assert not database.exists()

    assert main(["--config", config, "transfer", "acme_duckdb"]) == 0
    moved = json.loads(capsys.readouterr().out)
    assert moved["models"][0]["rows_transferred"] == 2
    assert database.exists()

    assert main(["--config", config, "integrity", "acme_duckdb"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "PASSED"
    assert report["models"][0]["status"] == "PASSED"

    assert main(["--config", config, "test-connection", "acme_duckdb"]) == 0
    capsys.readouterr()

    code = "import sys, duckdb; c = duckdb.connect(sys.argv[1]); print('open', flush=True); sys.stdin.read()"
    holder = subprocess.Popen([sys.executable, "-c", code, str(database)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        assert main(["--config", config, "test-connection", "acme_duckdb"]) == 1
        out = capsys.readouterr().out
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert "locked by another process" in out
    assert f"PID {holder.pid}" in out


def test_a_file_that_is_not_a_duckdb_database_is_named_as_such_not_as_a_permission(tmp_path: Path, capsys) -> None:
    """DuckDB cannot open another kind of file: the fix says what the file is and where to point
    connection.path; it does not suggest chmod (the folder's rights are not the problem)."""
    config, database = _setup(tmp_path)
    database.parent.mkdir(parents=True)
    database.write_text("id,name\n1,a\n")

    assert main(["--config", config, "test-connection", "acme_duckdb"]) == 1
    (failed,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert "not a valid DuckDB database file" in failed
    assert failed.endswith("Fix: the file at connection.path is not a DuckDB database this DuckDB can open: "
                           "point connection.path at a DuckDB database file, or at a path where no file "
                           "exists yet (the first transfer creates it)"), failed
    assert "chmod" not in failed
    assert database.read_text() == "id,name\n1,a\n"  # left as it was
