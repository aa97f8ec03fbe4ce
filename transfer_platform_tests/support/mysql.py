"""The machine's MariaDB/MySQL for the tests: connections (never skipped silently), the events
table and its rows, a ``vendor: mysql`` source block.

127.0.0.1:3306, user ``root`` without password (override with TP_TEST_MYSQL_HOST/PORT/USER).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import pymysql
import pytest

from transfer_platform.core.timeutil import utc
from transfer_platform_tests.support.events import normalize

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


@contextmanager
def new_database(prefix: str) -> Iterator[str]:
    """A database of its own (``<prefix>_<random>``, utf8mb4) for a test, dropped after it."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn = mysql_connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {mysql_ident(name)} CHARACTER SET utf8mb4")
    try:
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {mysql_ident(name)}")
        conn.close()


def mysql_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def mysql_connection_config(database: str) -> dict:
    """The ``connection`` block of a mysql source for the test server."""
    return {"host": MYSQL["host"], "port": MYSQL["port"], "database": database, "username": MYSQL["user"]}


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


def mysql_source(database: str, **settings) -> dict:
    """A ``vendor: mysql`` source block for the test server (``settings`` added as they are)."""
    return {"vendor": "mysql", "connection": mysql_connection_config(database), **settings}
