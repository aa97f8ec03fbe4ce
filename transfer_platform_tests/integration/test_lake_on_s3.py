"""A Parquet lake source in an S3 bucket (issue 14), multi-tenant and schema-tenanted, read from a
real S3-compatible server in its own process (moto, signature checks on). Expectations come from
the lake's rows: each recipient receives exactly its own, first in full, then what changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.errors import ConnectionFailure
from transfer_platform.sources.base import reader_for
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform_tests.support.platform import TENANTS, delivered, lake_rows, write_config
from transfer_platform_tests.support.s3_server import S3Server

pytestmark = pytest.mark.integration

BUCKET = "provider-lake"


@pytest.fixture(scope="module", autouse=True)
def _bucket(s3: S3Server) -> None:  # the session's S3 server (transfer_platform_tests/conftest.py)
    s3.create_bucket(BUCKET)


def upload(server: S3Server, root: Path, prefix: str, *, per_tenant: bool) -> None:
    """The local lake ``write_config`` made, into the bucket: as it is (multi-tenant), or split
    into ``<tenant>/<table>/`` folders holding only that tenant's rows (schema-tenanted)."""
    client = server.client()
    for key in [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
                for o in page.get("Contents", [])]:
        client.delete_object(Bucket=BUCKET, Key=key)
    for table_folder in (root / "lake").iterdir():
        for file in table_folder.glob("*.parquet"):
            rows = pq.read_table(file)
            if not per_tenant:
                client.put_object(Bucket=BUCKET, Key=f"{prefix}/{table_folder.name}/{file.name}", Body=file.read_bytes())
                continue
            for tenant in TENANTS.values():
                sink = pa.BufferOutputStream()
                pq.write_table(rows.filter(pc.equal(rows["organization_id"], tenant)), sink)
                client.put_object(Bucket=BUCKET, Key=f"{prefix}/{tenant}/{table_folder.name}/{file.name}",
                                  Body=sink.getvalue().to_pybytes())


def configure(root: Path, server: S3Server, monkeypatch: pytest.MonkeyPatch, *, tenancy: str) -> Path:
    monkeypatch.setenv("TP_LAKE_KEY_ID", server.access_key)
    monkeypatch.setenv("TP_LAKE_SECRET", server.secret_key)
    path = write_config(root, destinations={"acme": {}, "globex": {}})
    config = yaml.safe_load(path.read_text())
    config["sources"][0]["connection"] = {
        "bucket": BUCKET, "prefix": "warehouse", "endpoint_url": server.endpoint, "path_style": True,
        "access_key_id": "${TP_LAKE_KEY_ID}", "secret_access_key": "${TP_LAKE_SECRET}"}
    config["sources"][0]["tenancy"] = tenancy
    if tenancy == "schema_tenanted":
        for model in config["models"]:
            del model["organization_column"]
    path.write_text(yaml.safe_dump(config))
    upload(server, root, "warehouse", per_tenant=tenancy == "schema_tenanted")
    return path


def transfer_all(spark, config_path: Path) -> None:
    config = load_config(config_path)
    for recipient in ("acme", "globex"):
        writer = writer_for(config.destination(f"{recipient}_delta"))
        try:
            request = TransferRequest(spark=spark, config=config,
                                      order=TransferOrder(destination=f"{recipient}_delta"), writer=writer,
                                      transfer_id=f"t-{recipient}", now=datetime.now(UTC))
            summaries = run_transfer(request, config.models)
        finally:
            writer.close()
        assert all(s.status == "SUCCESS" for s in summaries), [(s.model, s.error) for s in summaries]


@pytest.mark.parametrize("tenancy", ["multi_tenant", "schema_tenanted"])
def test_each_recipient_gets_its_own_rows_from_a_lake_on_s3(spark, tmp_path: Path, s3: S3Server, tenancy: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config_path = configure(tmp_path, s3, monkeypatch, tenancy=tenancy)
    transfer_all(spark, config_path)
    for recipient in ("acme", "globex"):
        for table in ("items", "notes"):
            assert delivered(tmp_path, recipient, table) == lake_rows(tmp_path, table, recipient)

    # a late update and a new row arrive in the bucket: the incremental brings exactly them
    old = lake_rows(tmp_path, "items", "globex")[0]
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    extra = pa.Table.from_pylist([{**old, "updated_at": now, "v": "changed"},
                                  {"id": 20_001, "organization_id": TENANTS["acme"], "updated_at": now, "v": "new"}],
                                 schema=pq.read_table(tmp_path / "lake" / "items").schema)
    pq.write_table(extra, tmp_path / "lake" / "items" / "part-1.parquet")
    upload(s3, tmp_path, "warehouse", per_tenant=tenancy == "schema_tenanted")
    transfer_all(spark, config_path)
    for recipient in ("acme", "globex"):
        assert delivered(tmp_path, recipient, "items") == lake_rows(tmp_path, "items", recipient)
    assert any(r["v"] == "changed" for r in delivered(tmp_path, "globex", "items"))


def test_a_wrong_secret_or_missing_prefix_is_named(tmp_path: Path, s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    config_path = configure(tmp_path, s3, monkeypatch, tenancy="multi_tenant")
    monkeypatch.setenv("TP_LAKE_SECRET", "wrong-" + s3.secret_key)
    reader = reader_for(load_config(config_path).source("lake"))
    with pytest.raises(ConnectionFailure) as failure:
        reader.check()
    assert "SIGNATURE_DOES_NOT_MATCH" in str(failure.value)
    assert BUCKET in str(failure.value)
    assert s3.secret_key not in str(failure.value)
    monkeypatch.setenv("TP_LAKE_SECRET", s3.secret_key)
    config = yaml.safe_load(config_path.read_text())
    config["sources"][0]["connection"]["prefix"] = "nowhere"
    config_path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConnectionFailure, match="prefix nowhere of bucket provider-lake"):
        reader_for(load_config(config_path).source("lake")).check()
