"""A recipient's reader of object storage that follows only the words of the manifest
documentation (``docs/object-storage.md``, "Applying manifests"), over a history with updates,
soft deletes, rows deleted outright and a full refresh, in a folder, in a bucket and in an Azure
container.

The reader shares no code with the writer except the documented signature check
(:func:`verify_manifest`): it lists the manifests, verifies them and the files, orders them as the
documentation says and keeps per key what the documentation says. What it holds at the end must be
the source's rows, taken from the source table (the lake) as it is, not from the writer.

The history is one where the order matters: a row updated before the second transfer (so that
transfer delivers it) and then deleted outright before the full refresh. A reader that orders the
manifests by the time their windows start (what ``start_time`` held before it meant the transfer's
start) applies the full refresh before earlier transfers and brings that row back.
"""

from __future__ import annotations

import hashlib
import io
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.manifests import new_signing_key, verify_manifest
from transfer_platform.destinations.object_storage import ObjectStorageWriter
from transfer_platform.errors import ConnectionFailure
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform_tests.support.destinations import OBJECT_STORAGE
from transfer_platform_tests.support.platform import TENANTS, TS, write_config
from transfer_platform_tests.support.s3_server import S3Server

pytestmark = pytest.mark.integration

PREFIX = "exports/acme"
PRIVATE, PUBLIC = new_signing_key()
MODEL = "accounts"
SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS),
                    ("v", pa.string()), ("is_deleted", pa.bool_())])


# -- the recipient's side: a bucket, and the documented reader ---------------------------------------

@dataclass
class Objects:
    """The recipient's view of the destination: list keys under a prefix, read an object."""

    keys: Callable[[str], list[str]]
    get: Callable[[str], bytes]


def consume(objects: Objects, model: str, *, primary_key: str, last_modified: str, deleted: str,
            order_by: str = "sequence") -> list[dict]:
    """The documentation's "Applying manifests", step by step."""
    # 1. every object under <prefix>/_manifests/<model>/ whose name ends in .json, read as JSON
    manifests = [json.loads(objects.get(key)) for key in objects.keys(f"{PREFIX}/_manifests/{model}/")
                 if key.endswith(".json")]
    # 2. verify each: the signature with the pinned public key
    for manifest in manifests:
        verify_manifest(manifest, PUBLIC)
        assert manifest["version"] == 2
    # 3. in increasing order of sequence
    manifests.sort(key=lambda m: m[order_by])
    held: dict[object, dict] = {}
    for manifest in manifests:
        # 4. a FULL_REFRESH manifest: first discard every row held for the model, marked rows too
        if manifest["transfer_type"] == "FULL_REFRESH":
            held.clear()
        # 5. its files in the order listed, each checked against its SHA-256; every row of each:
        #    it replaces the row held for its key unless that one has a later last-modified value
        for entry in manifest["files"]:
            data = objects.get(entry["data_file_key"])
            assert hashlib.sha256(data).hexdigest() == entry["sha256_checksum"], entry["data_file_key"]
            for row in pq.read_table(io.BytesIO(data)).to_pylist():
                mine = held.get(row[primary_key])
                if mine is None or not mine[last_modified] > row[last_modified]:
                    held[row[primary_key]] = row
    # 6. the model's rows: those held, without the rows marked deleted
    return sorted((row for row in held.values() if not row[deleted]), key=lambda r: r[primary_key])


# -- the provider's side: a source table that changes, transfers ---------------------------------------

