"""The live lane of the ClickHouse destination: a real server (what chDB cannot prove: HTTP(S),
the log-in, the loader's grants). Runs when ``TRANSFER_PLATFORM_LIVE_CLICKHOUSE_HOST`` is set
(with ``_PORT``, ``_USER``, ``_PASSWORD``, ``_DATABASE``, ``_SECURE``), skipped otherwise: a
transfer, its rows and watermark read back through clickhouse-connect, test-connection passing, a
wrong password refused without it in the message."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.errors import ConnectionFailure
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer

PREFIX = "TRANSFER_PLATFORM_LIVE_CLICKHOUSE_"
VARS = [PREFIX + n for n in ("HOST", "PORT", "USER", "PASSWORD", "DATABASE", "SECURE")]

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not os.environ.get(PREFIX + "HOST"),
                                 reason=f"a real ClickHouse server: set {', '.join(VARS)}")]

TENANT = "acme"
BASE = datetime(2025, 3, 1, 1, tzinfo=UTC)


def connection(password_env: str = PREFIX + "PASSWORD") -> dict:
    env = os.environ
    block = {"host": env[PREFIX + "HOST"], "database": env.get(PREFIX + "DATABASE", "default"),
             "username": env.get(PREFIX + "USER", "default"), "password": f"${{{password_env}}}",
             "secure": env.get(PREFIX + "SECURE", "").lower() in ("1", "true", "yes")}
    if env.get(PREFIX + "PORT"):
        block["port"] = int(env[PREFIX + "PORT"])
    return block


def config_for(schema: str, conn: dict):
    model = {"model_name": MODEL, "source_name": "src", "source_table": f"{schema}.events",
             "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
             "min_start_time_epoch": int(BASE.timestamp()) - 3600,
             "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                         {"name_in_source": "organization_id", "data_type": "string"},
                         {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                         {"name_in_source": "payload", "data_type": "string"}]}
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model], "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "clickhouse", "connection": conn}],
    }, now=datetime(2025, 6, 1, tzinfo=UTC))


def test_a_transfer_to_a_real_server_is_read_back_and_a_wrong_password_is_refused(
        spark, pg_conn, pg_schema, monkeypatch) -> None:
    import clickhouse_connect

    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint, organization_id text, updated_at timestamptz, '
                    "payload text)")
    pg_conn.execute(f'INSERT INTO "{pg_schema}".events VALUES (1, %s, %s, %s), (2, %s, %s, NULL)',
                    (TENANT, BASE, "it's", TENANT, BASE + timedelta(minutes=1)))
    config = config_for(pg_schema, connection())
    c = connection()
    client = clickhouse_connect.get_client(host=c["host"], port=c.get("port"), username=c["username"],
                                           password=os.environ.get(PREFIX + "PASSWORD", ""), secure=c["secure"])
    client.command(f"DROP TABLE IF EXISTS `{c['database']}`.`{MODEL}` SYNC")
    writer = writer_for(config.destination(DESTINATION))
    try:
        checks = writer.probe(config.models, DESTINATION)
    finally:
        writer.close()
    assert not any(check.failed for check in checks), [check.line() for check in checks]

    summary = transfer(spark, config, BASE + timedelta(days=1), f"live{uuid.uuid4().hex[:6]}")
    assert summary.status == "SUCCESS", summary.error
    rows = client.query(f"SELECT id, payload FROM `{c['database']}`.`{MODEL}` FINAL ORDER BY id").result_rows
    assert rows == [(1, "it's"), (2, None)]
    (mark,) = client.query(f"SELECT transfer_last_updated_at FROM `{c['database']}`._transfer_status "
                           f"WHERE data_model_name = '{MODEL}'").result_rows
    assert mark[0].replace(tzinfo=UTC) == BASE + timedelta(days=1)

    wrong = "wrong-" + uuid.uuid4().hex
    monkeypatch.setenv("TP_TEST_WRONG_CLICKHOUSE_PASSWORD", wrong)
    writer = writer_for(config_for(pg_schema, connection("TP_TEST_WRONG_CLICKHOUSE_PASSWORD")).destination(DESTINATION))
    with pytest.raises(ConnectionFailure) as refused:
        writer.check()
    writer.close()
    assert wrong not in str(refused.value)
    client.command(f"DROP TABLE IF EXISTS `{c['database']}`.`{MODEL}` SYNC")
