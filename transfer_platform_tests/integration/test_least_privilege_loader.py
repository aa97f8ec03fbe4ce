"""A PostgreSQL destination loader with only ``USAGE, CREATE`` on its own schema (no ``CREATE`` on
the database, not a superuser, owning nothing outside the schema), as a recipient's DBA grants it.

Everything a transfer does to the destination works as that role: the backfill (the empty-target
fast path), an incremental transfer, schema evolution, both kinds of full refresh (truncate and
refill; drop and recreate) and the integrity check. A schema that is missing and that the role may
not create is a clear error naming the grant, and nothing is created. On the source side, a
PostgreSQL reader with only ``USAGE`` and ``SELECT``, and a MariaDB reader with a password and only
``SELECT`` on the model's columns, read, are checked, and are refused cleanly once the grant goes.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from transfer_platform.config.models import ColumnConfig, PlatformConfig
from transfer_platform.destinations.base import staging_suffix
from transfer_platform.destinations.postgres import STAGING_PREFIX
from transfer_platform.transfers.integrity import check_integrity
from transfer_platform_tests.support.config import (
    DESTINATION,
    config_for,
    events_model,
    pg_config,
    with_columns,
)
from transfer_platform_tests.support.events import (
    MODEL,
    create_events,
    day,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.mysql import (
    mysql_connect,
    mysql_create_events,
    mysql_ident,
    mysql_insert_rows,
    mysql_source,
    mysql_source_rows,
)
from transfer_platform_tests.support.postgres import (
    destination_rows,
    pg_connect,
    schema_exists,
    tables_in,
)
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT = "acme"


@pytest.fixture
def loader(pg_role: str) -> str:
    return pg_role


def as_role(config: PlatformConfig, role: str) -> PlatformConfig:
    destination = config.destination(DESTINATION)
    connection = destination.connection.model_copy(update={"username": role})
    return config.model_copy(update={"destinations": [destination.model_copy(update={"connection": connection})]})


def streamed(caplog: pytest.LogCaptureFixture) -> bool:
    """Whether the transfer logged since ``caplog`` was cleared streamed a window from the source
    into its staging table (binary COPY in the transfer's process: its read's phase line)."""
    return any('"phase": "read"' in r.getMessage() and '"streamed": true' in r.getMessage() for r in caplog.records)


def test_a_loader_with_only_usage_and_create_on_its_schema_does_every_transfer(
        spark, pg_conn, pg_schema, dst_schema, loader, caplog):
    pg_conn.execute(f'CREATE SCHEMA "{dst_schema}"')  # by the recipient's DBA, not the loader
    pg_conn.execute(f'GRANT USAGE, CREATE ON SCHEMA "{dst_schema}" TO "{loader}"')
    database_create = pg_conn.execute("SELECT has_database_privilege(%s, current_database(), 'CREATE')",
                                      (loader,)).fetchone()[0]
    assert not database_create
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "other"], 12, [day(3, 1), day(3, 2)], seed=5))
    config = as_role(pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT,
                               min_start=day(2, 28)), loader)
    now = day(3, 4)

    backfill = transfer(spark, config, now, "t1")
    assert backfill.status == "SUCCESS", backfill.error
    insert_rows(pg_conn, pg_schema, [(900, TENANT, now - timedelta(hours=1), "new")])
    dead = STAGING_PREFIX + staging_suffix(MODEL, "dead")  # left by a killed transfer, as the loader
    with pg_connect(autocommit=True) as as_loader:
        as_loader.execute(f'SET ROLE "{loader}"')
        as_loader.execute(f'CREATE UNLOGGED TABLE "{dst_schema}"."{dead}" (id bigint)')
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="transfer_platform"):
        incremental = transfer(spark, config, now + timedelta(hours=1), "t2")
    assert incremental.status == "SUCCESS", incremental.error
    assert streamed(caplog)  # its window streamed into a staging table the loader created
    assert dead not in tables_in(pg_conn, dst_schema)  # the clean-up ran as the loader
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)

    refill = transfer(spark, config, now + timedelta(hours=2), "t3", full_refresh=True)  # truncate and refill
    assert refill.status == "SUCCESS", refill.error
    pg_conn.execute(f'ALTER TABLE "{pg_schema}".events ADD COLUMN extra text')
    evolved = with_columns(config, add=[ColumnConfig(name_in_source="extra", data_type="string")])
    added = transfer(spark, evolved, now + timedelta(hours=3), "t4")  # ALTER TABLE ... ADD COLUMN
    assert added.status == "SUCCESS", added.error
    retyped = with_columns(config, remove=["payload"])  # the live table's columns no longer match
    recreate = transfer(spark, retyped, now + timedelta(hours=4), "t5", full_refresh=True)  # drop and recreate
    assert recreate.status == "SUCCESS", recreate.error
    columns = [r[0] for r in pg_conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum", (f'"{dst_schema}"."{MODEL}"',)).fetchall()]
    assert columns == ["id", "organization_id", "updated_at"]

    report = check_integrity(spark, retyped, DESTINATION, retyped.model(MODEL), now + timedelta(hours=5))
    assert report.passed, report
    owners = {r[0] for r in pg_conn.execute(
        "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = %s", (dst_schema,)).fetchall()}
    assert owners == {loader}


def test_a_missing_schema_the_loader_may_not_create_names_the_grant(spark, pg_conn, pg_schema, dst_schema, loader):
    create_events(pg_conn, pg_schema)
    config = as_role(pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT,
                               min_start=day(2, 28)), loader)
    failed = transfer(spark, config, day(3, 4), "t1")
    assert failed.status == "ERROR"
    assert f"schema '{dst_schema}' does not exist and cannot be created" in failed.error
    assert f'GRANT CREATE ON DATABASE "test" TO "{loader}"' in failed.error
    assert not schema_exists(pg_conn, dst_schema)


def test_a_loader_without_create_on_its_schema_is_told_the_grant(spark, pg_conn, pg_schema, dst_schema, loader):
    pg_conn.execute(f'CREATE SCHEMA "{dst_schema}"')
    pg_conn.execute(f'GRANT USAGE ON SCHEMA "{dst_schema}" TO "{loader}"')
    create_events(pg_conn, pg_schema)
    config = as_role(pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT,
                               min_start=day(2, 28)), loader)
    failed = transfer(spark, config, day(3, 4), "t1")
    assert failed.status == "ERROR"
    assert f'GRANT USAGE, CREATE ON SCHEMA "{dst_schema}" TO "{loader}"' in failed.error
    assert pg_conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (dst_schema,)).fetchone()[0] == 0


def test_a_source_reader_with_only_usage_and_select_reads_and_checks(spark, pg_conn, pg_schema, dst_schema,
                                                                    loader, caplog):
    """The source side as in production: the role has USAGE on the source schema and SELECT on the
    model's table, nothing else (``loader`` serves as that reader here)."""
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "other"], 6, [day(3, 1)], seed=9))
    pg_conn.execute(f'GRANT USAGE ON SCHEMA "{pg_schema}" TO "{loader}"')
    pg_conn.execute(f'GRANT SELECT ON "{pg_schema}".events TO "{loader}"')
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=day(2, 28))
    source = config.source("src")
    reader_source = source.model_copy(update={"connection": source.connection.model_copy(update={"username": loader})})
    config = config.model_copy(update={"sources": [reader_source]})

    with caplog.at_level(logging.INFO, logger="transfer_platform"):
        summary = transfer(spark, config, day(3, 4), "t1")
    assert summary.status == "SUCCESS", summary.error
    assert streamed(caplog)  # its window streamed out of the source by COPY, as that reader
    assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
    assert check_integrity(spark, config, DESTINATION, config.model(MODEL), day(3, 5)).passed

    pg_conn.execute(f'REVOKE SELECT ON "{pg_schema}".events FROM "{loader}"')
    refused = transfer(spark, config, day(3, 6), "t2")
    assert refused.status == "ERROR"
    assert "permission denied for table events" in refused.error


