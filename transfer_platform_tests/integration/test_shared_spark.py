"""The shared Spark server of the default mode, as a user meets it: ``transfer-platform transfer``
run as its own process (without ``spark.remote``) starts a Spark Connect server in the
background on first use, later commands reuse it, a server stops by itself once idle, and a
server that cannot start leaves the command to run its own Spark, with one warning.

Each test has a state folder of its own (``$TRANSFER_PLATFORM_STATE_DIR``) and kills every
server started under it afterwards (the rest of the suite runs with the shared server off)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from transfer_platform.runtime import resident
from transfer_platform.runtime.shared_spark import SHARED_ENV_VAR, STATE_DIR_ENV_VAR
from transfer_platform.runtime.spark_session import REMOTE_ENV_VAR
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import (
    create_events,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.postgres import destination_rows, pg_connection_config
from transfer_platform_tests.support.processes import group_alive

pytestmark = pytest.mark.integration

TENANT = "acme"
CLI = str(Path(sys.executable).with_name("transfer-platform"))
#: bounds a failure only: a server is up in ~10-20 s, a small transfer takes ~10 s more
BOUND_S = 300
SPARK = {"master": "local[2]", "driver_memory": "1g", "conf": {"spark.sql.shuffle.partitions": "2"}}


def server_pids(state: Path) -> list[int]:
    """The shared servers started under ``state`` that still run (their command names the folder)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            parts = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"transfer_platform.runtime.shared_spark" in parts and any(str(state).encode() in part for part in parts):
            pid = int(cmdline.parent.name)
            if group_alive(pid):
                pids.append(pid)
    return pids


def states(state: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(state.glob("*.json"))]


def wait_until(condition: Callable[[], bool], what: str, bound_s: float = BOUND_S) -> None:
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound_s} s: {what}")
        time.sleep(0.2)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """The state folder of this test's shared servers; each of them is killed afterwards (and the
    resident command process its commands started, stopped)."""
    folder = tmp_path / "state"
    yield folder
    for pid in resident.stop_servers(folder):
        wait_until(lambda pid=pid: not group_alive(pid), f"the resident process {pid} to go", 60)
    for pid in server_pids(folder):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        wait_until(lambda pid=pid: not group_alive(pid), f"the server {pid} to go", 60)


def environment(state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (REMOTE_ENV_VAR, "DAGSTER_HOME", "SPARK_CONNECT_MODE_ENABLED")}
    env.update({SHARED_ENV_VAR: "1", STATE_DIR_ENV_VAR: str(state), **extra})
    return env


