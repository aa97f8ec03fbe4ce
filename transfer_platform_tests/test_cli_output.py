"""What the command line writes where: stdout holds the result alone (a JSON summary, a transfer
id), stderr progress, warnings and errors; Spark's own output only with --verbose; help for every
subcommand and option; integrity checks from the command line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from transfer_platform.cli import _duration, _when, build_parser, main
from transfer_platform_tests.support.platform import dagster_home, write_config

NOW = datetime.now(UTC)
CLI = str(Path(sys.executable).with_name("transfer-platform"))
JVM_LINES = ("log4j", "incubator", "NativeCodeLoader", "setLogLevel", " WARN ")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (actions,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions.choices)


def test_every_subcommand_and_option_is_described() -> None:
    parser = build_parser()
    for name, sub in _subcommands(parser).items():
        assert len(sub.description or "") > 20, name
        for action in sub._actions:  # argparse keeps them there
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
    assert "TRANSFER_PLATFORM_LOG_LEVEL" in parser.format_help()


def test_version_and_options_after_the_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("transfer-platform ")
    path = str(write_config(tmp_path))
    assert main(["validate", "--config", path]) == 0
    assert main(["--config", str(tmp_path / "missing.yaml"), "validate", "--config", path]) == 0  # the later wins
    assert main(["--config", path, "validate"]) == 0
    assert "valid (1 source(s), 2 model(s)" in capsys.readouterr().out


def test_transfer_times_carry_their_zone_and_a_duration() -> None:
    assert _when("2026-11-24T12:09:49.123456+00:00") == "2026-11-24T12:09:49+00:00"
    assert _when(None) == "-"
    started = {"started_at": "2026-11-24T12:00:00.5+00:00", "ended_at": "2026-11-24T13:02:03.7+00:00"}
    assert _duration(started, NOW) == "1:02:03"
    assert _duration({"started_at": None, "ended_at": "2026-11-24T12:00:00+00:00"}, NOW) == "-"
    running = {"started_at": "2026-11-24T12:00:00+00:00", "ended_at": None}
    assert _duration(running, datetime(2026, 11, 24, 12, 0, 42, tzinfo=UTC)) == "0:42"


def _run(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *argv], capture_output=True, text=True, timeout=600, check=False, cwd=cwd,
                          env={**os.environ, **(env or {})})


@pytest.mark.integration
def test_a_transfer_prints_json_on_stdout_and_progress_without_spark_on_stderr(tmp_path: Path) -> None:
    config = str(write_config(tmp_path))
    done = _run("--config", config, "transfer", "acme_delta", "--model", "items")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # nothing else on stdout
    assert summary["status"] == "SUCCESS"
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("starting Spark")
    assert "items 0/4 windows, 0 rows, 0:00" in lines
    assert lines[-1].startswith("items 4/4 windows, 12 rows, ")
    assert lines[-1].endswith(", done")
    noise = [line for line in lines if any(marker in line for marker in JVM_LINES)]
    assert noise == []
    assert "Traceback" not in done.stderr

    verbose = _run("--config", config, "transfer", "acme_delta", "--model", "items", "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert json.loads(verbose.stdout)["status"] == "SUCCESS"
    assert "log4j" in verbose.stderr  # Spark's banner, shown when asked for


@pytest.mark.integration
def test_enqueue_prints_the_id_alone_for_a_script(tmp_path: Path) -> None:
    """``ID=$(transfer-platform transfer d --enqueue)`` then ``transfer-platform cancel "$ID"``."""
    config = write_config(tmp_path)
    env = {"TRANSFER_PLATFORM_CONFIG": str(config), "DAGSTER_HOME": str(dagster_home(tmp_path)),
           "CLI": CLI}
    script = 'ID=$("$CLI" transfer acme_delta --enqueue) && echo "id=$ID" && "$CLI" cancel "$ID"'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.strip().splitlines()
    transfer_id = first.removeprefix("id=")
    assert str(uuid.UUID(transfer_id)) == transfer_id
    assert second == f"{transfer_id}: CANCELLED"
    assert "code_server" not in done.stderr  # only with --verbose

    listing = _run("transfers", env=env)
    assert listing.returncode == 0, listing.stderr
    header, row = listing.stdout.strip().splitlines()
    assert "duration" in header
    assert row.startswith(transfer_id)
    submitted = row.split()[3]
    assert datetime.fromisoformat(submitted).utcoffset() == timedelta(0)
    assert submitted.endswith("+00:00")


def _lake_config(tmp_path: Path, tenant: str) -> str:
    folder = tmp_path / "lake" / "items"
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": pa.array([1, 2], pa.int64()), "organization_id": ["a", "b"],
                      "updated_at": pa.array([NOW - timedelta(days=2)] * 2, pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, folder / "part-0.parquet")
    config = {
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}, "lookback_window": 0}],
        "models": [{"model_name": "items", "source_name": "lake", "source_table": "items",
                    "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
                    "min_start_time_epoch": int((NOW - timedelta(days=3)).timestamp()),
                    "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                                {"name_in_source": "organization_id", "data_type": "string"},
                                {"name_in_source": "updated_at", "data_type": "timestamp",
                                 "is_last_modified": True}]}],
        "recipients": [{"name": "acme", "id_in_provider_system": tenant}],
        "destinations": [{"name": "acme_delta", "recipient": "acme", "vendor": "delta",
                          "connection": {"path": f"dest_{tenant}"}}],
    }
    path = tmp_path / f"{tenant}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


WARNING = "warning: recipient 'acme' (id_in_provider_system {!r}) received no row"


@pytest.mark.integration
def test_a_tenant_id_the_source_does_not_hold_is_a_warning(tmp_path: Path, spark,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    typo = _lake_config(tmp_path, "aa")
    assert main(["--config", typo, "transfer", "acme_delta"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["models"][0]["rows_transferred"] == 0
    assert err.count(WARNING.format("aa")) == 1
    assert "fix id_in_provider_system of recipient 'acme'" in err

    right = _lake_config(tmp_path, "a")
    assert main(["--config", right, "transfer", "acme_delta"]) == 0
    assert "received no row" not in capsys.readouterr().err
    assert main(["--config", right, "transfer", "acme_delta"]) == 0  # nothing new: no warning either
    out, err = capsys.readouterr()
    assert json.loads(out)["models"][0]["delta_rows_transferred"] == 0
    assert "received no row" not in err


@pytest.mark.integration
def test_integrity_from_the_command_line(tmp_path: Path, spark, capsys: pytest.CaptureFixture[str]) -> None:
    config = _lake_config(tmp_path, "a")
    assert main(["--config", config, "transfer", "acme_delta"]) == 0
    capsys.readouterr()

    assert main(["--config", config, "integrity", "acme_delta"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["status"] == "PASSED"
    (model,) = report["models"]
    assert (model["model"], model["rows_compared"], model["failures"]) == ("items", 1, 0)
    assert "passed." in err

    # a row the transfer could not have seen, committed long before the watermark: missing
    late = pa.table({"id": pa.array([3], pa.int64()), "organization_id": ["a"],
                     "updated_at": pa.array([NOW - timedelta(days=2, hours=1)], pa.timestamp("us", tz="UTC"))})
    pq.write_table(late, tmp_path / "lake" / "items" / "part-1.parquet")
    assert main(["--config", config, "integrity", "acme_delta", "--model", "items"]) == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["status"] == "FAILED"
    (model,) = report["models"]
    assert (model["status"], model["missing"], model["rows_compared"]) == ("FAILED", 1, 2)
    assert model["examples"] == {"missing": ["id=3"]}
    assert "missing 1:" in err


def test_an_error_is_one_line_without_stack_frames() -> None:
    from transfer_platform.cli import one_line

    text = ("model 'items' -> destination 'd': reading failed: boom\n\tat org.apache.spark.Foo(Foo.java:1)\n"
            "Caused by: java.io.IOException: x\n\t... 12 more\nFix: check the source")
    assert one_line(text) == "model 'items' -> destination 'd': reading failed: boom Fix: check the source"
