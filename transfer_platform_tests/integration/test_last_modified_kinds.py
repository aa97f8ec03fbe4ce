"""Last-modified columns of any common type, end to end: PostgreSQL, MySQL and the lake as sources.

Each kind (the cursor seed's ``datetime_format``/``cursor_granularity``): an epoch in milliseconds
(and seconds), a ``date``, and text in a declared strftime format (and the ISO-8601 default). For
each: a backfill over daily windows, then rows that change and rows that commit late, the next
transfer, and the destination must hold every tenant row with the value the source holds (an
integer stays an integer, a date a date, text the same text); the metrics follow the seeds
(``delta_rows_transferred``: strictly newer than the last delivered value) and the integrity check
passes. The read is pushed down in the column's own type (its index is used), and bad input
(a value the format does not write, a kind that does not match the column) stops the transfer
with a clear error, leaving the destination and its watermark as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.core.last_modified import LastModified
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.core.windows import ReadBounds, Window
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform.transfers.integrity import check_integrity
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.events import MODEL
from transfer_platform_tests.support.mysql import mysql_connection_config
from transfer_platform_tests.support.postgres import pg_connection_config, schema_exists, status_row
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT, OTHER = "o'kind", "other"
MIN_START = datetime(2024, 2, 28, tzinfo=UTC)
NOW1 = datetime(2024, 3, 3, 12, tzinfo=UTC)
NOW2 = NOW1 + timedelta(hours=3)


@dataclass(frozen=True)
class Kind:
    id: str
    column: dict  # the model's last-modified column (name ``lm``)
    pg_type: str
    mysql_type: str
    arrow_type: pa.DataType

    @property
    def kind(self) -> LastModified:
        return LastModified(self.column.get("last_modified_format") or
                            {"date": "date", "string": "text"}[self.column["data_type"]],
                            self.column.get("datetime_format"))

    def value(self, moment: datetime):
        """What the provider's column holds for a row changed at ``moment`` (the column's own
        precision: a date holds the day, epoch seconds the second...)."""
        kind = self.kind
        floor = kind.ceil(moment) if kind.ceil(moment) == moment else kind.ceil(moment) - kind.grain
        return kind.value(floor)


KINDS = [
    Kind("epoch-ms", {"data_type": "integer", "last_modified_format": "epoch_ms"}, "bigint", "BIGINT",
         pa.int64()),
    Kind("epoch-s", {"data_type": "integer", "last_modified_format": "epoch_s"}, "bigint", "BIGINT",
         pa.int64()),
    Kind("date", {"data_type": "date"}, "date", "DATE", pa.date32()),
    Kind("text", {"data_type": "string", "datetime_format": "%Y-%m-%d %H:%M:%S"}, "text",
         "VARCHAR(40)", pa.string()),
    Kind("text-iso-default", {"data_type": "string"}, "text", "VARCHAR(40)", pa.string()),
]
BY_ID = {k.id: k for k in KINDS}


def model(kind: Kind, source_table: str | None, *, source_query: str | None = None) -> dict:
    entry = {
        "model_name": MODEL, "source_name": "src", "organization_column": "organization_id",
        "max_transfer_time_window_seconds": 86_400, "min_start_time_epoch": int(MIN_START.timestamp()),
        "columns": [
            {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
            {"name_in_source": "organization_id", "data_type": "string"},
            {"name_in_source": "lm", "is_last_modified": True, **kind.column},
            {"name_in_source": "payload", "data_type": "string"},
        ],
    }
    if source_query:
        entry["source_query"] = source_query
    else:
        entry["source_table"] = source_table
    return entry


def config(source: dict, kind: Kind, dst_schema: str, **model_args) -> PlatformConfig:
    return parse_config({
        "sources": [{"name": "src", **source}],
        "models": [model(kind, **model_args)],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": pg_connection_config(dst_schema)}],
    }, now=datetime(2024, 6, 1, tzinfo=UTC))


# -- the three sources, behind one small interface ------------------------------------------------


class PgSource:
    def __init__(self, conn, schema: str, kind: Kind) -> None:
        self.conn, self.schema, self.kind = conn, schema, kind
        conn.execute(f'CREATE TABLE "{schema}".events (id bigint PRIMARY KEY, organization_id text, '
                     f"lm {kind.pg_type}, payload text)")
        conn.execute(f'CREATE INDEX ON "{schema}".events (organization_id, lm)')

    def block(self) -> dict:
        return {"vendor": "postgres", "connection": pg_connection_config()}

    table = property(lambda self: f"{self.schema}.events")

    def write(self, rows: list[tuple]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(f'INSERT INTO "{self.schema}".events VALUES (%s, %s, %s, %s) ON CONFLICT (id) '
                            "DO UPDATE SET lm = EXCLUDED.lm, payload = EXCLUDED.payload", rows)

    def rows(self, tenant: str) -> list[tuple]:
        return sorted(self.conn.execute(f'SELECT id, organization_id, lm, payload FROM "{self.schema}".events '
                                        "WHERE organization_id = %s", (tenant,)).fetchall())


class MysqlSource:
    def __init__(self, conn, database: str, kind: Kind) -> None:
        self.conn, self.database, self.kind = conn, database, kind
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE events (id BIGINT PRIMARY KEY, organization_id VARCHAR(100), "
                        f"lm {kind.mysql_type}, payload TEXT, KEY (organization_id, lm)) CHARACTER SET utf8mb4")

    def block(self) -> dict:
        return {"vendor": "mysql", "connection": mysql_connection_config(self.database)}

    table = property(lambda self: "events")

    def write(self, rows: list[tuple]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany("INSERT INTO events VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE "
                            "lm = VALUES(lm), payload = VALUES(payload)", rows)

    def rows(self, tenant: str) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT id, organization_id, lm, payload FROM events WHERE "
                        "CAST(organization_id AS BINARY) = CAST(%s AS BINARY)", (tenant,))
            return sorted(tuple(r) for r in cur.fetchall())


class LakeSource:
    def __init__(self, root: Path, kind: Kind) -> None:
        self.root, self.kind, self.all = root, kind, {}
        (root / "events").mkdir(parents=True)

    def block(self) -> dict:
        return {"vendor": "parquet", "connection": {"path": str(self.root)}, "lookback_window": 30}

    table = property(lambda self: "events")

    def write(self, rows: list[tuple]) -> None:
        self.all.update({r[0]: r for r in rows})
        schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("lm", self.kind.arrow_type),
                            ("payload", pa.string())])
        table = pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in self.all.values()],
                                     schema=schema)
        for old in (self.root / "events").glob("*.parquet"):
            old.unlink()
        pq.write_table(table, self.root / "events" / "part-0.parquet")

    def rows(self, tenant: str) -> list[tuple]:
        return sorted(r for r in self.all.values() if r[1] == tenant)


@pytest.fixture(params=["postgres", "mysql", "lake"])
def vendor(request) -> str:
    return request.param


def make_source(vendor: str, kind: Kind, request, tmp_path: Path):
    if vendor == "postgres":
        return PgSource(request.getfixturevalue("pg_conn"), request.getfixturevalue("pg_schema"), kind)
    if vendor == "mysql":
        return MysqlSource(request.getfixturevalue("mysql_conn"), request.getfixturevalue("mysql_database"), kind)
    return LakeSource(tmp_path / "lake", kind)


def delivered(pg_conn, dst_schema: str) -> list[tuple]:
    return sorted(pg_conn.execute(f'SELECT id, organization_id, lm, payload FROM "{dst_schema}".events').fetchall())


# -- every kind, every source ------------------------------------------------------------------


@pytest.mark.parametrize("kind", [BY_ID["epoch-ms"], BY_ID["date"], BY_ID["text"]], ids=lambda k: k.id)
def test_every_kind_moves_its_rows_as_the_source_holds_them(spark, pg_conn, dst_schema, tmp_path, request,
                                                          vendor, kind):
    source = make_source(vendor, kind, request, tmp_path)
    times = [datetime(2024, 2, 28, 1, 2, 3, 456_000, tzinfo=UTC), datetime(2024, 3, 1, 9, tzinfo=UTC),
             datetime(2024, 3, 2, 23, 59, 59, tzinfo=UTC), datetime(2024, 3, 3, 8, 30, 15, 250_000, tzinfo=UTC)]
    rows = [(i + 1, tenant, kind.value(t), f"{tenant} v1 {i}")
            for i, t in enumerate(times) for tenant in (TENANT, OTHER) if (i + 1) % 2 or tenant == TENANT]
    rows = [(k, tenant, v, p) for k, (_, tenant, v, p) in enumerate(rows, start=1)]
    source.write(rows)
    cfg = config(source.block(), kind, dst_schema, source_table=source.table)

    first = transfer(spark, cfg, NOW1, "t1")
    assert first.status == "SUCCESS", first.error
    assert delivered(pg_conn, dst_schema) == source.rows(TENANT)  # values as the source holds them
    last = max(kind.kind.moment(r[2]) for r in source.rows(TENANT))
    assert first.state.high_watermark == last

    # an update and a new row later the same day as the last one (a date cannot tell them apart
    # from it: its lookback re-reads the whole last day), and a row of another tenant
    changed = [(rows[0][0], TENANT, kind.value(NOW1 + timedelta(minutes=5)), "updated"),
               (100, TENANT, kind.value(last + timedelta(seconds=1)), "later, the same day"),
               (101, OTHER, kind.value(NOW1 + timedelta(minutes=5)), "other")]
    source.write(changed)
    second = transfer(spark, cfg, NOW2, "t2")
    assert second.status == "SUCCESS", second.error
    assert delivered(pg_conn, dst_schema) == source.rows(TENANT)
    newer = [r for r in source.rows(TENANT) if kind.kind.moment(r[2]) > last]
    assert second.delta_rows_transferred == len(newer)
    assert second.state.high_watermark == max(kind.kind.moment(r[2]) for r in source.rows(TENANT))
    assert status_row(pg_conn, dst_schema)["watermark"] == NOW2

    report = check_integrity(spark, cfg, DESTINATION, cfg.model(MODEL), NOW2 + timedelta(hours=1))
    assert report.passed, report
    assert report.rows_compared == len(source.rows(TENANT))


@pytest.mark.parametrize("kind", [BY_ID["epoch-s"], BY_ID["text-iso-default"]], ids=lambda k: k.id)
def test_more_kinds_through_a_source_query(spark, pg_conn, pg_schema, dst_schema, tmp_path, request, kind):
    """The predicates go outside a source_query, in the column's own type, there too."""
    source = PgSource(pg_conn, pg_schema, kind)
    rows = [(1, TENANT, kind.value(datetime(2024, 3, 1, 1, tzinfo=UTC)), "a"),
            (2, TENANT, kind.value(datetime(2024, 3, 2, 2, 0, 0, 123_456, tzinfo=UTC)), "b"),
            (3, OTHER, kind.value(datetime(2024, 3, 2, 3, tzinfo=UTC)), "c")]
    source.write(rows)
    query = f'SELECT id, organization_id, lm, upper(payload) AS payload FROM "{pg_schema}".events'
    cfg = config(source.block(), kind, dst_schema, source_table=None, source_query=query)

    assert transfer(spark, cfg, NOW1, "t1").status == "SUCCESS"
    source.write([(4, TENANT, kind.value(datetime(2024, 3, 2, 2, 0, 0, 123_456, tzinfo=UTC)), "late, same time")])
    second = transfer(spark, cfg, NOW2, "t2")
    assert second.status == "SUCCESS", second.error
    expected = [(k, t, v, p.upper()) for k, t, v, p in source.rows(TENANT)]
    assert delivered(pg_conn, dst_schema) == expected
    assert (second.rows_transferred, second.delta_rows_transferred) == (2, 0)  # b again, and the late one