class Lake:
    """The source table ``accounts`` as one Parquet file rewritten whole on each change: an update
    replaces a row (last-modified moved), a soft delete sets ``is_deleted`` (last-modified moved),
    a delete outright removes the row."""

    def __init__(self, root: Path) -> None:
        self.folder = root / "lake" / MODEL
        self.folder.mkdir(parents=True)
        self.version = 0
        start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
        self.rows: dict[int, dict] = {}
        for key in range(1, 25):
            tenant = TENANTS["acme"] if key % 3 else TENANTS["globex"]
            self.rows[key] = {"id": key, "organization_id": tenant, "updated_at": start + timedelta(hours=2 * key),
                              "v": f"v{key}", "is_deleted": False}
        self._write()

    def _write(self) -> None:
        for old in self.folder.iterdir():
            old.unlink()
        self.version += 1
        pq.write_table(pa.Table.from_pylist(list(self.rows.values()), schema=SCHEMA),
                       self.folder / f"part-{self.version}.parquet")

    def change(self, *, update: tuple[int, ...] = (), soft_delete: tuple[int, ...] = (),
               delete: tuple[int, ...] = (), insert: tuple[int, ...] = ()) -> None:
        moment = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        for key in update:
            self.rows[key] = {**self.rows[key], "updated_at": moment, "v": f"{self.rows[key]['v']}+"}
        for key in soft_delete:
            self.rows[key] = {**self.rows[key], "updated_at": moment, "is_deleted": True}
        for key in delete:
            del self.rows[key]
        for key in insert:
            self.rows[key] = {"id": key, "organization_id": TENANTS["acme"], "updated_at": moment,
                              "v": f"new{key}", "is_deleted": False}
        self._write()

    def acme_rows(self) -> list[dict]:
        """What the recipient should hold: acme's rows the source has, not marked deleted."""
        return sorted((r for r in self.rows.values() if r["organization_id"] == TENANTS["acme"]
                       and not r["is_deleted"]), key=lambda r: r["id"])