def command(config: Path, *argv: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([CLI, "--config", str(config), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def finished(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=BOUND_S)
    return process.returncode, out, err


def run(config: Path, *argv: str, env: dict[str, str]) -> tuple[int, str, str]:
    return finished(command(config, *argv, env=env))


def write_config(path: Path, source_schema: str, dst_schema: str, *, direct: bool = False, **spark: object) -> Path:
    """A transfer of the ``source`` fixture's events; read through Spark (its numeric column is
    converted), unless ``direct``: then every column is read as it is, by the database's driver."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    model = events_model(f"{source_schema}.events", min_start=today - timedelta(days=3))
    if not direct:
        model["columns"].append({"name_in_source": "amount", "data_type": "decimal"})
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config(dst_schema)}],
        "spark": {**SPARK, **spark},
    }))
    return path


@pytest.fixture
def source(pg_conn, pg_schema: str) -> str:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "other"], 150, [today - timedelta(days=d) for d in (2, 1)],
                                              seed=26))
    # a numeric column: the windows are read through Spark (a transfer whose reads are all direct,
    # small windows of types read as they are, starts no Spark session at all)
    pg_conn.execute(f'ALTER TABLE "{pg_schema}".events ADD COLUMN amount numeric(12, 4) DEFAULT 1.5')
    return pg_schema


def succeeded(result: tuple[int, str, str]) -> str:
    code, out, err = result
    assert code == 0, err[-3000:]
    assert json.loads(out)["status"] == "SUCCESS", out
    return err


def warnings_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def test_two_commands_at_once_start_one_server_and_a_later_command_is_its_client(
        state: Path, tmp_path: Path, pg_conn, source: str, new_schema) -> None:
    first, second = new_schema(), new_schema()
    env = environment(state)
    one = command(write_config(tmp_path / "one.yaml", source, first), "transfer", DESTINATION, env=env)
    two = command(write_config(tmp_path / "two.yaml", source, second), "transfer", DESTINATION, env=env)
    for result in (finished(one), finished(two)):
        assert warnings_of(succeeded(result)) == []
    expected = source_rows(pg_conn, source, TENANT)
    assert destination_rows(pg_conn, first) == expected
    assert destination_rows(pg_conn, second) == expected
    [server] = states(state)
    assert server_pids(state) == [server["pid"]]
    assert server["fields"]["conf"]["spark.driver.memory"] == "1g"
    assert Path(server["log"]).is_file()

    # a later command (another configuration file, the same spark settings): a client of that server,
    # forked by the resident command process the first commands started
    wait_until(lambda: any(state.glob("commands-*.sock")), "the resident command process listening")
    moment = datetime.now(UTC) - timedelta(seconds=90)
    insert_rows(pg_conn, source, [(10_000 + i, TENANT, moment + timedelta(microseconds=i), f"late {i}")
                                  for i in range(20)])
    err = succeeded(run(tmp_path / "one.yaml", "--verbose", "transfer", DESTINATION,
                        env=environment(state, TRANSFER_PLATFORM_LOG_LEVEL="INFO")))
    assert f"using the shared Spark server {server['url']} (pid {server['pid']}" in err
    assert "started the shared Spark server" not in err
    assert states(state) == [server]
    assert server_pids(state) == [server["pid"]]
    assert destination_rows(pg_conn, first) == source_rows(pg_conn, source, TENANT)
    [log] = state.glob("commands-*.log")
    assert log.read_text().count("transfer: pid ") == 1  # the later command, run by a fork of it


def test_a_transfer_whose_reads_are_all_direct_starts_no_server_and_one_that_needs_spark_does(
        state: Path, tmp_path: Path, pg_conn, source: str, new_schema) -> None:
    """In the default mode the session starts on first use: small windows of columns the
    database's driver reads as they are need no Spark, so neither the server nor a session is
    started (the resident command process is); the next transfer that reads through Spark starts it."""
    direct, through_spark = new_schema(), new_schema()
    env = environment(state)
    err = succeeded(run(write_config(tmp_path / "direct.yaml", source, direct, direct=True), "transfer",
                        DESTINATION, env=env))
    assert "starting Spark" not in err
    assert destination_rows(pg_conn, direct) == source_rows(pg_conn, source, TENANT)
    assert states(state) == []
    assert server_pids(state) == []

    err = succeeded(run(write_config(tmp_path / "spark.yaml", source, through_spark), "transfer", DESTINATION,
                        env=env))
    assert err.startswith("starting Spark (shared Spark server, local[2])")
    [server] = states(state)
    assert server_pids(state) == [server["pid"]]
    assert destination_rows(pg_conn, through_spark) == source_rows(pg_conn, source, TENANT)


def test_other_spark_settings_get_a_server_of_their_own(state: Path, tmp_path: Path, pg_conn, source: str,
                                                       new_schema) -> None:
    env = environment(state)
    first, second = new_schema(), new_schema()
    succeeded(run(write_config(tmp_path / "one.yaml", source, first), "transfer", DESTINATION, env=env))
    [one] = states(state)
    succeeded(run(write_config(tmp_path / "two.yaml", source, second, driver_memory="768m"), "transfer",
                  DESTINATION, env=env))
    servers = states(state)
    assert len(servers) == 2
    [two] = [server for server in servers if server["pid"] != one["pid"]]
    assert two["fields"]["conf"]["spark.driver.memory"] == "768m"
    assert two["key"] != one["key"]
    assert two["port"] != one["port"]
    assert sorted(server_pids(state)) == sorted([one["pid"], two["pid"]])
    assert destination_rows(pg_conn, second) == source_rows(pg_conn, source, TENANT)

    stop = subprocess.run([CLI, "spark-server", "--stop"], capture_output=True, text=True, env=env, timeout=BOUND_S,
                          check=False)
    assert stop.returncode == 0, stop.stderr
    [command_server] = [int(lock.read_text()) for lock in state.glob("commands-*.lock")]  # the commands' own
    assert sorted(stop.stdout.splitlines()) == sorted(
        [f"stopped the shared Spark server {s['url']} (pid {s['pid']}, log {s['log']})" for s in servers]
        + [f"stopped the resident command process (pid {command_server})"])
    assert server_pids(state) == []
    assert states(state) == []


def test_an_idle_server_stops_by_itself_and_removes_its_state(state: Path, tmp_path: Path, pg_conn, source: str,
                                                              dst_schema: str) -> None:
    succeeded(run(write_config(tmp_path / "tp.yaml", source, dst_schema, shared_idle_seconds=10), "transfer",
                  DESTINATION, env=environment(state)))
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, source, TENANT)
    [server] = states(state)
    wait_until(lambda: not server_pids(state) and not states(state), "the idle server to stop")
    assert "idle for 10 s: stopping" in Path(server["log"]).read_text()


def test_a_server_that_cannot_start_leaves_the_command_to_run_its_own_spark_with_one_warning(
        state: Path, tmp_path: Path, pg_conn, source: str, dst_schema: str) -> None:
    # a setting that only a Spark Connect server reads, and that it cannot read
    config = write_config(tmp_path / "tp.yaml", source, dst_schema,
                          conf={**SPARK["conf"], "spark.connect.grpc.maxInboundMessageSize": "lots"})
    err = succeeded(run(config, "transfer", DESTINATION, env=environment(state)))
    [warning] = warnings_of(err)
    assert "the shared Spark server could not be used: it exited with status" in warning
    [log] = [log for log in state.glob("*.log") if not log.name.startswith("commands-")]  # the server's
    assert str(log) in warning
    assert "lots" in warning
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, source, TENANT)
    assert server_pids(state) == []
    assert states(state) == []


def test_no_shared_spark_starts_no_server(state: Path, tmp_path: Path, pg_conn, source: str,
                                          dst_schema: str) -> None:
    config = write_config(tmp_path / "tp.yaml", source, dst_schema)
    err = succeeded(run(config, "--no-shared-spark", "transfer", DESTINATION, env=environment(state)))
    assert warnings_of(err) == []
    assert not state.exists() or list(state.iterdir()) == []
    assert server_pids(state) == []
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, source, TENANT)


def test_a_value_of_the_variable_that_is_neither_on_nor_off_is_refused(state: Path, tmp_path: Path,
                                                                        source: str, dst_schema: str) -> None:
    config = write_config(tmp_path / "tp.yaml", source, dst_schema)
    code, _, err = run(config, "transfer", DESTINATION, env=environment(state, **{SHARED_ENV_VAR: "maybe"}))
    assert code == 2
    assert f"${SHARED_ENV_VAR}='maybe'" in err
    assert not state.exists()


DAGSTER_RUN = """
import logging, os, sys
from pathlib import Path
import dagster as dg
from transfer_platform.definitions import build_definitions
from transfer_platform_tests.support.dagster import transfer_run_config

logging.basicConfig(level=logging.WARNING)
logging.getLogger("transfer_platform.spark").setLevel(logging.INFO)
job = build_definitions(sys.argv[1]).resolve_job_def("transfer")
print("after load:", sorted(p.name for p in Path(os.environ["TRANSFER_PLATFORM_STATE_DIR"]).glob("*")), flush=True)
with dg.instance_for_test() as instance:
    result = job.execute_in_process(run_config=transfer_run_config(sys.argv[2]), instance=instance,
                                    raise_on_error=False)
print("run:", "SUCCESS" if result.success else "FAILURE", flush=True)
"""


def test_a_dagster_run_is_a_client_of_the_shared_server_that_loading_the_definitions_does_not_start(
        state: Path, tmp_path: Path, pg_conn, source: str, dst_schema: str) -> None:
    config = write_config(tmp_path / "tp.yaml", source, dst_schema)
    done = subprocess.run([sys.executable, "-c", DAGSTER_RUN, str(config), DESTINATION], capture_output=True,
                          text=True, env=environment(state), timeout=BOUND_S, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["after load: []", "run: SUCCESS"], done.stderr[-3000:]
    [server] = states(state)
    assert server_pids(state) == [server["pid"]]  # it outlives the run's process
    assert f"using the shared Spark server {server['url']} (pid {server['pid']}" in done.stderr
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, source, TENANT)


QUIET_CLIENT = """
import sys, time
from transfer_platform.config.models import SparkSettings
from transfer_platform.runtime.spark_session import get_spark_session

spark = get_spark_session(SparkSettings(**{**eval(sys.argv[1]), "shared_idle_seconds": 10}))
print(spark.range(3).count(), flush=True)
time.sleep(30)  # the scenario: a transfer busy elsewhere (its destination's merge) for 3 idle times
print(spark.range(5).count(), flush=True)
"""


def test_a_client_process_with_an_open_session_keeps_the_server_however_quiet_and_then_it_stops(
        state: Path) -> None:
    done = subprocess.run([sys.executable, "-c", QUIET_CLIENT, repr(SPARK)], capture_output=True, text=True,
                          env=environment(state), timeout=BOUND_S, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3", "5"]
    wait_until(lambda: not server_pids(state) and not states(state), "the server to stop once its client ended")
