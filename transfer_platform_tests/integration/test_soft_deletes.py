"""Soft deletes reach the recipient: a row the source marks deleted (a boolean ``is_deleted`` that
is true, or a ``deleted_at`` that is set) is removed from the destination in the same commit as the
window's other rows, or kept with its marker when the model says ``keep_deleted_rows: true``.

The expectation is the source's: the destination holds the tenant's rows that are not marked
deleted (all of them, with their markers, when kept). The last-modified tie-break holds for
deletes too: a delete older than the delivered row never removes it, and a row re-created after
its delete comes back. Another tenant's rows, marked or not, never arrive. On PostgreSQL (the
backfill's empty-target fast path and the merge) and on Delta (the MERGE).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.config.parsing import parse_config
from transfer_platform.errors import ConfigError
from transfer_platform.transfers.integrity import check_integrity
from transfer_platform_tests.support.destinations import ONE_ROW_PER_KEY
from transfer_platform_tests.support.events import day, epoch
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT, OTHER = "acme", "globex"
BASE = day(3, 1) + timedelta(hours=1)


def model(marker: str, *, keep: bool, source_table: str) -> dict:
    kind = "boolean" if marker == "is_deleted" else "timestamp"
    entry = {
        "model_name": "events", "source_name": "src", "source_table": source_table,
        "organization_column": "organization_id", "min_start_time_epoch": epoch(day(2, 28)),
        "columns": [
            {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
            {"name_in_source": "organization_id", "data_type": "string"},
            {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
            {"name_in_source": "payload", "data_type": "string"},
            {"name_in_source": marker, "data_type": kind, "is_deleted_marker": True},
        ],
    }
    if keep:
        entry["keep_deleted_rows"] = True
    return entry


def config_for(marker: str, keep: bool, vendor: str, source_table: str, dst_schema: str, delta_root):
    connection = pg_connection_config(dst_schema) if vendor == "postgres" else {"path": str(delta_root)}
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model(marker, keep=keep, source_table=source_table)],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": "dst", "vendor": vendor, "recipient": "rcpt", "connection": connection}],
    }, now=day(6, 1))


def mark(conn, schema: str, key: int, marker: str, when, *, deleted: bool = True) -> None:
    """The source's own soft delete (or undelete): the marker and the last-modified value change."""
    value = deleted if marker == "is_deleted" else (when if deleted else None)
    conn.execute(f'UPDATE "{schema}".events SET {marker} = %s, updated_at = %s, payload = %s WHERE id = %s',
                 (value, when, f"v@{when:%H%M%S}", key))


def source_rows(conn, schema: str, marker: str, *, keep: bool) -> set:
    marked = "is_deleted IS TRUE" if marker == "is_deleted" else "deleted_at IS NOT NULL"
    rows = conn.execute(f'SELECT id, payload, {marked} FROM "{schema}".events WHERE organization_id = %s'
                        + ("" if keep else f" AND NOT ({marked})"), (TENANT,)).fetchall()
    return {tuple(r) for r in rows}


def destination_rows(conn, vendor: str, dst_schema: str, delta_root, marker: str) -> set:
    if vendor == "postgres":
        marked = "is_deleted IS TRUE" if marker == "is_deleted" else "deleted_at IS NOT NULL"
        rows = conn.execute(f'SELECT id, payload, {marked} FROM "{dst_schema}".events').fetchall()
        return {tuple(r) for r in rows}
    from deltalake import DeltaTable

    table = DeltaTable(str(delta_root / "events")).to_pyarrow_table().to_pylist()
    return {(r["id"], r["payload"], bool(r[marker]) if marker == "is_deleted" else r[marker] is not None)
            for r in table}


