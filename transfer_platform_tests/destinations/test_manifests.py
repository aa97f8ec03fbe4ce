"""Manifests and object-storage configuration, without a store (issue 14): a consumer's verification
accepts only an unchanged manifest signed by the pinned key; ``signing-key`` makes a usable pair;
``validate`` refuses a missing or malformed signing key and destinations sharing a place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from transfer_platform.cli import main
from transfer_platform.config import load_config
from transfer_platform.destinations.manifests import (
    load_signing_key,
    new_signing_key,
    sign,
    verify_manifest,
)
from transfer_platform.errors import ConfigError
from transfer_platform_tests.orchestration.platform_fixtures import TENANTS, write_config

PRIVATE, PUBLIC = new_signing_key()
BUCKET = "recipient-exports"


@pytest.fixture(autouse=True)
def _signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", PRIVATE)


def test_signing_key_prints_a_pair_that_signs_and_verifies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["signing-key"]) == 0
    pair = json.loads(capsys.readouterr().out)
    manifest = sign({"files": []}, load_signing_key(pair["private_key"]))
    verify_manifest(manifest, pair["public_key"])
    with pytest.raises(ValueError, match="another key"):
        verify_manifest(manifest, PUBLIC)


def test_validate_refuses_a_bad_signing_key_and_shared_prefixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def problems(destinations: list[dict]) -> str:
        path = write_config(tmp_path)
        config = yaml.safe_load(path.read_text())
        config["recipients"].append({"name": "globex", "id_in_provider_system": TENANTS["globex"]})
        config["destinations"] = destinations
        path.write_text(yaml.safe_dump(config))
        try:
            load_config(path)  # validates
        except ConfigError as exc:
            return str(exc)
        return ""

    def s3_destination(name: str, recipient: str, prefix: str, key: str = "${TP_TEST_SIGNING_KEY}") -> dict:
        return {"name": name, "recipient": recipient, "vendor": "s3", "signing_key": key,
                "connection": {"bucket": BUCKET, "prefix": prefix, "endpoint_url": "http://127.0.0.1:1"}}

    assert problems([s3_destination("a", "acme", "x/acme"), s3_destination("g", "globex", "x/globex")]) == ""
    text = problems([s3_destination("a", "acme", "x"), s3_destination("g", "globex", "x/globex")])
    assert "destinations a, g write to the same place" in text
    assert "one inside the other" in text
    text = problems([s3_destination("a", "acme", "shared/"), s3_destination("g", "globex", "/shared")])
    assert "destinations a, g write to the same place" in text
    local = [{"name": n, "recipient": r, "vendor": "local", "signing_key": "${TP_TEST_SIGNING_KEY}",
              "connection": {"path": "out", "prefix": p}} for n, r, p in (("a", "acme", ""), ("g", "globex", "g"))]
    assert "destinations a, g write to the same place" in problems(local)
    delta_inside = [{"name": "a", "recipient": "acme", "vendor": "delta", "connection": {"path": "out/g"}}, local[0]]
    assert "write to the same place" in problems(delta_inside)
    # Delta in a bucket and object storage in the same bucket: refused where the prefixes meet,
    # whatever the vendors (and per endpoint: the same bucket name at another store is another place)
    delta_s3 = {"name": "d", "recipient": "acme", "vendor": "delta",
                "connection": {"bucket": BUCKET, "prefix": "x/acme/delta", "endpoint_url": "http://127.0.0.1:1"}}
    assert "destinations d, g write to the same place" in problems([delta_s3, s3_destination("g", "globex", "x")])
    assert problems([delta_s3, s3_destination("g", "globex", "x/globex")]) == ""
    elsewhere = {**delta_s3, "connection": {**delta_s3["connection"], "endpoint_url": "http://127.0.0.1:2"}}
    assert problems([elsewhere, s3_destination("g", "globex", "x")]) == ""

    monkeypatch.delenv("TP_TEST_SIGNING_KEY")
    text = problems([s3_destination("a", "acme", "x")])
    assert "destinations[0] (a).signing_key" in text
    assert "TP_TEST_SIGNING_KEY is not set" in text
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", "c2hvcnQ=")
    text = problems([s3_destination("a", "acme", "x")])
    assert "decodes to 5 bytes, not 32" in text
    assert "Ed25519" in text
    assert "c2hvcnQ=" not in text


def test_a_manifest_verifies_only_unchanged_and_with_the_pinned_key() -> None:
    files = [{"data_file_key": "p/items/dt=2026-01-01/part-1.parquet", "sha256_checksum": "ab", "etag": "cd"}]
    manifest = sign({"version": 1, "files": files}, load_signing_key(PRIVATE))
    verify_manifest(manifest, PUBLIC)
    tampered = {**manifest, "files": [{**files[0], "sha256_checksum": "ef"}]}
    with pytest.raises(ValueError, match="does not match"):
        verify_manifest(tampered, PUBLIC)
    other_private, other_public = new_signing_key()
    forged = sign({"version": 1, "files": files}, load_signing_key(other_private))
    with pytest.raises(ValueError, match="another key"):
        verify_manifest(forged, PUBLIC)
    with pytest.raises(ValueError, match="does not match"):  # a forger's key put in the pinned key's place
        verify_manifest({**forged, "signature_public_key": PUBLIC}, PUBLIC)
