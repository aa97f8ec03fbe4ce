"""``transfer-platform transfer DEST --dry-run``: a JSON plan, nothing created or moved, no secret."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from transfer_platform.cli import main
from transfer_platform_tests.support.events import create_events, insert_rows
from transfer_platform_tests.support.files import tree
from transfer_platform_tests.support.postgres import pg_connection_config

NOW = datetime.now(UTC)  # set again as each test starts (_now)
COLUMNS = [
    {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
    {"name_in_source": "organization_id", "data_type": "string"},
    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
]


@pytest.fixture(autouse=True)
def _now() -> None:
    """The tests' "now" is the test's start, not the module's import: a suite that reaches this
    file half an hour after collecting it (across midnight UTC) plans other windows."""
    global NOW
    NOW = datetime.now(UTC)


def _config(tmp_path: Path, *, source: dict | None = None, source_table: str = "items") -> Path:
    config = {
        "sources": [source or {"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}}],
        "models": [{"model_name": "items", "source_name": "lake", "source_table": source_table,
                    "organization_column": "organization_id", "max_transfer_time_window_seconds": "P1D",
                    "min_start_time_epoch": int((NOW - timedelta(days=3)).timestamp()),
                    "columns": COLUMNS}],
        "recipients": [{"name": "acme", "id_in_provider_system": "a"}],
        "destinations": [{"name": "acme_delta", "recipient": "acme", "vendor": "delta",
                          "connection": {"path": "dest"}}],
    }
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _lake(tmp_path: Path, stamps: list[datetime], tenants: list[str], name: str = "part-0") -> None:
    folder = tmp_path / "lake" / "items"
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": pa.array(range(len(stamps)), pa.int64()) if name == "part-0"
                      else pa.array(range(100, 100 + len(stamps)), pa.int64()),
                      "organization_id": tenants, "updated_at": pa.array(stamps, pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, folder / f"{name}.parquet")


@pytest.mark.integration
def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path: Path, spark, capsys) -> None:
    stamps = [NOW - timedelta(days=2, microseconds=7), NOW - timedelta(hours=1)]
    _lake(tmp_path, stamps + stamps[:1], ["a", "a", "b"])
    config = str(_config(tmp_path))

    assert main(["--config", config, "transfer", "acme_delta", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert not (tmp_path / "dest").exists()
    assert (plan["dry_run"], plan["destination"], plan["status"]) == (True, "acme_delta", "PLANNED")
    assert (plan["windows"], plan["rows"]) == (4, 2)  # three days back and the window in progress
    (model,) = plan["models"]
    assert (model["model"], model["kind"], model["watermark"]) == ("items", "incremental", None)
    assert model["read_from"] == model["windows"][0]["read_from"]
    assert set(model["windows"][0]) == {"partition", "read_from", "read_until", "progress_start",
                                        "progress_end", "rows"}
    assert sum(w["rows"] for w in model["windows"]) == model["rows"] == 2

    assert main(["--config", config, "transfer", "acme_delta"]) == 0
    moved = json.loads(capsys.readouterr().out)["models"][0]
    _lake(tmp_path, [NOW - timedelta(minutes=30)], ["a"], name="part-1")
    before = tree(tmp_path / "dest")

    assert main(["--config", config, "transfer", "acme_delta", "--dry-run"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert tree(tmp_path / "dest") == before
    assert model["watermark"] == moved["watermark"]
    assert model["most_recent_last_updated_at"] == moved["most_recent_last_updated_at"]
    # from the last delivered row minus the lake's 5-minute lookback: that row and the new one
    assert model["read_from"] == (stamps[1] - timedelta(minutes=5)).isoformat(timespec="microseconds")
    assert model["rows"] == 2

    assert main(["--config", config, "transfer", "acme_delta", "--dry-run", "--full-refresh"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert (model["kind"], model["rows"], len(model["windows"])) == ("full_refresh", 3, 4)
    assert tree(tmp_path / "dest") == before


def test_dry_run_cannot_be_enqueued(tmp_path: Path, capsys) -> None:
    assert main(["--config", str(_config(tmp_path)), "transfer", "acme_delta", "--dry-run", "--enqueue"]) == 2
    assert "--dry-run plans here" in capsys.readouterr().err


@pytest.mark.integration
def test_dry_run_prints_no_secret_and_fails_clearly(tmp_path: Path, spark, capsys, monkeypatch,
                                                    pg_conn, pg_schema) -> None:
    """A PostgreSQL source with a password (trust auth ignores it): neither the plan nor an error
    shows it."""
    secret = "s3cr3t-Pa55word"
    monkeypatch.setenv("TP_TEST_DRY_RUN_PASSWORD", secret)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [(1, "a", NOW - timedelta(days=1), "x"), (2, "b", NOW - timedelta(days=1), "y")])
    source = {"name": "lake", "vendor": "postgres",
              "connection": {**pg_connection_config(), "password": "${TP_TEST_DRY_RUN_PASSWORD}"}}

    assert main(["--config", str(_config(tmp_path, source=source, source_table=f"{pg_schema}.events")),
                 "transfer", "acme_delta", "--dry-run"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["rows"] == 1
    assert secret not in out.out + out.err

    broken = _config(tmp_path, source=source, source_table=f"{pg_schema}.missing")
    assert main(["--config", str(broken), "transfer", "acme_delta", "--dry-run"]) == 1
    out = capsys.readouterr()
    (model,) = json.loads(out.out)["models"]
    assert model["status"] == "ERROR"
    assert "missing" in model["error"]
    assert "error: items:" in out.err
    assert secret not in out.out + out.err
    assert not (tmp_path / "dest").exists()
