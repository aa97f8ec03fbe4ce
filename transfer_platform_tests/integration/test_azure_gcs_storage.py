"""Azure Blob Storage destinations against a real emulator (Azurite in its own process): object
storage (vendor ``abs``) and Delta tables in a container (``az://``).

What a recipient and an operator expect: a wrong account key, a missing container and an
unreachable endpoint are each named (with the fix) by ``test-connection`` and by a transfer,
which writes nothing, and no output shows the key; ``test-connection``, a dry run, a transfer and
an integrity check work from the command line; every manifest verifies with the provider's public
key; a second transfer of a model is refused while the first holds the lock object, and a lock left
by a transfer that is gone is taken over.

GCS object storage (vendor ``gcs``) is tested in ``destinations/test_gcs_*.py`` against
fake-gcs-server; Delta on GCS is not built: that emulator does not serve the XML API delta-rs uses
(see docs/destinations.md).
"""

from __future__ import annotations

import json
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
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.azurite import Azurite
from transfer_platform_tests.support.platform import lake_rows, write_config

pytestmark = pytest.mark.integration

PRIVATE, PUBLIC = new_signing_key()
KEY_ENV = "TP_TEST_AZURE_ACCOUNT_KEY"
KINDS = ("abs", "delta-abs")


@pytest.fixture
def azure(azure_blob: Azurite, monkeypatch: pytest.MonkeyPatch) -> Azurite:
    monkeypatch.setenv(KEY_ENV, azure_blob.key)
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", PRIVATE)
    return azure_blob


def new_container(azure: Azurite) -> str:
    name = f"it-{uuid.uuid4().hex[:12]}"
    azure.create_container(name)
    return name


def configure(root: Path, kind: str, azure: Azurite, in_container: str, **changes: str) -> Path:
    """The lake's configuration (``support/platform.py``) with one destination ``acme_files`` in
    ``in_container``: object storage (``abs``) or Delta tables (``delta-abs``)."""
    path = write_config(root)
    config = yaml.safe_load(path.read_text())
    connection = {"account_name": azure.account, "container": in_container, "prefix": "acme",
                  "endpoint_url": azure.endpoint, "account_key": f"${{{KEY_ENV}}}", **changes}
    destination = {"name": "acme_files", "recipient": "acme", "connection": connection}
    if kind == "abs":
        destination |= {"vendor": "abs", "signing_key": "${TP_TEST_SIGNING_KEY}"}
    else:
        destination |= {"vendor": "delta"}
    config["destinations"] = [destination]
    path.write_text(yaml.safe_dump(config))
    return path


def blobs(azure: Azurite, container: str) -> list[str]:
    return sorted(b.name for b in azure.container(container).list_blobs())


