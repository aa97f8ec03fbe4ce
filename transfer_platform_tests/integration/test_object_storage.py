"""Object storage (issue 14): Parquet files and signed manifests in a folder (``local``), in a
bucket of a real S3-compatible server (``s3``, moto's standalone server in its own process) and in
a container of a real Azure Blob Storage emulator (``abs``, Azurite in its own process).

Expectations come from the lake (the source) and the reference's rules, not from the writer: what
a consumer holds after reading every file the manifests name and keeping, per key, the latest
last-modified version is exactly the tenant's rows; every manifest verifies against the provider's
public key and every file against its checksum; a file no manifest names is not delivered and is
gone after the next transfer.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.destinations import object_storage
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.manifests import new_signing_key, verify_manifest
from transfer_platform.errors import ConnectionFailure
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.support.azurite import Azurite
from transfer_platform_tests.support.destinations import OBJECT_STORAGE
from transfer_platform_tests.support.platform import TENANTS, TS, lake_rows, write_config
from transfer_platform_tests.support.s3_server import S3Server

pytestmark = pytest.mark.integration

BUCKET = "recipient-exports"
PREFIX = "tp/acme"
PRIVATE, PUBLIC = new_signing_key()


@pytest.fixture(scope="module", autouse=True)
def _bucket(s3: S3Server) -> None:  # the session's S3 server (transfer_platform_tests/conftest.py)
    s3.create_bucket(BUCKET)


@pytest.fixture(autouse=True)
def _signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", PRIVATE)


def use_keys(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables the configurations' key references name."""
    monkeypatch.setenv("TP_TEST_S3_KEY_ID", server.access_key)
    monkeypatch.setenv("TP_TEST_S3_SECRET", server.secret_key)


def s3_connection(server: S3Server, prefix: str, **changes: str) -> dict:
    return {"bucket": BUCKET, "prefix": prefix, "endpoint_url": server.endpoint, "path_style": True,
            "access_key_id": "${TP_TEST_S3_KEY_ID}", "secret_access_key": "${TP_TEST_S3_SECRET}", **changes}


@dataclass
class Bucket:
    """What a consumer sees: the objects under the destination's prefix."""

    vendor: str
    root: Path | None = None
    server: S3Server | Azurite | None = None

    def objects(self) -> list[str]:
        if self.vendor == "local":
            return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())
        if self.vendor == "abs":
            return sorted(b.name for b in self.server.container(BUCKET).list_blobs())
        pages = self.server.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def get(self, key: str) -> bytes:
        if self.vendor == "local":
            return (self.root / key).read_bytes()
        if self.vendor == "abs":
            return self.server.container(BUCKET).get_blob_client(key).download_blob().readall()
        return self.server.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def manifests(self, model: str) -> list[dict]:
        return [json.loads(self.get(k)) for k in self.objects() if k.startswith(f"{PREFIX}/_manifests/{model}/")]

    def data_files(self, model: str) -> list[str]:
        return [k for k in self.objects() if k.startswith(f"{PREFIX}/{model}/") and k.endswith(".parquet")]


def platform(root: Path, vendor: str, server: S3Server | None, window: int | None = 86_400) -> tuple[Path, Bucket]:
    path = write_config(root, window=window)
    config = yaml.safe_load(path.read_text())
    if vendor == "local":
        connection, bucket = {"path": "exports", "prefix": PREFIX}, Bucket("local", root=root / "exports")
    elif vendor == "abs":
        connection = {"account_name": server.account, "container": BUCKET, "prefix": PREFIX,
                      "endpoint_url": server.endpoint, "account_key": "${TP_TEST_AZURE_KEY}"}
        bucket = Bucket("abs", server=server)
        for key in bucket.objects():  # the module's container: each test starts empty
            server.container(BUCKET).delete_blob(key)
    else:
        connection, bucket = s3_connection(server, PREFIX), Bucket("s3", server=server)
        for key in bucket.objects():  # the module's bucket: each test starts empty
            server.client().delete_object(Bucket=BUCKET, Key=key)
    config["destinations"] = [{"name": "acme_files", "recipient": "acme", "vendor": vendor,
                               "connection": connection, "signing_key": "${TP_TEST_SIGNING_KEY}"}]
    path.write_text(yaml.safe_dump(config))
    return path, bucket


