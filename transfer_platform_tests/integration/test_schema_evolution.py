"""Schema evolution on incremental transfers: a column added to the model appears in the
destination on the next transfer, a column removed from the model is dropped from it (with the
model's allow_column_drop; without it: test_schema_safety.py), a changed primary key is refused (a
changed type: see test_full_refresh.py). PostgreSQL and Delta.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from transfer_platform.config.models import ColumnConfig
from transfer_platform.destinations.delta import read_state
from transfer_platform_tests.support.config import pg_config, with_columns
from transfer_platform_tests.support.events import MODEL, create_events, day, insert_rows, make_rows
from transfer_platform_tests.support.lake import lake_config
from transfer_platform_tests.support.postgres import status_row
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

MIN_START = day(2, 28)
DATA_DAYS = [day(3, 1), day(3, 2), day(3, 3)]
NOW1 = day(3, 4) + timedelta(hours=12)
NOW2 = day(3, 5) + timedelta(hours=6)
NOW3 = day(3, 6)
TENANT = "acme"
AMOUNT = ColumnConfig(name_in_source="amount", data_type="integer")


def allowing_drops(config):  # a PlatformConfig
    """The same configuration, its (single) model with ``allow_column_drop: true``."""
    model = config.model(MODEL).model_copy(update={"allow_column_drop": True})
    return config.model_copy(update={"models": [model]})


def pg_columns(conn, schema: str) -> dict[str, str]:
    return dict(conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (f'"{schema}"."{MODEL}"',)).fetchall())


def pg_table(conn, schema: str, columns: list[str], where: str = "TRUE", table: str = MODEL) -> list[tuple]:
    cols = ", ".join(columns)
    return sorted(conn.execute(f'SELECT {cols} FROM "{schema}"."{table}" WHERE {where}').fetchall())


def test_postgres_columns_follow_the_model(spark, pg_conn, pg_schema, dst_schema, caplog):
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, "globex"], 20, DATA_DAYS, seed=31))
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    assert transfer(spark, config, NOW1).status == "SUCCESS"

    # the provider adds a column and fills it for some rows, which change
    pg_conn.execute(f'ALTER TABLE "{pg_schema}".events ADD COLUMN amount bigint')
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET amount = id * 10, updated_at = %s '
                    "WHERE id %% 3 = 0", (NOW1 + timedelta(hours=2),))
    added = with_columns(config, add=[AMOUNT])
    with caplog.at_level(logging.WARNING, logger="transfer_platform.transfer"):
        second = transfer(spark, added, NOW2, transfer_id="t2")

    assert second.status == "SUCCESS", second.error
    assert pg_columns(pg_conn, dst_schema)["amount"] == "bigint"
    assert "added column amount (integer)" in caplog.text
    assert "NULL" in caplog.text  # the log says what rows delivered before hold
    everything = ["id", "organization_id", "updated_at", "payload", "amount"]
    tenant = f"organization_id = '{TENANT}'"
    # changed rows carry the new column; rows delivered before hold NULL until they change
    assert pg_table(pg_conn, dst_schema, everything, "id % 3 = 0") == pg_table(
        pg_conn, pg_schema, everything, f"{tenant} AND id % 3 = 0", table="events")
    assert {r[0] for r in pg_table(pg_conn, dst_schema, ["amount"], "id % 3 <> 0")} == {None}
    watermark = status_row(pg_conn, dst_schema)["watermark"]
    assert watermark == NOW2

    # the column is removed from the model again, and payload too: both are dropped, as allowed
    removed = allowing_drops(with_columns(config, remove=["payload"]))
    third = transfer(spark, removed, NOW3, transfer_id="t3")
    assert third.status == "SUCCESS", third.error
    assert list(pg_columns(pg_conn, dst_schema)) == ["id", "organization_id", "updated_at"]
    kept = ["id", "organization_id", "updated_at"]
    assert pg_table(pg_conn, dst_schema, kept) == pg_table(pg_conn, pg_schema, kept, tenant, table="events")
    assert status_row(pg_conn, dst_schema)["watermark"] == NOW3


def test_postgres_primary_key_change_is_refused(spark, pg_conn, pg_schema, dst_schema):
    create_events(pg_conn, pg_schema)
    pg_conn.execute(f'ALTER TABLE "{pg_schema}".events ADD COLUMN amount bigint')
    insert_rows(pg_conn, pg_schema, make_rows([TENANT], 10, DATA_DAYS, seed=32))
    config = pg_config(source_schema=pg_schema, dst_schema=dst_schema, tenant=TENANT, min_start=MIN_START)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    status_before = status_row(pg_conn, dst_schema)
    columns_before = pg_columns(pg_conn, dst_schema)

    refused = transfer(spark, with_columns(config, add=[AMOUNT], key=["id", "organization_id"]), NOW2)

    assert refused.error_type == "SchemaMismatch"
    for words in ("primary key", "(id)", "(id, organization_id)", "--full-refresh", "destination 'dst'"):
        assert words in refused.error
    # refused before anything changed: not even the added column
    assert pg_columns(pg_conn, dst_schema) == columns_before
    assert status_row(pg_conn, dst_schema) == status_before


# -- Delta ------------------------------------------------------------------------------------

TS = pa.timestamp("us", tz="UTC")


def write_lake(lake: Path, rows: list[dict], with_amount: bool) -> None:
    fields = [("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS), ("payload", pa.string())]
    if with_amount:
        fields.append(("amount", pa.int64()))
    folder = lake / "events"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(fields)), folder / "part-0.parquet")


def test_delta_columns_follow_the_model(spark, tmp_path):
    lake, root = tmp_path / "lake", tmp_path / "delta"
    config = lake_config(lake, root, tenant=TENANT, min_start=MIN_START)
    names = ["id", "organization_id", "updated_at", "payload"]
    rows = [dict(zip(names, r, strict=True)) for r in make_rows([TENANT, "globex"], 12, DATA_DAYS, seed=33)]
    write_lake(lake, rows, with_amount=False)
    assert transfer(spark, config, NOW1).status == "SUCCESS"

    changed = {r["id"] for r in rows if r["id"] % 3 == 0}
    rows = [{**r, "amount": r["id"] * 10 if r["id"] in changed else None,
             "updated_at": NOW1 + timedelta(hours=2) if r["id"] in changed else r["updated_at"]} for r in rows]
    write_lake(lake, rows, with_amount=True)
    second = transfer(spark, with_columns(config, add=[AMOUNT]), NOW2, transfer_id="t2")

    assert second.status == "SUCCESS", second.error
    table = DeltaTable(str(root / MODEL))
    delivered = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert delivered == sorted(({k: v for k, v in r.items()} for r in rows if r["organization_id"] == TENANT),
                               key=lambda r: r["id"])
    assert read_state(table).watermark == NOW2

    third = transfer(spark, allowing_drops(with_columns(config, remove=["payload"])), NOW3, transfer_id="t3")
    assert third.status == "SUCCESS", third.error
    table = DeltaTable(str(root / MODEL))
    assert pa.schema(table.schema().to_arrow()).names == ["id", "organization_id", "updated_at"]
    assert table.to_pyarrow_table().num_rows == len([r for r in rows if r["organization_id"] == TENANT])
    assert read_state(table).watermark == NOW3
