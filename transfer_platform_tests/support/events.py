"""The events of the integration tests: their rows (random, reproducible), the source table that
holds them, and rows normalized to compare."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import psycopg

from transfer_platform.core.timeutil import EPOCH, utc

Row = tuple[int, str, datetime, str | None]

MODEL = "events"
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