def transfer(spark, config_path: Path, transfer_id: str, *, full_refresh: bool = False,
             tuning: Tuning = DEFAULT) -> list:
    config = load_config(config_path)
    writer = writer_for(config.destination("acme_files"), tuning)
    try:
        request = TransferRequest(spark=spark, config=config,
                                  order=TransferOrder(destination="acme_files", full_refresh=full_refresh),
                                  writer=writer, transfer_id=transfer_id, now=datetime.now(UTC),
                                  tuning=tuning)
        summaries = run_transfer(request, config.models)
    finally:
        writer.close()
    assert all(s.status == "SUCCESS" for s in summaries), [(s.model, s.error) for s in summaries]
    return summaries



def consumed(bucket: Bucket, model: str) -> list[dict]:
    """A consumer's reading, as the manifest documentation says: verify each manifest with the
    pinned public key and each file with its checksum; apply the manifests in increasing
    ``sequence`` (a FULL_REFRESH one discards what is held first), keeping per key the row with
    the latest last-modified value (on a tie the later one)."""
    manifests = sorted(bucket.manifests(model), key=lambda m: m["sequence"])
    latest: dict[int, dict] = {}
    for manifest in manifests:
        verify_manifest(manifest, PUBLIC)
        assert manifest["file_format"] == "PARQUET"
        assert manifest["model_name"] == model
        if manifest["transfer_type"] == "FULL_REFRESH":
            latest.clear()
        for entry in manifest["files"]:
            data = bucket.get(entry["data_file_key"])
            assert hashlib.sha256(data).hexdigest() == entry["sha256_checksum"]
            for row in pq.read_table(io.BytesIO(data)).to_pylist():
                if row["id"] not in latest or row["updated_at"] >= latest[row["id"]]["updated_at"]:
                    latest[row["id"]] = row
    return sorted(latest.values(), key=lambda r: r["id"])


def named_files(bucket: Bucket, model: str) -> set[str]:
    return {e["data_file_key"] for m in bucket.manifests(model) for e in m["files"]}


def append_to_lake(root: Path, table: str, rows: list[dict]) -> None:
    schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS), ("v", pa.string())])
    name = f"part-{len(list((root / 'lake' / table).iterdir()))}.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / "lake" / table / name)


