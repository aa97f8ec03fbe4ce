"""The floor: what moving a tenant costs with nothing but psycopg.

Per tenant, in one transaction: ``COPY`` its rows out of the source into an UNLOGGED staging
table, then one ``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE excluded.updated_at >=
t.updated_at`` into a target table with the same columns and primary key as the platform's.
All tenants = each tenant into its own schema, one after another (as the platform does: each
recipient has its own destination schema).
"""

from __future__ import annotations

from benchmarks.common import COLUMNS, SCHEMA, count_rows, pg_connect
from benchmarks.source import SOURCE

PREFIX = f"{SCHEMA}_floor"


def floor_schema(index: int) -> str:
    return f"{PREFIX}_{index}"


def floor_copy(tenant: str, schema: str) -> None:
    """COPY out -> unlogged staging -> one merge, one transaction."""
    target = f"{schema}.events"
    cols = ", ".join(COLUMNS)
    updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "id")
    with pg_connect() as src, pg_connect() as dst:
        dst.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        dst.execute(f"CREATE TABLE {target} (LIKE {SOURCE} INCLUDING DEFAULTS, PRIMARY KEY (id))")
        dst.execute(f"CREATE UNLOGGED TABLE {target}_stg (LIKE {SOURCE})")
        with src.cursor().copy(f"COPY (SELECT {cols} FROM {SOURCE} WHERE tenant_id = "
                               f"'{tenant}') TO STDOUT") as out, \
                dst.cursor().copy(f"COPY {target}_stg ({cols}) FROM STDIN") as into:
            for data in out:
                into.write(data)
        dst.execute(f"INSERT INTO {target} AS t ({cols}) SELECT {cols} FROM {target}_stg "
                    f"ON CONFLICT (id) DO UPDATE SET {updates} "
                    "WHERE excluded.updated_at >= t.updated_at")
        dst.execute(f"DROP TABLE {target}_stg")
        dst.commit()


def floor_all(tenants: list[str]) -> None:
    for index, tenant in enumerate(tenants):
        floor_copy(tenant, floor_schema(index))


def floor_delivered(indices: list[int]) -> int:
    """Rows in the floor targets of the given tenants."""
    return sum(count_rows(f"{floor_schema(i)}.events") for i in indices)
