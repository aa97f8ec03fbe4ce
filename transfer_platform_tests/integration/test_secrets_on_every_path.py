"""No password on any path: logs, run configuration, the event log, the UI's GraphQL answers.

One configuration holds every source vendor (PostgreSQL, a MariaDB reader whose password MariaDB
really checks, a Parquet lake) and both destination vendors (PostgreSQL, staged by COPY from
Spark's Python workers; Delta), plus connections that fail: a PostgreSQL source and destination
on a port nobody listens on, a MariaDB source on such a port and one with a wrong password. Every
password is a ``${VARIABLE}`` reference; the value contains characters that URL encoding and
base64 change, and is looked for plain, URL-encoded (quote, quote_plus) and base64-encoded (at
each of the three alignments a value can take inside a longer base64 text, standard and URL-safe
alphabets). The wrong MariaDB password starts with the right one, so it is looked for too.

- The command line (``transfer``, ``transfer --dry-run``, ``test-connection``) runs in its own
  process with every Python logger (root, py4j, pyspark, dagster, ours) and Spark's log4j at
  DEBUG from the JVM's start: its whole stdout and stderr is read, which holds the JVM's and the
  Python workers' output too.
- The Dagster jobs (``transfer``, ``integrity``, ``test_connection``) run in this process on the
  shared Spark session against a real instance whose managed Python loggers include py4j and
  pyspark at DEBUG: the runs' configuration, every event log record, every file of the instance
  (its SQLite storages, compute logs), the GraphQL answers the UI reads (runs with their config
  YAML and tags, every run's events with errors and metadata), the Python log records and this
  process's stdout/stderr.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import stat
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote, quote_plus

import dagster as dg
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from dagster._serdes import serialize_value
from dagster_graphql.client.query import RUN_EVENTS_QUERY
from dagster_graphql.test.utils import execute_dagster_graphql
from deltalake import DeltaTable

from benchmarks.spark_server import SparkServer, spark_connect_server
from transfer_platform.config.loading import load_config
from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.catalog.checks import JOB_NAME as INTEGRITY_JOB
from transfer_platform.orchestration.catalog.checks import integrity_run_config
from transfer_platform.runtime.spark_session import REMOTE_ENV_VAR, is_remote
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.dagster import CONFIG_ENV, transfer_run_config, workspace
from transfer_platform_tests.support.events import (
    COLUMNS,
    create_events,
    insert_rows,
    make_rows,
    normalize,
)
from transfer_platform_tests.support.mysql import (
    mysql_connect,
    mysql_connection_config,
    mysql_create_events,
    mysql_insert_rows,
)
from transfer_platform_tests.support.postgres import destination_rows, pg_connection_config

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

PASSWORD_VAR = "TP_TEST_SECRET_PASSWORD"
WRONG_PASSWORD_VAR = "TP_TEST_SECRET_WRONG_PASSWORD"
TENANT = "acme"
UNREACHABLE_PORT = 1
#: every Python logger the transfers touch, at DEBUG ("" is the root logger)
DEBUG_LOGGERS = ("", "py4j", "py4j.clientserver", "py4j.java_gateway", "pyspark", "dagster", "transfer_platform")
GOOD_MODELS = ["from_pg", "from_maria", "from_lake"]
BAD_SOURCE_MODELS = ["from_pg_down", "from_maria_wrong_password", "from_maria_down"]


# -- what a leak looks like -------------------------------------------------------------------------

def secret_forms(secret: str) -> dict[str, bytes]:
    """The forms under which ``secret`` could be written: plain, URL-encoded, and base64 at each
    alignment inside a longer base64 text (only the characters that depend on the secret alone)."""
    raw = secret.encode()
    forms = {"plain": raw, "quote": quote(secret, safe="").encode(), "quote(safe='/')": quote(secret).encode(),
             "quote_plus": quote_plus(secret).encode()}
    for name, encode in (("base64", base64.b64encode), ("urlsafe_base64", base64.urlsafe_b64encode)):
        for shift in range(3):
            encoded = encode(b"\0" * shift + raw)
            whole_groups = (shift + len(raw)) // 3
            forms[f"{name}@{shift}"] = encoded[4 if shift else 0:4 * whole_groups]
    return forms


def leaks(data: str | bytes, secrets: Iterable[str]) -> list[str]:
    """The forms of the secrets found in ``data`` (with where, never the value)."""
    blob = data.encode(errors="surrogateescape") if isinstance(data, str) else data
    found = []
    for number, secret in enumerate(secrets):
        for name, form in secret_forms(secret).items():
            at = blob.find(form)
            if at >= 0:
                found.append(f"secret #{number} as {name} at offset {at} of {len(blob)}: "
                             f"...{blob[max(0, at - 120):at]!r} <SECRET>")
    return found


def assert_no_secret(where: str, data: str | bytes, secrets: Iterable[str]) -> None:
    found = leaks(data, secrets)
    assert not found, f"a password leaks into {where}:\n" + "\n".join(found)


def log_record_texts(records: Iterable[logging.LogRecord]) -> Iterator[str]:
    """Everything a handler could write of each record: message, attributes, traceback."""
    formatter = logging.Formatter()
    for record in records:
        yield record.getMessage()
        yield repr(record.__dict__)
        if record.exc_info:
            yield formatter.formatException(record.exc_info)
        if record.stack_info:
            yield record.stack_info


# -- the platform: every source and destination vendor, and connections that fail -------------------

@dataclass
class Platform:
    config_path: Path
    password: str
    wrong_password: str
    dst_schema: str
    bad_sources_schema: str
    delta_root: Path
    expected: list  # the tenant's rows, the same in every source

    @property
    def secrets(self) -> list[str]:
        return [self.password, self.wrong_password]

    @property
    def env(self) -> dict[str, str]:
        return {PASSWORD_VAR: self.password, WRONG_PASSWORD_VAR: self.wrong_password}


@pytest.fixture
def mariadb_reader(mysql_database: str) -> Iterator[tuple[str, str]]:
    """A MariaDB user identified by a distinctive password, with only SELECT on the database's
    ``events`` table (created here); dropped afterwards."""
    user = f"tp_sec_{uuid.uuid4().hex[:8]}"
    password = f"pa55/w0rd+=Tp!{uuid.uuid4().hex[:10]}"
    with mysql_connect(mysql_database) as conn:
        mysql_create_events(conn)
        with conn.cursor() as cur:
            for host in ("%", "localhost"):
                cur.execute(f"CREATE USER '{user}'@'{host.replace('%', '%%')}' IDENTIFIED BY %s", (password,))
                cur.execute(f"GRANT SELECT ON `{mysql_database}`.`events` TO '{user}'@'{host}'")
    try:
        yield user, password
    finally:
        with mysql_connect() as conn, conn.cursor() as cur:
            for host in ("%", "localhost"):
                cur.execute(f"DROP USER IF EXISTS '{user}'@'{host}'")


@pytest.fixture
def platform(tmp_path: Path, pg_conn: psycopg.Connection, pg_schema: str, new_schema, mysql_database: str,
             mariadb_reader: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> Platform:
    user, password = mariadb_reader
    now = datetime.now(UTC)
    start = (now - timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = make_rows([TENANT, "other"], 5, [start + timedelta(days=1)], seed=12)

    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, rows)
    with mysql_connect(mysql_database) as conn:
        mysql_insert_rows(conn, rows)
    lake = tmp_path / "lake"
    (lake / "events").mkdir(parents=True)
    schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()),
                        ("updated_at", pa.timestamp("us", tz="UTC")), ("payload", pa.string())])
    pq.write_table(pa.Table.from_pylist([dict(zip(COLUMNS, row, strict=True)) for row in rows], schema=schema),
                   lake / "events" / "part-0.parquet")

    ref, wrong_ref = f"${{{PASSWORD_VAR}}}", f"${{{WRONG_PASSWORD_VAR}}}"
    pg = {**pg_connection_config(), "password": ref}
    maria = {**mysql_connection_config(mysql_database), "username": user, "password": ref}

    def model(name: str, source: str, table: str) -> dict:
        entry = events_model(table, min_start=start, source_name=source)
        return {**entry, "model_name": name, "max_transfer_time_window_seconds": 7 * 86400}

    dst_schema, bad_sources_schema = new_schema(), new_schema()
    config = {
        "sources": [
            {"name": "pg", "vendor": "postgres", "connection": pg},
            {"name": "maria", "vendor": "mysql", "connection": maria},
            {"name": "lake", "vendor": "parquet", "connection": {"path": str(lake)}},
            {"name": "pg_down", "vendor": "postgres", "connection": {**pg, "port": UNREACHABLE_PORT}},
            {"name": "maria_wrong_password", "vendor": "mysql", "connection": {**maria, "password": wrong_ref}},
            {"name": "maria_down", "vendor": "mysql", "connection": {**maria, "port": UNREACHABLE_PORT}},
        ],
        "models": [
            model("from_pg", "pg", f"{pg_schema}.events"),
            model("from_maria", "maria", "events"),
            model("from_lake", "lake", "events"),
            model("from_pg_down", "pg_down", f"{pg_schema}.events"),
            model("from_maria_wrong_password", "maria_wrong_password", "events"),
            model("from_maria_down", "maria_down", "events"),
        ],
        "recipients": [{"name": f"for_{d}", "id_in_provider_system": TENANT}  # one destination each
                       for d in ("pg_dst", "delta_dst", "pg_dst_bad_sources", "pg_dst_down")],
        "destinations": [
            {"name": "pg_dst", "recipient": "for_pg_dst", "vendor": "postgres", "enabled_models": GOOD_MODELS,
             "connection": {**pg_connection_config(dst_schema), "password": ref}},
            {"name": "delta_dst", "recipient": "for_delta_dst", "vendor": "delta", "enabled_models": GOOD_MODELS,
             "connection": {"path": str(tmp_path / "delta")}},
            {"name": "pg_dst_bad_sources", "recipient": "for_pg_dst_bad_sources", "vendor": "postgres",
             "enabled_models": BAD_SOURCE_MODELS,
             "connection": {**pg_connection_config(bad_sources_schema), "password": ref}},
            {"name": "pg_dst_down", "recipient": "for_pg_dst_down", "vendor": "postgres",
             "enabled_models": ["from_lake"],
             "connection": {**pg_connection_config("nowhere"), "port": UNREACHABLE_PORT, "password": ref}},
        ],
        "spark": {"master": "local[2]", "driver_memory": "1g",
                  "conf": {"spark.log.level": "DEBUG", "spark.sql.shuffle.partitions": "2"}},
    }
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    load_config(path)  # valid
    platform = Platform(config_path=path, password=password, wrong_password=password + "-wrong",
                        dst_schema=dst_schema, bad_sources_schema=bad_sources_schema,
                        delta_root=tmp_path / "delta",
                        expected=normalize(r for r in rows if r[1] == TENANT))
    for name, value in platform.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return platform


def assert_delivered(platform: Platform, pg_conn: psycopg.Connection) -> None:
    """Every good model arrived whole in both destinations (the paths under test really ran)."""
    for model in GOOD_MODELS:
        assert destination_rows(pg_conn, platform.dst_schema, model) == platform.expected, model
        delta = DeltaTable(str(platform.delta_root / model)).to_pyarrow_table().to_pylist()
        assert normalize(tuple(r[c] for c in COLUMNS) for r in delta) == platform.expected, model


# -- the command line, in its own process: Python, the JVM and the Python workers at DEBUG ----------

DRIVER = """
import json, logging, sys, time
from transfer_platform.cli import main
logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(levelname)s %(name)s %(message)s")
for name in {loggers!r}:
    logging.getLogger(name).setLevel(logging.DEBUG)
