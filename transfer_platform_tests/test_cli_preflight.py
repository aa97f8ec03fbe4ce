"""Bad input stops the command line before Spark starts: one line per problem naming the field and
the fix, exit 2, no traceback, nothing written anywhere.

Each case runs the command line as a user does, in a process of its own. That process has
``JAVA_HOME`` pointing nowhere: had it tried to start Spark, it would fail differently (exit 1,
"Spark did not start"), so the expected exit 2 and message prove Spark was never started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from transfer_platform_tests.support.postgres import pg_connection_config

NOW = datetime.now(UTC)
START = int((NOW - timedelta(days=3)).timestamp())
#: generous: a command that fails before Spark takes ~1 s; Spark alone takes 8 s or more here
FAST_SECONDS = 6.0


def write_config(root: Path, *, source: dict | None = None, min_start: int = START,
                 recipient: dict | None = None) -> Path:
    config = {
        "sources": [source or {"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}}],
        "models": [{"model_name": "items", "source_name": "lake", "source_table": "items",
                    "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
                    "min_start_time_epoch": min_start,
                    "columns": [
                        {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                        {"name_in_source": "organization_id", "data_type": "string"},
                        {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                    ]}],
        "recipients": [recipient or {"name": "acme", "id_in_provider_system": "a"}],
        "destinations": [{"name": "acme_delta", "recipient": "acme", "vendor": "delta",
                          "connection": {"path": "dest"}}],
    }
    path = root / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def cli(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, str, float]:
    """``transfer-platform ARGV`` in a process of its own: exit code, stdout, stderr, seconds."""
    environment = {k: v for k, v in os.environ.items() if k not in ("TRANSFER_PLATFORM_CONFIG", "DAGSTER_HOME")}
    environment.update({"JAVA_HOME": "/nonexistent-java", **(env or {})})
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "transfer_platform.cli", *argv], capture_output=True,
                          text=True, env=environment, cwd=cwd, timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def assert_refused(code: int, out: str, err: str, seconds: float, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert out == ""
    assert len(lines) == 1, err  # one line
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in err
    assert "Spark" not in err  # neither started nor tried
    assert seconds < FAST_SECONDS


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "transfer_platform.yaml"
    path.write_text("# nothing configured yet\n")
    for argv in (["validate"], ["transfer", "acme_delta"]):
        code, out, err, seconds = cli("--config", str(path), *argv)
        assert_refused(code, out, err, seconds, "the configuration file is empty", "fix: add its sources")


@pytest.mark.parametrize(("value", "fix"), [
    (START * 1000, f"write seconds since 1970: {START}"),
    (START * 1_000_000, f"write seconds since 1970: {START}"),
], ids=["milliseconds", "microseconds"])
def test_a_start_epoch_in_milliseconds_names_the_field_and_the_seconds(tmp_path: Path, value: int, fix: str) -> None:
    path = write_config(tmp_path, min_start=value)
    for argv in (["validate"], ["transfer", "acme_delta"], ["transfer", "acme_delta", "--dry-run"]):
        code, out, err, seconds = cli("--config", str(path), *argv)
        assert_refused(code, out, err, seconds, "models[0] (items).min_start_time_epoch",
                       f"{value} looks like", fix)
    assert not (tmp_path / "dest").exists()


def test_a_start_epoch_in_the_future_is_refused(tmp_path: Path) -> None:
    future = int((NOW + timedelta(days=30)).timestamp())
    path = write_config(tmp_path, min_start=future)
    code, out, err, seconds = cli("--config", str(path), "transfer", "acme_delta")
    assert_refused(code, out, err, seconds, "models[0] (items).min_start_time_epoch", "is in the future",
                   "fix: write the earliest last-modified time")
    path = write_config(tmp_path, recipient={"name": "acme", "id_in_provider_system": "a",
                                             "default_full_refresh_min_start_time_epoch": START * 1000})
    code, out, err, seconds = cli("--config", str(path), "validate")
    assert_refused(code, out, err, seconds, "recipients[0] (acme).default_full_refresh_min_start_time_epoch",
                   "looks like milliseconds")
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize(("window", "needles"), [
    (["--start", "2025-03-02", "--end", "2025-03-01"], ("--start: 2025-03-02T00:00:00+00:00 is not before --end",)),
    (["--start", "2025-03-01T00:00:00Z", "--end", "2025-03-01T00:00:00Z"], ("is not before --end",)),
    (["--start", (NOW + timedelta(days=1)).isoformat()], ("--start:", "is in the future", "fix: give a --start in the past")),
], ids=["start-after-end", "start-equals-end", "start-in-the-future"])
@pytest.mark.parametrize("mode", [[], ["--dry-run"]], ids=["transfer", "dry-run"])
def test_a_window_that_holds_no_time_is_refused(tmp_path: Path, window: list[str], needles: tuple[str, ...],
                                                mode: list[str]) -> None:
    path = write_config(tmp_path)
    code, out, err, seconds = cli("--config", str(path), "transfer", "acme_delta", *window, *mode)
    assert_refused(code, out, err, seconds, *needles)
    assert not (tmp_path / "dest").exists()


def test_a_secret_whose_variable_is_unset_warns_in_validate_and_stops_a_transfer(tmp_path: Path) -> None:
    """``validate`` may run where secrets are not set (CI): a warning, exit 0. A transfer, a dry
    run, an integrity check and a sweep stop before Spark starts, naming the field and the
    variable; the secret of another destination's source is not asked for."""
    variable = "TP_TEST_PREFLIGHT_UNSET_PASSWORD"
    source = {"name": "lake", "vendor": "postgres",
              "connection": {**pg_connection_config(), "password": f"${{{variable}}}"}}
    path = write_config(tmp_path, source=source)
    assert variable not in os.environ
    code, out, err, _ = cli("--config", str(path), "validate")
    assert code == 0, err
    assert "valid" in out
    (line,) = err.strip().splitlines()
    assert line.startswith("warning: sources[0] (lake).connection.password: environment variable "
                           f"{variable} is not set")
    assert f"fix: export {variable}=" in line

    for argv in (["transfer", "acme_delta"], ["transfer", "acme_delta", "--dry-run"],
                 ["integrity", "acme_delta"]):
        code, out, err, seconds = cli("--config", str(path), *argv)
        assert_refused(code, out, err, seconds, "sources[0] (lake).connection.password",
                       f"environment variable {variable} is not set", f"fix: export {variable}=")
    assert not (tmp_path / "dest").exists()


