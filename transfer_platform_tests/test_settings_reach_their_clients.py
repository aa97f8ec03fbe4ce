"""Each connection setting reaches the client that uses it (psycopg, PyMySQL, Spark's JDBC reader),
and the ``spark`` block reaches the session's configuration on every path (``get_spark_session``
for the CLI and the demo, the Dagster resource). Pure: nothing connects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pymysql
import pytest

from transfer_platform.config.connection_settings import DatabaseConnection
from transfer_platform.config.models import SparkSettings
from transfer_platform.config.parsing import parse_config
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.orchestration.catalog.resources import spark_resource
from transfer_platform.runtime.connections import (
    connect_mysql,
    jdbc_properties,
    postgres_connect_kwargs,
)
from transfer_platform.runtime.spark_session import spark_conf
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform.sources.relay import relay_for

VAR = "TP_TEST_SETTINGS_PASSWORD"
SECRET = "pw-from-the-environment"
NOW = datetime(2025, 6, 1, tzinfo=UTC)


def connection(**extra) -> DatabaseConnection:
    return DatabaseConnection.model_validate({"host": "db.example", "port": 6543, "database": "app",
                                              "username": "reader", "password": f"${{{VAR}}}", **extra})


def raw_config(vendor: str, **connection_extra) -> dict:
    return {
        "sources": [{"name": "src", "vendor": vendor, "connection": {
            "host": "db.example", "port": 6543, "database": "app", "username": "reader",
            "password": f"${{{VAR}}}", **connection_extra}}],
        "models": [{"model_name": "events", "source_name": "src", "source_table": "events",
                    "organization_column": "org", "columns": [
                        {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                        {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True}]}],
        "recipients": [{"name": "acme", "id_in_provider_system": "org_1"}],
        "destinations": [{"name": "d", "vendor": "delta", "recipient": "acme", "connection": {"path": "out"}}],
        "spark": {"master": "local[3]", "driver_memory": "3g",
                  "conf": {"spark.sql.shuffle.partitions": "7"}},
    }


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv(VAR, SECRET)


def test_postgres_settings_reach_psycopg():
    kwargs = postgres_connect_kwargs(connection(), what="destinations.d")
    assert {k: kwargs[k] for k in ("host", "port", "dbname", "user", "password")} == {
        "host": "db.example", "port": 6543, "dbname": "app", "user": "reader", "password": SECRET}


def test_mysql_settings_reach_pymysql(monkeypatch):
    seen = {}
    monkeypatch.setattr(pymysql, "connect", lambda **kwargs: seen.update(kwargs))
    connect_mysql(connection(), what="sources.src")
    assert {k: seen[k] for k in ("host", "port", "database", "user", "password")} == {
        "host": "db.example", "port": 6543, "database": "app", "user": "reader", "password": SECRET}


@pytest.mark.parametrize(("vendor", "schema", "read_timeout", "url"), [
    # the read timeout (seconds for PostgreSQL's driver, milliseconds for MariaDB's) and the
    # schema in the URL: Spark Connect lower-cases option names ("sockettimeout", "currentschema"
    # would be ignored)
    ("postgres", None, None, "jdbc:postgresql://db.example:6543/app?prepareThreshold=-1&socketTimeout=600"),
    ("postgres", "sales", 45, "jdbc:postgresql://db.example:6543/app?prepareThreshold=-1&socketTimeout=45"
                              "&currentSchema=%22sales%22"),
    ("mysql", None, None, "jdbc:mysql://db.example:6543/app?socketTimeout=600000"),
    ("mysql", None, 45, "jdbc:mysql://db.example:6543/app?socketTimeout=45000"),
], ids=["postgres", "postgres-schema-timeout", "mysql", "mysql-timeout"])
def test_source_settings_reach_the_spark_jdbc_read(vendor, schema, read_timeout, url):
    raw = raw_config(vendor, **({} if schema is None else {"schema": schema}))
    if read_timeout is not None:
        raw["sources"][0]["read_timeout_seconds"] = read_timeout
    config = parse_config(raw, now=NOW)
    options = reader_for(config.source("src")).connection_options(
        ReadRequest(config.model("events"), "org_1", bounds=None))  # the options do not depend on it
    assert options["url"] == url
    assert (options["user"], options["password"]) == ("reader", SECRET)
    assert not any(key.lower() in ("currentschema", "sockettimeout") for key in options)
    assert jdbc_properties(connection(), "x") == {"user": "reader", "password": SECRET}


def test_a_sources_read_timeout_reaches_pymysql_and_the_relay(monkeypatch):
    raw = raw_config("mysql")
    raw["sources"][0]["read_timeout_seconds"] = 45
    reader = reader_for(parse_config(raw, now=NOW).source("src"))
    seen = {}
    monkeypatch.setattr(pymysql, "connect", lambda **kwargs: seen.update(kwargs))
    connect_mysql(reader.source.connection, what=reader.what, read_timeout=reader.dialect.read_timeout)
    assert seen["read_timeout"] == 45

    raw = raw_config("postgres")
    raw["sources"][0]["read_timeout_seconds"] = 45
    config = parse_config(raw, now=NOW)
    later = NOW + timedelta(hours=1)
    relay = relay_for(reader_for(config.source("src")),
                      ReadRequest(config.model("events"), "org_1", bounds=ReadBounds(NOW, later, Window(NOW, later))), 1)
    assert relay.read_timeout == 45


def test_the_spark_block_reaches_the_session_configuration():
    config = parse_config(raw_config("postgres"), now=NOW)
    for conf in (spark_conf(config.spark), spark_resource(config).spark_config):
        assert (conf["spark.master"], conf["spark.driver.memory"]) == ("local[3]", "3g")
        assert conf["spark.sql.shuffle.partitions"] == "7"  # spark.conf wins over our defaults
    defaults = spark_conf(SparkSettings())
    assert (defaults["spark.master"], defaults["spark.driver.memory"], defaults["spark.sql.shuffle.partitions"]) == (
        "local[2]", "2g", "4")
