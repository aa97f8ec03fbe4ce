"""Schema-tenanted sources: each recipient's rows live in the schema (MySQL: database; Parquet lake:
folder ``<path>/<tenant id>/<table>``) named by its ``id_in_provider_system``; no organization column.

Both recipients' tables hold the *same ids* with different payloads, so a row read from the wrong
schema shows up as a wrong payload or a duplicate key, not only as an extra row. One tenant id has
quotes and a backslash in it, the other a ``*``.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.core.timeutil import utc
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.errors import ConfigError
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform_tests.support.events import day, epoch
from transfer_platform_tests.support.mysql import (
    mysql_connect,
    mysql_connection_config,
    mysql_ident,
)
from transfer_platform_tests.support.postgres import pg_connect, pg_connection_config
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

MIN_START = day(3, 1)
NOW = day(3, 4)
MODEL = "events"
QUERY = "SELECT id, updated_at, payload FROM events WHERE payload IS NOT NULL"

Row = tuple[int, object, str | None]


def tenant_rows(tenant: str) -> list[Row]:
    """Ids 1..6 for every tenant (the same ids), microseconds, this tenant's payloads."""
    return [(k, day(3, 1 + k % 3) + timedelta(hours=k, microseconds=1000 * k + 7), f"{tenant} #{k}")
            for k in range(1, 7)]