@pytest.fixture(params=OBJECT_STORAGE)
def vendor(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def server(vendor: str, request: pytest.FixtureRequest,
           monkeypatch: pytest.MonkeyPatch) -> S3Server | Azurite | None:
    if vendor == "abs":
        azure = request.getfixturevalue("azure_blob")
        if BUCKET not in [c.name for c in azure.service().list_containers()]:
            azure.create_container(BUCKET)
        monkeypatch.setenv("TP_TEST_AZURE_KEY", azure.key)
        return azure
    if vendor != "s3":
        return None
    s3 = request.getfixturevalue("s3")
    use_keys(s3, monkeypatch)
    return s3


@pytest.mark.parametrize("written_by", ["transferring process", "executors"])
def test_backfill_then_incremental_deliver_exactly_the_tenants_rows(spark, tmp_path: Path, vendor: str,
                                                                    server: S3Server | None,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    written_by: str) -> None:
    """Small windows come to the transferring process (read together) and are written from there;
    with ``run_rows`` 0 every window is read alone and Spark's executors write its files (several
    per window, their digests read back where they were written)."""
    monkeypatch.chdir(tmp_path)
    tuning = DEFAULT
    if written_by == "executors":
        tuning = Tuning(run_rows=0, batch_rows=2)
    config_path, bucket = platform(tmp_path, vendor, server)
    began = datetime.now(UTC)
    summaries = transfer(spark, config_path, "backfill-1", tuning=tuning)
    days = {began.date(), datetime.now(UTC).date()}
    for model in ("items", "notes"):
        expected = lake_rows(tmp_path, model)
        assert consumed(bucket, model) == expected
        (manifest,) = bucket.manifests(model)
        assert manifest["transfer_type"] == "INCREMENTAL"
        assert manifest["transfer_id"] == "backfill-1"
        assert manifest["bucket_name"] == (str(tmp_path / "exports") if vendor == "local" else BUCKET)
        assert manifest["bucket_prefix"] == PREFIX
        assert manifest["manifest_file_key"] in bucket.objects()
        assert manifest["manifest_file_key"].startswith(f"{PREFIX}/_manifests/{model}/dt=")
        for key in named_files(bucket, model):  # the day the transfer began (or the next, past midnight)
            assert key.startswith(tuple(f"{PREFIX}/{model}/dt={day:%Y-%m-%d}/" for day in days))
        heads = {e["data_file_key"]: e["etag"] for e in manifest["files"]}
        for key, etag in heads.items():  # the ETag is the store's own
            if vendor == "s3":
                assert server.client().head_object(Bucket=BUCKET, Key=key)["ETag"].strip('"') == etag
            if vendor == "abs":
                blob = server.container(BUCKET).get_blob_client(key)
                assert blob.get_blob_properties().etag.strip('"') == etag
    if written_by == "executors":  # their files: row groups of Tuning.batch_rows rows
        groups = [pq.ParquetFile(io.BytesIO(bucket.get(k))).metadata for k in named_files(bucket, "items")]
        assert all(g.row_group(i).num_rows <= 2 for g in groups for i in range(g.num_row_groups))
        assert any(g.num_row_groups > 1 for g in groups)
    summary = {s.model: s for s in summaries}
    assert summary["items"].rows_transferred == len(lake_rows(tmp_path, "items"))
    assert summary["items"].volume_bytes == sum(
        len(bucket.get(k)) for k in named_files(bucket, "items"))

    # changes arrive: an update of a delivered row, a new row, and another tenant's new row
    old = lake_rows(tmp_path, "items")[0]
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    append_to_lake(tmp_path, "items", [
        {**old, "updated_at": now, "v": "changed"},
        {"id": 10_001, "organization_id": TENANTS["acme"], "updated_at": now, "v": "new"},
        {"id": 10_002, "organization_id": TENANTS["globex"], "updated_at": now, "v": "not acme's"},
    ])
    summaries = {s.model: s for s in transfer(spark, config_path, "incremental-2", tuning=tuning)}
    assert consumed(bucket, "items") == lake_rows(tmp_path, "items")
    assert {r["organization_id"] for r in consumed(bucket, "items")} == {TENANTS["acme"]}
    assert summaries["items"].delta_rows_transferred == 2
    second = [m for m in bucket.manifests("items") if m["transfer_id"] == "incremental-2"]
    assert len(second) == 1
    assert second[0]["transfer_type"] == "INCREMENTAL"
    # integrity checks read what the manifests name, as a consumer does
    config = load_config(config_path)
    writer = writer_for(config.destination("acme_files"))
    delivered = writer.read_table(spark, config.model("items")).toArrow().to_pylist()
    assert sorted(delivered, key=lambda r: r["id"]) == lake_rows(tmp_path, "items")


def test_a_failure_before_the_manifest_delivers_nothing_and_is_cleaned_next_time(
        spark, tmp_path: Path, vendor: str, server: S3Server | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config_path, bucket = platform(tmp_path, vendor, server)
    real = object_storage.ObjectStorageWriter._write_manifest
    calls = []

    def fail_on_the_second_window(self, *args, **kwargs) -> None:
        calls.append(1)
        if len(calls) == 2:  # the window's file is written; its manifest is not
            raise ConnectionFailure("object storage", reason="the connection dropped", fix="retry")
        real(self, *args, **kwargs)

    monkeypatch.setattr(object_storage.ObjectStorageWriter, "_write_manifest", fail_on_the_second_window)
    config = load_config(config_path)
    writer = writer_for(config.destination("acme_files"))
    request = TransferRequest(spark=spark, config=config, order=TransferOrder(destination="acme_files"),
                              writer=writer, transfer_id="dies", now=datetime.now(UTC))
    (items,) = run_transfer(request, [config.model("items")])
    writer.close()
    assert items.status != "SUCCESS"
    orphans = set(bucket.data_files("items")) - named_files(bucket, "items")
    assert len(orphans) == 1, "the failed window's file should exist, unnamed"
    (manifest,) = bucket.manifests("items")
    delivered = consumed(bucket, "items")
    assert delivered
    assert len(delivered) < len(lake_rows(tmp_path, "items"))
    watermark = writer.committed_state(config.model("items")).state.watermark
    assert [r for r in lake_rows(tmp_path, "items") if r["updated_at"] < watermark] == delivered

    monkeypatch.setattr(object_storage.ObjectStorageWriter, "_write_manifest", real)
    transfer(spark, config_path, "next")
    assert set(bucket.data_files("items")) == named_files(bucket, "items"), "an orphan file is left"
    assert consumed(bucket, "items") == lake_rows(tmp_path, "items")


def test_full_refresh_writes_a_new_generation(spark, tmp_path: Path, vendor: str, server: S3Server | None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config_path, bucket = platform(tmp_path, vendor, server)
    transfer(spark, config_path, "first")
    transfer(spark, config_path, "refresh", full_refresh=True)
    manifests = sorted(bucket.manifests("items"), key=lambda m: m["sequence"])
    assert [m["transfer_type"] for m in manifests] == ["INCREMENTAL", "FULL_REFRESH"]
    assert [m["generation"] for m in manifests] == [0, 1]
    assert {e["data_file_key"] for e in manifests[0]["files"]}.isdisjoint(
        {e["data_file_key"] for e in manifests[1]["files"]})
    refreshed = []
    for entry in manifests[1]["files"]:
        refreshed += pq.read_table(io.BytesIO(bucket.get(entry["data_file_key"]))).to_pylist()
    assert sorted(refreshed, key=lambda r: r["id"]) == lake_rows(tmp_path, "items")
    assert consumed(bucket, "items") == lake_rows(tmp_path, "items")


def test_a_killed_transfer_leaves_no_unnamed_file_after_the_next(tmp_path: Path, s3: S3Server) -> None:
    """kill -9 of a real transfer process writing to S3 (hourly windows over three days), once its
    first files are in the bucket; the next transfer leaves every file named by a manifest and
    the consumer's rows exact."""
    config_path, bucket = platform(tmp_path, "s3", s3, window=3600)
    env = {**os.environ, "TP_TEST_SIGNING_KEY": PRIVATE, "TP_TEST_S3_KEY_ID": s3.access_key,
           "TP_TEST_S3_SECRET": s3.secret_key}
    cli = [sys.executable, "-m", "transfer_platform.cli", "--config", str(config_path), "transfer", "acme_files"]
    process = subprocess.Popen(cli, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    deadline = time.monotonic() + 600  # bounds a failure (a JVM starts slowly on a busy machine)
    while len(bucket.data_files("items")) < 3:
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "no files after 600 s"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert len(bucket.data_files("items")) < 72, "the transfer was not stopped midway"
    debug = {**env, "TRANSFER_PLATFORM_LOG_LEVEL": "DEBUG"}  # boto3, py4j and ours log all they do
    result = subprocess.run(cli, cwd=tmp_path, env=debug, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "botocore" in result.stderr, "boto3's DEBUG log was not on"
    for model in ("items", "notes"):
        assert set(bucket.data_files(model)) == named_files(bucket, model), model
        assert consumed(bucket, model) == lake_rows(tmp_path, model)
    assert not [k for k in bucket.objects() if "/pending/" in k or k.endswith("lock.json")]
    assert s3.secret_key not in result.stderr + result.stdout


def test_bad_buckets_and_keys_fail_clearly_and_never_show_the_secret(tmp_path: Path, s3: S3Server,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cases = {
        "wrong key": (s3_connection(s3, "p", secret_access_key="${TP_TEST_WRONG}"), ["SignatureDoesNotMatch", BUCKET]),
        "missing bucket": (s3_connection(s3, "p", bucket="no-such-bucket"), ["NoSuchBucket", "no-such-bucket"]),
        "unreachable": (s3_connection(s3, "p", endpoint_url="http://127.0.0.1:9"), ["127.0.0.1:9", "cannot be reached"]),
    }
    use_keys(s3, monkeypatch)
    monkeypatch.setenv("TP_TEST_WRONG", "not-the-secret-" + s3.secret_key)
    for case, (connection, words) in cases.items():
        destination = {"name": "d", "recipient": "acme", "vendor": "s3", "connection": connection,
                       "signing_key": "${TP_TEST_SIGNING_KEY}"}
        config_path = write_config(tmp_path)
        config = yaml.safe_load(config_path.read_text())
        config["destinations"] = [destination]
        config_path.write_text(yaml.safe_dump(config))
        writer = writer_for(load_config(config_path).destination("d"))
        with pytest.raises(ConnectionFailure) as failure:
            writer.check()
        text = str(failure.value)
        for word in words:
            assert word in text, (case, text)
        assert s3.secret_key not in text, case


def test_test_connection_writes_reads_and_deletes_a_probe_object_and_leaves_nothing(
        tmp_path: Path, vendor: str, server: S3Server | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config_path, bucket = platform(tmp_path, vendor, server)
    config = load_config(config_path)
    before = bucket.objects() if vendor != "local" else []
    checks = writer_for(config.destination("acme_files")).probe(config.models, "acme_files")
    assert [c.outcome for c in checks] == ["PASS", "PASS"], checks
    assert (bucket.objects() if vendor != "local" else [p for p in (tmp_path / "exports").rglob("*") if p.is_file()]) \
        == before, "the probe left an object behind"
    if vendor == "s3":  # a wrong secret: reaching fails with S3's reason, the write is skipped
        monkeypatch.setenv("TP_TEST_S3_SECRET", "wrong-" + server.secret_key)
        checks = writer_for(load_config(config_path).destination("acme_files")).probe(config.models, "acme_files")
        assert [c.outcome for c in checks] == ["FAIL", "SKIP"], checks
        assert "SignatureDoesNotMatch" in checks[0].detail


def test_the_lookback_writes_a_row_again_and_the_consumers_rule_keeps_one(
        spark, tmp_path: Path, vendor: str, server: S3Server | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed (transfers, "Object storage destinations"): append-only, "Lookback windows may cause
    the same data to be written multiple times", to be deduplicated downstream. With a 5-minute
    lookback, a row changed a minute ago is in the first transfer's files and again in the next
    one's (the next read starts at the last delivered value minus the lookback); the consumer's
    rule (latest last-modified per key) still yields exactly the tenant's rows."""
    monkeypatch.chdir(tmp_path)
    config_path, bucket = platform(tmp_path, vendor, server)
    config = yaml.safe_load(config_path.read_text())
    config["sources"][0]["lookback_window"] = 300
    config_path.write_text(yaml.safe_dump(config))
    now = datetime.now(UTC).replace(microsecond=0)
    recent = now - timedelta(seconds=60)
    midnight = now.replace(hour=0, minute=0, second=0)
    if not timedelta(0) <= recent - midnight < timedelta(days=1, seconds=-600):
        # The models' daily windows start at each UTC midnight and each window's read begins the
        # lookback earlier: a row in the lookback before a midnight is in two windows' reads, in
        # the first transfer already (or in the second, should that midnight pass between them).
        # Ten minutes before the last midnight it is still the newest row (the lake's rows end
        # yesterday at 15:00) and in one window's read only.
        recent = midnight - timedelta(seconds=600)
    append_to_lake(tmp_path, "items", [{"id": 30_001, "organization_id": TENANTS["acme"], "updated_at": recent,
                                        "v": "a minute ago"}])
    transfer(spark, config_path, "first")
    transfer(spark, config_path, "second")

    def copies(transfer_id: str) -> int:
        (manifest,) = [m for m in bucket.manifests("items") if m["transfer_id"] == transfer_id]
        return sum(row["id"] == 30_001 for entry in manifest["files"]
                   for row in pq.read_table(io.BytesIO(bucket.get(entry["data_file_key"]))).to_pylist())

    assert (copies("first"), copies("second")) == (1, 1)
    assert consumed(bucket, "items") == lake_rows(tmp_path, "items")


def test_a_bad_row_in_a_window_the_executors_write_leaves_no_file_and_no_state(
        spark, tmp_path: Path, vendor: str, server: S3Server | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two versions of a key with the same last-modified value in a window written by the
    executors: refused by name, its files deleted at once, no manifest, the state as it was."""
    monkeypatch.chdir(tmp_path)
    tuning = Tuning(run_rows=0)
    config_path, bucket = platform(tmp_path, vendor, server)
    transfer(spark, config_path, "backfill-1", tuning=tuning)
    before = (bucket.objects(), consumed(bucket, "items"))
    config = load_config(config_path)
    watermark = writer_for(config.destination("acme_files")).committed_state(config.model("items")).state
    old = lake_rows(tmp_path, "items")[0]
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    append_to_lake(tmp_path, "items", [{**old, "updated_at": now, "v": "copy a"},
                                       {**old, "updated_at": now, "v": "copy b"}])
    writer = writer_for(config.destination("acme_files"))
    try:
        (items,) = run_transfer(TransferRequest(spark=spark, config=config,
                                                order=TransferOrder(destination="acme_files"), writer=writer,
                                                transfer_id="refused", now=datetime.now(UTC), tuning=tuning),
                                [config.model("items")])
    finally:
        writer.close()
    assert items.status == "ERROR"
    assert f"two different versions of key id={old['id']!r} have the same, latest last-modified" in items.error
    assert (bucket.objects(), consumed(bucket, "items")) == before
    assert writer_for(config.destination("acme_files")).committed_state(config.model("items")).state == watermark