def cli(capsys, config: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--config", str(config), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


# -- failures: named, with the fix, no secret, nothing written ---------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_wrong_key_a_missing_container_and_an_unreachable_endpoint_are_named_without_the_key(
        spark, tmp_path: Path, kind: str, azure: Azurite, capsys, caplog, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    container = new_container(azure)
    wrong = "V3Jvbmc" + azure.key[7:]  # a well-formed key of the account's length, not its key
    monkeypatch.setenv("TP_TEST_WRONG_KEY", wrong)
    cases = {
        "wrong key": ({"account_key": "${TP_TEST_WRONG_KEY}"}, ["AuthorizationFailure", "account_key", container]),
        "missing container": ({"container": "no-such-container"}, ["ContainerNotFound", "no-such-container",
                                                                    "create the container"]),
        "unreachable": ({"endpoint_url": "http://127.0.0.1:9/devstoreaccount1"},
                        ["127.0.0.1:9", "cannot be reached", "connection.endpoint_url"]),
    }
    for case, (changes, words) in cases.items():
        config = configure(tmp_path, kind, azure, container, **changes)
        code, out, err = cli(capsys, config, "test-connection", "acme_files")
        assert code == 1, (case, out, err)
        first = out.splitlines()[0]
        assert first.startswith("FAIL"), (case, out)
        for word in words:
            assert word in first, (case, first)
        code, out, err = cli(capsys, config, "transfer", "acme_files")
        assert code == 1, (case, out, err)
        for word in words:
            assert word in out + err, (case, out, err)
        shown = out + err + caplog.text
        assert azure.key not in shown, case
        assert wrong not in shown, case
        assert blobs(azure, container) == [], f"{case}: something was written"


# -- the command line: test-connection, dry run, transfer, integrity; manifests verify ---------------


@pytest.mark.parametrize("kind", KINDS)
def test_test_connection_dry_run_transfer_and_integrity_from_the_command_line(
        spark, tmp_path: Path, kind: str, azure: Azurite, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    container = new_container(azure)
    config = configure(tmp_path, kind, azure, container)

    code, out, err = cli(capsys, config, "test-connection", "acme_files")
    assert code == 0, (out, err)
    lines = out.splitlines()
    assert [line.split("  ", 1)[0] for line in lines[:2]] == ["PASS", "PASS"], out
    assert f"Azure container {container}" in lines[0]
    assert "write, read, replace and delete" in lines[1]
    assert blobs(azure, container) == [], "the probe left an object behind"

    code, out, err = cli(capsys, config, "transfer", "acme_files", "--dry-run")
    assert code == 0, (out, err)
    assert json.loads(out)["status"] == "PLANNED"
    assert blobs(azure, container) == [], "a dry run wrote"

    code, out, err = cli(capsys, config, "transfer", "acme_files")
    assert code == 0, (out, err)
    assert json.loads(out)["status"] == "SUCCESS", out
    assert blobs(azure, container)

    code, out, err = cli(capsys, config, "integrity", "acme_files")
    assert code == 0, (out, err)
    assert "FAIL" not in out, out
    assert azure.key not in out + err

    destination = load_config(config).destination("acme_files")
    writer = writer_for(destination)
    for model in ("items", "notes"):  # what the container holds is the tenant's rows
        rows = writer.read_table(spark, load_config(config).model(model)).toArrow().to_pylist()
        assert sorted(rows, key=lambda r: r["id"]) == lake_rows(tmp_path, model), model
    if kind == "abs":  # every manifest verifies with the provider's public key, not with another
        client = azure.container(container)
        manifests = [json.loads(client.get_blob_client(b).download_blob().readall())
                     for b in blobs(azure, container) if "/_manifests/" in b]
        assert {m["model_name"] for m in manifests} == {"items", "notes"}
        for manifest in manifests:
            verify_manifest(manifest, PUBLIC)
            assert manifest["bucket_name"] == container
            with pytest.raises(ValueError, match="another key"):
                verify_manifest(manifest, new_signing_key()[1])
            forged = {**manifest, "files": manifest["files"][:-1] or [{"data_file_key": "x"}]}
            with pytest.raises(ValueError, match="does not match"):
                verify_manifest(forged, PUBLIC)


# -- one transfer per model: the lock object ------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_lock_refuses_a_second_transfer_and_a_dead_transfers_lock_is_taken_over(
        tmp_path: Path, kind: str, azure: Azurite, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    container = new_container(azure)
    config = load_config(configure(tmp_path, kind, azure, container))
    destination, model = config.destination("acme_files"), config.model("items")
    quick = Tuning(lock_wait_seconds=1)

    first = writer_for(destination, quick)
    first.lock_model(model, "transfer-one")
    (lock_key,) = [b for b in blobs(azure, container) if "items" in b and "lock" in b]
    second = writer_for(destination, quick)
    with pytest.raises(TransferRunning, match="transfer transfer-one"):
        second.lock_model(model, "transfer-two")
    first.close()
    assert lock_key not in blobs(azure, container), "the lock object outlived its transfer"
    second.lock_model(model, "transfer-two")  # free now
    second.close()

    # a lock object renewed longer ago than the lease, by a process of another machine: taken over
    stale = json.loads(holder_text("gone"))
    stale |= {"host": "another-machine", "since": (datetime.now(UTC) - timedelta(hours=1)).isoformat()}
    azure.container(container).upload_blob(lock_key, json.dumps(stale).encode())
    third = writer_for(destination, quick)
    third.lock_model(model, "transfer-three")
    held = json.loads(azure.container(container).get_blob_client(lock_key).download_blob().readall())
    assert held["transfer_id"] == "transfer-three"
    third.close()

    # a fresh one of another machine is not
    fresh = stale | {"since": datetime.now(UTC).isoformat()}
    azure.container(container).upload_blob(lock_key, json.dumps(fresh).encode())
    with pytest.raises(TransferRunning, match="transfer gone"):
        writer_for(destination, quick).lock_model(model, "transfer-four")
