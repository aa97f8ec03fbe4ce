"""A row that changed twice inside the lookback (the reference: "duplicates resolved via the last
modified timestamp").

A Parquet lake is append-only: each change of a row is a new file, so the incremental transfer
after a second change reads two versions of one key (the lookback re-reads the first). The
destination must then hold the later version and the transfer succeed, on every destination
(PostgreSQL, Delta, object storage) and on both paths (small windows read together into this
process as Arrow; large ones staged by Spark's executors); a copy of a file changes nothing. Two
different versions with the same last-modified value are a real conflict: refused, naming key,
value and both files, nothing written, the watermark where it was. Expectations come from the
lake's files: per key, the row with the latest last-modified value.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from transfer_platform.config import parse_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.manifests import new_signing_key
from transfer_platform.transfers import runner
from transfer_platform.transfers.runner import ModelSummary, TransferRequest, run_transfer
from transfer_platform_tests.conftest import pg_connection_config

pytestmark = pytest.mark.integration

TENANT = "org-acme"
SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()),
                    ("updated_at", pa.timestamp("us", tz="UTC")), ("v", pa.string())])
NOW = datetime.now(UTC).replace(microsecond=0)
KEY = 3


@pytest.fixture(params=["together", "alone"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Windows read together into this process (the default for small ones), or each read alone
    and staged by Spark's executors (``RUN_ROWS`` 0: every window is "large")."""
    if request.param == "alone":
        monkeypatch.setattr(runner, "RUN_ROWS", 0)
    return request.param


@pytest.fixture(params=["postgres", "delta", "local"])
def destination(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    vendor = request.param
    if vendor == "postgres":
        return {"vendor": "postgres", "connection": pg_connection_config(request.getfixturevalue("dst_schema"))}
    if vendor == "delta":
        return {"vendor": "delta", "connection": {"path": str(tmp_path / "delta")}}
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", new_signing_key()[0])
    return {"vendor": "local", "connection": {"path": str(tmp_path / "exports"), "prefix": "tp/acme"},
            "signing_key": "${TP_TEST_SIGNING_KEY}"}


def config_for(lake: Path, destination: dict) -> PlatformConfig:
    return parse_config({
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": str(lake)},
                     "lookback_window": 600}],
        "models": [{
            "model_name": "items", "source_name": "lake", "source_table": "items",
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


def write_file(lake: Path, name: str, rows: list[tuple[int, datetime, str]]) -> Path:
    file = lake / "items" / name
    file.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{"id": i, "organization_id": TENANT, "updated_at": at, "v": v}
                                         for i, at, v in rows], schema=SCHEMA), file)
    return file


def latest_in_lake(lake: Path) -> list[dict]:
    """Per key, the row with the latest last-modified value among all the lake's files."""
    latest: dict[int, dict] = {}
    for row in pq.read_table(lake / "items", schema=SCHEMA).to_pylist():
        if row["id"] not in latest or row["updated_at"] > latest[row["id"]]["updated_at"]:
            latest[row["id"]] = row
    return sorted(latest.values(), key=lambda r: r["id"])


def transfer(spark, config: PlatformConfig, transfer_id: str) -> ModelSummary:  # noqa: ANN001
    writer = writer_for(config.destination("acme_dest"))
    try:
        (summary,) = run_transfer(TransferRequest(spark=spark, config=config, destination="acme_dest", writer=writer,
                                                  transfer_id=transfer_id, now=datetime.now(UTC)), config.models)
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


def committed(config: PlatformConfig):  # noqa: ANN201 - the model's committed ModelState
    writer = writer_for(config.destination("acme_dest"))
    try:
        return writer.committed_state(config.model("items")).state
    finally:
        writer.close()


def backfilled(spark, tmp_path: Path, destination: dict) -> tuple[Path, PlatformConfig]:  # noqa: ANN001
    """A lake whose row ``KEY`` changed once a few minutes ago (its own file), delivered."""
    lake = tmp_path / "lake"
    write_file(lake, "part-0.parquet", [(i, NOW - timedelta(days=1, hours=i), f"v{i}") for i in range(1, 6)])
    write_file(lake, "part-1.parquet", [(KEY, NOW - timedelta(minutes=4), "first change")])
    config = config_for(lake, destination)
    summary = transfer(spark, config, "backfill")
    assert summary.status == "SUCCESS", summary.error
    assert held(config, tmp_path)[0] == latest_in_lake(lake)
    return lake, config


def test_a_row_changed_twice_inside_the_lookback_arrives_as_its_latest_version(
        spark, tmp_path: Path, destination: dict, path: str) -> None:
    lake, config = backfilled(spark, tmp_path, destination)
    second = write_file(lake, "part-2.parquet", [(KEY, NOW - timedelta(minutes=2), "second change")])
    shutil.copy(second, lake / "items" / "part-2-copy.parquet")  # the same file landed twice

    summary = transfer(spark, config, "incremental")

    assert summary.status == "SUCCESS", summary.error
    rows = held(config, tmp_path)[0]
    assert rows == latest_in_lake(lake)
    assert next(r for r in rows if r["id"] == KEY)["v"] == "second change"
    # the lookback re-read the first change: it and the copy were left out, one row delivered
    assert (summary.rows_transferred, summary.versions_superseded) == (1, 2)
    assert summary.as_dict()["versions_superseded"] == 2


def test_two_different_versions_with_the_same_last_modified_value_are_refused_by_name(
        spark, tmp_path: Path, destination: dict, path: str) -> None:
    lake, config = backfilled(spark, tmp_path, destination)
    before, state = held(config, tmp_path), committed(config)
    when = NOW - timedelta(minutes=2)
    one = write_file(lake, "part-2.parquet", [(KEY, when, "one value")])
    other = write_file(lake, "part 3.parquet", [(KEY, when, "another value"), (KEY + 1, when, "fine")])

    summary = transfer(spark, config, "refused")

    assert summary.status == "ERROR"
    assert f"key id={KEY}" in summary.error
    assert f"updated_at={when.isoformat()}" in summary.error
    assert str(one) in summary.error
    assert str(other) in summary.error
    assert "part-1.parquet" not in summary.error  # the older version is no part of the conflict
    assert held(config, tmp_path) == before  # nothing written (no file either)
    assert committed(config) == state  # the watermark did not move