for argv in json.loads(sys.argv[1]):
    print("### transfer-platform " + " ".join(argv), flush=True)
    began = time.monotonic()
    status = main(argv)
    print(f"### exit {{status}} after {{time.monotonic() - began:.1f}} s", flush=True)
"""

CLI_COMMANDS = [  # (argv, exit status)
    # Parquet -> PostgreSQL first: the COPY's function (password inside) crosses py4j before any
    # JDBC password does
    (["transfer", "pg_dst", "--model", "from_lake"], 0),
    (["transfer", "pg_dst"], 0),
    (["transfer", "delta_dst"], 0),
    (["transfer", "pg_dst", "--dry-run"], 0),
    (["transfer", "pg_dst_bad_sources"], 1),
    (["transfer", "pg_dst_down"], 1),
    (["test-connection", "maria"], 0),
    (["test-connection", "pg_dst"], 0),
    (["test-connection", "maria_wrong_password"], 1),
    (["test-connection", "pg_dst_down"], 1),
]


@pytest.fixture
def spark_at_debug(spark_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SparkServer | None]:
    """In the Connect lane: a Spark Connect server of this test's own, its log4j at DEBUG from its
    start (its log is read like the command line's), named to every Spark client the test makes;
    and the Connect client's logger at DEBUG (it logs every plan it sends, a read's JDBC options
    included). Else None: the local Spark is at DEBUG by the configuration file."""
    if spark_server is None:
        yield None
        return
    client_log = logging.getLogger("pyspark.sql.connect.logging")
    disabled, level = client_log.disabled, client_log.level
    with spark_connect_server(tmp_path / "debug_server", conf={"spark.log.level": "DEBUG"}) as server:
        monkeypatch.setenv(REMOTE_ENV_VAR, server.url)
        monkeypatch.setenv("SPARK_CONNECT_LOG_LEVEL", "debug")
        client_log.disabled = False
        client_log.setLevel(logging.DEBUG)
        try:
            yield server
        finally:
            client_log.disabled, client_log.level = disabled, level


def assert_spark_logged_at_debug(server: SparkServer | None, python_log: str, jvm_log: bytes | None,
                                 secrets: list[str]) -> None:
    """The Spark side was at DEBUG and shows no secret: the Connect client's plans (with a server),
    and the JVM's log4j (the local JVM's, or the Connect server's)."""
    if server is not None:
        assert "Executing plan" in python_log  # the Connect client's DEBUG log of each plan
        jvm_log = server.log.read_bytes()
    if jvm_log is None:
        warnings.warn("the shared JVM writes to a terminal (pytest -s): its log was not read", stacklevel=2)
        return
    assert re.search(rb"^\d\d/\d\d/\d\d [\d:]{8} DEBUG \w+: ", jvm_log, re.MULTILINE)  # log4j's format
    assert_no_secret("the JVM's log (Spark at DEBUG)", jvm_log, secrets)


