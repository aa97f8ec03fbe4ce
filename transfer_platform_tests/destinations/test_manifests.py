"""Manifests and object-storage configuration, without a store (issue 14): a consumer's verification
accepts only an unchanged manifest signed by the pinned key; ``signing-key`` makes a usable pair;
``validate`` refuses a missing or malformed signing key and destinations sharing a place."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from transfer_platform.cli import main
from transfer_platform.config.loading import load_config
from transfer_platform.config.signing_keys import load_signing_key
from transfer_platform.destinations.base import arrow_schema
from transfer_platform.destinations.manifests import (
    application_order,
    model_id,
    new_signing_key,
    sign,
    verify_manifest,
)
from transfer_platform.destinations.object_storage import latest_per_key
from transfer_platform.errors import ConfigError
from transfer_platform_tests.support.platform import TENANTS, write_config

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

    monkeypatch.delenv("TP_TEST_SIGNING_KEY")  # unset: as any secret's, refused by a transfer to it
    assert problems([s3_destination("a", "acme", "x")]) == ""
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


def test_manifests_apply_by_sequence_from_the_last_full_refresh_after_every_version_1_one() -> None:
    """Version 2 manifests by ``sequence`` (whatever their times say), from the last FULL_REFRESH
    on; version 1 ones (no sequence: written before it existed) come first, by generation, the
    refresh of a generation before its other manifests."""
    def v1(name: str, kind: str, generation: int, end: str) -> dict:
        return {"version": 1, "transfer_id": name, "transfer_type": kind, "generation": generation,
                "end_time": end, "files": []}

    def v2(name: str, kind: str, sequence: int, end: str) -> dict:
        return {"version": 2, "transfer_id": name, "transfer_type": kind, "sequence": sequence, "generation": 9,
                "end_time": end, "files": []}

    old = [v1("a", "INCREMENTAL", 0, "2026-01-01"), v1("r", "FULL_REFRESH", 1, "2026-01-03"),
           v1("b", "INCREMENTAL", 1, "2026-01-02"),  # an explicit past window: ended "before" r
           v1("c", "INCREMENTAL", 1, "2026-01-04")]
    assert [m["transfer_id"] for m in application_order(old[::-1])] == ["r", "b", "c"]
    new = [v2("x", "INCREMENTAL", 1, "2026-02-05"), v2("y", "INCREMENTAL", 2, "2026-02-01"),  # a slower clock
           v2("z", "INCREMENTAL", 3, "2026-02-06")]
    assert [m["transfer_id"] for m in application_order(new[::-1] + old)] == ["r", "b", "c", "x", "y", "z"]
    refreshed = [*new, v2("R", "FULL_REFRESH", 4, "2026-01-01"), v2("w", "INCREMENTAL", 5, "2026-03-01")]
    assert [m["transfer_id"] for m in application_order(old + refreshed[::-1])] == ["R", "w"]


def test_a_model_id_is_the_documented_uuid5_of_its_name() -> None:
    assert model_id("orders") == str(uuid.uuid5(uuid.NAMESPACE_URL, "transfer-platform:model:orders"))
    assert model_id("orders") != model_id("order_items")


def test_the_consumers_rule_keeps_the_latest_version_and_on_a_tie_the_later_one(tmp_path: Path) -> None:
    """Rows in the order they were applied: per key the latest last-modified value wins; at the
    same value the row applied later (it was read from the source later)."""
    model = load_config(write_config(tmp_path)).model("items")
    early, late = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    rows = pa.Table.from_pylist([
        {"id": 1, "organization_id": "o", "updated_at": late, "v": "newest"},
        {"id": 1, "organization_id": "o", "updated_at": early, "v": "older, applied later"},
        {"id": 2, "organization_id": "o", "updated_at": early, "v": "first"},
        {"id": 2, "organization_id": "o", "updated_at": early, "v": "same time, applied later"},
        {"id": 3, "organization_id": "o", "updated_at": early, "v": "alone"},
    ], schema=arrow_schema(model))
    kept = {r["id"]: r["v"] for r in latest_per_key(rows, model).to_pylist()}
    assert kept == {1: "newest", 2: "same time, applied later", 3: "alone"}