def test_an_epoch_ms_read_uses_the_sources_index(spark, pg_conn, pg_schema):
    """The bound is a bigint literal, so PostgreSQL can use the (organization_id, lm) index; a
    ``to_timestamp(lm)`` comparison could not, however hard the planner is pushed."""
    kind = BY_ID["epoch-ms"]
    source = PgSource(pg_conn, pg_schema, kind)
    source.write([(i, TENANT, i * 1000, "x") for i in range(1, 200)])
    cfg = config(source.block(), kind, "unused", source_table=source.table)
    reader = reader_for(cfg.source("src"))
    window = Window(EPOCH + timedelta(seconds=10), EPOCH + timedelta(seconds=20))
    query = reader.query_for(ReadRequest(cfg.model(MODEL), TENANT, ReadBounds(window.start, window.end, window)))
    assert '"lm" >= 10000 AND "lm" < 20000' in query
    with pg_conn.transaction():
        pg_conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in pg_conn.execute(f"EXPLAIN {query}").fetchall())
    assert "Index" in plan, plan
    assert "events_organization_id_lm_idx" in plan, plan


# -- bad input ---------------------------------------------------------------------------------


def test_a_value_the_format_does_not_write_stops_the_transfer_and_changes_nothing(
        spark, pg_conn, pg_schema, dst_schema):
    kind = BY_ID["text"]
    source = PgSource(pg_conn, pg_schema, kind)
    source.write([(1, TENANT, "2024-03-01 10:00:00", "ok")])
    cfg = config(source.block(), kind, dst_schema, source_table=source.table)
    assert transfer(spark, cfg, NOW1, "t1").status == "SUCCESS"
    before_rows, before_status = delivered(pg_conn, dst_schema), status_row(pg_conn, dst_schema)

    # no seconds: it sorts inside the window, is read, and does not parse (a value that sorts
    # outside every window is never read; the integrity check reports it as missing)
    source.write([(2, TENANT, "2024-03-03 13:00:00", "fine"), (3, TENANT, "2024-03-03 13:05", "bad")])
    failed = transfer(spark, cfg, NOW2, "t2")

    assert failed.status == "ERROR"
    for words in ("model 'events'", "destination 'dst'", "'2024-03-03 13:05'", "id=3", "%Y-%m-%d %H:%M:%S"):
        assert words in failed.error, failed.error
    assert delivered(pg_conn, dst_schema) == before_rows
    assert status_row(pg_conn, dst_schema) == before_status


