"""Shared fixtures: the machine's PostgreSQL (never skipped silently), one small Spark session.

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

PG = {
    "host": os.environ.get("TP_TEST_PG_HOST", "127.0.0.1"),
    "port": int(os.environ.get("TP_TEST_PG_PORT", "5432")),
    "dbname": os.environ.get("TP_TEST_PG_DATABASE", "test"),
    "user": os.environ.get("TP_TEST_PG_USER", "postgres"),
}

HOW_TO_START_PG = (
    "PostgreSQL is not reachable at {host}:{port} (database {dbname}, user {user}): {error}\n"
    "Start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start\n"
    "(or point TP_TEST_PG_HOST/TP_TEST_PG_PORT at a server with trust auth and a 'test' database)."
)


def pg_connect(**extra) -> psycopg.Connection:
    try:
        return psycopg.connect(**PG, connect_timeout=5, **extra)
    except psycopg.OperationalError as exc:
        pytest.fail(HOW_TO_START_PG.format(error=str(exc).strip(), **PG), pytrace=False)


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


@pytest.fixture(scope="session")
def spark():
    """One small, quiet Spark session for the whole test session."""
    from transfer_platform.config.models import SparkSettings
    from transfer_platform.spark_session import get_spark_session

    session = get_spark_session(SparkSettings(master="local[2]", driver_memory="1g",
                                              conf={"spark.sql.shuffle.partitions": "2"}))
    yield session
    session.stop()


def pg_connection_config(schema: str | None = None) -> dict:
    """The ``connection`` block of a postgres source/destination for the test database."""
    block = {"host": PG["host"], "port": PG["port"], "database": PG["dbname"], "username": PG["user"]}
    if schema:
        block["schema"] = schema
    return block


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
