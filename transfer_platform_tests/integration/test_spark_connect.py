"""A real Spark Connect server (``transfer-platform spark-server``) and the clients a user has:
the command line, each transfer its own process. Every client here is another process (a Spark
Connect client turns the whole Python process into Connect mode, and the local lane's tests share
a local Spark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from benchmarks.spark_server import free_port, spark_connect_server
from transfer_platform.runtime.spark_session import REMOTE_ENV_VAR
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import (
    create_events,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.postgres import (
    destination_rows,
    pg_connection_config,
    status_row,
)

pytestmark = pytest.mark.integration

TENANT = "acme"
CLI = str(Path(sys.executable).with_name("transfer-platform"))


@pytest.fixture(scope="module")
def server(spark_server, tmp_path_factory: pytest.TempPathFactory):
    """The Connect lane's server, or one of this module's own."""
    if spark_server is not None:
        yield spark_server
        return
    with spark_connect_server(tmp_path_factory.mktemp("connect")) as own:
        yield own


def cli(config: Path, *argv: str, remote: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (REMOTE_ENV_VAR, "DAGSTER_HOME", "SPARK_CONNECT_MODE_ENABLED")}
    if remote:
        env[REMOTE_ENV_VAR] = remote
    return subprocess.run([CLI, "--config", str(config), *argv], capture_output=True, text=True, env=env,
                          timeout=600, check=False)


def write_config(path: Path, source_schema: str, dst_schema: str, remote: str) -> Path:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [events_model(f"{source_schema}.events", min_start=today - timedelta(days=3))],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config(dst_schema)}],
        "spark": {"remote": remote},
    }))
    return path


def test_transfers_through_the_server_and_a_server_that_is_down_fails_at_once_changing_nothing(
        server, tmp_path: Path, pg_conn, pg_schema: str, dst_schema: str) -> None:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "other"], 200, [today - timedelta(days=d) for d in (2, 1)],
                                              seed=5))
    config = write_config(tmp_path / "tp.yaml", pg_schema, dst_schema, server.url)
    done = cli(config, "transfer", DESTINATION)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["status"] == "SUCCESS"
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    before = status_row(pg_conn, dst_schema)

    # the file names a server nobody runs: the transfer stops before anything is touched
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = %s, updated_at = now() '
                    "WHERE organization_id = %s AND id %% 7 = 0", ("changed", TENANT))
    down = f"sc://127.0.0.1:{free_port()}"
    config_down = write_config(tmp_path / "down.yaml", pg_schema, dst_schema, down)
    failed = cli(config_down, "transfer", DESTINATION)
    assert failed.returncode == 1
    assert f"cannot reach the Spark Connect server {down}" in failed.stderr
    assert "spark-server" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert status_row(pg_conn, dst_schema) == before  # watermark and state as they were
    assert destination_rows(pg_conn, dst_schema) != source_rows(pg_conn, pg_schema, TENANT)

    # $TRANSFER_PLATFORM_SPARK_REMOTE wins over the file: the same file, the running server
    again = cli(config_down, "transfer", DESTINATION, remote=server.url)
    assert again.returncode == 0, again.stderr[-3000:]
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)


VERSION_CLIENT = """
import sys, pyspark
pyspark.__version__ = "3.5.1"  # what another installation's client would say
from transfer_platform.runtime.spark_session import connect, parse_endpoint
try:
    connect(parse_endpoint(sys.argv[1]))
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_a_client_of_another_spark_version_is_refused_naming_both(server) -> None:
    import pyspark

    env = {k: v for k, v in os.environ.items() if k not in (REMOTE_ENV_VAR, "SPARK_CONNECT_MODE_ENABLED")}
    done = subprocess.run([sys.executable, "-c", VERSION_CLIENT, server.url], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.stdout.startswith("SparkVersionMismatch"), done.stdout + done.stderr[-3000:]
    assert f"runs Spark {pyspark.__version__}" in done.stdout
    assert "PySpark 3.5.1" in done.stdout
    assert server.url in done.stdout
