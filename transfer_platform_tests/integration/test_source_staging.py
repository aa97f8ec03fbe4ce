"""Source staging: the due transfers of a model read the source once per tick, and every
destination receives exactly what it receives without staging.

A real PostgreSQL source (tenant ids with quotes and a backslash, and a decoy tenant that a broken
escape would select), four destinations (three PostgreSQL schemas, one local Delta table), one
world with staging and one without, the same writes and the same transfers; the statements sent
to the source are counted by the source layer's own counter (``jdbc.SOURCE_STATEMENTS``). The
staging is a folder or a bucket of a real S3-compatible server (``s3``, moto's standalone server in
its own process), each test that can run on both running on both.
"""

from __future__ import annotations

import json
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from transfer_platform.config.models import PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.errors import ConfigError
from transfer_platform.sources import jdbc
from transfer_platform.transfers.order import TransferOrder
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
from transfer_platform_tests.support.s3_server import S3Server

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
    staging (``staging``: the source's ``staging`` entry)."""

    def __init__(self, tmp: Path, source_schema: str, staging: dict | None, label: str) -> None:
        self.tmp, self.source_schema, self.staging = tmp, source_schema, staging
        tag = uuid.uuid4().hex[:8]
        self.places = [Place(f"tp_stg_{tag}_{label}{i}", tmp / f"{label}{i}", s3=lambda: None)
                       for i in range(len(TENANTS))]
        self.destinations: list[TestDestination] = [
            delta(p) if i == 2 else postgres(p) for i, p in enumerate(self.places)]

    def config(self, *, broken: int | None = None, staging: dict | None = None) -> PlatformConfig:
        source = {"name": "src", "vendor": "postgres", "connection": pg_connection_config()}
        entry = staging or self.staging
        if entry is not None:
            source["staging"] = entry
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
            (summary,) = run_transfer(TransferRequest(spark=spark, config=config,
                                                      order=TransferOrder(destination=name), writer=writer,
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


class Area:
    """The staging as the tests see it (the model's objects, under ``src/events/``): a folder, or
    a bucket read with the server's own client."""

    def __init__(self, kind: str, tmp: Path, s3: S3Server | None = None) -> None:
        self.kind = kind
        if kind == "folder":
            self.folder = tmp / "staging"
            self.entry = {"path": str(self.folder)}
        else:
            assert s3 is not None
            self.bucket, self.client = f"tp-stg-{uuid.uuid4().hex[:8]}", s3.client()
            s3.create_bucket(self.bucket)
            self.entry = {"s3": s3_entry(s3, self.bucket)}

    def objects(self) -> list[str]:
        """Every object of the model's staging, relative to ``src/events/``."""
        if self.kind == "folder":
            root = self.folder / "src" / "events"
            return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=f"{PREFIX}/src/events/")
        return sorted(item["Key"].removeprefix(f"{PREFIX}/src/events/") for page in pages
                      for item in page.get("Contents", []))

    def batches(self) -> list[str]:
        """The batches' names (in a folder, its batch folders: an emptied one counts)."""
        if self.kind == "folder":
            return sorted(p.name for p in (self.folder / "src" / "events" / "batches").glob("*") if p.is_dir())
        return sorted({k.split("/")[1] for k in self.objects() if k.startswith("batches/")})

    def files(self, batch: str | None = None) -> list[str]:
        """The staged Parquet objects' names (of ``batch``, or of every batch)."""
        return sorted(k.rsplit("/", 1)[-1] for k in self.objects()
                      if k.endswith(".parquet") and (batch is None or k.startswith(f"batches/{batch}/")))

    def read(self, key: str) -> bytes:
        if self.kind == "folder":
            return (self.folder / "src" / "events" / key).read_bytes()
        return self.client.get_object(Bucket=self.bucket, Key=f"{PREFIX}/src/events/{key}")["Body"].read()

    def write(self, key: str, data: bytes) -> None:
        if self.kind == "folder":
            path = self.folder / "src" / "events" / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        else:
            self.client.put_object(Bucket=self.bucket, Key=f"{PREFIX}/src/events/{key}", Body=data)


PREFIX = "staging/here"


def s3_entry(s3: S3Server, bucket: str, **changes: str) -> dict:
    """A staging bucket's connection (the fields of an S3 destination's), its keys in variables."""
    return {"bucket": bucket, "prefix": PREFIX, "endpoint_url": s3.endpoint, "path_style": True,
            "access_key_id": "${TP_TEST_S3_KEY_ID}", "secret_access_key": "${TP_TEST_S3_SECRET}", **changes}


def use_keys(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TP_TEST_S3_KEY_ID", s3.access_key)
    monkeypatch.setenv("TP_TEST_S3_SECRET", s3.secret_key)


@pytest.fixture(params=["folder", "bucket"])
def area(request, tmp_path, monkeypatch) -> Area:
    if request.param == "folder":
        return Area("folder", tmp_path)
    s3 = request.getfixturevalue("s3")
    use_keys(s3, monkeypatch)
    return Area("bucket", tmp_path, s3)


@pytest.fixture
def worlds(tmp_path, source, area):
    staged = World(tmp_path, source, area.entry, "on")
    plain = World(tmp_path, source, None, "off")
    yield staged, plain
    staged.drop()
    plain.drop()


@pytest.fixture
def world(tmp_path, source):
    """One world, its staging given to each configuration."""
    one = World(tmp_path, source, None, "on")
    yield one
    one.drop()


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


def statements(kind: str) -> int:
    return jdbc.SOURCE_STATEMENTS[("src", kind)]


def only_demands_left(area: Area) -> bool:
    """Every batch gone: what stays is each destination's demand record."""
    return area.batches() == [] and all(k.startswith("demand/") for k in area.objects())


def test_one_source_query_per_tick_and_each_destination_as_without_staging(spark, worlds, area, pg_conn, source):
    staged, plain = worlds
    for world in worlds:  # the backfills read the source themselves (nothing to share yet)
        for i in range(len(TENANTS)):
            assert world.transfer(spark, i, NOW1).status == "SUCCESS"
    assert area.batches() == []
    assert len(area.objects()) == len(TENANTS)  # each destination's demand
    change_source(pg_conn, source)

    before = (statements("rows"), statements("schema"), statements("catalog"))
    files_left = []
    for i in range(len(TENANTS)):
        assert staged.transfer(spark, i, NOW2).status == "SUCCESS"
        files_left.append(len(area.files()))
    rows_q, schema_q, catalog_q = (statements("rows") - before[0], statements("schema") - before[1],
                                   statements("catalog") - before[2])
    # one statement read rows for all four (over 3+ windows each); the first transfer asked the
    # source for its columns (no row) before it knew there would be a batch; nothing else
    assert (rows_q, schema_q, catalog_q) == (1, 1, 0)
    # each tenant's file is deleted once its destination committed; the batch after the last one
    assert files_left == [3, 2, 1, 0]
    assert only_demands_left(area), area.objects()

    for i in range(len(TENANTS)):
        assert plain.transfer(spark, i, NOW2).status == "SUCCESS"
    for i, tenant in enumerate(TENANTS):
        expected = source_until(pg_conn, source, tenant, NOW2)
        assert staged.rows(i) == plain.rows(i) == expected, tenant
        assert all(r[1] == tenant for r in staged.rows(i))


def test_concurrent_transfers_of_a_tick_share_one_batch(spark, worlds, area, pg_conn, source):
    """The four transfers of a tick at once, in four threads (each its own store and lock, as
    separate processes): the store's lock lets one of them read the source, the others join its
    batch."""
    staged, _ = worlds
    for i in range(len(TENANTS)):
        assert staged.transfer(spark, i, NOW1).status == "SUCCESS"
    change_source(pg_conn, source)
    before = statements("rows")
    with ThreadPoolExecutor(len(TENANTS)) as pool:
        results = list(pool.map(lambda i: staged.transfer(spark, i, NOW2), range(len(TENANTS))))
    assert [r.status for r in results] == ["SUCCESS"] * len(TENANTS)
    assert statements("rows") - before == 1
    for i, tenant in enumerate(TENANTS):
        assert staged.rows(i) == source_until(pg_conn, source, tenant, NOW2), tenant
    assert only_demands_left(area), area.objects()


def test_a_failing_destination_does_not_block_the_others_and_takes_its_rows_later(spark, worlds, area, pg_conn,
                                                                                  source):
    staged, _ = worlds
    for i in range(len(TENANTS)):
        assert staged.transfer(spark, i, NOW1).status == "SUCCESS"
    change_source(pg_conn, source)
    broken = staged.config(broken=1)
    results = [staged.transfer(spark, i, NOW2, broken) for i in range(len(TENANTS))]
    assert [r.status for r in results] == ["SUCCESS", "ERROR", "SUCCESS", "SUCCESS"]
    for i in (0, 2, 3):
        assert staged.rows(i) == source_until(pg_conn, source, TENANTS[i], NOW2)
    assert len(area.files()) == 1  # d1's rows wait for d1
    before = statements("rows")
    assert staged.transfer(spark, 1, NOW2 + timedelta(minutes=1)).status == "SUCCESS"  # same tick, mended
    assert statements("rows") == before  # from the batch, planned up to its upper bound
    assert staged.rows(1) == source_until(pg_conn, source, TENANTS[1], NOW2)
    assert only_demands_left(area), area.objects()


def test_unreachable_staging_folder_reads_the_source_with_one_warning(spark, world, pg_conn, source, tmp_path,
                                                                      caplog):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the staging folder should be")
    config = world.config(staging={"path": str(blocker / "staging")})
    for i in range(len(TENANTS)):
        assert world.transfer(spark, i, NOW1, config).status == "SUCCESS"
    change_source(pg_conn, source)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        summary = world.transfer(spark, 0, NOW2, config)
    assert summary.status == "SUCCESS"
    warnings = [r.getMessage() for r in caplog.records if "source staging" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "reading the source directly" in warnings[0]
    assert "Fix: make sources.src.staging.path a writable folder" in warnings[0]
    assert world.rows(0) == source_until(pg_conn, source, TENANTS[0], NOW2)


@pytest.mark.parametrize("case", ["closed port", "missing bucket", "wrong key"])
def test_unreachable_staging_bucket_reads_the_source_with_one_warning(spark, world, pg_conn, source, s3, case,
                                                                      monkeypatch, caplog):
    """A bucket that cannot be used: the transfer reads the source itself, after one warning that
    names the bucket (never the secret), and delivers what the source holds."""
    use_keys(s3, monkeypatch)
    monkeypatch.setenv("TP_TEST_WRONG_SECRET", "not-the-secret-" + s3.secret_key)
    bucket = f"tp-stg-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(bucket)
    entry, expected = {
        "closed port": (s3_entry(s3, bucket, endpoint_url="http://127.0.0.1:9"), "the endpoint cannot be reached"),
        "missing bucket": (s3_entry(s3, "tp-stg-no-such-bucket"), "NoSuchBucket"),
        "wrong key": (s3_entry(s3, bucket, secret_access_key="${TP_TEST_WRONG_SECRET}"), "SignatureDoesNotMatch"),
    }[case]
    config = world.config(staging={"s3": entry})
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert world.transfer(spark, 0, NOW1, config).status == "SUCCESS"
        change_source(pg_conn, source)
        assert world.transfer(spark, 0, NOW2, config).status == "SUCCESS"
        assert world.transfer(spark, 1, NOW2, config).status == "SUCCESS"
    assert world.rows(0) == source_until(pg_conn, source, TENANTS[0], NOW2)
    assert world.rows(1) == source_until(pg_conn, source, TENANTS[1], NOW2)
    warnings = [r.getMessage() for r in caplog.records if "source staging" in r.getMessage()]
    assert len(warnings) == 3, warnings  # one per transfer
    for warning in warnings:
        assert "reading the source directly" in warning, warning
        assert expected in warning, warning
        for named in (entry["bucket"], "s3:PutObject", "s3:ListBucket"):
            assert named in warning, warning
        assert s3.secret_key not in warning
    assert "staging.s3" in warnings[0]
    assert all(s3.secret_key not in r.getMessage() for r in caplog.records)
    if case != "missing bucket":
        assert s3.client().list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_stale_batch_is_released_and_max_age_sweeps(spark, worlds, area, pg_conn, source):
    """A destination pending in an earlier tick's batch does not use it (a new tick reads anew),
    and its tenant's file is deleted; a batch older than max_age_hours, and one without a
    manifest (its creator died), are deleted by any use."""
    staged, _ = worlds
    for i in range(len(TENANTS)):
        assert staged.transfer(spark, i, NOW1).status == "SUCCESS"
    change_source(pg_conn, source)
    assert staged.transfer(spark, 0, NOW2).status == "SUCCESS"  # batch of NOW2's tick: d1..d3 pending
    assert len(area.files()) == 3
    assert staged.transfer(spark, 1, NOW3).status == "SUCCESS"  # the next tick: a new batch
    assert staged.rows(1) == source_until(pg_conn, source, TENANTS[1], NOW3)
    (old,) = [b for b in area.batches() if b.startswith(NOW2.strftime("%Y%m%dT%H%M%S"))]
    # files by sorted tenant id: acme (d0, taken), back\\slash (d3), o'reilly (d1, released), say "hi" (d2)
    assert area.files(old) == ["t00001.parquet", "t00003.parquet"]
    manifest = json.loads(area.read(f"batches/{old}/manifest.json"))
    manifest["created_epoch"] -= 25 * 3600  # older than the default 24 h
    area.write(f"batches/{old}/manifest.json", json.dumps(manifest).encode())
    dead = "20240501T093000000000-0000000000000000-deadbeef"  # a killed creator's: no manifest
    area.write(f"batches/{dead}/t00000.parquet", b"half a file")
    assert staged.transfer(spark, 2, NOW3).status == "SUCCESS"
    assert old not in area.batches()
    assert dead not in area.batches()  # unfinished: swept under the lock
    assert not any(k.startswith(f"batches/{old}/") for k in area.objects())
    assert staged.rows(2) == source_until(pg_conn, source, TENANTS[2], NOW3)


def test_staging_is_refused_where_it_cannot_work(tmp_path):
    base = {"name": "src", "vendor": "postgres", "connection": pg_connection_config()}
    model = {"model_name": MODEL, "source_name": "src", "source_table": "s.events",
             "organization_column": "organization_id", "min_start_time_epoch": epoch(START),
             "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                         {"name_in_source": "u", "data_type": "string", "is_last_modified": True}]}
    with pytest.raises(ConfigError, match="a bucket is given as staging.s3"):
        parse_config({"sources": [{**base, "staging": {"path": "s3://bucket/prefix"}}], "models": []})
    bucket = {"bucket": "stage", "endpoint_url": "http://127.0.0.1:9000", "access_key_id": "${TP_TEST_ID}",
              "secret_access_key": "${TP_TEST_SECRET}"}
    with pytest.raises(ConfigError, match=r"exactly one of path \(a folder\) and s3 \(a bucket.*it has neither"):
        parse_config({"sources": [{**base, "staging": {"max_age_hours": 2}}], "models": []})
    with pytest.raises(ConfigError, match=r"exactly one of path \(a folder\) and s3 \(a bucket.*it has both"):
        parse_config({"sources": [{**base, "staging": {"path": str(tmp_path), "s3": bucket}}], "models": []})
    with pytest.raises(ConfigError, match="staging"):  # S3Connection's own checks
        parse_config({"sources": [{**base, "staging": {"s3": {**bucket, "bucket": "Not_A_Bucket"}}}], "models": []})
    with pytest.raises(ConfigError, match="secret_access_key"):  # a secret is a variable's name, never the value
        parse_config({"sources": [{**base, "staging": {"s3": {**bucket, "secret_access_key": "plain"}}}],
                      "models": []})
    # the staging inside a destination's place (or it inside the staging's): its recipient could read every tenant
    inside = {"name": "d", "vendor": "delta", "recipient": "r", "connection": {**bucket, "prefix": "stage/d"}}
    for prefix in ("stage", "stage/d/staging"):
        with pytest.raises(ConfigError, match="overlap: its recipient could read every tenant's staged rows"):
            parse_config({"sources": [{**base, "staging": {"s3": {**bucket, "prefix": prefix}}}], "models": [],
                          "recipients": [{"name": "r", "id_in_provider_system": "acme"}], "destinations": [inside]})
    folder = {"name": "d", "vendor": "delta", "recipient": "r", "connection": {"path": str(tmp_path)}}
    with pytest.raises(ConfigError, match="staging folder"):
        parse_config({"sources": [{**base, "staging": {"path": str(tmp_path / "staging")}}], "models": [],
                      "recipients": [{"name": "r", "id_in_provider_system": "acme"}], "destinations": [folder]})
    apart = parse_config({"sources": [{**base, "staging": {"s3": {**bucket, "prefix": "stage/src"}}}], "models": [],
                          "recipients": [{"name": "r", "id_in_provider_system": "acme"}], "destinations": [inside]})
    assert apart.sources[0].staging.s3.prefix == "stage/src"
    staged = parse_config({"sources": [{**base, "staging": {"s3": bucket, "max_age_hours": 2}}], "models": []})
    assert staged.sources[0].staging.s3.bucket == "stage"
    assert staged.sources[0].staging.path is None
    with pytest.raises(ConfigError, match="text last-modified"):
        parse_config({"sources": [{**base, "staging": {"path": str(tmp_path)}}], "models": [model]}, now=NOW1)
    with pytest.raises(ConfigError, match="schema-tenanted"):
        parse_config({"sources": [{**base, "tenancy": "schema_tenanted", "staging": {"path": str(tmp_path)}}],
                      "models": []})
    with pytest.raises(ConfigError, match="staging"):
        parse_config({"sources": [{**base, "vendor": "mysql", "staging": {"path": str(tmp_path)}}], "models": []})
