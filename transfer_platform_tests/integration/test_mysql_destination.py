"""The MySQL / MariaDB destination against the machine's MariaDB, as a recipient's DBA sets it up:
a database of its own and a loader user holding only the grants the docs list
(``GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER ON <database>.*``), with a password.

- as that user, a backfill, an incremental transfer, schema evolution, a full refresh and the
  integrity check all work, and ``test-connection`` passes;
- a user lacking one of those grants is refused with one line naming the grant (the transfer and
  ``test-connection``), and nothing is written;
- a timestamp before the year 1000 (DATETIME holds 1000-01-01..9999-12-31) is refused at the first
  window by name, rows and watermark as before;
- decimals, microsecond timestamps, JSON, dates, booleans, doubles and text (quotes, commas,
  backslashes, newlines, ``\\N``, empty strings, NULLs, non-ASCII) arrive exactly;
- an unreachable server is named by host and port, the password nowhere in the message.

The source is the machine's PostgreSQL; rows are read back through PyMySQL, not the writer.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.transfers.integrity import check_integrity
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.destinations import mysql_reader
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.mysql import MYSQL, mysql_connect, mysql_ident, new_database
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer
from transfer_platform_tests.support.typed import EVERY_TYPE_COLUMNS as COLUMNS
from transfer_platform_tests.support.typed import create_every_type_source

pytestmark = pytest.mark.integration

TENANT = "acme"
BASE = datetime(2025, 3, 1, 1, tzinfo=UTC)
NOW1 = datetime(2025, 3, 2, 1, tzinfo=UTC)
NOW2 = NOW1 + timedelta(hours=1)
NOW3 = NOW2 + timedelta(hours=1)
PASSWORD_ENV = "TP_TEST_MYSQL_LOADER_PASSWORD"
PASSWORD = "s3cret-Pw!" + uuid.uuid4().hex[:8]
#: the loader's grants, as docs/permissions.md lists them
LOADER_GRANTS = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER")


@pytest.fixture
def source(pg_conn, pg_schema) -> str:
    return create_every_type_source(pg_conn, pg_schema)


@pytest.fixture
def database():
    with new_database("tp_my") as name:
        yield name


def make_user(database: str, grants: tuple[str, ...]) -> str:
    """A user with a password and ``grants`` on ``database`` only (dropped at the end of the test)."""
    user = f"tp_ld_{uuid.uuid4().hex[:8]}"
    conn = mysql_connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (PASSWORD,))
        if grants:
            cur.execute(f"GRANT {', '.join(grants)} ON {mysql_ident(database)}.* TO '{user}'@'%'")
    conn.close()
    return user


@pytest.fixture
def users(monkeypatch):
    made: list[str] = []
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)

    def make(database: str, grants: tuple[str, ...] = LOADER_GRANTS) -> str:
        made.append(make_user(database, grants))
        return made[-1]

    yield make
    conn = mysql_connect()
    with conn.cursor() as cur:
        for user in made:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
    conn.close()


def config_for(schema: str, database: str, user: str | None = None, **options) -> PlatformConfig:
    return parse_config(raw_config(schema, database, user, **options), now=datetime(2025, 6, 1, tzinfo=UTC))


def raw_config(schema: str, database: str, user: str | None = None, *, columns=COLUMNS, port: int | None = None,
               **settings) -> dict:
    connection = {"host": MYSQL["host"], "port": port or MYSQL["port"], "database": database,
                  "username": user or MYSQL["user"]}
    if user is not None:
        connection["password"] = f"${{{PASSWORD_ENV}}}"
    model = {"model_name": MODEL, "source_name": "src", "source_table": f"{schema}.events",
             "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
             "min_start_time_epoch": int(BASE.timestamp()) - 3600, "columns": list(columns), **settings}
    return {
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "mysql", "connection": connection}],
    }


def insert(conn, schema: str, *rows: tuple) -> None:
    """Rows (id, updated_at, payload[, amount, doc, born, flag, ratio]) of the tenant."""
    with conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{schema}".events (id, organization_id, updated_at, payload, amount, doc, '
                        "born, flag, ratio) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        [(r[0], TENANT, *r[1:], *([None] * (8 - len(r)))) for r in rows])


def expected(conn, config: PlatformConfig) -> list[dict]:
    names = [c.name_in_source for c in config.model(MODEL).columns]
    cursor = conn.execute(f"SELECT {', '.join(names)} FROM {config.model(MODEL).source_table} "
                          "WHERE organization_id = %s ORDER BY id", (TENANT,))
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def held(config: PlatformConfig, database: str) -> tuple:
    """The rows (read through PyMySQL) and the committed watermark."""
    writer = writer_for(config.destination(DESTINATION))
    try:
        watermark = writer.committed_state(config.model(MODEL)).state.watermark
    finally:
        writer.close()
    return mysql_reader(database)(config.model(MODEL)), watermark


def succeeds(spark, config, now, transfer_id, **options) -> None:
    summary = transfer(spark, config, now, transfer_id, **options)
    assert summary.status == "SUCCESS", summary.error


def test_a_loader_with_only_the_documented_grants_does_everything_a_transfer_does(
        spark, pg_conn, source, database, users) -> None:
    user = users(database)
    insert(pg_conn, source, *[(k, BASE + timedelta(minutes=k), f"v1-{k}") for k in range(1, 6)])
    config = config_for(source, database, user, delete_detection="sweep")
    writer = writer_for(config.destination(DESTINATION))
    try:
        checks = writer.probe(config.models, DESTINATION)
    finally:
        writer.close()
    assert [c for c in checks if c.failed] == [], [c.line() for c in checks]

    succeeds(spark, config, NOW1, "t1")  # backfill
    assert held(config, database) == (expected(pg_conn, config), NOW1)

    pg_conn.execute(f'UPDATE "{source}".events SET payload = %s, updated_at = %s WHERE id = 2',
                    ("v2-2", NOW1 + timedelta(minutes=1)))
    insert(pg_conn, source, (6, NOW1 + timedelta(minutes=2), "v1-6"))
    pg_conn.execute(f'ALTER TABLE "{source}".events ADD COLUMN extra bigint')
    pg_conn.execute(f'UPDATE "{source}".events SET extra = id * 10')
    evolved = config_for(source, database, user, columns=[*COLUMNS, {"name_in_source": "extra", "data_type": "integer"}])
    succeeds(spark, evolved, NOW2, "t2")  # incremental, a column added
    rows, _ = held(evolved, database)
    assert [(r["id"], r["payload"]) for r in rows] == [(r["id"], r["payload"]) for r in expected(pg_conn, evolved)]

    succeeds(spark, evolved, NOW3, "t3", full_refresh=True)  # published by RENAME TABLE
    assert held(evolved, database) == (expected(pg_conn, evolved), NOW3)

    report = check_integrity(spark, evolved, DESTINATION, evolved.model(MODEL), NOW3)
    assert (report.rows_compared, report.missing, report.stale, report.incorrect, report.orphaned) == (6, 0, 0, 0, 0)


def test_a_loader_lacking_a_grant_is_refused_naming_it_and_nothing_is_written(
        spark, pg_conn, source, database, users) -> None:
    user = users(database, tuple(g for g in LOADER_GRANTS if g != "INSERT"))
    insert(pg_conn, source, (1, BASE, "v1"))
    config = config_for(source, database, user)

    refused = transfer(spark, config, NOW1, "t1")

    assert refused.status == "ERROR"
    assert "\n" not in refused.error.strip()
    assert f"GRANT INSERT ON `{database}`.*" in refused.error, refused.error
    assert PASSWORD not in refused.error
    assert held(config_for(source, database), database)[1] is None  # no watermark
    assert mysql_reader(database)(config.model(MODEL)) in (None, [])

    writer = writer_for(config.destination(DESTINATION))
    try:
        failed = [c for c in writer.probe(config.models, DESTINATION) if c.failed]
    finally:
        writer.close()
    assert failed
    assert "GRANT INSERT" in failed[0].line(), [c.line() for c in failed]


def test_a_timestamp_before_the_year_1000_is_refused_at_the_first_window_with_nothing_written(
        spark, pg_conn, source, database) -> None:
    insert(pg_conn, source, (1, BASE, "good"))
    config = config_for(source, database)
    succeeds(spark, config, NOW1, "t1")
    before = held(config, database)
    insert(pg_conn, source, (2, NOW1 + timedelta(minutes=1), "good too"),
           (3, NOW1 + timedelta(minutes=2), "old", None, None, date(999, 12, 31)))

    refused = transfer(spark, config, NOW2, "t2")

    assert refused.status == "ERROR"
    assert "'born'" in refused.error, refused.error
    assert "1000-01-01" in refused.error, refused.error
    assert held(config, database) == before


def test_values_arrive_exactly(spark, pg_conn, source, database) -> None:
    texts = ['quote " comma , backslash \\ end', "line\nbreak\r\ttab", "\\N", "", "naïve ☃ 𝄞", "NULL", "a\\"]
    rows = [(k + 1, BASE + timedelta(minutes=k, microseconds=k * 111_111 + 1), text,
             Decimal("12345678901234567890123456789.123456789") * (-1) ** k,
             json.dumps({"k": k, "t": text, "nested": [1, 2.5, None]}), date(1000 + k, 1, 1) if k else date(9999, 12, 31),
             bool(k % 2), 1.0 / (k + 3)) for k, text in enumerate(texts)]
    rows.append((99, BASE + timedelta(hours=2), None, None, None, None, None, None))
    insert(pg_conn, source, *rows)
    config = config_for(source, database)

    succeeds(spark, config, NOW1, "t1")

    got = mysql_reader(database)(config.model(MODEL))
    want = expected(pg_conn, config)
    assert [{**r, "doc": None if r["doc"] is None else json.loads(r["doc"])} for r in got] == \
        [{**r, "doc": None if r["doc"] is None else json.loads(r["doc"])} for r in want]
    assert [r["payload"] for r in got] == [r["payload"] for r in want]
    assert got[1]["updated_at"].microsecond == 111_112


def test_an_unreachable_server_is_named_without_the_password(spark, pg_conn, source, database, users) -> None:
    import socket

    user = users(database)
    insert(pg_conn, source, (1, BASE, "v1"))
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = config_for(source, database, user, port=port)

    refused = transfer(spark, config, NOW1, "t1")

    assert refused.status == "ERROR"
    assert f"127.0.0.1:{port}" in refused.error, refused.error
    assert PASSWORD not in refused.error
    writer = writer_for(config.destination(DESTINATION))
    try:
        checks = writer.probe(config.models, DESTINATION)
    finally:
        writer.close()
    assert any(c.failed for c in checks)
    assert all(PASSWORD not in c.line() for c in checks)


def test_test_connection_dry_run_and_integrity_from_the_command_line(
        tmp_path, spark, pg_conn, source, database, users, capsys) -> None:
    import yaml

    from transfer_platform.cli import main

    user = users(database)
    now = datetime.now(UTC).replace(microsecond=0)
    pg_conn.execute(f'INSERT INTO "{source}".events (id, organization_id, updated_at, payload) VALUES '
                    "(1, %s, %s, 'a'), (2, %s, %s, 'b'), (3, 'other', %s, 'c')",
                    (TENANT, now - timedelta(hours=5), TENANT, now - timedelta(hours=2), now - timedelta(hours=2)))
    model = {"model_name": MODEL, "source_name": "src", "source_table": f"{source}.events",
             "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
             "min_start_time_epoch": int((now - timedelta(days=1)).timestamp()), "columns": COLUMNS[:4]}
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model], "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "mysql", "connection": {
            "host": MYSQL["host"], "port": MYSQL["port"], "database": database, "username": user,
            "password": f"${{{PASSWORD_ENV}}}"}}],
        "spark": {"master": "local[2]", "driver_memory": "1g"}}))
    config = ["--config", str(path)]

    assert main([*config, "test-connection", DESTINATION]) == 0
    out = capsys.readouterr().out
    assert "load rows with LOAD DATA LOCAL INFILE" in out
    assert "FAIL" not in out

    assert main([*config, "transfer", DESTINATION, "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["status"], plan["models"][0]["rows"]) == ("PLANNED", 2)
    assert mysql_reader(database)(parse_config(yaml.safe_load(path.read_text())).model(MODEL)) is None

    assert main([*config, "transfer", DESTINATION]) == 0
    capsys.readouterr()
    assert main([*config, "integrity", DESTINATION]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["status"], report["models"][0]["rows_compared"]) == ("PASSED", 2)

    conn = mysql_connect(database)  # a row the recipient's table lost: the integrity check finds it
    with conn.cursor() as cur:
        cur.execute(f"DELETE FROM {mysql_ident(MODEL)} WHERE id = 1")
    conn.close()
    assert main([*config, "integrity", DESTINATION]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "FAILED"
    assert PASSWORD not in path.read_text()


def test_a_full_refresh_waits_a_bounded_time_for_readers_then_publishes_on_the_next_run(
        spark, pg_conn, source, database) -> None:
    from transfer_platform.tuning import Tuning

    insert(pg_conn, source, *[(k, BASE + timedelta(minutes=k), f"v1-{k}") for k in range(1, 4)])
    config = config_for(source, database)
    succeeds(spark, config, NOW1, "t1")
    pg_conn.execute(f'DELETE FROM "{source}".events WHERE id = 2')  # only a refresh removes it
    before = held(config, database)
    reader = mysql_connect(database)  # a recipient's open transaction that has read the table
    try:
        with reader.cursor() as cur:
            cur.execute("START TRANSACTION")
            cur.execute(f"SELECT count(*) FROM {mysql_ident(MODEL)}")
        refused = transfer(spark, config, NOW2, "r1", full_refresh=True, tuning=Tuning(lock_wait_seconds=1))
        assert refused.status == "ERROR"
        assert "was not published" in refused.error, refused.error
        reader.rollback()
        assert held(config, database) == before
    finally:
        reader.close()

    succeeds(spark, config, NOW2, "r2")  # carries the refresh built aside on, and publishes it
    assert held(config, database) == (expected(pg_conn, config), NOW2)


def test_a_publish_that_died_after_its_rename_is_finished_by_the_next_transfer(
        spark, pg_conn, source, database, monkeypatch) -> None:
    from transfer_platform.destinations.mysql.writer import MysqlWriter

    insert(pg_conn, source, *[(k, BASE + timedelta(minutes=k), f"v1-{k}") for k in range(1, 4)])
    config = config_for(source, database)
    succeeds(spark, config, NOW1, "t1")
    pg_conn.execute(f'DELETE FROM "{source}".events WHERE id = 2')
    recorded = MysqlWriter._record_state

    def killed(self, model, state, transfer_id):  # the process dies right after RENAME TABLE
        raise RuntimeError("killed after the rename")

    monkeypatch.setattr(MysqlWriter, "_record_state", killed)
    with pytest.raises(RuntimeError, match="killed after the rename"):
        transfer(spark, config, NOW2, "r1", full_refresh=True)
    monkeypatch.setattr(MysqlWriter, "_record_state", recorded)

    # the refresh's table is live, and its state is what the next transfer starts from
    assert held(config, database) == (expected(pg_conn, config), NOW2)
    insert(pg_conn, source, (4, NOW2 + timedelta(minutes=1), "new"))
    succeeds(spark, config, NOW3, "t2")
    assert held(config, database) == (expected(pg_conn, config), NOW3)
    conn = mysql_connect(database)
    with conn.cursor() as cur:
        cur.execute("SELECT published_state, refresh_state FROM _transfer_status")
        assert cur.fetchall() == ((None, None),)
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (database,))
        assert sorted(r[0] for r in cur.fetchall()) == ["_transfer_status", MODEL]
    conn.close()


def test_validate_refuses_a_schema_and_two_destinations_in_one_database() -> None:
    from transfer_platform.errors import ConfigError

    raw = raw_config("s", "db_a")
    raw["destinations"][0]["connection"]["schema"] = "x"
    with pytest.raises(ConfigError, match=r"connection\.schema.*has no effect on a mysql destination"):
        parse_config(raw, now=NOW1)
    raw = raw_config("s", "db_a")
    raw["recipients"].append({"name": "r2", "id_in_provider_system": "other"})
    raw["destinations"].append({**raw["destinations"][0], "name": "second", "recipient": "r2",
                                "connection": {**raw["destinations"][0]["connection"], "host": "localhost"}})
    with pytest.raises(ConfigError, match="second"):
        parse_config(raw, now=NOW1)


def test_a_string_key_is_held_up_to_255_characters_and_a_longer_one_is_refused(
        spark, pg_conn, pg_schema, database) -> None:
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (code text, organization_id text, updated_at timestamptz, '
                    "note text)")
    columns = [{"name_in_source": "code", "data_type": "string", "is_primary_key": True},
               {"name_in_source": "organization_id", "data_type": "string"},
               {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
               {"name_in_source": "note", "data_type": "string"}]
    keys = ["é" * 255, "Acme", "acme"]  # at the limit; two keys that differ only by case
    with pg_conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{pg_schema}".events VALUES (%s, %s, %s, %s)',
                        [(k, TENANT, BASE + timedelta(minutes=n), f"n{n}") for n, k in enumerate(keys)])
    config = config_for(pg_schema, database, columns=columns)
    succeeds(spark, config, NOW1, "t1")
    before = held(config, database)
    assert sorted(r["code"] for r in before[0]) == sorted(keys)

    pg_conn.execute(f'INSERT INTO "{pg_schema}".events VALUES (%s, %s, %s, %s)',
                    ("x" * 256, TENANT, NOW1 + timedelta(minutes=1), "too long"))
    refused = transfer(spark, config, NOW2, "t2")

    assert refused.status == "ERROR"
    assert "longer than 255 characters" in refused.error, refused.error
    assert held(config, database) == before


def test_a_value_the_server_would_bend_is_refused_with_nothing_written(spark, pg_conn, source, database) -> None:
    insert(pg_conn, source, (1, BASE, "good"))
    config = config_for(source, database)
    succeeds(spark, config, NOW1, "t1")
    before = held(config, database)
    insert(pg_conn, source, (2, NOW1 + timedelta(minutes=1), "nan", None, None, None, None, float("nan")))

    refused = transfer(spark, config, NOW2, "t2")  # LOAD DATA LOCAL would store 0 with a warning

    assert refused.status == "ERROR"
    assert "LOAD DATA into the staging table failed" in refused.error, refused.error
    assert held(config, database) == before


# -- a full refresh whose first window died between its rename and its commit ---------------------
# (the create-and-rename empty-table load renames outside the window's transaction: MySQL's DDL
# commits; the contract of every empty-table load is contract/test_empty_table_load_contract.py)

FRESH_COLUMNS = [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                 {"name_in_source": "organization_id", "data_type": "string"},
                 {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                 {"name_in_source": "payload", "data_type": "string"}]


def fresh_config(database: str) -> PlatformConfig:
    """A MySQL destination in ``database``, its windows written through the writer."""
    model = {"model_name": MODEL, "source_name": "src", "source_table": "unread.events",
             "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
             "min_start_time_epoch": int(BASE.timestamp()), "columns": FRESH_COLUMNS}
    connection = {"host": MYSQL["host"], "port": MYSQL["port"], "database": database, "username": MYSQL["user"]}
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "mysql", "connection": connection}],
    }, now=datetime(2025, 6, 1, tzinfo=UTC))


def fresh_rows(model, ids, payload: str):
    import pyarrow as pa

    from transfer_platform.destinations.base import arrow_schema

    return pa.Table.from_pylist([{"id": k, "organization_id": TENANT, "updated_at": BASE + timedelta(seconds=k),
                                  "payload": f"{payload}-{k}"} for k in ids], schema=arrow_schema(model))


def first_window(model, transfer_id: str, *, into_refresh: bool = False):
    from transfer_platform.core.windows import Window
    from transfer_platform.destinations.base import WindowLoad

    return WindowLoad(model, transfer_id, Window(BASE, BASE + timedelta(days=1)), BASE, into_refresh=into_refresh)


def fetched(database: str, statement: str) -> list[tuple]:
    conn = mysql_connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall())
    finally:
        conn.close()


def test_a_refresh_whose_first_window_died_after_its_rename_is_emptied_by_the_next(database, monkeypatch) -> None:
    from transfer_platform.destinations.mysql.writer import MysqlWriter

    config = fresh_config(database)
    model = config.model(MODEL)
    writer = writer_for(config.destination(DESTINATION))
    try:
        writer.prepare(model, "t0")
        writer.write_arrow(fresh_rows(model, [1, 2], "old"), first_window(model, "t0"))
        writer.prepare(model, "r1", full_refresh=True)
        recorded = MysqlWriter._set_state

        def killed(self, model, column, state):  # the process dies between the rename and the commit
            if column == "refresh_state" and state is not None and state.watermark is not None:
                raise RuntimeError("killed after the rename")
            recorded(self, model, column, state)

        monkeypatch.setattr(MysqlWriter, "_set_state", killed)
        with pytest.raises(RuntimeError, match="killed after the rename"):
            writer.write_arrow(fresh_rows(model, [3, 4], "lost"), first_window(model, "r1", into_refresh=True))
        monkeypatch.setattr(MysqlWriter, "_set_state", recorded)
    finally:
        writer.close()
    aside = [r[0] for r in fetched(database, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE "
                                             f"TABLE_SCHEMA = '{database}' AND TABLE_NAME LIKE '\\_tp\\_refresh\\_%'")]
    assert aside
    assert fetched(database, f"SELECT count(*) FROM {mysql_ident(aside[0])}")[0][0] == 2

    writer = writer_for(config.destination(DESTINATION))
    try:
        prepared = writer.prepare(model, "r2")  # carries the refresh on, from no window
        assert prepared.refresh is not None
        assert prepared.refresh.watermark is None
        assert fetched(database, f"SELECT count(*) FROM {mysql_ident(aside[0])}")[0][0] == 0  # emptied
        writer.write_arrow(fresh_rows(model, [3], "new"), first_window(model, "r2", into_refresh=True))
        writer.publish_refresh(model, "r2")
    finally:
        writer.close()
    assert fetched(database, f"SELECT id, payload FROM {mysql_ident(MODEL)} ORDER BY id") == [(3, "new-3")]
