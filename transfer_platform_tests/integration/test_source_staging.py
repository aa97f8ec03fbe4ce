"""Source staging: the due transfers of a model read the source once per tick, and every
destination receives exactly what it receives without staging.

A real PostgreSQL source (tenant ids with quotes and a backslash, and a decoy tenant that a broken
escape would select), four destinations (three PostgreSQL schemas, one local Delta table), one
world with staging and one without, the same writes and the same transfers; the statements sent
to the source are counted by the source layer's own counter (``jdbc.SOURCE_STATEMENTS``).
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from transfer_platform.config import parse_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.destinations.base import writer_for
from transfer_platform.errors import ConfigError
from transfer_platform.sources import jdbc
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform_tests.support.destinations import Place, TestDestination, delta, postgres
from transfer_platform_tests.support.events import (
    MODEL,
    create_events,
    epoch,
    insert_rows,
    normalize,
)
from transfer_platform_tests.support.postgres import pg_connect, pg_connection_config

pytestmark = pytest.mark.integration

TENANTS = ("acme", "o'reilly", 'say "hi"', "back\\slash")
DECOY = "o''reilly"
START = datetime(2024, 5, 1, tzinfo=UTC)
NOW1 = datetime(2024, 5, 1, 6, 0, 0, 250_000, tzinfo=UTC)
NOW2 = datetime(2024, 5, 1, 9, 20, 0, 500_000, tzinfo=UTC)  # 3+ hourly windows after NOW1
NOW3 = datetime(2024, 5, 1, 9, 50, tzinfo=UTC)
SPARSE = TENANTS[1]  # its last row is hours before the others': its read starts earliest
SPARSE_LAST = START + timedelta(hours=1, minutes=7)


class World:
    """A source table and four destinations (``d0``..``d3``, one per tenant), with or without
    staging in ``staging``."""

    def __init__(self, tmp: Path, source_schema: str, staging: str | None, label: str) -> None:
        self.tmp, self.source_schema, self.staging = tmp, source_schema, staging
        tag = uuid.uuid4().hex[:8]
        self.places = [Place(f"tp_stg_{tag}_{label}{i}", tmp / f"{label}{i}", s3=lambda: None)
                       for i in range(len(TENANTS))]
        self.destinations: list[TestDestination] = [
            delta(p) if i == 2 else postgres(p) for i, p in enumerate(self.places)]

    def config(self, *, broken: int | None = None, staging: str | None = None) -> PlatformConfig:
        source = {"name": "src", "vendor": "postgres", "connection": pg_connection_config()}
        path = staging or self.staging
        if path is not None:
            source["staging"] = {"path": path}
        destinations = []
        for i, d in enumerate(self.destinations):
            entry = d.entry(f"d{i}", f"r{i}")
            entry["frequency_minutes"] = 15
            if i == broken:
                entry = {**entry, "connection": {**entry["connection"], "port": 1}}  # nothing listens
            destinations.append(entry)
        return parse_config({
            "sources": [source],
            "models": [{
                "model_name": MODEL, "source_name": "src", "source_table": f"{self.source_schema}.events",
                "organization_column": "organization_id", "min_start_time_epoch": epoch(START),
                "max_transfer_time_window_seconds": 3600,
                "columns": [
                    {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                    {"name_in_source": "organization_id", "data_type": "string"},
                    {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                    {"name_in_source": "payload", "data_type": "string"},
                ],
            }],
            "recipients": [{"name": f"r{i}", "id_in_provider_system": t} for i, t in enumerate(TENANTS)],
            "destinations": destinations,
        }, now=NOW1)

    def transfer(self, spark, index: int, now: datetime, config: PlatformConfig | None = None):
        config = config or self.config()
        name = f"d{index}"
        writer = writer_for(config.destination(name))
        try:
            (summary,) = run_transfer(TransferRequest(spark=spark, config=config, destination=name, writer=writer,
                                                      transfer_id=f"t{uuid.uuid4().hex[:6]}", now=now),
                                      config.models_for(config.destination(name)))
        finally:
            writer.close()
        return summary

    def rows(self, index: int, config: PlatformConfig | None = None) -> list:
        model = (config or self.config()).model(MODEL)
        rows = self.destinations[index].rows(model) or []
        return normalize((r["id"], r["organization_id"], r["updated_at"], r["payload"]) for r in rows)

    def drop(self) -> None:
        with pg_connect(autocommit=True) as conn:
            for place in self.places:
                conn.execute(f'DROP SCHEMA IF EXISTS "{place.schema}" CASCADE')


@pytest.fixture
def source(pg_schema, pg_conn):
    create_events(pg_conn, pg_schema)
    rows, key = [], 1
    for tenant in (*TENANTS, DECOY):
        for k in range(2 if tenant == SPARSE else 6):
            rows.append((key, tenant, START + timedelta(hours=k, minutes=7, microseconds=key), f"{tenant} v1 {k}"))
            key += 1
    insert_rows(pg_conn, pg_schema, rows)
    return pg_schema


@pytest.fixture
def worlds(tmp_path, source):
    staged = World(tmp_path, source, str(tmp_path / "staging"), "on")
    plain = World(tmp_path, source, None, "off")
    yield staged, plain
    staged.drop()
    plain.drop()


def source_until(conn, schema: str, tenant: str, now: datetime) -> list:
    return normalize(conn.execute(
        f'SELECT id, organization_id, updated_at, payload FROM "{schema}".events '
        "WHERE organization_id = %s AND updated_at < %s", (tenant, now)).fetchall())


def change_source(conn, schema: str) -> None:
    """Updates, inserts and late commits (inside the 30 s lookback before NOW1) for every tenant
    and the decoy, between NOW1 and NOW2."""
    conn.execute(f'UPDATE "{schema}".events SET updated_at = %s + (id * interval \'1 minute\'), '
                 "payload = payload || ' v2' WHERE id %% 3 = 0", (NOW1,))
    rows, key = [], 1000
    for tenant in (*TENANTS, DECOY):
        rows.append((key, tenant, NOW1 - timedelta(seconds=10), f"{tenant} late"))  # late commit
        rows.append((key + 1, tenant, NOW1 + timedelta(hours=2, microseconds=key), f"{tenant} new"))
        rows.append((key + 2, tenant, NOW1 + timedelta(hours=2, microseconds=key), f"{tenant} tie"))  # same value
        key += 10
    # committed after NOW1's transfer, stamped just before the sparse tenant's last delivered row:
    # only a read from *its* lower bound (not the first transfer's) finds it
    rows.append((2000, SPARSE, SPARSE_LAST - timedelta(seconds=10), "late, sparse"))
    insert_rows(conn, schema, rows)


def batches(root: str) -> list[Path]:
    return sorted(p for p in Path(root).glob("src/events/batches/*") if p.is_dir())


def staged_files(root: str) -> list[str]:
    return sorted(p.name for p in Path(root).glob("src/events/batches/*/*.parquet"))


def statements(kind: str) -> int:
    return jdbc.SOURCE_STATEMENTS[("src", kind)]


def test_one_source_query_per_tick_and_each_destination_as_without_staging(spark, worlds, pg_conn, source):
    staged, plain = worlds
    for world in worlds:  # the backfills read the source themselves (nothing to share yet)
        for i in range(len(TENANTS)):
            assert world.transfer(spark, i, NOW1).status == "SUCCESS"
    assert batches(staged.staging) == []
    change_source(pg_conn, source)

    before = (statements("rows"), statements("schema"), statements("catalog"))
    files_left = []
    for i in range(len(TENANTS)):
        assert staged.transfer(spark, i, NOW2).status == "SUCCESS"
        files_left.append(len(staged_files(staged.staging)))
    rows_q, schema_q, catalog_q = (statements("rows") - before[0], statements("schema") - before[1],
                                   statements("catalog") - before[2])
    # one statement read rows for all four (over 3+ windows each); the first transfer asked the
    # source for its columns (no row) before it knew there would be a batch; nothing else
    assert (rows_q, schema_q, catalog_q) == (1, 1, 0)
    # each tenant's file is deleted once its destination committed; the batch after the last one
    assert files_left == [3, 2, 1, 0]
    assert batches(staged.staging) == []

    for i in range(len(TENANTS)):
        assert plain.transfer(spark, i, NOW2).status == "SUCCESS"
    for i, tenant in enumerate(TENANTS):
        expected = source_until(pg_conn, source, tenant, NOW2)
        assert staged.rows(i) == plain.rows(i) == expected, tenant
        assert all(r[1] == tenant for r in staged.rows(i))


def test_a_failing_destination_does_not_block_the_others_and_takes_its_rows_later(spark, worlds, pg_conn, source):
    staged, _ = worlds
    for i in range(len(TENANTS)):
        assert staged.transfer(spark, i, NOW1).status == "SUCCESS"
    change_source(pg_conn, source)
    broken = staged.config(broken=1)
    results = [staged.transfer(spark, i, NOW2, broken) for i in range(len(TENANTS))]
    assert [r.status for r in results] == ["SUCCESS", "ERROR", "SUCCESS", "SUCCESS"]
    for i in (0, 2, 3):
        assert staged.rows(i) == source_until(pg_conn, source, TENANTS[i], NOW2)
    assert len(staged_files(staged.staging)) == 1  # d1's rows wait for d1
    before = statements("rows")
    assert staged.transfer(spark, 1, NOW2 + timedelta(minutes=1)).status == "SUCCESS"  # same tick, mended
    assert statements("rows") == before  # from the batch, planned up to its upper bound
    assert staged.rows(1) == source_until(pg_conn, source, TENANTS[1], NOW2)
    assert batches(staged.staging) == []


def test_unreachable_staging_folder_reads_the_source_with_one_warning(spark, worlds, pg_conn, source, tmp_path,
                                                                      caplog):
    staged, _ = worlds
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the staging folder should be")
    config = staged.config(staging=str(blocker / "staging"))
    for i in range(len(TENANTS)):
        assert staged.transfer(spark, i, NOW1, config).status == "SUCCESS"
    change_source(pg_conn, source)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        summary = staged.transfer(spark, 0, NOW2, config)
    assert summary.status == "SUCCESS"
    warnings = [r for r in caplog.records if "source staging" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "reading the source directly" in warnings[0].getMessage()
    assert staged.rows(0) == source_until(pg_conn, source, TENANTS[0], NOW2)


def test_stale_batch_is_released_and_max_age_sweeps(spark, worlds, pg_conn, source):
    """A destination pending in an earlier tick's batch does not use it (a new tick reads anew),
    and its tenant's file is deleted; a batch older than max_age_hours is deleted by any use."""
    staged, _ = worlds
    for i in range(len(TENANTS)):
        assert staged.transfer(spark, i, NOW1).status == "SUCCESS"
    change_source(pg_conn, source)
    assert staged.transfer(spark, 0, NOW2).status == "SUCCESS"  # batch of NOW2's tick: d1..d3 pending
    assert len(staged_files(staged.staging)) == 3
    assert staged.transfer(spark, 1, NOW3).status == "SUCCESS"  # the next tick: a new batch
    assert staged.rows(1) == source_until(pg_conn, source, TENANTS[1], NOW3)
    (old,) = [b for b in batches(staged.staging) if b.name.startswith(NOW2.strftime("%Y%m%dT%H%M%S"))]
    # files by sorted tenant id: acme (d0, taken), back\\slash (d3), o'reilly (d1, released), say "hi" (d2)
    assert sorted(p.name for p in old.glob("*.parquet")) == ["t00001.parquet", "t00003.parquet"]
    import json
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["created_epoch"] -= 25 * 3600  # older than the default 24 h
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert staged.transfer(spark, 2, NOW3).status == "SUCCESS"
    assert not old.exists()
    assert staged.rows(2) == source_until(pg_conn, source, TENANTS[2], NOW3)


def test_staging_is_refused_where_it_cannot_work(tmp_path):
    base = {"name": "src", "vendor": "postgres", "connection": pg_connection_config()}
    model = {"model_name": MODEL, "source_name": "src", "source_table": "s.events",
             "organization_column": "organization_id", "min_start_time_epoch": epoch(START),
             "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                         {"name_in_source": "u", "data_type": "string", "is_last_modified": True}]}
    with pytest.raises(ConfigError, match="staging"):
        parse_config({"sources": [{**base, "staging": {"path": "s3://bucket/prefix"}}], "models": []})
    with pytest.raises(ConfigError, match="text last-modified"):
        parse_config({"sources": [{**base, "staging": {"path": str(tmp_path)}}], "models": [model]}, now=NOW1)
    with pytest.raises(ConfigError, match="schema-tenanted"):
        parse_config({"sources": [{**base, "tenancy": "schema_tenanted", "staging": {"path": str(tmp_path)}}],
                      "models": []})
    with pytest.raises(ConfigError, match="staging"):
        parse_config({"sources": [{**base, "vendor": "mysql", "staging": {"path": str(tmp_path)}}], "models": []})
