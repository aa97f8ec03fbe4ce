"""The Iceberg destination beyond the contract: a catalog that is down, every type round trip, a
full refresh published as one snapshot, a bucket's wrong keys or missing bucket; each read back as
a recipient would, through the catalog's row in PostgreSQL, the table's metadata JSON, its
manifests and data files (``support.destinations``), never through the writer."""

from __future__ import annotations

import json
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from transfer_platform.config.parsing import parse_config
from transfer_platform.vendors import DESTINATIONS
from transfer_platform_tests.support import destinations
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import MODEL, day
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

TENANT = "acme"
MIN_START = day(3, 1)
NOW1, NOW2 = day(3, 3), day(3, 4)
SECRET = "s3cr3t-Iceberg-catalog-pw"


def closed_port() -> int:
    from benchmarks.spark_server import free_port

    return free_port()  # nothing listens there


@pytest.fixture
def place(new_schema, tmp_path, request) -> destinations.Place:
    return destinations.Place(new_schema(), tmp_path / "destination", lambda: request.getfixturevalue("s3"))


@pytest.fixture
def events(pg_conn, pg_schema) -> str:
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint, organization_id text, '
                    "updated_at timestamptz, payload text)")
    rows = [(k, TENANT, MIN_START + timedelta(hours=1, minutes=k, microseconds=k), f"v{k}") for k in range(1, 6)]
    with pg_conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{pg_schema}".events VALUES (%s, %s, %s, %s)', rows)
    return pg_schema


def config_of(source_schema: str, destination: destinations.TestDestination, *, model: dict | None = None):
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model or events_model(f"{source_schema}.events", min_start=MIN_START)],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [destination.entry(DESTINATION, "rcpt")],
    }, now=day(6, 1))


def source_rows(conn, schema: str, table: str = "events", columns: str = "id, organization_id, updated_at, payload"):
    cursor = conn.execute(f'SELECT {columns} FROM "{schema}".{table} WHERE organization_id = %s ORDER BY id',
                          (TENANT,))
    return [dict(zip([d.name for d in cursor.description], r, strict=True)) for r in cursor.fetchall()]


def metadata(destination: destinations.TestDestination, table: str = MODEL) -> dict | None:
    d = destination.details
    return destinations.iceberg_snapshot(d["schema"], d["catalog"], d["namespace"], table,
                                         lambda location: Path(location.removeprefix("file://")).read_bytes())


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_a_catalog_that_is_down_is_named_and_nothing_is_committed(spark, pg_conn, events, place, monkeypatch):
    destination = destinations.make("iceberg", place, monkeypatch)
    port = closed_port()
    monkeypatch.setenv("TP_TEST_CATALOG_PW", SECRET)
    destination.block["connection"]["catalog"] |= {"port": port, "password": "${TP_TEST_CATALOG_PW}"}
    config = config_of(events, destination)

    summary = transfer(spark, config, NOW1)

    assert summary.status == "ERROR"
    assert "cannot reach Iceberg catalog 'contract_" in summary.error
    assert f"127.0.0.1:{port}" in summary.error
    assert SECRET not in summary.error
    assert files_under(destination.details["warehouse"]) == []  # not a data file, not a metadata file
    assert destination.rows(config.model(MODEL)) is None  # the real catalog holds no table either


def test_every_type_round_trips_with_its_iceberg_type(spark, pg_conn, pg_schema, place, monkeypatch):
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".typed (id bigint, organization_id text, updated_at timestamptz, '
                    "amount numeric(38,9), name text, doc jsonb, flag boolean, score double precision, born date)")
    at = MIN_START + timedelta(hours=1, microseconds=123456)
    rows = [(1, TENANT, at, Decimal("12345678901234567890123456789.123456789"), "Zoë ∑", '{"a": [1, 2]}', True,
             1.5e-300, date(1999, 12, 31)),
            (2, TENANT, at + timedelta(microseconds=1), Decimal("-0.000000001"), "", "null", False, -0.0,
             date(2024, 2, 29)),
            (3, TENANT, at + timedelta(seconds=1), None, None, None, None, None, None)]
    with pg_conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{pg_schema}".typed VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)', rows)
    types = {"amount": "decimal", "name": "string", "doc": "json", "flag": "boolean", "score": "float",
             "born": "date"}
    model = events_model(f"{pg_schema}.typed", min_start=MIN_START)
    model["columns"] = model["columns"][:3] + [{"name_in_source": n, "data_type": t} for n, t in types.items()]
    destination = destinations.make("iceberg", place, monkeypatch)
    config = config_of(pg_schema, destination, model=model)

    summary = transfer(spark, config, NOW1)

    assert summary.status == "SUCCESS", summary.error
    want = source_rows(pg_conn, pg_schema, "typed", "id, organization_id, updated_at, amount, name, "
                                                    "doc::text AS doc, flag, score, born")
    assert destination.rows(config.model(MODEL)) == want
    assert want[0]["updated_at"].microsecond == 123456
    schema = next(s for s in metadata(destination)["schemas"] if s["schema-id"] == metadata(destination)["current-schema-id"])
    iceberg_types = DESTINATIONS["iceberg"].column_types
    assert {f["name"]: f["type"] for f in schema["fields"]} == {
        "id": "long", "organization_id": "string", "updated_at": "timestamptz",
        **{n: iceberg_types[t] for n, t in types.items()}}
    assert iceberg_types["decimal"] == "decimal(38, 9)"


