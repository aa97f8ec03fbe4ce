"""Delta Sharing's file URLs from the stores themselves, and a query's committed version: a shared
``delta`` destination in an Azurite container, in a moto bucket, and in a folder, its tables written
straight into the store by ``deltalake.write_deltalake`` (no Spark, no transfer), queried through
the API (FastAPI's TestClient) with the recipient's token; each answered URL fetched over HTTP
from the store as a recipient's client would."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pyarrow as pa
import pytest
import yaml

from transfer_platform.config.parsing import parse_config
from transfer_platform.sharing.tables import Location
from transfer_platform_tests.support.api import Api, start_api, write_api_config
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.events import day
from transfer_platform_tests.support.processes import listening
from transfer_platform_tests.support.s3_server import REGION

pytestmark = pytest.mark.integration

KEY_ENV, SECRET_ENV = "SHARING_STORES_TEST_KEY", "SHARING_STORES_TEST_SECRET"
TABLE = "/delta-sharing/shares/acme/schemas/default/tables/events"


def shared(tmp_path: Path, store_schema: str, connection: dict) -> tuple[Api, Location, dict[str, str]]:
    """The API over one shared ``delta`` destination of recipient acme at ``connection``; the
    destination's location and the recipient's Authorization header."""
    sections = {
        "api": {"public_url": "http://testserver"},
        "sources": [{"name": "src", "vendor": "parquet", "connection": {"path": str(tmp_path / "lake")}}],
        "models": [events_model("events", min_start=day(2, 28))],
        "recipients": [{"name": "acme", "id_in_provider_system": "org-acme"}],
        "destinations": [{"name": "acme", "vendor": "delta", "recipient": "acme", "sharing": {"enabled": True},
                          "connection": connection}],
    }
    path = write_api_config(tmp_path, store_schema, **sections)
    api = start_api(path, store_schema)
    answer = api.post("/recipients/acme/sharing-token", {"expires_in_days": 1})
    assert answer.status_code == 201, answer.text
    token = answer.json()["data"]["profile"]["bearerToken"]
    config = parse_config(yaml.safe_load(path.read_text()))
    return api, Location.of(config.destination("acme")), {"Authorization": f"Bearer {token}"}


def write(location: Location, ids: range, mode: str = "append") -> None:
    from deltalake import write_deltalake

    write_deltalake(location.table_uri("events"), pa.table({"id": pa.array(list(ids), pa.int64())}),
                    mode=mode, storage_options=location.options)


def query(api: Api, auth: dict[str, str], **body) -> tuple[int, list[dict]]:
    """The table's version and its file lines, answered to the recipient."""
    answer = api.client.post(f"{TABLE}/query", json=body, headers=auth)
    assert answer.status_code == 200, answer.text
    lines = [yaml.safe_load(line) for line in answer.text.splitlines()]
    assert "protocol" in lines[0]
    assert "metaData" in lines[1]
    return int(answer.headers["Delta-Table-Version"]), [line["file"] for line in lines[2:]]


def ids_in(parquet: bytes) -> list[int]:
    import pyarrow.parquet as pq

    return pq.read_table(pa.BufferReader(parquet)).column("id").to_pylist()


# -- Azure: a SAS of read permission, checked by Azurite ---------------------------------------------------


def test_azure_sas_urls_read_the_file_and_are_refused_after_expiry(tmp_path, store_schema, secret_key, azure_blob,
                                                                   monkeypatch) -> None:
    container = "sharing-stores"
    if not azure_blob.container(container).exists():
        azure_blob.create_container(container)
    monkeypatch.setenv(KEY_ENV, azure_blob.key)
    connection = {"account_name": azure_blob.account, "container": container, "endpoint_url": azure_blob.endpoint,
                  "account_key": f"${{{KEY_ENV}}}", "prefix": f"t{os.getpid()}-{tmp_path.name}"}
    api, location, auth = shared(tmp_path, store_schema, connection)
    with api.client:
        write(location, range(1, 6))
        _, files = query(api, auth)
        assert len(files) == 1
        url = files[0]["url"]
        assert url.startswith(f"{azure_blob.endpoint}/{container}/{connection['prefix']}/events/")
        sas = parse_qs(urlparse(url).query)
        assert sas["sp"] == ["r"]
        assert {"se", "sig"} <= set(sas)
        got = httpx.get(url, timeout=30)
        assert got.status_code == 200, got.text
        assert ids_in(got.content) == [1, 2, 3, 4, 5]

        # the announced expiry is not later than the store's (the SAS names whole seconds)
        assert files[0]["expirationTimestamp"] // 1000 <= datetime.fromisoformat(sas["se"][0]).timestamp()

        # the store, not the API, refuses: a URL after its expiry (its signature otherwise right)
        relative = urlparse(url).path.split("/events/", 1)[1]
        short = location.file_url("http://testserver", "events", relative, 3)
        assert httpx.get(short, timeout=30).status_code == 200
        expiry = datetime.fromisoformat(parse_qs(urlparse(short).query)["se"][0])
        assert expiry <= datetime.now(UTC) + timedelta(seconds=3)
        refused = wait_for_refusal(short, 3 + 10)
        assert refused.status_code == 403
        assert "AuthorizationFailure" in refused.text
        assert datetime.now(UTC) > expiry  # refused for its expiry, which had passed
        expired = location.file_url("http://testserver", "events", relative, -5)
        assert httpx.get(expired, timeout=30).status_code == 403
        # an altered URL: wider permission, or another blob under the same SAS
        widened = url.replace("sp=r&", "sp=rw&")
        assert widened != url
        assert httpx.get(widened, timeout=30).status_code == 403
        write(location, range(6, 8))
        _, both = query(api, auth)
        second = next(f["url"] for f in both if urlparse(f["url"]).path != urlparse(url).path)
        assert httpx.get(second, timeout=30).status_code == 200
        swapped = f"{second.split('?')[0]}?{urlparse(url).query}"
        assert httpx.get(swapped, timeout=30).status_code == 403  # a SAS names one blob only


