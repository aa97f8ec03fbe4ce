"""The ClickHouse destination against ClickHouse 26.9 embedded (chDB, the session's folder), read
back through clickhouse-connect as a recipient reads it (``FINAL``): every data type exactly, a
value out of ClickHouse's range refused with nothing written, a database name with quotes, the
model's lock, bad connection settings named without the password, test-connection."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import yaml

from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.errors import ConnectionFailure, TransferRunning
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.clickhouse import clickhouse_reader, q
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer
from transfer_platform_tests.support.typed import EVERY_TYPE_COLUMNS as COLUMNS
from transfer_platform_tests.support.typed import create_every_type_source

pytestmark = pytest.mark.integration

TENANT = "acme"
BASE = datetime(2025, 3, 1, 1, tzinfo=UTC)
NOW1 = datetime(2025, 3, 2, 1, tzinfo=UTC)
PASSWORD_ENV = "TP_TEST_CLICKHOUSE_PASSWORD"
PASSWORD = "s3cret-Pw!" + uuid.uuid4().hex[:8]


@pytest.fixture
def source(pg_conn, pg_schema) -> str:
    return create_every_type_source(pg_conn, pg_schema)


def raw_config(schema: str, connection: dict) -> dict:
    model = {"model_name": MODEL, "source_name": "src", "source_table": f"{schema}.events",
             "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
             "min_start_time_epoch": int(BASE.timestamp()) - 3600, "columns": COLUMNS}
    return {
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "clickhouse", "connection": connection}],
    }


def config_for(schema: str, connection: dict):
    return parse_config(raw_config(schema, connection), now=datetime(2025, 6, 1, tzinfo=UTC))


def insert(conn, schema: str, *rows: tuple) -> None:
    with conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{schema}".events (id, organization_id, updated_at, payload, amount, doc, '
                        "born, flag, ratio) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        [(r[0], TENANT, *r[1:], *([None] * (8 - len(r)))) for r in rows])


def expected(conn, config) -> list[dict]:
    names = [c.name_in_source for c in config.model(MODEL).columns]
    cursor = conn.execute(f"SELECT {', '.join(names)} FROM {config.model(MODEL).source_table} "
                          "WHERE organization_id = %s ORDER BY id", (TENANT,))
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def test_values_arrive_exactly_in_a_database_whose_name_has_quotes(spark, pg_conn, source, clickhouse_server) -> None:
    database = f"tp_ch_{uuid.uuid4().hex[:6]}_o'neil`s \"db\""
    texts = ['quote " comma , backslash \\ end', "line\nbreak\r\ttab", "\\N", "", "naïve ☃ 𝄞", "NULL", "a\\", "it's"]
    rows = [(k + 1, BASE + timedelta(minutes=k, microseconds=k * 111_111 + 1), text,
             Decimal("12345678901234567890123456789.123456789") * (-1) ** k,
             json.dumps({"k": k, "t": text, "nested": [1, 2.5, None]}), date(1900 + k, 1, 1) if k else date(2299, 12, 31),
             bool(k % 2), 1.0 / (k + 3)) for k, text in enumerate(texts)]
    rows.append((99, BASE + timedelta(hours=2), None, None, None, None, None, None))
    insert(pg_conn, source, *rows)
    config = config_for(source, {"path": str(clickhouse_server.path), "database": database})

    summary = transfer(spark, config, NOW1, "t1")
    assert summary.status == "SUCCESS", summary.error

    got = clickhouse_reader(clickhouse_server, database)(config.model(MODEL))
    assert got == expected(pg_conn, config)
    assert got[1]["updated_at"].microsecond == 111_112
    client = clickhouse_server.client()
    (state,) = client.query(f"SELECT data_model_name, transfer_last_updated_at FROM {q(database)}._transfer_status"
                            ).result_rows
    assert state[0] == MODEL
    assert state[1].replace(tzinfo=UTC) == NOW1


def test_a_date_out_of_clickhouses_range_is_refused_with_nothing_written(spark, pg_conn, source,
                                                                         clickhouse_server) -> None:
    database = f"tp_ch_{uuid.uuid4().hex[:10]}"
    insert(pg_conn, source, (1, BASE, "fine", None, None, date(2000, 1, 1)), (2, BASE, "old", None, None,
                                                                              date(1899, 12, 31)))
    config = config_for(source, {"path": str(clickhouse_server.path), "database": database})

    summary = transfer(spark, config, NOW1, "t1")

    assert summary.status == "ERROR"
    assert "'born' holds 1899-12-31" in summary.error, summary.error
    assert "nothing was written" in summary.error
    assert clickhouse_reader(clickhouse_server, database)(config.model(MODEL)) == []
    assert clickhouse_server.client().query(f"SELECT state FROM {q(database)}._transfer_status").result_rows == [
        ("{}",)] or clickhouse_server.client().query(f"SELECT count() FROM {q(database)}._transfer_status"
                                                     ).result_rows == [(0,)]


def test_one_transfer_of_a_model_at_a_time_and_a_dead_holders_lock_is_taken_over(source, clickhouse_server) -> None:
    database = f"tp_ch_{uuid.uuid4().hex[:10]}"
    config = config_for(source, {"path": str(clickhouse_server.path), "database": database})
    model = config.model(MODEL)
    first = writer_for(config.destination(DESTINATION))
    second = writer_for(config.destination(DESTINATION), Tuning(lock_wait_seconds=0.5))
    try:
        first.lock_model(model, "first-transfer")
        with pytest.raises(TransferRunning, match="first-transfer"):
            second.lock_model(model, "second-transfer")
        first.close()
        second.lock_model(model, "second-transfer")  # released at close
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
        lock = second._locked[MODEL].table
        second.session.execute(second.dialect.set_comment(lock, json.dumps(  # the holder's process is gone
            {"transfer_id": "dead", "host": socket.gethostname(), "pid": int(dead.stdout), "lease_end_us": 2**62})))
        second._locked.clear()
        third = writer_for(config.destination(DESTINATION), Tuning(lock_wait_seconds=0.5))
        third.lock_model(model, "third-transfer")
        third.close()
    finally:
        first.close()
        second.close()


def test_an_unreachable_server_and_a_bad_folder_are_named_without_the_password(
        source, clickhouse_server, tmp_path, monkeypatch, capsys) -> None:
    from transfer_platform.cli import main

    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = {"host": "127.0.0.1", "port": port, "database": "acme", "username": "loader",
              "password": f"${{{PASSWORD_ENV}}}"}
    config = config_for(source, server)
    writer = writer_for(config.destination(DESTINATION))
    with pytest.raises(ConnectionFailure) as refused:
        writer.check()
    writer.close()
    assert f"127.0.0.1:{port}" in str(refused.value)
    assert "ClickHouse destination" in str(refused.value)
    assert PASSWORD not in str(refused.value)

    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(raw_config(source, server)))
    assert main(["--config", str(path), "test-connection", DESTINATION]) == 1
    out = capsys.readouterr()
    assert f"127.0.0.1:{port}" in out.out + out.err
    assert PASSWORD not in out.out + out.err

    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    config = config_for(source, {"path": str(a_file), "database": "acme"})
    writer = writer_for(config.destination(DESTINATION))
    with pytest.raises(ConnectionFailure, match="ClickHouse destination"):
        writer.check()
    writer.close()


def test_test_connection_passes_on_a_chdb_folder(source, clickhouse_server) -> None:
    config = config_for(source, {"path": str(clickhouse_server.path), "database": f"tp_ch_{uuid.uuid4().hex[:10]}"})
    writer = writer_for(config.destination(DESTINATION))
    try:
        checks = writer.probe(config.models, DESTINATION)
    finally:
        writer.close()
    assert checks
    assert not any(c.failed for c in checks), [c.line() for c in checks]


def test_validate_refuses_host_with_path_and_server_settings_on_a_folder(tmp_path) -> None:
    from transfer_platform.errors import ConfigError

    for connection, wanted in (({"host": "h", "path": str(tmp_path), "database": "d"}, "not both"),
                               ({"database": "d"}, "not both and not neither"),
                               ({"path": str(tmp_path), "database": "d", "secure": True}, "secure has no effect")):
        with pytest.raises(ConfigError, match=wanted):
            config_for("s", connection)
    assert os.path.isdir(tmp_path)