def test_a_full_refresh_is_one_new_snapshot_and_the_old_one_still_reads_the_old_rows(
        spark, pg_conn, events, place, monkeypatch):
    destination = destinations.make("iceberg", place, monkeypatch)
    config = config_of(events, destination)
    assert transfer(spark, config, NOW1).status == "SUCCESS"
    before = metadata(destination)
    old_rows = destination.rows(config.model(MODEL))
    pg_conn.execute(f'DELETE FROM "{events}".events WHERE id = 2')

    summary = transfer(spark, config, NOW2, "refresh", full_refresh=True)

    assert summary.status == "SUCCESS", summary.error
    after = metadata(destination)
    assert len(after["snapshots"]) == len(before["snapshots"]) + 1
    current = next(s for s in after["snapshots"] if s["snapshot-id"] == after["current-snapshot-id"])
    assert current["parent-snapshot-id"] == before["current-snapshot-id"]
    assert current["summary"]["operation"] == "overwrite"
    assert json.loads(current["summary"]["transfer-platform.state"])  # the watermark in the same snapshot
    assert destination.rows(config.model(MODEL)) == source_rows(pg_conn, events)
    # a reader still on the snapshot before the refresh sees every old row (a half-done one: none of it)
    from pyiceberg.io.pyarrow import PyArrowFileIO

    old = destinations.iceberg_data_files(before, PyArrowFileIO())
    import pyarrow.parquet as pq

    assert sorted(r["id"] for f in old for r in pq.read_table(f.removeprefix("file://")).to_pylist()) == [
        r["id"] for r in old_rows]
    assert 2 in [r["id"] for r in old_rows]
    # the table built aside is gone from the catalog
    assert metadata(destination, "_tp_refresh_events") is None


def test_the_independent_reader_matches_the_source_in_a_bucket(spark, pg_conn, events, place, monkeypatch):
    destination = destinations.make("iceberg-s3", place, monkeypatch)
    config = config_of(events, destination)

    summary = transfer(spark, config, NOW1)

    assert summary.status == "SUCCESS", summary.error
    assert destination.rows(config.model(MODEL)) == source_rows(pg_conn, events)


@pytest.mark.parametrize("wrong", ["secret", "bucket"])
def test_a_bucket_with_wrong_keys_or_missing_is_named_and_nothing_is_committed(
        spark, pg_conn, events, place, monkeypatch, wrong):
    destination = destinations.make("iceberg-s3", place, monkeypatch)
    if wrong == "secret":
        monkeypatch.setenv(destinations.SECRET_ENV, SECRET)
    else:
        destination.block["connection"]["warehouse"]["bucket"] = "no-such-bucket-here"
    config = config_of(events, destination)

    summary = transfer(spark, config, NOW1)

    assert summary.status == "ERROR"
    assert ("SignatureDoesNotMatch" if wrong == "secret" else "NoSuchBucket") in summary.error
    assert "Fix:" in summary.error
    assert SECRET not in summary.error
    assert destination.rows(config.model(MODEL)) is None


def test_a_loader_with_only_the_documented_catalog_grants_transfers(spark, pg_conn, events, place, pg_role,
                                                                     monkeypatch):
    # docs/permissions.md: USAGE and CREATE on the catalog's schema (an administrator created it),
    # nothing on the database; the first transfer creates the catalog's tables, the loader owns them
    pg_conn.execute(f'CREATE SCHEMA "{place.schema}"')
    pg_conn.execute(f'GRANT USAGE, CREATE ON SCHEMA "{place.schema}" TO "{pg_role}"')
    destination = destinations.make("iceberg", place, monkeypatch)
    destination.block["connection"]["catalog"]["username"] = pg_role
    config = config_of(events, destination)
    from transfer_platform.destinations.base import writer_for

    writer = writer_for(config.destination(DESTINATION))
    try:
        checks = writer.probe([config.model(MODEL)], f"destination {DESTINATION!r}")
    finally:
        writer.close()
    assert [c for c in checks if c.failed] == []

    assert transfer(spark, config, NOW1).status == "SUCCESS"
    pg_conn.execute(f'UPDATE "{events}".events SET payload = %s, updated_at = %s WHERE id = 2',
                    ("changed", NOW1 - timedelta(minutes=1)))
    assert transfer(spark, config, NOW2).status == "SUCCESS"

    assert destination.rows(config.model(MODEL)) == source_rows(pg_conn, events)
    owner = pg_conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = %s AND tablename = 'iceberg_tables'",
                            (place.schema,)).fetchone()
    assert owner == (pg_role,)
