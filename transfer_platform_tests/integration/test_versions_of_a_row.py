"""A row that changed twice inside the lookback (the reference: "duplicates resolved via the last
modified timestamp").

A Parquet lake is append-only: each change of a row is a new file, so the incremental transfer
after a second change reads two versions of one key (the lookback re-reads the first). The
destination must then hold the later version and the transfer succeed, on every destination
(PostgreSQL, Delta, object storage) and on both paths (small windows read together into this
process as Arrow; large ones staged by Spark's executors); a copy of a file changes nothing. Two
different versions with the same last-modified value are a real conflict: refused, naming key,
value and both files, nothing written, the watermark where it was. The lake is a folder, or a
bucket of a real S3-compatible server (moto, in its own process). Expectations come from the
lake's files: per key, the row with the latest last-modified value.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from transfer_platform.config.models import ColumnConfig, ModelConfig, PlatformConfig
from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.manifests import new_signing_key
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform.transfers.integrity import check_integrity
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import ModelSummary
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.support.destinations import WITHOUT_S3
from transfer_platform_tests.support.mysql import mysql_connection_config
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.s3_server import S3Server

pytestmark = pytest.mark.integration

TENANT = "org-acme"
SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()),
                    ("updated_at", pa.timestamp("us", tz="UTC")), ("v", pa.string())])
NOW = datetime.now(UTC).replace(microsecond=0)
KEY = 3


@pytest.fixture(params=["together", "alone"])
def tuning(request: pytest.FixtureRequest) -> Tuning:
    """Windows read together into this process (the default for small ones), or each read alone
    and staged by Spark's executors (``run_rows`` 0: every window is "large")."""
    return Tuning(run_rows=0) if request.param == "alone" else DEFAULT


@pytest.fixture(params=WITHOUT_S3)
def destination(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    vendor = request.param
    if vendor == "postgres":
        return {"vendor": "postgres", "connection": pg_connection_config(request.getfixturevalue("dst_schema"))}
    if vendor == "delta":
        return {"vendor": "delta", "connection": {"path": str(tmp_path / "delta")}}
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", new_signing_key()[0])
    return {"vendor": "local", "connection": {"path": str(tmp_path / "exports"), "prefix": "tp/acme"},
            "signing_key": "${TP_TEST_SIGNING_KEY}"}


@dataclass
class Lake:
    """The table ``items`` of a lake: files in a folder (``root``), mirrored into a bucket when
    ``server`` is given (the source then reads the bucket)."""

    root: Path
    server: S3Server | None = None
    bucket: str = ""

    def connection(self) -> dict:
        if self.server is None:
            return {"path": str(self.root)}
        return {"bucket": self.bucket, "prefix": "warehouse", "endpoint_url": self.server.endpoint,
                "path_style": True, "access_key_id": "${TP_LAKE_KEY_ID}", "secret_access_key": "${TP_LAKE_SECRET}"}

    def write(self, name: str, rows: list[tuple[int, datetime, str]]) -> str:
        """A new file of ``rows``; returns the file as an error names it."""
        file = self.root / "items" / name
        file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist([{"id": i, "organization_id": TENANT, "updated_at": at, "v": v}
                                             for i, at, v in rows], schema=SCHEMA), file)
        return self._put(name, file.read_bytes())

    def copy(self, name: str, new_name: str) -> str:
        data = (self.root / "items" / name).read_bytes()
        (self.root / "items" / new_name).write_bytes(data)
        return self._put(new_name, data)

    def _put(self, name: str, data: bytes) -> str:
        if self.server is None:
            return str(self.root / "items" / name)
        self.server.client().put_object(Bucket=self.bucket, Key=f"warehouse/items/{name}", Body=data)
        return f"s3://{self.bucket}/warehouse/items/{name}"


