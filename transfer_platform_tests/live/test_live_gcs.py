"""The ``gcs`` destination against Google Cloud Storage itself (what the emulator cannot prove:
the service account's token exchange, IAM, Google's preconditions and ETags): ``test-connection``,
a transfer of the lake's two models into a fresh prefix of the bucket, every manifest verified,
the rows read back with google-cloud-storage as the recipient reads them, no key in the output;
the prefix deleted afterwards.

Runs only when ``TRANSFER_PLATFORM_LIVE_GCS_BUCKET`` (an existing bucket) and
``TRANSFER_PLATFORM_LIVE_GCS_CREDENTIALS`` (a service account's JSON key with
``roles/storage.objectAdmin`` on it) are set (docs/development.md#live-lanes)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
import yaml

from transfer_platform.cli import main
from transfer_platform.config.loading import load_config
from transfer_platform.destinations.manifests import new_signing_key, verify_manifest
from transfer_platform_tests.support.destinations import _consumed
from transfer_platform_tests.support.platform import lake_rows, write_config

BUCKET_ENV, CREDENTIALS_ENV = "TRANSFER_PLATFORM_LIVE_GCS_BUCKET", "TRANSFER_PLATFORM_LIVE_GCS_CREDENTIALS"

pytestmark = pytest.mark.skipif(not (os.environ.get(BUCKET_ENV) and os.environ.get(CREDENTIALS_ENV)),
                                reason=f"the live GCS lane: set {BUCKET_ENV} and {CREDENTIALS_ENV}")


def test_a_transfer_into_google_cloud_storage_is_read_back_as_the_recipient_reads_it(
        spark, tmp_path: Path, capsys, monkeypatch) -> None:
    from google.cloud import storage
    from google.oauth2 import service_account

    from transfer_platform.storage.gcs import SCOPE

    bucket, prefix = os.environ[BUCKET_ENV], f"transfer-platform-live/{uuid.uuid4().hex[:12]}"
    private, public = new_signing_key()
    monkeypatch.setenv("TP_LIVE_SIGNING_KEY", private)
    monkeypatch.chdir(tmp_path)
    path = write_config(tmp_path)
    config = yaml.safe_load(path.read_text())
    config["destinations"] = [{"name": "acme_files", "recipient": "acme", "vendor": "gcs",
                               "signing_key": "${TP_LIVE_SIGNING_KEY}",
                               "connection": {"bucket": bucket, "prefix": prefix,
                                              "credentials": f"${{{CREDENTIALS_ENV}}}"}}]
    path.write_text(yaml.safe_dump(config))
    info = json.loads(os.environ[CREDENTIALS_ENV])
    client = storage.Client(project=info.get("project_id"), credentials=service_account.Credentials
                            .from_service_account_info(info, scopes=[SCOPE]))

    def keys(start: str) -> list[str]:
        return sorted(b.name for b in client.list_blobs(bucket, prefix=start))

    def get(key: str) -> bytes:
        return client.bucket(bucket).blob(key).download_as_bytes()

    try:
        assert main(["--config", str(path), "test-connection", "acme_files"]) == 0, capsys.readouterr()
        assert main(["--config", str(path), "transfer", "acme_files"]) == 0, capsys.readouterr()
        shown = capsys.readouterr()
        assert info["private_key"].splitlines()[1] not in shown.out + shown.err
        loaded = load_config(path)
        for model in ("items", "notes"):
            rows = _consumed(loaded.model(model), keys, get, prefix)
            want = lake_rows(tmp_path, model)
            assert [r["id"] for r in rows] == [r["id"] for r in want], model
        for key in keys(f"{prefix}/_manifests/"):
            verify_manifest(json.loads(get(key)), public)
    finally:
        for key in keys(f"{prefix}/"):
            client.bucket(bucket).blob(key).delete()