def test_a_value_with_another_offset_is_refused_not_misordered(spark, pg_conn, pg_schema, dst_schema):
    """Text is compared as text: a value written in another zone would sort in the wrong place."""
    kind = BY_ID["text-iso-default"]
    source = PgSource(pg_conn, pg_schema, kind)
    source.write([(1, TENANT, "2024-03-01T10:00:00.000000+0200", "not UTC")])
    failed = transfer(spark, config(source.block(), kind, dst_schema, source_table=source.table), NOW1, "t1")
    assert failed.status == "ERROR"
    assert "2024-03-01T10:00:00.000000+0200" in failed.error
    assert "UTC" in failed.error


@pytest.mark.parametrize(
    ("pg_type", "declared", "found", "write"),
    [
        pytest.param("date", {"data_type": "timestamp"}, "date", "data_type: date", id="date-declared-timestamp"),
        pytest.param("bigint", {"data_type": "timestamp"}, "bigint", "last_modified_format: epoch_s, epoch_ms",
                     id="epoch-declared-timestamp"),
        pytest.param("timestamptz", {"data_type": "integer", "last_modified_format": "epoch_ms"}, "timestamp",
                     "data_type: timestamp", id="timestamp-declared-epoch"),
        pytest.param("timestamptz", {"data_type": "date"}, "timestamp", "data_type: timestamp",
                     id="timestamp-declared-date"),
    ],
)
def test_a_column_of_another_kind_than_declared_is_named_on_the_first_read(
        spark, pg_conn, pg_schema, dst_schema, pg_type, declared, found, write):
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint PRIMARY KEY, organization_id text, '
                    f"lm {pg_type}, payload text)")
    kind = Kind("declared", declared, pg_type, "", pa.null())
    cfg = config({"vendor": "postgres", "connection": pg_connection_config()}, kind, dst_schema,
                 source_table=f"{pg_schema}.events")
    failed = transfer(spark, cfg, NOW1, "t1")
    assert failed.status == "ERROR"
    assert f"is {found} there" in failed.error, failed.error
    assert write in failed.error
    assert failed.error_type == "ConfigError"
    assert not schema_exists(pg_conn, dst_schema)  # refused before the destination was touched