def test_bad_usage_is_one_line_too(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    for argv, needle in ((["transfer"], "the following arguments are required: destination"),
                         (["transfer", "acme_delta", "--start", "yesterday"], "is not an ISO-8601 time"),
                         (["nope"], "invalid choice: 'nope'")):
        code, out, err, seconds = cli("--config", str(path), *argv)
        assert_refused(code, out, err, seconds, needle, "--help")
    code, out, err, seconds = cli("--config", str(path), "validate", env={"TRANSFER_PLATFORM_LOG_LEVEL": "LOUD"})
    assert_refused(code, out, err, seconds, "TRANSFER_PLATFORM_LOG_LEVEL='LOUD' is not a log level")


def test_without_a_problem_spark_is_tried_and_its_failure_is_one_line(tmp_path: Path) -> None:
    """The premise of the tests above: with a sound configuration the same process does try to
    start Spark, which fails there (no Java), on one line quoting the JVM launcher's last words."""
    path = write_config(tmp_path)
    code, out, err, _ = cli("--config", str(path), "transfer", "acme_delta")
    assert code == 1, err
    assert out == ""
    starting, failure = err.strip().splitlines()
    assert starting.startswith("starting Spark")
    assert failure.startswith("error: Spark did not start: ")
    assert "/nonexistent-java/bin/java" in failure
    assert "Traceback" not in err
    assert not (tmp_path / "dest").exists()


def test_in_the_default_mode_spark_starts_when_first_needed_and_its_failure_still_ends_the_command(
        tmp_path: Path) -> None:
    """The shared server's mode (the default) starts Spark on first use, here the lake's read
    proof: the command still ends with the one line saying Spark did not start (exit 1, no
    summary), after the shared server's warning, with nothing written."""
    path = write_config(tmp_path)
    (tmp_path / "lake" / "items").mkdir(parents=True)  # the source is there: Spark is needed to read it
    code, out, err, _ = cli("--config", str(path), "transfer", "acme_delta",
                            env={"TRANSFER_PLATFORM_SHARED_SPARK": "1",
                                 "TRANSFER_PLATFORM_STATE_DIR": str(tmp_path / "state")})
    assert code == 1, err
    assert out == ""
    lines = err.strip().splitlines()
    assert lines[0] == "starting Spark (shared Spark server, local[2])", err
    assert lines[-1].startswith("error: Spark did not start: "), err
    assert all(line.startswith("warning: the shared Spark server could not be used") for line in lines[1:-1]), err
    assert "Traceback" not in err
    assert not (tmp_path / "dest").exists()
