"""Helpers for the integration tests: source tables, configurations, one-call transfers, snapshots."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from deltalake import DeltaTable

from transfer_platform.config import parse_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.timeutil import EPOCH, utc
from transfer_platform.destinations.base import writer_for
from transfer_platform.transfers.runner import ModelSummary, TransferRequest, run_transfer
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.conftest import pg_connection_config

Row = tuple[int, str, datetime, str | None]

MODEL = "events"
DESTINATION = "dst"
COLUMNS = ["id", "organization_id", "updated_at", "payload"]
LOOKBACK = timedelta(seconds=30)  # the postgres source's default lookback


def day(month: int, dom: int, *, year: int = 2024) -> datetime:
    return datetime(year, month, dom, tzinfo=UTC)


def epoch(moment: datetime) -> int:
    return int(moment.timestamp())


def make_rows(tenants: list[str], per_tenant: int, days: list[datetime], *, seed: int,
              start_id: int = 1) -> list[Row]:
    """Rows spread over ``days`` at 00:00..22:59 (never in the 30 s lookback before a midnight),
    every timestamp with microseconds, some payloads NULL or full of quotes and backslashes."""
    rng = random.Random(seed)
    rows: list[Row] = []
    key = start_id
    for tenant in tenants:
        for i in range(per_tenant):
            when = days[i % len(days)] + timedelta(
                hours=rng.randrange(23), minutes=rng.randrange(60), seconds=rng.randrange(60),
                microseconds=rng.randrange(1, 1_000_000))
            payload = None if i % 13 == 5 else f"{tenant}|{key}|v1 é'\"\\ {rng.random():.6f}"
            rows.append((key, tenant, when, payload))
            key += 1
    return rows


# -- source tables ------------------------------------------------------------------------------


def create_events(conn: psycopg.Connection, schema: str, table: str = "events", *,
                  primary_key: bool = True) -> None:
    pk = " PRIMARY KEY" if primary_key else ""
    conn.execute(f'CREATE TABLE "{schema}"."{table}" (id bigint{pk}, organization_id text, '
                 "updated_at timestamptz, payload text)")


def insert_rows(conn: psycopg.Connection, schema: str, rows: list[Row], table: str = "events") -> None:
    with conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{schema}"."{table}" (id, organization_id, updated_at, payload) '
                        "VALUES (%s, %s, %s, %s)", rows)


def _order(row: Row) -> tuple:
    key, tenant, when, payload = row
    return (key is None, key or 0, tenant, when is None, when or EPOCH, payload is None, payload or "")


def normalize(rows) -> list[Row]:
    """Rows as sorted tuples with UTC timestamps (NULL keys and values sort last)."""
    return sorted(((r[0], r[1], None if r[2] is None else utc(r[2]), r[3]) for r in rows), key=_order)


def source_rows(conn: psycopg.Connection, schema: str, tenant: str, table: str = "events") -> list[Row]:
    return normalize(conn.execute(
        f'SELECT id, organization_id, updated_at, payload FROM "{schema}"."{table}" '
        "WHERE organization_id = %s", (tenant,)).fetchall())


def destination_rows(conn: psycopg.Connection, schema: str, table: str = MODEL) -> list[Row]:
    return normalize(conn.execute(
        f'SELECT id, organization_id, updated_at, payload FROM "{schema}"."{table}"').fetchall())


def status_row(conn: psycopg.Connection, schema: str, model: str = MODEL) -> dict[str, Any] | None:
    row = conn.execute(
        f'SELECT transfer_last_updated_at, high_watermark, state::text, last_transfer_id, updated_at '
        f'FROM "{schema}"."_transfer_status" WHERE data_model_name = %s', (model,)).fetchone()
    if row is None:
        return None
    keys = ("watermark", "high_watermark", "state", "last_transfer_id", "updated_at")
    return {k: (utc(v) if isinstance(v, datetime) else v) for k, v in zip(keys, row, strict=True)}


def tables_in(conn: psycopg.Connection, schema: str) -> list[str]:
    return sorted(r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall())


def schema_exists(conn: psycopg.Connection, schema: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def xmins(conn: psycopg.Connection, schema: str, ids: list[int]) -> dict[int, str]:
    return dict(conn.execute(f'SELECT id, xmin::text FROM "{schema}"."{MODEL}" WHERE id = ANY(%s)',
                             (ids,)).fetchall())


# -- configuration and transfers ----------------------------------------------------------------


def events_model(source_table: str, *, min_start: datetime, source_name: str = "src") -> dict:
    return {
        "model_name": MODEL,
        "source_name": source_name,
        "source_table": source_table,
        "organization_column": "organization_id",
        "max_transfer_time_window_seconds": 86400,
        "min_start_time_epoch": epoch(min_start),
        "columns": [
            {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
            {"name_in_source": "organization_id", "data_type": "string"},
            {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
            {"name_in_source": "payload", "data_type": "string"},
        ],
    }


def pg_config(*, source_schema: str, dst_schema: str, tenant: str, min_start: datetime,
              table: str = "events", parallel: int = 1, source_port: int | None = None,
              dst_port: int | None = None) -> PlatformConfig:
    source_connection = pg_connection_config()
    if source_port is not None:
        source_connection["port"] = source_port
    dst_connection = pg_connection_config(dst_schema)
    if dst_port is not None:
        dst_connection["port"] = dst_port
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": source_connection,
                     "max_concurrent_queries_per_transfer": parallel}],
        "models": [events_model(f"{source_schema}.{table}", min_start=min_start)],
        "recipients": [{"name": "rcpt", "id_in_provider_system": tenant}],
        "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                          "connection": dst_connection}],
    }, now=datetime(2024, 6, 1, tzinfo=UTC))


def with_columns(config: PlatformConfig, *, add: list = (), remove: list[str] = (),
                 key: list[str] | None = None, types: dict[str, str] | None = None) -> PlatformConfig:
    """The same configuration with the (single) model's columns changed: ``add`` ColumnConfigs,
    ``remove`` by source name, ``key`` the primary key columns, ``types`` new data types by name."""
    model = config.model(MODEL)
    columns = [c for c in model.columns if c.name_in_source not in remove] + list(add)
    if key is not None:
        columns = [c.model_copy(update={"is_primary_key": c.name_in_source in key}) for c in columns]
    if types:
        columns = [c.model_copy(update={"data_type": types.get(c.name_in_source, c.data_type)}) for c in columns]
    return config.model_copy(update={"models": [model.model_copy(update={"columns": columns})]})


def lake_config(lake, delta_root, *, tenant: str, min_start: datetime) -> PlatformConfig:
    """The events model from a Parquet lake (folder ``events``) to one Delta destination
    (``delta_root``: its folder, or its connection: a bucket's, say)."""
    return parse_config({
        "sources": [{"name": "src", "vendor": "parquet", "connection": {"path": str(lake)}}],
        "models": [events_model("events", min_start=min_start)],
        "recipients": [{"name": "rcpt", "id_in_provider_system": tenant}],
        "destinations": [{"name": DESTINATION, "vendor": "delta", "recipient": "rcpt",
                          "connection": delta_root if isinstance(delta_root, dict) else {"path": str(delta_root)}}],
    }, now=datetime(2024, 6, 1, tzinfo=UTC))


def transfer(spark, config: PlatformConfig, now: datetime, transfer_id: str = "t1",
             destination: str = DESTINATION, *, full_refresh: bool = False,
             tuning: Tuning = DEFAULT) -> ModelSummary:
    """One transfer of the destination's models; returns the (single) model's summary. The
    writer works with ``tuning``'s sizes and waits."""
    dest = config.destination(destination)
    writer = writer_for(dest, tuning)
    try:
        summaries = run_transfer(
            TransferRequest(spark=spark, config=config, destination=destination, writer=writer,
                            transfer_id=transfer_id, now=now, full_refresh=full_refresh),
            config.models_for(dest),
        )
    finally:
        writer.close()
    (summary,) = summaries
    return summary


@dataclass(frozen=True)
class DeltaTables:
    """Where a Delta destination's tables are: a folder, or a bucket with delta-rs's storage
    options (and a client to list what is left there)."""

    root: str
    options: dict[str, str] | None = None
    client: Any = None
    bucket: str | None = None

    def table(self, model: str = MODEL) -> DeltaTable:
        return DeltaTable(f"{self.root}/{model}", storage_options=self.options)

    def anything_at(self, relative: str) -> bool:
        """Whether any file is left at ``relative`` (a folder under the root)."""
        if self.client is None:
            return Path(self.root, relative).exists()
        prefix = self.root.removeprefix(f"s3://{self.bucket}/") + f"/{relative}/"
        return bool(self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix).get("KeyCount"))


def rows_by_partition(frame, *expressions: str) -> dict[int, list]:
    """The frame's rows (``expressions`` of them) by the Spark partition that read them; a
    partition that read nothing is absent. (Connect has no RDDs: ``spark_partition_id`` works in
    both kinds of session.)"""
    parts: dict[int, list] = {}
    for row in frame.selectExpr("spark_partition_id() AS _partition", *expressions).collect():
        parts.setdefault(row[0], []).append(row[1:] if len(row) > 2 else row[1])
    return parts


def jdbc_read_partitions(frame) -> int:
    """How many queries Spark's JDBC scan of ``frame`` is split into, from its plan
    (``JDBCRelation(...) [numPartitions=n]``): Connect has no RDD to ask."""
    import contextlib
    import io
    import re

    plan = io.StringIO()
    with contextlib.redirect_stdout(plan):
        frame.explain()
    (count,) = set(re.findall(r"numPartitions=(\d+)", plan.getvalue()))
    return int(count)