def wait_for_refusal(url: str, seconds: float) -> httpx.Response:
    """GET ``url`` until the store refuses it, for at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        answer = httpx.get(url, timeout=30)
        if answer.status_code != 200 or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)  # polling the store until it refuses the URL (not a fixed wait)


# -- S3: a pre-signed GET (Signature Version 4) ------------------------------------------------------------


@contextmanager
def moto_without_iam(folder: Path) -> Iterator[str]:
    """A moto server that checks no credentials: the suite's (``s3`` fixture) enforces IAM, which
    reads only the Authorization header and answers 500 to a query-string-signed GET."""
    server = Path(sys.executable).with_name("moto_server")
    env = {k: v for k, v in os.environ.items() if k != "INITIAL_NO_AUTH_ACTION_COUNT"}
    with listening("moto_server", [str(server), "-H", "127.0.0.1", "-p", "{port}"], folder / "moto.log",
                   env=env) as port:
        yield f"http://127.0.0.1:{port}"


def test_s3_urls_are_presigned_with_signature_version_4(tmp_path, store_schema, secret_key, monkeypatch) -> None:
    import boto3

    with moto_without_iam(tmp_path) as endpoint:
        boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="AKIASHARINGSTORES",
                     aws_secret_access_key="secret").create_bucket(Bucket="sharing-stores")
        monkeypatch.setenv(KEY_ENV, "AKIASHARINGSTORES")
        monkeypatch.setenv(SECRET_ENV, "secret")
        connection = {"bucket": "sharing-stores", "prefix": "recipient", "endpoint_url": endpoint,
                      "path_style": True, "region": REGION,
                      "access_key_id": f"${{{KEY_ENV}}}", "secret_access_key": f"${{{SECRET_ENV}}}"}
        api, location, auth = shared(tmp_path, store_schema, connection)
        with api.client:
            write(location, range(1, 4))
            _, files = query(api, auth)
            assert len(files) == 1
            url = urlparse(files[0]["url"])
            assert url.path.startswith("/sharing-stores/recipient/events/")
            signed = parse_qs(url.query)
            assert signed["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
            assert signed["X-Amz-Expires"] == ["900"]  # url_seconds' default
            assert signed["X-Amz-Credential"][0].startswith("AKIASHARINGSTORES/")
            assert f"/{REGION}/s3/aws4_request" in signed["X-Amz-Credential"][0]
            assert not {"Signature", "AWSAccessKeyId"} & set(signed)  # not version 2
            got = httpx.get(files[0]["url"], timeout=30)
            assert got.status_code == 200, got.text
            assert ids_in(got.content) == [1, 2, 3]


# -- a query answers a committed version only -------------------------------------------------------------


def test_a_query_lists_a_committed_versions_files_only(tmp_path, store_schema, secret_key) -> None:
    api, location, auth = shared(tmp_path, store_schema, {"path": str(tmp_path / "shared")})
    with api.client:
        write(location, range(1, 4))  # version 0
        write(location, range(4, 6))  # version 1
        folder = Path(location.table_uri("events"))
        # a write in progress: its data file is in the table's folder, its commit is not in the log
        (folder / "part-00000-in-progress.parquet").write_bytes((next(folder.glob("*.parquet"))).read_bytes())
        (folder / "_delta_log" / "_commit_in-progress.json.tmp").write_text('{"add": {"path": "x"}}\n')

        version, files = query(api, auth)
        assert version == 1
        listed = sorted(urlparse(f["url"]).path.rsplit("/", 1)[1] for f in files)
        assert "part-00000-in-progress.parquet" not in listed
        assert len(listed) == 2
        assert sum(int(yaml.safe_load(f["stats"])["numRecords"]) for f in files) == 5

        version, first = query(api, auth, version=0)
        assert version == 0
        assert len(first) == 1
        assert urlparse(first[0]["url"]).path.rsplit("/", 1)[1] in listed
        got = api.client.get(first[0]["url"])
        assert got.status_code == 200
        assert ids_in(got.content) == [1, 2, 3]

        write(location, range(10, 11), mode="overwrite")  # version 2 replaces every file
        version, latest = query(api, auth)
        assert version == 2
        assert len(latest) == 1
        assert urlparse(latest[0]["url"]).path.rsplit("/", 1)[1] not in listed
        assert sorted(urlparse(f["url"]).path.rsplit("/", 1)[1] for f in query(api, auth, version=1)[1]) == listed
