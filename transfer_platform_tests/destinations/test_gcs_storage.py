"""Object storage in a Google Cloud Storage bucket (vendor ``gcs``) against a real emulator
(fake-gcs-server in its own process, the JSON API), read back with google-cloud-storage.

What a recipient and an operator expect: a service account key that is no key, a key whose token
cannot be had, a missing bucket and an unreachable endpoint are each named (with the fix) by
``test-connection`` and by a transfer, which writes nothing, and no output shows the key;
``test-connection``, a transfer and an integrity check work from the command line; every manifest
verifies with the provider's public key; a second transfer of a model is refused while the first
holds the lock object, a lock left by a transfer that is gone is taken over, and of two
transfers creating (or taking over) the same lock at once exactly one wins (GCS's generation
preconditions: the loser's write is refused with 412).

The emulator checks no credentials and enforces no IAM: a wrong but well-formed key and a missing
role are not proven here (docs/destinations.md).
"""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from transfer_platform.cli import main
from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.manifests import new_signing_key, verify_manifest
from transfer_platform.errors import TransferRunning
from transfer_platform.storage.locks import holder_text
from transfer_platform.storage.s3 import LostRace
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.gcs_server import GcsServer
from transfer_platform_tests.support.platform import lake_rows, write_config

pytestmark = pytest.mark.integration

PRIVATE, PUBLIC = new_signing_key()
CREDENTIALS_ENV = "TP_TEST_GCS_CREDENTIALS"


