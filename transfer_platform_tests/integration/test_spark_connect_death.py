"""A Spark Connect server that dies in the middle of a transfer (SIGKILL of its whole process
group, as an out-of-memory kill or a lost machine does): the transfer ends quickly, once, with an
error that names the server and how to start it again; what was committed stays, nothing else is
written, no watermark moves past a committed window, no secret is printed.

The server is this module's own (it is killed), and the transfer the command line's, as a user
runs it: another process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import yaml

from benchmarks.spark_server import free_port, spark_connect_server
from transfer_platform.destinations.postgres import STAGING_PREFIX
from transfer_platform.runtime.spark_session import REMOTE_ENV_VAR
from transfer_platform.tuning import DEFAULT
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.events import normalize
from transfer_platform_tests.support.postgres import pg_connection_config, status_row, tables_in

pytestmark = pytest.mark.integration

TENANT = "acme"
DESTINATION = "dst"
MODELS = [f"events_{i}" for i in range(4)]
DAYS = 3
CLI = str(Path(sys.executable).with_name("transfer-platform"))
#: from the kill to the end of the command: ~15 s asked; generous for a busy machine, far below
#: the ~30 s per model (two full retry budgets each) the transfer took before
KILLED_DEADLINE_S = 40
#: a server that is not running at the start: nothing is retried at all
DOWN_DEADLINE_S = 20
#: the source password: it must never reach the output
PASSWORD_VARIABLE = "TP_DEATH_TEST_PASSWORD"
PASSWORD = "s3cret-Connect-death-7f1c"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (REMOTE_ENV_VAR, "DAGSTER_HOME", "SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    return {**env, PASSWORD_VARIABLE: PASSWORD, **extra}


def _source(conn: psycopg.Connection, schema: str, start: datetime, days: int, per_day: int) -> None:
    """``per_day`` rows of the tenant on each of ``days`` days from ``start``, between 01:00 and
    23:00 (never in a lookback before midnight)."""
    conn.execute(f'CREATE TABLE "{schema}".events (id bigint PRIMARY KEY, organization_id text, '
                 "updated_at timestamptz, payload text, score numeric(10, 2) DEFAULT 1.5)")
    conn.execute(f'INSERT INTO "{schema}".events SELECT n, %s, %s::timestamptz + (n / %s) * interval \'1 day\' '
                 "+ interval '1 hour' + (n %% %s) * (interval '22 hours' / %s), 'p' || n "
                 "FROM generate_series(0, %s - 1) AS n", (TENANT, start, per_day, per_day, per_day, days * per_day))


def _config(path: Path, source_schema: str, dst_schema: str, start: datetime, remote: str) -> Path:
    source = {**pg_connection_config(), "password": "${" + PASSWORD_VARIABLE + "}"}
    # a numeric read as decimal: a conversion, so every read goes through Spark (not the driver's
    # direct read of small windows, sources/direct.py), whose server this test kills
    base = events_model(f"{source_schema}.events", min_start=start)
    base["columns"] = [*base["columns"], {"name_in_source": "score", "data_type": "decimal"}]
    models = [{**base, "model_name": name} for name in MODELS]
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": source}],
        "models": models,
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config(dst_schema)}],
        "spark": {"remote": remote},
    }))
    return path


def _committed(conn: psycopg.Connection, dst_schema: str, model: str) -> datetime | None:
    """The watermark of the model's committed windows, once one has committed."""
    if "_transfer_status" not in tables_in(conn, dst_schema):
        return None
    row = status_row(conn, dst_schema, model)
    return None if row is None else row["watermark"]


def _staging(conn: psycopg.Connection, dst_schema: str) -> bool:
    """Whether a window is being staged (by Spark's executors, for a window read alone)."""
    return any(name.startswith(STAGING_PREFIX) for name in tables_in(conn, dst_schema))


def _assert_only_committed_windows(conn: psycopg.Connection, source_schema: str, dst_schema: str) -> dict:
    """Each model's table holds exactly the source rows below its watermark (the end of its last
    committed window): nothing of a window that did not commit, no watermark past what is there;
    no staging table is left behind."""
    watermarks = {}
    tables = tables_in(conn, dst_schema)
    for model in MODELS:
        watermark = _committed(conn, dst_schema, model)
        watermarks[model] = watermark
        rows = normalize(conn.execute(f'SELECT id, organization_id, updated_at, payload FROM "{dst_schema}"."{model}"')
                         .fetchall()) if model in tables else []
        expected = [] if watermark is None else normalize(conn.execute(
            f'SELECT id, organization_id, updated_at, payload FROM "{source_schema}".events '
            "WHERE updated_at < %s", (watermark,)).fetchall())
        assert rows == expected, (model, watermark, len(rows), len(expected))
    assert set(tables) <= {*MODELS, "_transfer_status"}, tables
    return watermarks