def test_a_mariadb_reader_with_only_select_on_the_model_columns_reads_and_checks(
        spark, monkeypatch, mysql_conn, mysql_database, mysql_reader, pg_conn, dst_schema):
    """A MariaDB reader as a provider's DBA creates it: a password (MariaDB checks it) and
    ``SELECT`` on the model's columns of its table, nothing else (not even the other columns)."""
    user, password = mysql_reader
    mysql_create_events(mysql_conn)
    with mysql_conn.cursor() as cur:
        cur.execute("ALTER TABLE events ADD COLUMN secret TEXT")
    mysql_insert_rows(mysql_conn, make_rows([TENANT, "other"], 6, [day(3, 1)], seed=19))
    table = f"{mysql_ident(mysql_database)}.{mysql_ident('events')}"
    with mysql_connect() as admin, admin.cursor() as cur:
        for host in ("%", "localhost"):
            cur.execute(f"GRANT SELECT (id, organization_id, updated_at, payload) ON {table} TO '{user}'@'{host}'")
    monkeypatch.setenv("TP_TEST_READER_PASSWORD", password)
    source = mysql_source(mysql_database)
    source["connection"].update(username=user, password="${TP_TEST_READER_PASSWORD}")
    config = config_for(source, events_model("events", min_start=day(2, 28)), tenant=TENANT, dst_schema=dst_schema)

    backfill = transfer(spark, config, day(3, 4), "t1")
    assert backfill.status == "SUCCESS", backfill.error
    mysql_insert_rows(mysql_conn, [(900, TENANT, day(3, 4) + timedelta(hours=1), "new")])
    incremental = transfer(spark, config, day(3, 4) + timedelta(hours=2), "t2")
    assert incremental.status == "SUCCESS", incremental.error
    assert destination_rows(pg_conn, dst_schema) == mysql_source_rows(mysql_conn, TENANT)
    assert check_integrity(spark, config, DESTINATION, config.model(MODEL), day(3, 5)).passed

    with mysql_connect() as admin, admin.cursor() as cur:
        for host in ("%", "localhost"):
            cur.execute(f"REVOKE SELECT (id, organization_id, updated_at, payload) ON {table} FROM '{user}'@'{host}'")
    before = destination_rows(pg_conn, dst_schema)
    refused = transfer(spark, config, day(3, 4) + timedelta(hours=3), "t3")
    assert refused.status == "ERROR"
    assert "denied" in refused.error
    assert password not in refused.error
    assert destination_rows(pg_conn, dst_schema) == before


