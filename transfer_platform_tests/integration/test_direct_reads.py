"""Small windows of a PostgreSQL source read by its driver, without a Spark job
(``transfer_platform/sources/direct.py``): a recipient receives exactly what the read through Spark
delivers, value for value, for every type read that way; a column that needs a conversion keeps
the whole model on Spark."""

from __future__ import annotations

import json
import logging
import math
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from transfer_platform.runtime.spark_session import LazySession
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.support.config import config_for
from transfer_platform_tests.support.events import MODEL, epoch
from transfer_platform_tests.support.postgres import PG, pg_connection_config
from transfer_platform_tests.support.tcp_proxy import tcp_proxy
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT = "acme"
NOW = datetime(2025, 3, 10, 12, tzinfo=UTC)
START = datetime(2025, 3, 1, tzinfo=UTC)
#: a source column of each type the driver reads as it is, and the data_type reading it unchanged
COLUMNS = [("small", "smallint", "integer"), ("med", "integer", "integer"), ("big", "bigint", "integer"),
           ("name", "text", "string"), ("label", "varchar(20)", "string"), ("score", "double precision", "float"),
           ("flag", "boolean", "boolean"), ("day", "date", "date"), ("seen_at", "timestamptz", "timestamp")]
VALUES = [  # (small, med, big, name, label, score, flag, day, seen_at), one row each
    (-32768, -2147483648, -9223372036854775808, "", "x", -1.5e308, False, date(1, 1, 1),
     datetime(1, 1, 1, tzinfo=UTC)),
    (32767, 2147483647, 9223372036854775807, "ünïcødé ✓ 'quote' \"dq\" \\ back", "y" * 20, 1e-300, True,
     date(9999, 12, 31), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    (0, 0, 0, "line\nbreak\ttab", "z", float("inf"), True, date(1970, 1, 1),
     datetime(1970, 1, 1, tzinfo=UTC)),
    (None, None, None, None, None, None, None, None, None),
    (7, 8, 9, "nan", "w", float("nan"), False, date(2024, 2, 29),
     datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=UTC)),
    (1, 2, 3, "neg inf", "v", float("-inf"), None, date(2000, 1, 1),
     datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC)),
]


def make_source(pg_conn, schema: str, extra: str = "") -> None:
    columns = ", ".join(f"{name} {sql_type}" for name, sql_type, _ in COLUMNS)
    pg_conn.execute(f'CREATE TABLE "{schema}".things (id bigint PRIMARY KEY, organization_id text NOT NULL, '
                    f"updated_at timestamptz NOT NULL, {columns}{extra})")
    names = ", ".join(name for name, _, _ in COLUMNS)
    for i, values in enumerate(VALUES):
        for tenant in (TENANT, "other"):  # another tenant's rows, never delivered
            key = i if tenant == TENANT else 1000 + i
            pg_conn.execute(
                f'INSERT INTO "{schema}".things (id, organization_id, updated_at, {names}) VALUES '
                f"(%s, %s, %s, {', '.join(['%s'] * len(COLUMNS))})",
                (key, tenant, START + timedelta(days=i % 4, hours=i, microseconds=i), *values))


def model(schema: str, extra: list[dict] = ()) -> dict:
    return {
        "model_name": MODEL, "source_name": "src", "source_table": f"{schema}.things",
        "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
        "min_start_time_epoch": epoch(START),
        "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                    {"name_in_source": "organization_id", "data_type": "string"},
                    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                    *({"name_in_source": name, "data_type": data_type} for name, _, data_type in COLUMNS),
                    *extra],
    }


def delivered(pg_conn, schema: str, columns: list[str]) -> list[tuple]:
    rows = pg_conn.execute(f'SELECT {", ".join(columns)} FROM "{schema}"."{MODEL}" ORDER BY id').fetchall()
    return [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row) for row in rows]


def reads_logged(caplog) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith('{"phase": "read"')]


def run(spark, pg_conn, source_schema: str, dst_schema: str, tuning: Tuning, caplog, extra: list[dict] = (),
        source_port: int | None = None, now: datetime = NOW):
    connection = {**pg_connection_config(), **({"port": source_port} if source_port else {})}
    config = config_for({"vendor": "postgres", "connection": connection}, model(source_schema, extra),
                        tenant=TENANT, dst_schema=dst_schema)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="transfer_platform"):
        summary = transfer(spark, config, now, tuning=tuning)
    assert summary.status == "SUCCESS", summary.error
    return reads_logged(caplog)


def test_every_type_read_directly_arrives_as_the_read_through_spark_delivers_it(
        spark, pg_conn, pg_schema, new_schema, caplog):
    make_source(pg_conn, pg_schema)
    direct, streamed, through_spark = new_schema(), new_schema(), new_schema()
    # into Arrow (a window read alone would be streamed into the staging table, as the next one is)
    reads = run(spark, pg_conn, pg_schema, direct, Tuning(relay_windows=False), caplog)
    assert reads
    assert all(r.get("direct") is True and "streamed" not in r for r in reads)
    reads = run(spark, pg_conn, pg_schema, streamed, DEFAULT, caplog)
    assert reads
    assert all(r.get("direct") is True for r in reads)
    reads = run(spark, pg_conn, pg_schema, through_spark, Tuning(direct_reads=False), caplog)
    assert reads
    assert not any("direct" in r for r in reads)

    columns = ["id", "organization_id", "updated_at", *(name for name, _, _ in COLUMNS)]
    expected = delivered(pg_conn, through_spark, columns)
    assert len(expected) == len(VALUES)
    assert delivered(pg_conn, direct, columns) == expected
    assert delivered(pg_conn, streamed, columns) == expected
    source = pg_conn.execute(f'SELECT {", ".join(columns)} FROM "{pg_schema}".things WHERE organization_id = %s '
                             "ORDER BY id", (TENANT,)).fetchall()
    assert expected == [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)
                        for row in source]