def test_the_command_line_at_debug_never_shows_a_password(platform: Platform, pg_conn: psycopg.Connection,
                                                          spark_at_debug: SparkServer | None) -> None:
    # --verbose: the JVM's output (its log4j) on stderr too, where this test reads it
    argvs = [["--verbose", "--config", str(platform.config_path), *argv] for argv, _ in CLI_COMMANDS]
    env = {**os.environ, **platform.env, "TRANSFER_PLATFORM_LOG_LEVEL": "DEBUG", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-c", DRIVER.format(loggers=DEBUG_LOGGERS), json.dumps(argvs)],
                          env=env, capture_output=True, timeout=900, check=False)
    stdout, stderr = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr[-5000:]
    exits = [int(line.split()[2]) for line in stdout.splitlines() if line.startswith("### exit ")]
    assert exits == [status for _, status in CLI_COMMANDS], stdout[-5000:]
    assert_delivered(platform, pg_conn)
    # the failures are the ones meant, each named
    assert "Access denied for user" in stdout + stderr
    assert f"127.0.0.1:{UNREACHABLE_PORT}" in stdout + stderr
    # everything was at DEBUG: py4j's commands or the Connect client's plans, Spark's log4j, ours
    assert "INFO transfer_platform.phases" in stderr
    if spark_at_debug is None:
        assert "DEBUG py4j" in stderr
    assert_spark_logged_at_debug(spark_at_debug, stderr, done.stderr, platform.secrets)

    assert_no_secret("the command line's stdout", done.stdout, platform.secrets)
    assert_no_secret("the command line's stderr (Python, the JVM, the Python workers)", done.stderr,
                     platform.secrets)