@pytest.fixture
def gcs(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> GcsServer:
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", PRIVATE)
    return gcs_server


def new_bucket(gcs: GcsServer) -> str:
    name = f"it-{uuid.uuid4().hex[:12]}"
    gcs.create_bucket(name)
    return name


def configure(root: Path, gcs: GcsServer, in_bucket: str, **changes: str) -> Path:
    """The lake's configuration (``support/platform.py``) with one destination ``acme_files``: object
    storage in ``in_bucket`` of the emulator."""
    path = write_config(root)
    config = yaml.safe_load(path.read_text())
    connection = {"bucket": in_bucket, "prefix": "acme", "endpoint_url": gcs.endpoint, **changes}
    config["destinations"] = [{"name": "acme_files", "recipient": "acme", "vendor": "gcs", "connection": connection,
                               "signing_key": "${TP_TEST_SIGNING_KEY}"}]
    path.write_text(yaml.safe_dump(config))
    return path


def objects(gcs: GcsServer, bucket: str) -> list[str]:
    return sorted(b.name for b in gcs.client().list_blobs(bucket))


def cli(capsys, config: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--config", str(config), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def service_account_key(token_uri: str, private_key: str | None = None) -> str:
    """A service account's JSON key of the right form (its private key a fresh RSA key)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    if private_key is None:
        private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return json.dumps({"type": "service_account", "project_id": "acme", "private_key_id": "k1",
                       "private_key": private_key, "client_email": "transfers@acme.iam.gserviceaccount.com",
                       "client_id": "1", "token_uri": token_uri})


# -- failures: named, with the fix, no secret, nothing written ---------------------------------------


def test_a_bad_key_a_missing_bucket_and_an_unreachable_endpoint_are_named_without_the_key(
        spark, tmp_path: Path, gcs: GcsServer, capsys, caplog, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    bucket = new_bucket(gcs)
    not_a_key = "-----BEGIN PRIVATE KEY-----\nTOP-SECRET-NOT-A-KEY\n-----END PRIVATE KEY-----\n"
    unusable = service_account_key("http://127.0.0.1:9/token", not_a_key)
    no_token = service_account_key("http://127.0.0.1:9/token")  # Google's token endpoint, unreachable
    secrets = {"not a key": unusable, "no token": no_token}
    cases = {
        "not a key": ({"credentials": f"${{{CREDENTIALS_ENV}}}"},
                      [f"${{{CREDENTIALS_ENV}}}", "not a usable key", "service account's JSON key"]),
        "no token": ({"credentials": f"${{{CREDENTIALS_ENV}}}"},
                     ["no access token", "connection.credentials", bucket]),
        "missing bucket": ({"bucket": "no-such-bucket"}, ["404", "no-such-bucket", "create the bucket"]),
        "unreachable": ({"endpoint_url": "http://127.0.0.1:9"},
                        ["127.0.0.1:9", "cannot be reached", "connection.endpoint_url"]),
    }
    for case, (changes, words) in cases.items():
        if case in secrets:
            monkeypatch.setenv(CREDENTIALS_ENV, secrets[case])
        config = configure(tmp_path, gcs, bucket, **changes)
        one_model = yaml.safe_load(config.read_text())
        one_model["models"] = one_model["models"][:1]  # each model's transfer tries again: one is enough
        config.write_text(yaml.safe_dump(one_model))
        code, out, err = cli(capsys, config, "test-connection", "acme_files")
        assert code == 1, (case, out, err)
        first = (out or err).splitlines()[0]  # a check that failed, or a key refused before any check
        assert first.startswith("FAIL" if out else "error: cannot reach object storage"), (case, out, err)
        for word in words:
            assert word in first, (case, first)
        code, out, err = cli(capsys, config, "transfer", "acme_files")
        assert code == 1, (case, out, err)
        for word in words:
            assert word in out + err, (case, out, err)
        shown = out + err + caplog.text
        for secret in secrets.values():
            assert json.loads(secret)["private_key"].splitlines()[1] not in shown, case
        assert "TOP-SECRET" not in shown, case
        assert objects(gcs, bucket) == [], f"{case}: something was written"


def test_without_credentials_only_an_emulator_is_allowed(tmp_path: Path, gcs: GcsServer, capsys,
                                                         monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = configure(tmp_path, gcs, "some-bucket")
    config = yaml.safe_load(path.read_text())
    del config["destinations"][0]["connection"]["endpoint_url"]
    path.write_text(yaml.safe_dump(config))
    assert main(["--config", str(path), "validate"]) == 2  # a configuration error
    out = capsys.readouterr()
    assert "credentials" in out.out + out.err


# -- the command line: test-connection, transfer, integrity; manifests verify ------------------------


def test_test_connection_transfer_and_integrity_from_the_command_line(
        spark, tmp_path: Path, gcs: GcsServer, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    bucket = new_bucket(gcs)
    config = configure(tmp_path, gcs, bucket)

    code, out, err = cli(capsys, config, "test-connection", "acme_files")
    assert code == 0, (out, err)
    lines = out.splitlines()
    assert [line.split("  ", 1)[0] for line in lines[:2]] == ["PASS", "PASS"], out
    assert f"GCS bucket {bucket}" in lines[0]
    assert objects(gcs, bucket) == [], "the probe left an object behind"

    code, out, err = cli(capsys, config, "transfer", "acme_files")
    assert code == 0, (out, err)
    assert json.loads(out)["status"] == "SUCCESS", out

    code, out, err = cli(capsys, config, "integrity", "acme_files")
    assert code == 0, (out, err)
    assert "FAIL" not in out, out

    destination = load_config(config).destination("acme_files")
    writer = writer_for(destination)
    for model in ("items", "notes"):  # what the bucket holds is the tenant's rows
        rows = writer.read_table(spark, load_config(config).model(model)).toArrow().to_pylist()
        assert sorted(rows, key=lambda r: r["id"]) == lake_rows(tmp_path, model), model
    bucket_client = gcs.client().bucket(bucket)
    manifests = [json.loads(bucket_client.blob(b).download_as_bytes())
                 for b in objects(gcs, bucket) if "/_manifests/" in b]
    assert {m["model_name"] for m in manifests} == {"items", "notes"}
    for manifest in manifests:  # every manifest verifies with the provider's public key, not another
        verify_manifest(manifest, PUBLIC)
        assert manifest["bucket_name"] == bucket
        for entry in manifest["files"]:
            assert bucket_client.get_blob(entry["data_file_key"]).etag == entry["etag"]
        with pytest.raises(ValueError, match="another key"):
            verify_manifest(manifest, new_signing_key()[1])
        forged = {**manifest, "files": manifest["files"][:-1] or [{"data_file_key": "x"}]}
        with pytest.raises(ValueError, match="does not match"):
            verify_manifest(forged, PUBLIC)


# -- one transfer per model: the lock object, over generations ------------------------------------------


def test_the_lock_refuses_a_second_transfer_and_a_dead_transfers_lock_is_taken_over(
        tmp_path: Path, gcs: GcsServer, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    bucket = new_bucket(gcs)
    config = load_config(configure(tmp_path, gcs, bucket))
    destination, model = config.destination("acme_files"), config.model("items")
    quick = Tuning(lock_wait_seconds=1)
    blobs = gcs.client().bucket(bucket)

    first = writer_for(destination, quick)
    first.lock_model(model, "transfer-one")
    (lock_key,) = [b for b in objects(gcs, bucket) if "items" in b and "lock" in b]
    second = writer_for(destination, quick)
    with pytest.raises(TransferRunning, match="transfer transfer-one"):
        second.lock_model(model, "transfer-two")
    first.store.renew(model.model_name, "transfer-one")  # renewed over its own generation
    first.close()
    assert lock_key not in objects(gcs, bucket), "the lock object outlived its transfer"
    second.lock_model(model, "transfer-two")  # free now
    second.close()

    # a lock object renewed longer ago than the lease, by a process of another machine: taken over
    stale = json.loads(holder_text("gone"))
    stale |= {"host": "another-machine", "since": (datetime.now(UTC) - timedelta(hours=1)).isoformat()}
    blobs.blob(lock_key).upload_from_string(json.dumps(stale))
    third = writer_for(destination, quick)
    third.lock_model(model, "transfer-three")
    assert json.loads(blobs.blob(lock_key).download_as_bytes())["transfer_id"] == "transfer-three"

    # a transfer whose lock was taken over meanwhile stops at its next renewal
    blobs.blob(lock_key).upload_from_string(json.dumps(stale | {"since": datetime.now(UTC).isoformat()}))
    with pytest.raises(TransferRunning, match="taken over"):
        third.store.renew(model.model_name, "transfer-three")
    third.close()

    # a fresh one of another machine is not taken over
    fresh = stale | {"since": datetime.now(UTC).isoformat()}
    blobs.blob(lock_key).upload_from_string(json.dumps(fresh))
    with pytest.raises(TransferRunning, match="transfer gone"):
        writer_for(destination, quick).lock_model(model, "transfer-four")


def test_of_two_transfers_creating_or_taking_over_one_lock_at_once_exactly_one_wins(
        tmp_path: Path, gcs: GcsServer, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    bucket = new_bucket(gcs)
    config = load_config(configure(tmp_path, gcs, bucket))
    destination, model = config.destination("acme_files"), config.model("items")
    blobs = gcs.client().bucket(bucket)
    stores = [writer_for(destination, Tuning(lock_wait_seconds=1)).store for _ in range(2)]

    def race(write) -> list:
        """``write(store, n)`` by both stores at once: what each got (a generation, or LostRace)."""
        start, results = threading.Barrier(2), [None, None]

        def run(n: int) -> None:
            start.wait()
            try:
                results[n] = write(stores[n], n)
            except LostRace as lost:
                results[n] = lost

        threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    for attempt in range(5):  # created only if absent: one creator gets 412
        key = f"locks/created-{attempt}.json"
        results = race(lambda store, n, key=key: store.upload(key, f"creator {n}".encode(), if_generation_match=0))
        assert sum(isinstance(r, LostRace) for r in results) == 1, results
        (winner,) = [n for n, r in enumerate(results) if not isinstance(r, LostRace)]
        assert blobs.blob(key).download_as_bytes() == f"creator {winner}".encode()

    for attempt in range(5):  # a stale lock's version replaced by one only
        key = f"locks/stale-{attempt}.json"
        blobs.blob(key).upload_from_string(b"stale")
        generation = blobs.get_blob(key).generation
        results = race(lambda store, n, key=key, g=generation: store.upload(key, f"taker {n}".encode(),
                                                                             if_generation_match=g))
        assert sum(isinstance(r, LostRace) for r in results) == 1, results

    # the same through the writers: a dead transfer's lock, two transfers taking it over at once
    stale = json.loads(holder_text("gone")) | {"host": "another-machine",
                                              "since": (datetime.now(UTC) - timedelta(hours=1)).isoformat()}
    writers = [writer_for(destination, Tuning(lock_wait_seconds=1)) for _ in range(2)]
    writers[0].lock_model(model, "probe")
    (lock_key,) = [b for b in objects(gcs, bucket) if b.endswith("items/lock.json")]
    writers[0].close()
    blobs.blob(lock_key).upload_from_string(json.dumps(stale))
    start, outcome = threading.Barrier(2), {}

    def take(n: int) -> None:
        start.wait()
        try:
            writers[n].lock_model(model, f"taker-{n}")
            outcome[n] = "held"
        except TransferRunning:
            outcome[n] = "refused"

    threads = [threading.Thread(target=take, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcome.values()) == ["held", "refused"], outcome
    (holder,) = [n for n, o in outcome.items() if o == "held"]
    assert json.loads(blobs.blob(lock_key).download_as_bytes())["transfer_id"] == f"taker-{holder}"
    for writer in writers:
        writer.close()