@pytest.mark.parametrize("keep", [False, True], ids=["remove", "keep"])
@pytest.mark.parametrize("marker", ["is_deleted", "deleted_at"])
@pytest.mark.parametrize("vendor", ONE_ROW_PER_KEY)
def test_marked_rows_are_removed_or_kept_by_the_last_modified_rule(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, vendor, marker, keep):
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint PRIMARY KEY, organization_id text, '
                    "updated_at timestamptz, payload text, is_deleted boolean, deleted_at timestamptz)")
    for key in range(1, 16):
        tenant = TENANT if key <= 10 else OTHER
        pg_conn.execute(f'INSERT INTO "{pg_schema}".events VALUES (%s, %s, %s, %s, false, NULL)',
                        (key, tenant, BASE + timedelta(minutes=key), f"v{key}"))
    mark(pg_conn, pg_schema, 10, marker, BASE + timedelta(minutes=20))  # deleted before the backfill
    config = config_for(marker, keep, vendor, f"{pg_schema}.events", dst_schema, tmp_path / "delta")
    summary = transfer(spark, config, day(3, 2), "t1")
    assert summary.status == "SUCCESS", summary.error
    assert destination_rows(pg_conn, vendor, dst_schema, tmp_path / "delta", marker) == source_rows(
        pg_conn, pg_schema, marker, keep=keep)
    delivered_high = BASE + timedelta(minutes=20)  # the tenant's greatest delivered last-modified value

    # deletes of two rows, an older delete of the newest delivered row, and another tenant's delete
    later = day(3, 2) + timedelta(hours=1)
    mark(pg_conn, pg_schema, 1, marker, later)
    mark(pg_conn, pg_schema, 2, marker, later + timedelta(seconds=1))
    pg_conn.execute(f'UPDATE "{pg_schema}".events SET updated_at = %s WHERE id = 9', (delivered_high,))
    summary = transfer(spark, config, day(3, 2) + timedelta(minutes=30), "t2")  # id 9 now newest
    assert summary.status == "SUCCESS", summary.error
    mark(pg_conn, pg_schema, 9, marker, delivered_high - timedelta(seconds=10))  # older than delivered
    mark(pg_conn, pg_schema, 11, marker, later)
    summary = transfer(spark, config, day(3, 3), "t3")
    assert summary.status == "SUCCESS", summary.error
    assert summary.rows_deleted == 2

    expected = source_rows(pg_conn, pg_schema, marker, keep=keep)
    nine = {r for r in expected if r[0] == 9} if keep else set()
    expected = (expected - nine) | {(9, "v9", False)}  # the older delete left the newer row alone
    assert destination_rows(pg_conn, vendor, dst_schema, tmp_path / "delta", marker) == expected
    assert {r[0] for r in expected} & {11, 12, 13, 14, 15} == set()
    # the integrity check compares with the rows a transfer delivers: only the row whose delete
    # was older than the delivered row disagrees with the source (kept unmarked, or not removed)
    report = check_integrity(spark, config, "dst", config.model("events"), day(3, 4))
    assert report.failures == 1, report
    assert report.examples[next(k for k in ("orphaned", "stale", "incorrect") if report.counts[k])] == ["id=9"]

    # a row re-created after its delete comes back
    mark(pg_conn, pg_schema, 1, marker, day(3, 3) + timedelta(hours=1), deleted=False)
    summary = transfer(spark, config, day(3, 4), "t4")
    assert summary.status == "SUCCESS", summary.error
    assert summary.rows_deleted == 0
    assert (1, f"v@{day(3, 3) + timedelta(hours=1):%H%M%S}", False) in destination_rows(
        pg_conn, vendor, dst_schema, tmp_path / "delta", marker)


@pytest.mark.parametrize(("columns", "settings", "message"), [
    ([{"name_in_source": "flag", "data_type": "string", "is_deleted_marker": True}], {},
     "a deletion marker must be boolean (deleted when true) or timestamp (deleted when not NULL), not string"),
    ([{"name_in_source": "a", "data_type": "boolean", "is_deleted_marker": True},
      {"name_in_source": "b", "data_type": "boolean", "is_deleted_marker": True}], {},
     "more than one column is marked is_deleted_marker (a, b)"),
    ([], {"keep_deleted_rows": True}, "no column is marked is_deleted_marker"),
    ([{"name_in_source": "gone", "data_type": "boolean", "is_deleted_marker": True}], {"is_append_only": True},
     "an is_append_only model never changes a delivered row"),
])
def test_validate_refuses_a_marker_that_cannot_mark_a_delete(columns, settings, message):
    entry = model("is_deleted", keep=False, source_table="events")
    entry["columns"] = entry["columns"][:4] + columns
    entry.update(settings)
    with pytest.raises(ConfigError, match="is_deleted_marker|deletion marker|keep_deleted_rows") as raised:
        parse_config({
            "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
            "models": [entry],
            "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
            "destinations": [{"name": "dst", "vendor": "postgres", "recipient": "rcpt",
                              "connection": pg_connection_config("x")}],
        }, now=day(6, 1))
    assert message in str(raised.value)