@pytest.fixture(params=["folder", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lake:
    if request.param == "folder":
        return Lake(tmp_path / "lake")
    server: S3Server = request.getfixturevalue("s3")  # the session's S3 server (transfer_platform_tests/conftest.py)
    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    monkeypatch.setenv("TP_LAKE_KEY_ID", server.access_key)
    monkeypatch.setenv("TP_LAKE_SECRET", server.secret_key)
    return Lake(tmp_path / "lake", server, bucket)


def items_config(source: dict, read: dict, destination: dict) -> PlatformConfig:
    """Model ``items`` (id, organization_id, updated_at, v) read from ``source`` as ``read`` says
    (``source_table`` or ``source_query``), for recipient ``acme`` into ``destination``."""
    return parse_config({
        "sources": [source],
        "models": [{
            "model_name": "items", "source_name": source["name"], **read,
            "organization_column": "organization_id",
            "min_start_time_epoch": int((NOW - timedelta(days=2)).timestamp()),
            "max_transfer_time_window_seconds": 86_400,
            "columns": [
                {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                {"name_in_source": "organization_id", "data_type": "string"},
                {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
                {"name_in_source": "v", "data_type": "string"},
            ]}],
        "recipients": [{"name": "acme", "id_in_provider_system": TENANT}],
        "destinations": [{"name": "acme_dest", "recipient": "acme", **destination}],
    })


def config_for(lake: Lake, destination: dict) -> PlatformConfig:
    return items_config({"name": "lake", "vendor": "parquet", "connection": lake.connection(),
                         "lookback_window": 600}, {"source_table": "items"}, destination)


def latest_in_lake(lake: Lake) -> list[dict]:
    """Per key, the row with the latest last-modified value among all the lake's files."""
    latest: dict[int, dict] = {}
    for row in pq.read_table(lake.root / "items", schema=SCHEMA).to_pylist():
        if row["id"] not in latest or row["updated_at"] > latest[row["id"]]["updated_at"]:
            latest[row["id"]] = row
    return sorted(latest.values(), key=lambda r: r["id"])


def transfer(spark, config: PlatformConfig, transfer_id: str, tuning: Tuning = DEFAULT) -> ModelSummary:
    writer = writer_for(config.destination("acme_dest"))
    try:
        (summary,) = run_transfer(TransferRequest(spark=spark, config=config,
                                                  order=TransferOrder(destination="acme_dest"), writer=writer,
                                                  transfer_id=transfer_id, now=datetime.now(UTC),
                                                  tuning=tuning),
                                  config.models)
    finally:
        writer.close()
    return summary


def held(config: PlatformConfig, tmp_path: Path) -> tuple[list[dict], list[str]]:
    """What the recipient holds: the table's rows (for object storage, per key the latest version
    among the delivered files) and, for object storage, the files themselves."""
    destination = config.destination("acme_dest")
    files: list[str] = []
    if destination.vendor == "postgres":
        with psycopg.connect(host="127.0.0.1", dbname="test", user="postgres", autocommit=True) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            found = conn.execute(f'SELECT id, organization_id, updated_at, v FROM "{destination.connection.schema_}".items')
            rows = [dict(zip(["id", "organization_id", "updated_at", "v"], r, strict=True)) for r in found]
    elif destination.vendor == "delta":
        rows = DeltaTable(str(tmp_path / "delta" / "items")).to_pyarrow_table().select(SCHEMA.names).to_pylist()
    else:
        root = tmp_path / "exports"
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        latest: dict[int, dict] = {}
        for file in (root / "tp" / "acme" / "items").rglob("*.parquet"):
            for row in pq.read_table(file).select(SCHEMA.names).to_pylist():
                if row["id"] not in latest or row["updated_at"] > latest[row["id"]]["updated_at"]:
                    latest[row["id"]] = row
        rows = list(latest.values())
    return sorted(rows, key=lambda r: r["id"]), files


def committed(config: PlatformConfig):  # the model's committed ModelState
    writer = writer_for(config.destination("acme_dest"))
    try:
        return writer.committed_state(config.model("items")).state
    finally:
        writer.close()


def backfilled(spark, tmp_path: Path, lake: Lake, destination: dict, tuning: Tuning) -> PlatformConfig:
    """A lake whose row ``KEY`` changed once a few minutes ago (its own file), delivered."""
    lake.write("part-0.parquet", [(i, NOW - timedelta(days=1, hours=i), f"v{i}") for i in range(1, 6)])
    lake.write("part-1.parquet", [(KEY, NOW - timedelta(minutes=4), "first change")])
    config = config_for(lake, destination)
    summary = transfer(spark, config, "backfill", tuning)
    assert summary.status == "SUCCESS", summary.error
    assert held(config, tmp_path)[0] == latest_in_lake(lake)
    return config


def test_a_row_changed_twice_inside_the_lookback_arrives_as_its_latest_version(
        spark, tmp_path: Path, lake: Lake, destination: dict, tuning: Tuning) -> None:
    config = backfilled(spark, tmp_path, lake, destination, tuning)
    lake.write("part-2.parquet", [(KEY, NOW - timedelta(minutes=2), "second change")])
    lake.copy("part-2.parquet", "part-2-copy.parquet")  # the same file landed twice

    summary = transfer(spark, config, "incremental", tuning)

    assert summary.status == "SUCCESS", summary.error
    rows = held(config, tmp_path)[0]
    assert rows == latest_in_lake(lake)
    assert next(r for r in rows if r["id"] == KEY)["v"] == "second change"
    # the lookback re-read the first change: it and the copy were left out, one row delivered
    assert (summary.rows_transferred, summary.versions_superseded) == (1, 2)
    assert summary.as_dict()["versions_superseded"] == 2
    if destination["vendor"] != "local":  # a table to compare: the source's latest versions match it
        report = check_integrity(spark, config, "acme_dest", config.model("items"), datetime.now(UTC))
        assert (report.passed, report.rows_compared, report.incorrect) == (True, 5, 0), report


def test_two_different_versions_with_the_same_last_modified_value_are_refused_by_name(
        spark, tmp_path: Path, lake: Lake, destination: dict, tuning: Tuning) -> None:
    config = backfilled(spark, tmp_path, lake, destination, tuning)
    before, state = held(config, tmp_path), committed(config)
    when = NOW - timedelta(minutes=2)
    one = lake.write("part-2.parquet", [(KEY, when, "one value")])
    other = lake.write("part 3.parquet", [(KEY, when, "another value"), (KEY + 1, when, "fine")])

    summary = transfer(spark, config, "refused", tuning)

    assert summary.status == "ERROR"
    assert f"key id={KEY}" in summary.error
    assert f"updated_at={when.isoformat()}" in summary.error
    assert one in summary.error
    assert other in summary.error
    assert "part-1.parquet" not in summary.error  # the older version is no part of the conflict
    assert held(config, tmp_path) == before  # nothing written (no file either)
    assert committed(config) == state  # the watermark did not move


# -- a database's source_query that returns a key twice (a join over a table of changes) ----------

def changes_config(pg_schema: str, dst_schema: str) -> PlatformConfig:
    query = (f'SELECT e.id, e.organization_id, c.updated_at, c.payload AS v FROM "{pg_schema}".events e '
             f'JOIN "{pg_schema}".changes c ON c.id = e.id')
    return items_config({"name": "db", "vendor": "postgres", "connection": pg_connection_config()},
                        {"source_query": query},
                        {"vendor": "postgres", "connection": pg_connection_config(dst_schema)})


def changes_source(pg_conn, pg_schema: str, changes: list[tuple[int, datetime, str]]) -> None:
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".events (id bigint PRIMARY KEY, organization_id text)')
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".changes (id bigint, updated_at timestamptz, payload text)')
    pg_conn.execute(f'INSERT INTO "{pg_schema}".events VALUES (1, %s), (2, %s), (3, %s)', (TENANT, TENANT, "globex"))
    with pg_conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{pg_schema}".changes VALUES (%s, %s, %s)', changes)


def test_a_source_query_returning_a_key_twice_delivers_its_latest_version(
        spark, pg_conn, pg_schema: str, dst_schema: str, tuning: Tuning) -> None:
    # all in yesterday's daily window (the grid is UTC days): relative to "now", the versions
    # would fall in two windows in the first hours after midnight, each delivering its own latest
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    changes_source(pg_conn, pg_schema, [
        (1, day + timedelta(hours=1), "old"), (1, day + timedelta(hours=3), "new"),
        (2, day + timedelta(hours=2), "only"), (3, day + timedelta(hours=3), "other tenant's")])
    config = changes_config(pg_schema, dst_schema)

    summary = transfer(spark, config, "t1", tuning)

    assert summary.status == "SUCCESS", summary.error
    assert [(r["id"], r["v"]) for r in held(config, Path())[0]] == [(1, "new"), (2, "only")]
    assert (summary.rows_transferred, summary.versions_superseded) == (2, 1)


def test_a_source_query_conflict_names_the_key_the_value_and_both_rows_values(
        spark, pg_conn, pg_schema: str, dst_schema: str, tuning: Tuning) -> None:
    when = NOW - timedelta(hours=1)
    changes_source(pg_conn, pg_schema, [(1, when, "one payload"), (1, when, "another payload"),
                                        (2, when, "fine")])
    config = changes_config(pg_schema, dst_schema)

    summary = transfer(spark, config, "t1", tuning)

    assert summary.status == "ERROR"
    assert "key id=1" in summary.error
    assert f"updated_at={when.isoformat()}" in summary.error
    assert "v='one payload'" in summary.error
    assert "v='another payload'" in summary.error
    assert held(config, Path())[0] == []  # nothing delivered
    assert committed(config).high_watermark is None


# -- a database table whose key is unique needs no resolution by Spark ------------------------------

def key_model(source_table: str | None, *, query: str | None = None) -> ModelConfig:
    return ModelConfig(model_name="m", source_name="db", source_table=source_table, source_query=query,
                       organization_column="org", columns=[
                           ColumnConfig(name_in_source="id", data_type="integer", is_primary_key=True),
                           ColumnConfig(name_in_source="Region", data_type="string", is_primary_key=True),
                           ColumnConfig(name_in_source="updated_at", data_type="timestamp", is_last_modified=True)])


UNIQUE_CASES = [  # table DDL (after the name), is the model's key (id, Region) unique in it
    ("primary-key-on-the-key", '(id bigint, "Region" text, org text, updated_at timestamptz, PRIMARY KEY (id, "Region"))', True),
    ("primary-key-on-part-of-the-key", '(id bigint PRIMARY KEY, "Region" text, org text, updated_at timestamptz)', True),
    ("no-index", '(id bigint, "Region" text, org text, updated_at timestamptz)', False),
    ("unique-with-another-column", '(id bigint, "Region" text, org text, updated_at timestamptz, UNIQUE (id, org))', False),
    ("unique-with-included-column", '(id bigint, "Region" text, org text, updated_at timestamptz, '
                                    'UNIQUE (id) INCLUDE (org))', True),
]


@pytest.mark.parametrize(("ddl", "unique"), [c[1:] for c in UNIQUE_CASES], ids=[c[0] for c in UNIQUE_CASES])
def test_postgres_says_whether_a_table_keeps_the_key_unique(pg_conn, pg_schema: str, ddl: str, unique: bool) -> None:
    pg_conn.execute(f'CREATE TABLE "{pg_schema}"."T" {ddl}')
    reader = reader_for(parse_config({
        "sources": [{"name": "db", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [], "recipients": [], "destinations": []}).source("db"))
    request = ReadRequest(key_model(f"{pg_schema}.T"), TENANT, None)  # type: ignore[arg-type]
    assert reader.keys_unique(request) is unique
    assert reader.keys_unique(ReadRequest(key_model(None, query=f'SELECT * FROM "{pg_schema}"."T"'), TENANT,
                                          None)) is False  # type: ignore[arg-type]
    pg_conn.execute(f'CREATE VIEW "{pg_schema}".v AS SELECT * FROM "{pg_schema}"."T"')
    assert reader.keys_unique(ReadRequest(key_model(f"{pg_schema}.v"), TENANT, None)) is False  # type: ignore[arg-type]
    assert reader.keys_unique(ReadRequest(key_model(f"{pg_schema}.missing"), TENANT, None)) is False  # type: ignore[arg-type]


@pytest.mark.parametrize(("ddl", "unique"), [
    ("(id BIGINT, region VARCHAR(10), org VARCHAR(10), updated_at DATETIME(6), PRIMARY KEY (id, region))", True),
    ("(id BIGINT, region VARCHAR(10), org VARCHAR(10), updated_at DATETIME(6), UNIQUE KEY (id, org))", False),
    ("(id BIGINT, region VARCHAR(10), org VARCHAR(10), updated_at DATETIME(6))", False),
], ids=["primary-key", "unique-with-another-column", "no-index"])
def test_mysql_says_whether_a_table_keeps_the_key_unique(mysql_conn, mysql_database: str, ddl: str,
                                                         unique: bool) -> None:
    with mysql_conn.cursor() as cur:
        cur.execute(f"CREATE TABLE t {ddl}")
    reader = reader_for(parse_config({
        "sources": [{"name": "db", "vendor": "mysql", "connection": mysql_connection_config(mysql_database)}],
        "models": [], "recipients": [], "destinations": []}).source("db"))
    assert reader.keys_unique(ReadRequest(key_model("t"), TENANT, None)) is unique  # type: ignore[arg-type]