def test_a_column_that_needs_a_conversion_keeps_the_model_on_spark(spark, pg_conn, pg_schema, new_schema, caplog):
    make_source(pg_conn, pg_schema, extra=", amount numeric(12,4), code integer")
    pg_conn.execute(f'UPDATE "{pg_schema}".things SET amount = id * 1.25, code = id')
    extra = [{"name_in_source": "amount", "data_type": "decimal"}, {"name_in_source": "code", "data_type": "string"}]
    dst = new_schema()
    reads = run(spark, pg_conn, pg_schema, dst, DEFAULT, caplog, extra)
    assert reads
    assert not any("direct" in r for r in reads)
    rows = pg_conn.execute(f'SELECT id, amount, code FROM "{dst}"."{MODEL}" ORDER BY id').fetchall()
    assert rows == [(i, Decimal(i) * Decimal("1.25"), str(i)) for i in range(len(VALUES))]


def test_a_transfer_read_directly_starts_no_spark_session(spark, pg_conn, pg_schema, new_schema, caplog):
    """A Dagster run hands its transfer a session started on first use (``LazySession``): when
    every read is direct, no Spark session is started (nor asked of a Connect server); a model
    read through Spark starts it."""
    make_source(pg_conn, pg_schema, extra=", amount numeric(12,4)")
    starts = []

    def start():
        starts.append(1)
        return spark

    lazy, dst = LazySession(start), new_schema()
    reads = run(lazy, pg_conn, pg_schema, dst, DEFAULT, caplog)
    assert reads
    assert all(r.get("direct") is True for r in reads)
    assert starts == []
    assert lazy.started is None
    assert [row[0] for row in delivered(pg_conn, dst, ["id"])] == list(range(len(VALUES)))

    lazy = LazySession(start)
    reads = run(lazy, pg_conn, pg_schema, new_schema(), DEFAULT, caplog,
                [{"name_in_source": "amount", "data_type": "decimal"}])
    assert reads
    assert not any("direct" in r for r in reads)
    assert starts == [1]
    assert lazy.started is spark


def test_a_model_read_directly_opens_one_connection_to_the_source(pg_conn, pg_schema, new_schema, caplog):
    """The read's proof, the windows' row counts and their rows share one connection to the source
    (each a new PostgreSQL backend otherwise, 3-80 ms on 2 cores): counted at a TCP proxy in front
    of the source, for a backfill of several windows and then an incremental."""
    make_source(pg_conn, pg_schema)
    dst = new_schema()
    lazy = LazySession(lambda: pytest.fail("a transfer read directly started Spark"))
    with tcp_proxy(PG["host"], PG["port"]) as proxy:
        reads = run(lazy, pg_conn, pg_schema, dst, DEFAULT, caplog, source_port=proxy.port)
        assert reads
        assert all(r.get("direct") is True for r in reads)
        assert proxy.connections == 1
        pg_conn.execute(f'UPDATE "{pg_schema}".things SET updated_at = %s, small = 1 '
                        "WHERE id = 2", (NOW + timedelta(hours=1),))
        reads = run(lazy, pg_conn, pg_schema, dst, DEFAULT, caplog, source_port=proxy.port, now=NOW + timedelta(days=1))
        assert reads
        assert all(r.get("direct") is True for r in reads)
        assert proxy.connections == 2
    assert delivered(pg_conn, dst, ["id", "small"])[2] == (2, 1)


def test_a_streamed_window_whose_source_fails_is_read_again_and_said(
        spark, pg_conn, pg_schema, new_schema, caplog, monkeypatch):
    """The source's connection reset as the incremental's window starts streaming: nothing of the
    stream is committed, the window is read again (a new connection) and delivered whole, and a
    warning names the failure (the second read costs a connection and time)."""
    from transfer_platform.sources import relay

    make_source(pg_conn, pg_schema)
    dst = new_schema()
    with tcp_proxy(PG["host"], PG["port"]) as proxy:
        run(spark, pg_conn, pg_schema, dst, DEFAULT, caplog, source_port=proxy.port)
        pg_conn.execute(f'UPDATE "{pg_schema}".things SET updated_at = %s, small = 1 '
                        "WHERE id = 2", (NOW + timedelta(hours=1),))
        copied_out = relay.copied_out

        def reset_first(conn, statement, read_timeout):
            if not proxy.fired.is_set():
                proxy.fault("reset")  # every open connection: the one the window streams on
            yield from copied_out(conn, statement, read_timeout)

        monkeypatch.setattr(relay, "copied_out", reset_first)
        run(spark, pg_conn, pg_schema, dst, DEFAULT, caplog, source_port=proxy.port, now=NOW + timedelta(days=1))
        assert proxy.fired.is_set()
    lines = [(r.levelno, json.loads(r.getMessage())) for r in caplog.records if r.getMessage().startswith('{"phase"')]
    said = [line for level, line in lines if line["phase"] == "stream" and level == logging.WARNING]
    assert len(said) == 1
    assert said[0]["read_again"] is True
    assert "streaming the window from PostgreSQL source 'src' failed: " in said[0]["failed"]
    loads = [line for _, line in lines if line["phase"] == "load" and line["rows_transferred"]]
    assert len(loads) == 1
    assert "relayed" not in loads[0]  # read again as any window, then loaded
    assert loads[0]["read_from"] == said[0]["read_from"]
    assert delivered(pg_conn, dst, ["id", "small"]) == [(i, VALUES[i][0] if i != 2 else 1) for i in range(len(VALUES))]
