"""The command line: validate, transfer (JSON summary, exit codes)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from transfer_platform.cli import main

NOW = datetime.now(UTC)


def _config(tmp_path: Path, **model_overrides) -> Path:
    model = {
        "model_name": "items", "source_name": "lake", "source_table": "items",
        "organization_column": "organization_id", "max_transfer_time_window_seconds": "P1D",
        "min_start_time_epoch": int((NOW - timedelta(days=3)).timestamp()),
        "columns": [
            {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
            {"name_in_source": "organization_id", "data_type": "string"},
            {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
        ],
        **model_overrides,
    }
    config = {
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}}],
        "models": [model],
        "recipients": [{"name": "acme", "id_in_provider_system": "a"}],
        "destinations": [{"name": "acme_delta", "recipient": "acme", "vendor": "delta",
                          "connection": {"path": "dest"}}],
    }
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_validate_ok(tmp_path: Path, capsys) -> None:
    assert main(["--config", str(_config(tmp_path)), "validate"]) == 0
    assert "valid (1 source(s), 1 model(s)" in capsys.readouterr().out


def test_validate_lists_every_problem_with_path_and_fix(tmp_path: Path, capsys) -> None:
    path = _config(tmp_path, source_name="nope", max_transfer_time_window_seconds=0)
    assert main(["--config", str(path), "validate"]) == 2
    err = capsys.readouterr().err
    assert "models[0].max_transfer_time_window_seconds" in err
    assert "at least 1 second" in err


def test_validate_reports_cross_reference_problems(tmp_path: Path, capsys) -> None:
    path = _config(tmp_path, source_name="nope", organization_column=None)
    assert main(["--config", str(path), "validate"]) == 2
    err = capsys.readouterr().err
    assert "models[0] (items).source_name: unknown source 'nope'" in err
    assert "fix: use one of the configured sources: 'lake'" in err


def test_validate_finds_the_file_through_the_environment(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(_config(tmp_path)))
    assert main(["validate"]) == 0
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(tmp_path / "missing.yaml"))
    assert main(["validate"]) == 2
    assert "configuration file not found" in capsys.readouterr().err


@pytest.mark.integration
def test_transfer_prints_a_json_summary_per_model(tmp_path: Path, spark, capsys) -> None:
    (tmp_path / "lake" / "items").mkdir(parents=True)
    stamps = [NOW - timedelta(days=2, microseconds=7), NOW - timedelta(hours=1)]
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "organization_id": ["a", "a", "b"],
                      "updated_at": pa.array(stamps + stamps[:1], pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, tmp_path / "lake" / "items" / "part-0.parquet")
    start = NOW - timedelta(days=3)  # the configuration's min_start_time_epoch

    def days_to_now() -> int:  # daily windows from the start's day to today's (in progress), inclusive
        return (datetime.now(UTC).date() - start.date()).days + 1

    before = days_to_now()  # the suite may cross midnight UTC after NOW was taken
    assert main(["--config", str(_config(tmp_path)), "transfer", "acme_delta"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "SUCCESS"
    (model,) = summary["models"]
    assert model["model"] == "items"
    assert model["status"] == "SUCCESS"
    assert model["rows_transferred"] == 2
    assert model["delta_rows_transferred"] == 2
    assert model["windows"] in {before, days_to_now()}  # three days back, the window in progress included
    assert model["most_recent_last_updated_at"] == stamps[1].isoformat(timespec="microseconds")

    # again: nothing new, the lookback re-reads the recent row, no delta rows
    assert main(["--config", str(_config(tmp_path)), "transfer", "acme_delta"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert model["delta_rows_transferred"] == 0
    assert model["windows"] == 1


def test_transfer_unknown_destination_is_one_clear_line(tmp_path: Path, capsys) -> None:
    assert main(["--config", str(_config(tmp_path)), "transfer", "nowhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown destination 'nowhere'" in err
    assert "acme_delta" in err


def test_tags_on_a_transfer_run_here_are_refused_not_dropped(tmp_path: Path, capsys) -> None:
    """Tags label a transfer in the instance's list; one run in this process is not listed there,
    so ``--tag`` without ``--enqueue`` is refused before anything moves, not silently dropped."""
    config = _config(tmp_path)
    assert main(["--config", str(config), "transfer", "acme_delta", "--tag", "team=data"]) == 2
    err = capsys.readouterr().err
    assert "a transfer run here, in this process, is not listed there: add --enqueue" in err
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("argv", [["demo", "--dir", "{tmp}/demo"], ["signing-key"], ["transfers"],
                                  ["cancel", "some-id"]], ids=["demo", "signing-key", "transfers", "cancel"])
@pytest.mark.parametrize("where", ["before", "after"])
def test_config_given_to_a_command_that_reads_none_is_refused_not_ignored(tmp_path: Path, capsys, argv,
                                                                          where) -> None:
    argv = [a.format(tmp=tmp_path) for a in argv]
    config = ["--config", str(_config(tmp_path))]
    assert main(config + argv if where == "before" else argv + config) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: {argv[0]} reads no configuration file (")
    assert captured.err.strip().endswith("drop --config")
    assert captured.out == ""
    assert not (tmp_path / "demo").exists()


@pytest.mark.integration
def test_transfer_failure_exits_non_zero_with_a_reason(tmp_path: Path, spark, capsys) -> None:
    (tmp_path / "lake" / "items").mkdir(parents=True)
    table = pa.table({"id": pa.array([1], pa.int64()), "organization_id": ["a"],
                      "updated_at": pa.array([None], pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, tmp_path / "lake" / "items" / "part-0.parquet")
    assert main(["--config", str(_config(tmp_path)), "transfer", "acme_delta"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["status"] == "ERROR"
    assert "NULL last-modified value (updated_at) at key id=1" in captured.err
