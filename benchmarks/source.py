"""The multi-tenant source table ``<SCHEMA>.events`` (``tp_bench_<run>.events``) and the
changes the incremental cases make.

Row ``g`` (1..rows) belongs to ``tenant-<g % tenants>``, so a tenant's rows are
``id = t + k * tenants`` and "the k-th row of a tenant" is ``id / tenants`` (integer division).
The table is deterministic: rebuilt with 10x rows, its first ``rows`` rows are the same.
"""

from __future__ import annotations

from datetime import datetime

from benchmarks.common import NOW, SCHEMA, pg_connect

SOURCE = f"{SCHEMA}.events"


def tenant_names(tenants: int) -> list[str]:
    return [f"tenant-{i}" for i in range(tenants)]


def create_source(rows: int, tenants: int) -> None:
    """(Re)create ``<SCHEMA>.events``: bigint key, tenant id, ``updated_at`` spread over a year,
    integers, doubles, short texts and a ~100-byte text."""
    with pg_connect(autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(
            f"CREATE TABLE {SOURCE} (id bigint PRIMARY KEY, tenant_id text NOT NULL, "
            "updated_at timestamptz NOT NULL, a integer, b integer, c integer, x double precision, "
            "y double precision, s1 text, s2 text, doc text)")
        conn.execute(
            f"INSERT INTO {SOURCE} SELECT g, 'tenant-' || (g %% %s), "
            "%s::timestamptz - (g %% 31536000) * interval '1 second' - (g %% 997) * interval '1 microsecond', "
            "g %% 1000, g %% 7, g %% 13, g * 0.5, g / 3.0, 'k' || (g %% 50), 'v' || (g %% 9), "
            "repeat(md5(g::text), 3) FROM generate_series(1, %s) g", (tenants, NOW, rows))
        conn.execute(f"CREATE INDEX ON {SOURCE} (tenant_id, updated_at)")
        conn.execute(f"VACUUM ANALYZE {SOURCE}")


def tenant_counts() -> dict[str, int]:
    with pg_connect(autocommit=True) as conn:
        return dict(conn.execute(f"SELECT tenant_id, count(*) FROM {SOURCE} GROUP BY 1").fetchall())


def touch_one_percent(tenant: str, tenants: int, at: datetime, *, max_id: int | None = None) -> int:
    """Change 1 % of a tenant's rows (every 100th of them; only ids <= ``max_id`` if given, so
    that a 10x table can get the same change as the 1x one); return how many rows changed."""
    bound = "" if max_id is None else f"AND id <= {int(max_id)}"
    with pg_connect(autocommit=True) as conn:
        cursor = conn.execute(
            f"UPDATE {SOURCE} SET a = a + 1, updated_at = %s WHERE tenant_id = %s "
            f"AND (id / %s) %% 100 = 0 {bound}", (at, tenant, tenants))
        return cursor.rowcount


def drop_source() -> None:
    with pg_connect(autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def rows_since(tenant: str, since: datetime) -> int:
    """A tenant's rows with ``updated_at >= since``."""
    with pg_connect(autocommit=True) as conn:
        return conn.execute(f"SELECT count(*) FROM {SOURCE} WHERE tenant_id = %s AND updated_at >= %s",
                            (tenant, since)).fetchone()[0]
