"""Fixtures of the integration tests (the shared ones are in transfer_platform_tests/conftest.py).

MariaDB/MySQL: 127.0.0.1:3306, user ``root`` without password (override with TP_TEST_MYSQL_HOST/
PORT/USER). Each test gets its own database(s), dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime

import pymysql
import pytest

from transfer_platform.config import parse_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.timeutil import utc
from transfer_platform_tests.conftest import pg_connection_config
from transfer_platform_tests.integration.helpers import DESTINATION, DeltaTables, normalize
from transfer_platform_tests.s3_server import S3Server, s3_server

# -- MariaDB / MySQL ------------------------------------------------------------------------------

MYSQL = {
    "host": os.environ.get("TP_TEST_MYSQL_HOST", "127.0.0.1"),
    "port": int(os.environ.get("TP_TEST_MYSQL_PORT", "3306")),
    "user": os.environ.get("TP_TEST_MYSQL_USER", "root"),
}

HOW_TO_START_MYSQL = (
    "MariaDB/MySQL is not reachable at {host}:{port} (user {user}, no password): {error}\n"
    "Start it with: service mariadb start\n"
    "(or point TP_TEST_MYSQL_HOST/TP_TEST_MYSQL_PORT at a server where that user needs no password)."
)


def mysql_connect(database: str | None = None) -> pymysql.Connection:
    """An autocommit PyMySQL connection in UTC; the test fails (never skips) if there is no server."""
    try:
        return pymysql.connect(**MYSQL, database=database, autocommit=True, charset="utf8mb4",
                               connect_timeout=5, init_command="SET time_zone = '+00:00'")
    except pymysql.err.OperationalError as exc:
        pytest.fail(HOW_TO_START_MYSQL.format(error=exc.args[-1], **MYSQL), pytrace=False)


def mysql_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def mysql_connection_config(database: str) -> dict:
    """The ``connection`` block of a mysql source for the test server."""
    return {"host": MYSQL["host"], "port": MYSQL["port"], "database": database, "username": MYSQL["user"]}


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
    from transfer_platform_tests.conftest import pg_connect

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


def mysql_table(table: str, database: str | None = None) -> str:
    return f"{mysql_ident(database)}.{mysql_ident(table)}" if database else mysql_ident(table)


def mysql_create_events(conn: pymysql.Connection, table: str = "events", *, database: str | None = None,
                        lm_type: str = "DATETIME(6)") -> None:
    """``events`` shaped like helpers.create_events: id, organization_id (indexed, the server's
    default case-insensitive collation), a last-modified column of ``lm_type``, payload."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {mysql_table(table, database)} (id BIGINT PRIMARY KEY, "
                    "organization_id VARCHAR(100), "
                    f"updated_at {lm_type} NULL DEFAULT NULL, payload TEXT, KEY (organization_id), "
                    "KEY (updated_at)) CHARACTER SET utf8mb4")


def mysql_insert_rows(conn: pymysql.Connection, rows: list, table: str = "events", *,
                      database: str | None = None) -> None:
    """Insert (id, organization_id, updated_at, payload) rows; aware times are stored as UTC."""
    def naive(moment: datetime | None) -> datetime | None:
        return None if moment is None else utc(moment).replace(tzinfo=None)

    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {mysql_table(table, database)} (id, organization_id, updated_at, "
                        "payload) VALUES (%s, %s, %s, %s)",
                        [(r[0], r[1], naive(r[2]), r[3]) for r in rows])


def mysql_source_rows(conn: pymysql.Connection, tenant: str | None = None, table: str = "events", *,
                      database: str | None = None) -> list:
    """The rows of one tenant (compared byte for byte), or all rows, normalized like helpers'."""
    sql = f"SELECT id, organization_id, updated_at, payload FROM {mysql_table(table, database)}"
    with conn.cursor() as cur:
        if tenant is None:
            cur.execute(sql)
        else:
            cur.execute(sql + " WHERE CAST(organization_id AS BINARY) = CAST(%s AS BINARY)", (tenant,))
        return normalize(cur.fetchall())


def config_for(source: dict, model: dict, *, tenant: str, dst_schema: str) -> PlatformConfig:
    """One source (named ``src``), one model, one recipient with id ``tenant`` and its PostgreSQL
    destination ``dst`` in ``dst_schema``."""
    return parse_config({
        "sources": [{"name": "src", **source}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": tenant}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config(dst_schema)}],
    })


def mysql_source(database: str, **settings) -> dict:
    """A ``vendor: mysql`` source block for the test server (``settings`` added as they are)."""
    return {"vendor": "mysql", "connection": mysql_connection_config(database), **settings}


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3-compatible server (moto) in its own process, for the whole session."""
    with s3_server(tmp_path_factory.mktemp("s3")) as server:
        yield server


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