#: where the server is killed: ``between_windows`` once the first model has committed a window
#: (small windows, read 64 at a time into this process, so the kill lands between Spark jobs);
#: ``while_staging`` once a window is being staged (windows above Tuning.run_rows are read
#: alone and written into a staging table by Spark's executors: the kill lands in a Spark job)
KILL_POINTS = {
    "between_windows": (300, 3, lambda conn, dst: _committed(conn, dst, MODELS[0]) is not None),
    "while_staging": (3, DEFAULT.run_rows + 10_000, _staging),
}


@pytest.mark.parametrize("kill_point", list(KILL_POINTS))
def test_a_server_killed_mid_transfer_ends_it_quickly_naming_the_server(
        kill_point: str, tmp_path: Path, pg_conn: psycopg.Connection, pg_schema: str, dst_schema: str) -> None:
    days, per_day, mid_transfer = KILL_POINTS[kill_point]
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=days)
    _source(pg_conn, pg_schema, start, days, per_day)
    with spark_connect_server(tmp_path / "server") as server:
        config = _config(tmp_path / "tp.yaml", pg_schema, dst_schema, start, server.url)
        out, err = (tmp_path / "out").open("w+"), (tmp_path / "err").open("w+")
        transfer = subprocess.Popen([CLI, "--config", str(config), "transfer", DESTINATION], stdout=out,
                                    stderr=err, env=_env())
        try:
            deadline = time.monotonic() + 300
            while not mid_transfer(pg_conn, dst_schema):
                assert transfer.poll() is None, (tmp_path / "err").read_text()[-3000:]
                assert time.monotonic() < deadline, "the transfer did not get under way in 300 s"
                time.sleep(0.05)
            os.killpg(server.pid, signal.SIGKILL)
            killed = time.monotonic()
            code = transfer.wait(timeout=600)
            took = time.monotonic() - killed
        finally:
            if transfer.poll() is None:
                transfer.kill()
                transfer.wait()
    stderr = (tmp_path / "err").read_text()
    stdout = (tmp_path / "out").read_text()
    print(f"{kill_point}: from the kill to the end of the transfer: {took:.1f} s")  # noqa: T201 - measured
    assert code == 1, stderr[-3000:]
    assert took < KILLED_DEADLINE_S, f"{took:.1f} s: {stderr[-3000:]}"
    assert f"Spark Connect server {server.url}" in stderr, stderr[-3000:]
    assert "transfer-platform --config <file> spark-server" in stderr, stderr[-3000:]
    assert "source_table exists" not in stderr + stdout
    assert "Traceback" not in stderr
    assert PASSWORD not in stderr + stdout
    result = json.loads(stdout)
    assert result["status"] == "ERROR"
    assert [m["status"] for m in result["models"]] == ["ERROR"] * len(MODELS)
    # every model fails with the server's error, the first one's included
    assert all(f"Spark Connect server {server.url}" in m["error"] for m in result["models"]), result
    watermarks = _assert_only_committed_windows(pg_conn, pg_schema, dst_schema)
    # the models after the first did not start: not even their tables were created
    assert set(tables_in(pg_conn, dst_schema)) <= {MODELS[0], "_transfer_status"}
    if kill_point == "between_windows":
        assert watermarks[MODELS[0]] is not None  # what committed before the kill stayed
        assert watermarks[MODELS[0]] < start + timedelta(days=days)  # and it was mid-transfer


def test_a_server_not_running_at_the_start_fails_at_once_naming_it(
        tmp_path: Path, pg_conn: psycopg.Connection, pg_schema: str, dst_schema: str) -> None:
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=DAYS)
    _source(pg_conn, pg_schema, start, DAYS, 3)
    down = f"sc://127.0.0.1:{free_port()}"
    config = _config(tmp_path / "tp.yaml", pg_schema, dst_schema, start, down)
    began = time.monotonic()
    done = subprocess.run([CLI, "--config", str(config), "transfer", DESTINATION], capture_output=True,
                          text=True, env=_env(), timeout=600, check=False)
    took = time.monotonic() - began
    print(f"a server not running: the command ended in {took:.1f} s")  # noqa: T201 - the measurement
    assert done.returncode == 1, done.stderr[-3000:]
    assert took < DOWN_DEADLINE_S
    assert f"Spark Connect server {down}" in done.stderr
    assert "transfer-platform --config <file> spark-server" in done.stderr
    assert "Traceback" not in done.stderr
    assert PASSWORD not in done.stderr + done.stdout
    assert tables_in(pg_conn, dst_schema) == []  # nothing created, nothing written
