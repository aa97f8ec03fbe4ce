"""Shared fixtures: the machine's PostgreSQL (never skipped silently), one small Spark session, the
session's S3 server (started on first use). What the tests share besides fixtures is in ``support/``.

PostgreSQL: 127.0.0.1:5432, database ``test``, trust auth (override with TP_TEST_PG_HOST/PORT/
USER/DATABASE). Each test gets its own schema, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from transfer_platform_tests.support.azurite import Azurite, azurite
from transfer_platform_tests.support.postgres import pg_connect
from transfer_platform_tests.support.s3_server import S3Server, s3_server

#: the suite runs Spark inside each process (each test's command lines and Dagster runs inherit
#: this): a shared Spark server started by a test's command would outlive it. The tests of the
#: shared server (integration/test_shared_spark.py) turn it on for their own commands.
os.environ.setdefault("TRANSFER_PLATFORM_SHARED_SPARK", "0")


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh schema in the test database, dropped (with everything in it) afterwards."""
    schema = f"tp_test_{uuid.uuid4().hex[:10]}"
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with pg_connect(autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_conn() -> Iterator[psycopg.Connection]:
    with pg_connect(autocommit=True) as conn:
        yield conn


#: ``TP_TEST_SPARK=connect``: the tests that move data run against a Spark Connect server that
#: the session starts (``transfer-platform spark-server``), every Spark of the session its client:
#: the ``spark`` fixture, and the command lines and Dagster runs the tests start (through
#: ``$TRANSFER_PLATFORM_SPARK_REMOTE``). ``scripts/dev test`` runs the suite, then this lane.
SPARK_MODE = os.environ.get("TP_TEST_SPARK", "local")
#: the tests the Connect lane runs: everything that moves data through Spark
CONNECT_LANE = ("transfer_platform_tests/integration/", "transfer_platform_tests/test_cli_transfers.py",
                "transfer_platform_tests/orchestration/test_transfer_job.py",
                # not test_daemon.py: its proof that two destinations ran at once needs runs longer
                # than the queue's launch gap; against a warm server a run takes ~2 s and they did not
                "transfer_platform_tests/orchestration/test_several_destinations.py",
                # connections cut or stalled under a server's Spark: its tasks relay and read
                "transfer_platform_tests/faults/test_database_faults.py",
                # a transfer killed mid-window, and the loads into an empty table, on a server's Spark
                "transfer_platform_tests/contract/test_crash_safety_contract.py",
                "transfer_platform_tests/contract/test_empty_table_load_contract.py")
#: tests that start Spark servers of their own (a Connect server on a standalone cluster, one
#: that they kill, the shared servers of the command line), and tests under integration/ that use
#: no Spark (the lane would run them again for nothing)
OWN_SPARK = ("transfer_platform_tests/integration/test_standalone_cluster.py",
             "transfer_platform_tests/integration/test_spark_connect_death.py",
             "transfer_platform_tests/integration/test_shared_spark.py")


def pytest_collection_modifyitems(config, items) -> None:
    if SPARK_MODE not in ("local", "connect"):
        raise pytest.UsageError(f"TP_TEST_SPARK={SPARK_MODE!r}: write local (the default) or connect")
    if SPARK_MODE == "connect":
        root = Path(str(config.rootpath))
        keep = [i for i in items if (path := str(Path(str(i.path)).relative_to(root))).startswith(CONNECT_LANE)
                and not path.startswith(OWN_SPARK)]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


@pytest.fixture(scope="session", autouse=SPARK_MODE == "connect")
def spark_server(tmp_path_factory: pytest.TempPathFactory):
    """In the Connect lane: the session's Spark Connect server, named to every process the tests
    start; else None (each process runs a local Spark)."""
    if SPARK_MODE != "connect":
        yield None
        return
    from benchmarks.spark_server import spark_connect_server
    from transfer_platform.runtime.spark_session import REMOTE_ENV_VAR

    with spark_connect_server(tmp_path_factory.mktemp("spark_connect")) as server:
        os.environ[REMOTE_ENV_VAR] = server.url
        try:
            yield server
        finally:
            del os.environ[REMOTE_ENV_VAR]


@pytest.fixture(scope="session")
def spark(spark_server):
    """One small, quiet Spark session for the whole test session: a local one, or in the
    Connect lane a client of the session's Spark Connect server."""
    from transfer_platform.config.models import SparkSettings
    from transfer_platform.runtime.spark_session import get_spark_session

    session = get_spark_session(SparkSettings(master="local[2]", driver_memory="1g",
                                              conf={"spark.sql.shuffle.partitions": "2"}))
    yield session
    session.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def new_schema(pg_conn: psycopg.Connection) -> Iterator[Callable[[], str]]:
    """A factory of fresh schema names (not created: the destination writer creates them);
    every schema handed out is dropped afterwards."""
    names: list[str] = []

    def make() -> str:
        name = f"tp_dst_{uuid.uuid4().hex[:10]}"
        names.append(name)
        return name

    yield make
    for name in names:
        pg_conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def dst_schema(new_schema: Callable[[], str]) -> str:
    """A fresh destination schema name, dropped after the test."""
    return new_schema()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3-compatible server (moto) in its own process, for the whole session."""
    with s3_server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="session")
def azure_blob(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """A real Azure Blob Storage emulator (Azurite) in its own process, for the whole session."""
    with azurite(tmp_path_factory.mktemp("azurite")) as server:
        yield server


@pytest.fixture(scope="session")
def sftp_server(tmp_path_factory: pytest.TempPathFactory):
    """A real SFTP server (OpenSSH's sshd, chrooted key-only user) in its own process, for the session."""
    from transfer_platform_tests.support.sftp_server import sftp_server as launch

    with launch(tmp_path_factory.mktemp("sftp")) as server:
        yield server


@pytest.fixture(scope="session")
def clickhouse_server(tmp_path_factory: pytest.TempPathFactory):
    """The session's ClickHouse: a chDB data folder opened in this process (no server process:
    chDB is ClickHouse embedded; see support/clickhouse_server.py)."""
    from transfer_platform_tests.support.clickhouse_server import chdb_folder

    return chdb_folder(tmp_path_factory.mktemp("clickhouse"))


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory):
    """A real Google Cloud Storage emulator (fake-gcs-server) in its own process, for the whole session."""
    from transfer_platform_tests.support.gcs_server import gcs_server as start

    with start(tmp_path_factory.mktemp("gcs")) as server:
        yield server


@pytest.fixture(scope="session")
def snowflake_server(tmp_path_factory: pytest.TempPathFactory):
    """A Snowflake emulator (fakesnow's server) in its own process, for the whole session."""
    from transfer_platform_tests.support.snowflake_server import fakesnow_server

    with fakesnow_server(tmp_path_factory.mktemp("snowflake")) as server:
        yield server


@pytest.fixture(scope="session")
def bigquery_server(tmp_path_factory: pytest.TempPathFactory):
    """A BigQuery emulator (crucible) in its own process, for the whole session."""
    from transfer_platform_tests.support.bigquery_server import bigquery_server as start

    with start(tmp_path_factory.mktemp("bigquery")) as server:
        yield server