def model(*, query: bool) -> dict:
    return {
        "model_name": MODEL,
        "source_name": "src",
        **({"source_query": QUERY} if query else {"source_table": "events"}),
        "min_start_time_epoch": epoch(MIN_START),
        "columns": [
            {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
            {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
            {"name_in_source": "payload", "data_type": "string"},
        ],
    }


def two_recipients(source: dict, tenants: list[str], dst_schemas: list[str], *,
                   query: bool) -> PlatformConfig:
    return parse_config({
        "sources": [{"name": "src", "tenancy": "schema_tenanted", **source}],
        "models": [model(query=query)],
        "recipients": [{"name": f"r{i}", "id_in_provider_system": t} for i, t in enumerate(tenants)],
        "destinations": [{"name": f"d{i}", "vendor": "postgres", "recipient": f"r{i}",
                          "connection": pg_connection_config(schema)}
                         for i, schema in enumerate(dst_schemas)],
    }, now=NOW)


def delivered(pg_conn, schema: str) -> list[Row]:
    return [(k, utc(at), payload) for k, at, payload in pg_conn.execute(
        f'SELECT id, updated_at, payload FROM "{schema}"."{MODEL}" ORDER BY id').fetchall()]


# -- the tenants' schemas, per vendor ----------------------------------------------------------------


@pytest.fixture
def tenants() -> list[str]:
    """Quotes and a backslash in one id; the other, read as a pattern (a Hadoop glob for the
    Parquet lake), would also match the first."""
    tag = uuid.uuid4().hex[:8]
    return [f"tp_{tag}_a'cme\"\\x", f"tp_{tag}_a*"]


@pytest.fixture
def postgres_tenants(tenants):
    with pg_connect(autocommit=True) as conn:
        for tenant in tenants:
            schema = '"' + tenant.replace('"', '""') + '"'
            conn.execute(f"CREATE SCHEMA {schema}")
            conn.execute(f"CREATE TABLE {schema}.events (id bigint PRIMARY KEY, updated_at timestamptz, "
                         "payload text)")
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {schema}.events VALUES (%s, %s, %s)", tenant_rows(tenant))
    yield {"vendor": "postgres", "connection": pg_connection_config()}
    with pg_connect(autocommit=True) as conn:
        for tenant in tenants:
            conn.execute('DROP SCHEMA IF EXISTS "' + tenant.replace('"', '""') + '" CASCADE')


@pytest.fixture
def mysql_tenants(tenants, new_mysql_database, mysql_database):
    admin = mysql_connect()
    with admin.cursor() as cur:
        for tenant in tenants:
            new_mysql_database(tenant, exact=True)
            cur.execute(f"CREATE TABLE {mysql_ident(tenant)}.events (id BIGINT PRIMARY KEY, "
                        "updated_at DATETIME(6), payload TEXT)")
            cur.executemany(f"INSERT INTO {mysql_ident(tenant)}.events VALUES (%s, %s, %s)",
                            [(k, utc(at).replace(tzinfo=None), p) for k, at, p in tenant_rows(tenant)])
    admin.close()
    # the connection's own database holds an `events` table too: it must never be read
    with mysql_connect(mysql_database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE events (id BIGINT PRIMARY KEY, updated_at DATETIME(6), payload TEXT)")
        cur.execute("INSERT INTO events VALUES (1, '2024-03-02 00:00:00', 'the default database')")
    return {"vendor": "mysql", "connection": mysql_connection_config(mysql_database)}


def write_parquet(folder: Path, rows: list[Row]) -> None:
    folder.mkdir(parents=True)
    table = pa.table({
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "updated_at": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
        "payload": pa.array([r[2] for r in rows], pa.string()),
    })
    pq.write_table(table, folder / "part-0.parquet")


@pytest.fixture
def parquet_tenants(tenants, tmp_path):
    lake = tmp_path / "lake"
    for tenant in tenants:
        write_parquet(lake / tenant / "events", tenant_rows(tenant))
    write_parquet(lake / "events", [(1, day(3, 2), "the lake's root")])  # never read
    return {"vendor": "parquet", "connection": {"path": str(lake)}}


VENDOR_FIXTURES = {"postgres": "postgres_tenants", "mysql": "mysql_tenants", "parquet": "parquet_tenants"}


@pytest.mark.parametrize("query", [False, True], ids=["source_table", "source_query"])
@pytest.mark.parametrize("vendor", list(VENDOR_FIXTURES))
def test_each_recipient_receives_only_its_own_schemas_rows(
        request, spark, pg_conn, new_schema, tenants, vendor, query):
    source = request.getfixturevalue(VENDOR_FIXTURES[vendor])
    dst_schemas = [new_schema(), new_schema()]
    config = two_recipients(source, tenants, dst_schemas, query=query)

    for i in range(len(tenants)):
        summary = transfer(spark, config, NOW, destination=f"d{i}")
        assert summary.status == "SUCCESS", summary.error
        assert summary.rows_transferred == 6

    for tenant, schema in zip(tenants, dst_schemas, strict=True):
        assert delivered(pg_conn, schema) == [(k, utc(at), p) for k, at, p in tenant_rows(tenant)]


# -- refusals --------------------------------------------------------------------------------------


def test_a_missing_tenant_schema_is_an_error_naming_the_destination(spark, postgres_tenants):
    config = two_recipients(postgres_tenants, ["tp_no_such_tenant_schema", "x"], ["a", "b"], query=False)
    bounds = ReadBounds(MIN_START, NOW, Window(MIN_START, NOW))
    reader = reader_for(config.source("src"))

    with pytest.raises(Exception) as caught:  # noqa: PT011 - the type is asserted below
        reader.read(spark, ReadRequest(config.model(MODEL), "tp_no_such_tenant_schema", bounds, "d0"))

    assert type(caught.value).__name__ == "DataError"
    text = str(caught.value)
    assert "destination 'd0'" in text
    assert "tp_no_such_tenant_schema" in text
    assert "id_in_provider_system" in text


@pytest.mark.parametrize(("vendor", "tenant"), [("mysql", "acme?x"), ("mysql", "acme/x"),
                                                ("parquet", "../acme"), ("postgres", "t" * 64)])
def test_a_tenant_id_that_cannot_name_its_schema_is_refused_before_reading(
        spark, tmp_path, vendor, tenant):
    """``acme?x`` in a JDBC URL would connect to database ``acme``: another tenant's."""
    source = {"postgres": {"vendor": "postgres", "connection": pg_connection_config()},
              "mysql": {"vendor": "mysql", "connection": mysql_connection_config("test")},
              "parquet": {"vendor": "parquet", "connection": {"path": str(tmp_path)}}}[vendor]
    with pytest.raises(ConfigError) as at_validation:
        two_recipients(source, [tenant], ["d"], query=True)
    assert "recipients[0] (r0).id_in_provider_system" in str(at_validation.value)

    # a reader given such an id anyway (configuration built without the checks) refuses it too
    config = two_recipients(source, ["ok"], ["d"], query=True)
    bounds = ReadBounds(MIN_START, NOW, Window(MIN_START, NOW))
    with pytest.raises(ConfigError) as at_read:
        reader_for(config.source("src")).read(spark, ReadRequest(config.model(MODEL), tenant, bounds, "d0"))
    assert "destination 'd0'" in str(at_read.value)
    assert repr(tenant) in str(at_read.value)