# -- Dagster, in this process: run config, event log, instance files, GraphQL ---------------------

RUNS_QUERY = """
query {
  runsOrError {
    __typename
    ... on Runs { results { runId jobName status runConfigYaml tags { key value } } }
    ... on PythonError { message stack }
  }
}
"""


def shared_jvm_stderr(spark) -> bytes | None:
    """What the shared session's JVM wrote to its stderr during this test: it inherited pytest's
    capture file when the session started (pytest empties it at every test phase); None if it
    writes to a terminal or pipe instead (``pytest -s``), or is a Connect server's."""
    if is_remote(spark):
        return None
    path = f"/proc/{spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()}/fd/2"
    if not stat.S_ISREG(os.stat(path).st_mode):
        return None
    return Path(path).read_bytes()


@pytest.fixture
def everything_at_debug(spark, spark_at_debug) -> Iterator[None]:
    """Every Python logger and Spark's log4j at DEBUG (the shared session's levels restored
    afterwards; in the Connect lane, ``spark_at_debug``'s server is at DEBUG)."""
    loggers = [logging.getLogger(name) for name in DEBUG_LOGGERS]
    levels = [logger.level for logger in loggers]
    if spark_at_debug is not None:
        for logger in loggers:
            logger.setLevel(logging.DEBUG)
        yield
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        return
    jvm_level = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel().toString()
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
    spark.sparkContext.setLogLevel("DEBUG")
    try:
        yield
    finally:
        spark.sparkContext.setLogLevel(jvm_level)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def test_dagster_runs_their_events_and_graphql_never_show_a_password(
        platform: Platform, spark, pg_conn: psycopg.Connection, tmp_path: Path, everything_at_debug, spark_at_debug,
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    home = tmp_path / "dagster_home"
    home.mkdir()
    python_logs = {"managed_python_loggers": ["transfer_platform", "py4j", "py4j.clientserver",
                                              "py4j.java_gateway", "pyspark", "pyspark.sql.connect.logging"],
                   "python_log_level": "DEBUG"}
    defs = build_definitions(str(platform.config_path))
    transfer_job = defs.resolve_job_def("transfer")
    with dg.instance_for_test(temp_dir=str(home), overrides={"python_logs": python_logs}) as instance:
        def run_transfer(destination: str, **fields) -> dg.ExecuteInProcessResult:
            return transfer_job.execute_in_process(run_config=transfer_run_config(destination, **fields),
                                                   instance=instance, raise_on_error=False)

        # Parquet -> PostgreSQL first: the COPY's function crosses py4j before any JDBC password
        assert run_transfer("pg_dst", models=["from_lake"]).success
        assert run_transfer("pg_dst").success
        assert run_transfer("delta_dst").success
        assert_delivered(platform, pg_conn)
        assert not run_transfer("pg_dst_bad_sources").success
        assert not run_transfer("pg_dst_down").success
        # the integrity check reads the source and the destination through JDBC, each with its
        # password (one model's check: py4j's DEBUG lines, each an event, cost ~15 ms apiece)
        integrity = defs.resolve_job_def(INTEGRITY_JOB).execute_in_process(
            run_config=integrity_run_config("pg_dst", ["from_maria"]), instance=instance, raise_on_error=False)
        assert integrity.success
        (evaluation,) = integrity.get_asset_check_evaluations()
        assert evaluation.passed, evaluation.description
        connection_test = defs.resolve_job_def("test_connection")
        for name, works in (("maria", True), ("maria_wrong_password", False), ("pg_dst_down", False)):
            result = connection_test.execute_in_process(
                run_config={"ops": {"check_connection": {"config": {"name": name}}}},
                instance=instance, raise_on_error=False)
            assert result.success is works, name

        runs = instance.get_runs()
        assert len(runs) == 9
        failures, py4j_debug_records = [], 0
        for run in runs:
            assert_no_secret(f"the run config of run {run.run_id}", json.dumps(run.run_config), platform.secrets)
            assert_no_secret(f"the tags of run {run.run_id}", json.dumps(run.tags), platform.secrets)
            records = instance.all_logs(run.run_id)
            py4j_debug_records += sum(r.user_message.startswith(("Command to send", "Executing plan"))
                                      for r in records)
            for record in records:
                assert_no_secret(f"an event log record of run {run.run_id}", serialize_value(record),
                                 platform.secrets)
                if record.dagster_event and record.dagster_event.is_step_failure:
                    failures.append(record.dagster_event.step_failure_data.error.message)
        # the failures are the ones meant, each named
        assert any("Access denied for user" in message for message in failures), failures
        assert any(f"127.0.0.1:{UNREACHABLE_PORT}" in message for message in failures), failures
        assert py4j_debug_records  # py4j's DEBUG log reached the event log

        with workspace(instance) as process_context:
            context = process_context.create_request_context()
            answer = execute_dagster_graphql(context, RUNS_QUERY).data
            assert answer["runsOrError"]["__typename"] == "Runs"
            assert len(answer["runsOrError"]["results"]) == 9
            assert_no_secret("GraphQL: the runs, their config YAML and tags", json.dumps(answer), platform.secrets)
            for run in runs:
                events = execute_dagster_graphql(context, RUN_EVENTS_QUERY, {"runId": run.run_id}).data
                assert events["logsForRun"]["__typename"] == "EventConnection"
                assert events["logsForRun"]["events"]
                assert_no_secret(f"GraphQL: the events of run {run.run_id}", json.dumps(events), platform.secrets)

    for path in sorted(home.rglob("*")):  # run and event log storages, compute logs, anything else
        if path.is_file():
            assert_no_secret(f"the instance's file {path.relative_to(home)}", path.read_bytes(), platform.secrets)
    python_log = "\n".join(log_record_texts(caplog.records))
    assert_no_secret("Python log records", python_log, platform.secrets)
    if spark_at_debug is None:
        assert any(r.name.startswith("py4j") and r.levelno == logging.DEBUG for r in caplog.records)
    captured = capfd.readouterr()
    assert_no_secret("this process's stdout", captured.out, platform.secrets)
    assert_no_secret("this process's stderr", captured.err, platform.secrets)
    assert_spark_logged_at_debug(spark_at_debug, python_log, shared_jvm_stderr(spark), platform.secrets)
