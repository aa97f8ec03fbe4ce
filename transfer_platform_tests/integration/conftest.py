"""Fixtures of the integration tests (the shared ones are in transfer_platform_tests/conftest.py).

MariaDB/MySQL: 127.0.0.1:3306, user ``root`` without password (override with TP_TEST_MYSQL_HOST/
PORT/USER). Each test gets its own database(s), dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pymysql
import pytest

from transfer_platform_tests.support.lake import DeltaTables
from transfer_platform_tests.support.mysql import (
    mysql_connect,
    mysql_ident,
)

# -- MariaDB / MySQL ------------------------------------------------------------------------------


@pytest.fixture
def new_mysql_database() -> Iterator[Callable[..., str]]:
    """A factory of fresh MariaDB databases (``name`` gets a unique prefix unless ``exact``);
    every database handed out is dropped afterwards."""
    names: list[str] = []
    admin = mysql_connect()

    def make(name: str = "", *, exact: bool = False) -> str:
        full = name if exact else f"tp_src_{uuid.uuid4().hex[:10]}{name}"
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {mysql_ident(full)} CHARACTER SET utf8mb4")
        names.append(full)
        return full

    try:
        yield make
    finally:
        with admin.cursor() as cur:
            for name in names:
                cur.execute(f"DROP DATABASE IF EXISTS {mysql_ident(name)}")
        admin.close()


@pytest.fixture
def mysql_database(new_mysql_database: Callable[..., str]) -> str:
    """A fresh MariaDB database (``tp_src_<hex>``), dropped after the test."""
    return new_mysql_database()


@pytest.fixture
def mysql_conn(mysql_database: str) -> Iterator[pymysql.Connection]:
    """An autocommit connection to ``mysql_database`` in UTC."""
    conn = mysql_connect(mysql_database)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def pg_role() -> Iterator[str]:
    """A PostgreSQL login role with no rights of its own (trust auth: no password on this
    machine), dropped with everything it owns afterwards."""
    from transfer_platform_tests.support.postgres import pg_connect

    role = f"tp_role_{uuid.uuid4().hex[:8]}"
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE')
    yield role
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{role}" CASCADE')
        conn.execute(f'DROP ROLE "{role}"')


@pytest.fixture
def mysql_reader(mysql_database) -> Iterator[tuple[str, str]]:
    """A MariaDB user with a password (MariaDB checks it) and no rights; (user, password)."""
    user, password = f"tp_rd_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    with mysql_connect() as conn, conn.cursor() as cur:
        for host in ("%", "localhost"):
            cur.execute(f"CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'")
    yield user, password
    with mysql_connect() as conn, conn.cursor() as cur:
        for host in ("%", "localhost"):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'{host}'")


@pytest.fixture(params=["folder", "s3"])
def delta_tables(request: pytest.FixtureRequest, tmp_path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, DeltaTables]:
    """A Delta destination's connection and where its tables are: a folder, or a new bucket of
    the S3 server (the keys as environment references)."""
    if request.param == "folder":
        return {"path": str(tmp_path / "delta")}, DeltaTables(str(tmp_path / "delta"))
    server = request.getfixturevalue("s3")
    bucket = f"delta-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    monkeypatch.setenv("TP_DELTA_KEY_ID", server.access_key)
    monkeypatch.setenv("TP_DELTA_SECRET", server.secret_key)
    connection = {"bucket": bucket, "prefix": "recipient/rcpt", "endpoint_url": server.endpoint, "path_style": True,
                  "access_key_id": "${TP_DELTA_KEY_ID}", "secret_access_key": "${TP_DELTA_SECRET}"}
    options = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": server.access_key, "AWS_SECRET_ACCESS_KEY": server.secret_key}
    return connection, DeltaTables(f"s3://{bucket}/recipient/rcpt", options, server.client(), bucket)