def configure(root: Path, connection: dict) -> Path:
    path = write_config(root)
    config = yaml.safe_load(path.read_text())
    config["sources"][0]["lookback_window"] = 300  # a later transfer re-reads the last 5 minutes
    start = int((datetime.now(UTC) - timedelta(days=3)).timestamp())
    config["models"] = [{
        "model_name": MODEL, "source_name": "lake", "source_table": MODEL, "organization_column": "organization_id",
        "min_start_time_epoch": start, "max_transfer_time_window_seconds": 86_400,
        "columns": [
            {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
            {"name_in_source": "organization_id", "data_type": "string"},
            {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
            {"name_in_source": "v", "data_type": "string"},
            {"name_in_source": "is_deleted", "data_type": "boolean", "is_deleted_marker": True},
        ],
    }]
    config["destinations"] = [{"name": "acme_files", "recipient": "acme", "vendor": connection.pop("vendor"),
                               "connection": connection, "signing_key": "${TP_TEST_SIGNING_KEY}"}]
    path.write_text(yaml.safe_dump(config))
    return path


def transfer(spark, config_path: Path, transfer_id: str, *, full_refresh: bool = False) -> tuple[datetime, datetime]:
    """Run one transfer; returns when it was asked for and when it had returned."""
    asked = datetime.now(UTC)
    config = load_config(config_path)
    writer = writer_for(config.destination("acme_files"))
    try:
        (summary,) = run_transfer(TransferRequest(spark=spark, config=config,
                                                  order=TransferOrder(destination="acme_files", full_refresh=full_refresh),
                                                  writer=writer, transfer_id=transfer_id,
                                                  now=datetime.now(UTC)), config.models)
    finally:
        writer.close()
    assert summary.status == "SUCCESS", summary.error
    return asked, datetime.now(UTC)


@pytest.fixture(params=OBJECT_STORAGE)
def destination(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, Objects]:
    """The destination's connection (with its vendor) and the recipient's view of it."""
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", PRIVATE)
    if request.param == "local":
        root = tmp_path / "bucket"
        return ({"vendor": "local", "path": str(root), "prefix": PREFIX},
                Objects(lambda prefix: sorted(str(p.relative_to(root)) for p in (root / prefix).rglob("*")
                                              if p.is_file()),
                        lambda key: (root / key).read_bytes()))
    if request.param == "abs":  # an Azure container (Azurite), read with the SDK
        azure = request.getfixturevalue("azure_blob")
        container = f"recipient-{uuid.uuid4().hex[:12]}"
        azure.create_container(container)
        monkeypatch.setenv("TP_TEST_AZURE_KEY", azure.key)
        blobs = azure.container(container)
        return ({"vendor": "abs", "account_name": azure.account, "container": container, "prefix": PREFIX,
                 "endpoint_url": azure.endpoint, "account_key": "${TP_TEST_AZURE_KEY}"},
                Objects(lambda prefix: sorted(b.name for b in blobs.list_blobs(name_starts_with=prefix)),
                        lambda key: blobs.get_blob_client(key).download_blob().readall()))
    server: S3Server = request.getfixturevalue("s3")
    bucket = f"recipient-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    monkeypatch.setenv("TP_TEST_S3_KEY_ID", server.access_key)
    monkeypatch.setenv("TP_TEST_S3_SECRET", server.secret_key)
    client = server.client()

    def keys(prefix: str) -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    return ({"vendor": "s3", "bucket": bucket, "prefix": PREFIX, "endpoint_url": server.endpoint, "path_style": True,
             "access_key_id": "${TP_TEST_S3_KEY_ID}", "secret_access_key": "${TP_TEST_S3_SECRET}"},
            Objects(keys, lambda key: client.get_object(Bucket=bucket, Key=key)["Body"].read()))


def test_a_reader_following_the_documentation_holds_the_sources_rows(
        spark, tmp_path: Path, destination: tuple[dict, Objects], monkeypatch: pytest.MonkeyPatch) -> None:
    connection, objects = destination
    monkeypatch.chdir(tmp_path)
    lake = Lake(tmp_path)
    config_path = configure(tmp_path, dict(connection))
    acme = [k for k in lake.rows if lake.rows[k]["organization_id"] == TENANTS["acme"]]

    def read(**order: str) -> list[dict]:
        return consume(objects, MODEL, primary_key="id", last_modified="updated_at", deleted="is_deleted", **order)

    times = {"t1-backfill": transfer(spark, config_path, "t1-backfill")}
    assert read() == lake.acme_rows()

    # updates (one of them, acme[2], deleted outright later), a soft delete, a new row
    lake.change(update=(acme[0], acme[2]), soft_delete=(acme[1],), insert=(100,))
    times["t2-incremental"] = transfer(spark, config_path, "t2-incremental")
    assert read() == lake.acme_rows()

    # rows deleted outright (one the second transfer delivered, one untouched since the backfill):
    # files never carry such a delete; the full refresh is how they leave
    lake.change(delete=(acme[2], acme[3]), update=(acme[4],))
    times["t3-refresh"] = transfer(spark, config_path, "t3-refresh", full_refresh=True)
    assert read() == lake.acme_rows()

    # after the refresh: an update, a soft delete of a row updated before, a new row; the next
    # transfer re-reads the refresh's last minutes (the lookback)
    lake.change(update=(acme[5],), soft_delete=(acme[0],), insert=(101,))
    times["t4-incremental"] = transfer(spark, config_path, "t4-incremental")
    assert read() == lake.acme_rows()
    assert {acme[2], acme[3]}.isdisjoint(r["id"] for r in read())

    # the history discriminates: ordering by where each transfer's window starts (the meaning
    # start_time had) applies the full refresh before the transfers it replaced and brings rows
    # deleted outright back
    wrong = read(order_by="window_start")
    assert {acme[2], acme[3]} & {r["id"] for r in wrong}, "the history does not tell the orders apart"


    # the fields mean what the documentation says
    found = {m["transfer_id"]: m for m in (json.loads(objects.get(k)) for k in
                                           objects.keys(f"{PREFIX}/_manifests/{MODEL}/"))}
    assert list(found) == sorted(found, key=lambda t: found[t]["sequence"]) == list(times)  # t1 < t2 < t3 < t4
    assert len({m["sequence"] for m in found.values()}) == 4
    configured_start = datetime.fromtimestamp(load_config(config_path).model(MODEL).min_start_time_epoch, UTC)
    for transfer_id, (asked, returned) in times.items():
        manifest = found[transfer_id]
        start, end = datetime.fromisoformat(manifest["start_time"]), datetime.fromisoformat(manifest["end_time"])
        assert asked <= start <= end <= returned, transfer_id  # the transfer's own start and end, UTC
        assert start.utcoffset() == end.utcoffset() == timedelta(0)
        assert manifest["model_id"] == str(uuid.uuid5(uuid.NAMESPACE_URL, f"transfer-platform:model:{MODEL}"))
        assert manifest["transfer_type"] == ("FULL_REFRESH" if transfer_id == "t3-refresh" else "INCREMENTAL")
        window_start, window_end = (datetime.fromisoformat(manifest[f]) for f in ("window_start", "window_end"))
        assert window_start < window_end <= start, transfer_id  # last-modified values up to the transfer's start
        for entry in manifest["files"]:  # every row delivered was modified inside the window
            for row in pq.read_table(io.BytesIO(objects.get(entry["data_file_key"]))).to_pylist():
                assert window_start <= row["updated_at"] < window_end, (transfer_id, row)
    # a backfill and a full refresh cover everything from the model's start; an incremental
    # transfer goes on where the one before it ended, re-reading the lookback below that
    for transfer_id in ("t1-backfill", "t3-refresh"):
        assert datetime.fromisoformat(found[transfer_id]["window_start"]) == configured_start
    window = {t: (datetime.fromisoformat(m["window_start"]), datetime.fromisoformat(m["window_end"]))
              for t, m in found.items()}
    for before, after in (("t1-backfill", "t2-incremental"), ("t3-refresh", "t4-incremental")):
        assert window[before][0] < window[after][0] < window[before][1] <= window[after][1]


def test_a_transfer_that_dies_after_its_manifest_leaves_the_next_one_a_greater_sequence(
        spark, tmp_path: Path, destination: tuple[dict, Objects], monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest is written, the state after it is not (the process dies there): the window is
    delivered again by the next transfer, whose manifest must come after the dead one's."""
    connection, objects = destination
    monkeypatch.chdir(tmp_path)
    lake = Lake(tmp_path)
    config_path = configure(tmp_path, dict(connection))
    transfer(spark, config_path, "t1-backfill")
    lake.change(update=(1, 2), insert=(100,))

    real_manifest, real_book = ObjectStorageWriter._write_manifest, ObjectStorageWriter._write_book
    written = []

    def manifest_then_note(self, *args, **kwargs) -> None:
        real_manifest(self, *args, **kwargs)
        written.append(1)

    def book_unless_after_a_manifest(self, *args, **kwargs) -> None:
        if written:
            raise ConnectionFailure("object storage", reason="the process died", fix="-")
        real_book(self, *args, **kwargs)

    monkeypatch.setattr(ObjectStorageWriter, "_write_manifest", manifest_then_note)
    monkeypatch.setattr(ObjectStorageWriter, "_write_book", book_unless_after_a_manifest)
    config = load_config(config_path)
    writer = writer_for(config.destination("acme_files"))
    try:
        (summary,) = run_transfer(TransferRequest(spark=spark, config=config,
                                                  order=TransferOrder(destination="acme_files"),
                                                  writer=writer, transfer_id="t2-dies", now=datetime.now(UTC)), config.models)
    finally:
        writer.close()
    assert summary.status != "SUCCESS"
    assert written, "the transfer did not die after its manifest"
    monkeypatch.setattr(ObjectStorageWriter, "_write_manifest", real_manifest)
    monkeypatch.setattr(ObjectStorageWriter, "_write_book", real_book)

    transfer(spark, config_path, "t3-next")
    found = {m["transfer_id"]: m["sequence"] for m in (json.loads(objects.get(k)) for k in
                                                       objects.keys(f"{PREFIX}/_manifests/{MODEL}/"))}
    assert found["t1-backfill"] < found["t2-dies"] < found["t3-next"], found
    assert consume(objects, MODEL, primary_key="id", last_modified="updated_at", deleted="is_deleted") \
        == lake.acme_rows()
