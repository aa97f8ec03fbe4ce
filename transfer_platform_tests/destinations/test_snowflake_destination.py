"""The Snowflake destination against the emulator (fakesnow's server, its own process), read back
through snowflake.connector as a recipient reads it:

- every model data_type arrives exactly: text with quotes, backslashes, newlines and non-ASCII,
  integers, doubles, booleans, microsecond timestamps, dates, exact decimals, JSON, NULLs;
- bad input is one line naming Snowflake, the object and the fix, exit 1 from the command line,
  nothing written, the watermark unmoved and the password nowhere: an unreachable host, a missing
  database, a missing schema, a password variable that is not set, a private key that is no key;
- a transfer that fell silent loses the model's lock once its lease runs out, and its commit is
  then refused;
- ``test-connection`` passes every step against a schema that exists, and names the schema's
  ``CREATE SCHEMA`` when it does not.

The emulator accepts any password and enforces no grant: a wrong password and a missing grant
are not tested here (the live lane does, against a real account).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import yaml

from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.base import writer_for
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.processes import free_port
from transfer_platform_tests.support.snowflake import PASSWORD_ENV, snowflake_rows, watermark
from transfer_platform_tests.support.transfers import transfer
from transfer_platform_tests.support.typed import EVERY_TYPE_COLUMNS as COLUMNS
from transfer_platform_tests.support.typed import create_every_type_source

pytestmark = pytest.mark.integration

TENANT = "o'brien \"co\""  # a tenant id with quotes goes through as data
BASE = datetime(2025, 3, 1, 1, tzinfo=UTC)
NOW1 = datetime(2025, 3, 2, 1, tzinfo=UTC)
NOW2 = NOW1 + timedelta(hours=1)
PASSWORD = "s3cret-Pw!" + uuid.uuid4().hex[:8]


@pytest.fixture
def source(pg_conn, pg_schema) -> str:
    return create_every_type_source(pg_conn, pg_schema)


@pytest.fixture
def database(snowflake_server, monkeypatch) -> str:
    name = f"TP_{uuid.uuid4().hex[:10].upper()}"
    snowflake_server.create_schema(name, "acme")
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    return name


def block(server, in_database: str, **connection) -> dict:
    return {"name": DESTINATION, "recipient": "rcpt", "vendor": "snowflake",
            "connection": {**server.connection(in_database, "acme", PASSWORD_ENV), **connection}}


def settings(source: str, destination: dict) -> dict:
    model = {"model_name": MODEL, "source_name": "src", "source_table": f"{source}.events",
             "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
             "min_start_time_epoch": int(datetime(2025, 2, 28, tzinfo=UTC).timestamp()), "columns": COLUMNS}
    return {"sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
            "models": [model], "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
            "destinations": [destination], "spark": {"master": "local[2]", "driver_memory": "1g"}}


def insert(conn, schema: str, *rows: tuple) -> None:
    with conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{schema}".events (id, organization_id, updated_at, payload, amount, doc, '
                        "born, flag, ratio) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        [(r[0], TENANT, *r[1:]) for r in rows])


def test_every_type_arrives_exactly(spark, pg_conn, source, database, snowflake_server) -> None:
    texts = ['quote " and \' comma , backslash \\ end', "line\nbreak\r\ttab", "\\N", "", "naïve ☃ 𝄞", "NULL"]
    rows = [(k + 1, BASE + timedelta(minutes=k, microseconds=k * 111_111 + 1), text,
             Decimal("12345678901234567890123456789.123456789") * (-1) ** k,
             json.dumps({"k": k, "t": text, "nested": [1, 2.5, None]}), date(1000 + k, 1, 1) if k else date(9999, 12, 31),
             bool(k % 2), 1.0 / (k + 3)) for k, text in enumerate(texts)]
    rows.append((99, BASE + timedelta(hours=2), None, None, None, None, None, None))
    insert(pg_conn, source, *rows)
    config = parse_config(settings(source, block(snowflake_server, database)))

    summary = transfer(spark, config, NOW1, "t1")
    assert summary.status == "SUCCESS", summary.error

    got = snowflake_rows(snowflake_server, database, "acme", config.model(MODEL))
    want = [dict(zip([c["name_in_source"] for c in COLUMNS], (r[0], TENANT, *r[1:]), strict=True)) for r in rows]
    as_json = lambda text: None if text is None else json.loads(text)  # noqa: E731
    assert [{**r, "doc": as_json(r["doc"])} for r in got] == [{**r, "doc": as_json(r["doc"])} for r in want]
    assert [r["payload"] for r in got] == [r["payload"] for r in want]
    assert got[1]["updated_at"].microsecond == 111_112
    assert isinstance(got[0]["amount"], Decimal)
    assert isinstance(got[0]["id"], int)
    assert watermark(snowflake_server, database, "acme", MODEL) == NOW1


@pytest.mark.parametrize(("exit_code", "connection", "named", "fix"), [
    pytest.param(1, {"port": "free"}, "cannot reach Snowflake destination", "check account, host",
                 id="unreachable-host"),
    pytest.param(1, {"database": "NO_SUCH_DB"}, "NO_SUCH_DB", "GRANT USAGE ON DATABASE", id="missing-database"),
    pytest.param(1, {"schema": "no_such_schema"}, "no_such_schema", "CREATE SCHEMA", id="missing-schema"),
    # a configuration error (exit 2), found before anything runs
    pytest.param(2, {"password": "${TP_TEST_SNOWFLAKE_UNSET}"}, "TP_TEST_SNOWFLAKE_UNSET", "export",
                 id="password-variable-unset"),
    pytest.param(1, {"password": None, "private_key": f"${{{PASSWORD_ENV}}}"}, "private_key",
                 "PKCS#8 PEM", id="private-key-not-a-key"),
])
def test_bad_input_is_one_line_naming_the_object_and_the_fix_and_changes_nothing(
        tmp_path, spark, pg_conn, source, database, snowflake_server, capsys, exit_code, connection, named, fix) -> None:
    from transfer_platform.cli import main

    insert(pg_conn, source, (1, BASE, "v1", None, None, None, None, None))
    config = parse_config(settings(source, block(snowflake_server, database)))
    assert transfer(spark, config, NOW1, "t1").status == "SUCCESS"
    model = config.model(MODEL)
    before = snowflake_rows(snowflake_server, database, "acme", model), watermark(snowflake_server, database,
                                                                                  "acme", MODEL)
    insert(pg_conn, source, (2, datetime.now(UTC) - timedelta(minutes=5), "v2", None, None, None, None, None))
    changed = {k: (free_port() if v == "free" else v) for k, v in connection.items()}
    bad = tmp_path / "bad.yaml"
    destination = block(snowflake_server, database, **changed)
    destination["connection"] = {k: v for k, v in destination["connection"].items() if v is not None}
    bad.write_text(yaml.safe_dump(settings(source, destination)))

    code = main(["--config", str(bad), "transfer", DESTINATION])
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert code == exit_code, output
    assert any(line.startswith("error:") and named in line and fix in line for line in captured.err.splitlines()), \
        output  # one line naming the object and the fix
    assert "Retrying" not in output  # the connector's own retries are not shown
    assert PASSWORD not in output
    assert (snowflake_rows(snowflake_server, database, "acme", model),
            watermark(snowflake_server, database, "acme", MODEL)) == before


def test_test_connection_passes_every_step_and_names_a_missing_schema(database, snowflake_server) -> None:
    def probe(schema: str) -> list:
        config = parse_config(settings("src_schema", block(snowflake_server, database, schema=schema)))
        writer = writer_for(config.destination(DESTINATION))
        try:
            return writer.probe(config.models, DESTINATION)
        finally:
            writer.close()

    checks = probe("acme")
    assert checks
    assert not [c.line() for c in checks if c.failed], [c.line() for c in checks]
    assert any("COPY INTO" in c.line() for c in checks)

    missing = probe("nowhere")
    failed = [c for c in missing if c.failed]
    assert failed, [c.line() for c in missing]
    assert 'CREATE SCHEMA "' in failed[0].line(), [c.line() for c in missing]
    assert all(PASSWORD not in c.line() for c in missing)
    with snowflake_server.connect() as conn, conn.cursor() as cursor:  # the probe's objects dropped
        cursor.execute(f'SELECT count(*) FROM "{database}".INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = \'acme\' '
                       "AND STARTSWITH(TABLE_NAME, '_tp_probe_')")
        assert cursor.fetchone()[0] == 0


def test_a_dead_holders_lock_is_taken_over_after_its_lease_and_the_old_holder_cannot_commit(
        database, snowflake_server) -> None:
    import time

    from transfer_platform.errors import TransferRunning
    from transfer_platform.tuning import Tuning

    destination = block(snowflake_server, database)
    destination["lock_lease_seconds"] = 2
    config = parse_config(settings("src_schema", destination))
    model = config.model(MODEL)
    first = writer_for(config.destination(DESTINATION))
    second = writer_for(config.destination(DESTINATION), Tuning(lock_wait_seconds=0))
    try:
        first.lock_model(model, "first")
        with pytest.raises(TransferRunning, match="is running"):
            second.lock_model(model, "second")
        deadline = time.monotonic() + 30
        while True:  # the first holder falls silent: its lease runs out
            with snowflake_server.connect() as conn, conn.cursor() as cursor:
                cursor.execute(f'SELECT expires_at < CURRENT_TIMESTAMP() FROM "{database}"."acme"."_transfer_locks" '
                               "WHERE data_model_name = %s", (MODEL,))
                if cursor.fetchone()[0]:
                    break
            assert time.monotonic() < deadline
        second.lock_model(model, "second")  # taken over
        with pytest.raises(TransferRunning, match="taken over"), first.session.transaction():
            first._lock_state(model, "state")  # the old holder's commit is refused
    finally:
        first.close()
        second.close()


def test_a_model_with_a_json_column_into_an_empty_table_is_staged_and_merged(
        snowflake_server, tmp_path, monkeypatch, caplog) -> None:
    """Not copied straight into the empty table (``copy-into``, the contract of
    contract/test_empty_table_load_contract.py): its JSON values are parsed in the merge."""
    import logging

    import pyarrow as pa

    from transfer_platform.config.loading import load_config
    from transfer_platform.core.windows import Window
    from transfer_platform.destinations.base import WindowLoad, arrow_schema

    database = f"TP_{uuid.uuid4().hex[:10].upper()}"
    snowflake_server.create_schema(database, "acme")
    monkeypatch.setenv(PASSWORD_ENV, "snow")
    start = datetime(2025, 3, 1, tzinfo=UTC)
    model_entry = {"model_name": MODEL, "source_name": "src", "source_table": "unread.events",
                   "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
                   "min_start_time_epoch": int(start.timestamp()),
                   "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                               {"name_in_source": "organization_id", "data_type": "string"},
                               {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                               {"name_in_source": "payload", "data_type": "json"}]}
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model_entry],
        "recipients": [{"name": "rcpt", "id_in_provider_system": "acme"}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "snowflake",
                          "connection": snowflake_server.connection(database, "acme", PASSWORD_ENV)}],
    }))
    config = load_config(path)
    model = config.model(MODEL)
    batch = pa.Table.from_pylist([{"id": k, "organization_id": "acme", "updated_at": start + timedelta(hours=k),
                                   "payload": p} for k, p in ((1, '{"a": 1}'), (2, '[true, "x"]'))],
                                 schema=arrow_schema(model))
    caplog.set_level(logging.INFO, logger="transfer_platform.phases")
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t1")
        writer.write_arrow(batch, WindowLoad(model, "t1", Window(start, start + timedelta(days=1)), start))
    finally:
        writer.close()
    stages = [json.loads(r.getMessage()) for r in caplog.records if r.name == "transfer_platform.phases"]
    assert [r["straight_into_target"] for r in stages if r["phase"] == "stage"] == [False]
    payloads = [json.loads(r["payload"]) for r in sorted(snowflake_rows(snowflake_server, database, "acme", model),
                                                         key=lambda r: r["id"])]
    assert payloads == [{"a": 1}, [True, "x"]]  # parsed, not kept as JSON strings