def test_a_schema_dropped_by_the_recipients_admin_is_recreated_when_the_loader_may(
        spark, pg_conn, pg_schema, dst_schema, loader):
    """The schema goes with its tables and watermark: the next transfer starts again from the
    configured start, into a schema it creates, if the loader may; else it names the grant."""
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "other"], 8, [day(3, 1), day(3, 2)], seed=23))
    pg_conn.execute(f'GRANT CREATE ON DATABASE test TO "{loader}"')
    try:
        config = as_role(pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT,
                                   min_start=day(2, 28)), loader)
        assert transfer(spark, config, day(3, 4), "t1").status == "SUCCESS"
        pg_conn.execute(f'DROP SCHEMA "{dst_schema}" CASCADE')  # the recipient's admin
        again = transfer(spark, config, day(3, 4) + timedelta(hours=1), "t2")
        assert again.status == "SUCCESS", again.error
        assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
        owner = pg_conn.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = %s",
                                (dst_schema,)).fetchone()[0]
        assert owner.strip('"') == loader
    finally:
        pg_conn.execute(f'REVOKE CREATE ON DATABASE test FROM "{loader}"')
    pg_conn.execute(f'DROP SCHEMA "{dst_schema}" CASCADE')
    refused = transfer(spark, config, day(3, 4) + timedelta(hours=2), "t3")
    assert refused.status == "ERROR"
    assert f'GRANT CREATE ON DATABASE "test" TO "{loader}"' in refused.error
    assert not schema_exists(pg_conn, dst_schema)
