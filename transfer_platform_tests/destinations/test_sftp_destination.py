"""Object storage on an SFTP server (vendor ``sftp``) against a real OpenSSH sshd in its own process
(``support/sftp_server.py``: a chrooted, key-only user restricted to internal-sftp), read back over
SFTP with paramiko as a recipient reads it.

- a wrong private key, an unknown host key (the server presents another), an unreachable port
  and a missing folder are each named, with the fix, by ``test-connection`` and by a transfer,
  which writes nothing; no output or log shows the private key;
- ``test-connection`` names the step that fails in the folder (a folder it cannot create);
- ``test-connection`` and a transfer work from the command line (a dry run: the contract suite);
  every manifest verifies with the provider's public key (not with another; a forged one fails);
  a window read alone (a large one) is written through the store by the transferring process;
- a second transfer of a model is refused while the first holds the lock file; a lock left by
  a transfer that is gone is taken over, a fresh one is not; of creators racing for a lock file
  exactly one wins (``O_EXCL`` on the server);
- every model data_type round-trips exactly through the Parquet files read over SFTP.
"""

from __future__ import annotations

import io
import json
import stat
import threading
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from transfer_platform.cli import main
from transfer_platform.config.connection_settings import SFTPConnection
from transfer_platform.config.loading import load_config
from transfer_platform.config.parsing import parse_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.manifests import new_signing_key, verify_manifest
from transfer_platform.errors import TransferRunning
from transfer_platform.storage.locks import holder_text
from transfer_platform.storage.sftp import SFTPStore
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import day
from transfer_platform_tests.support.platform import lake_rows, write_config
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.sftp import sftp_consumed, sftp_keys
from transfer_platform_tests.support.sftp_server import SFTPServer
from transfer_platform_tests.support.transfers import transfer
from transfer_platform_tests.support.typed import TYPED_COLUMNS

pytestmark = pytest.mark.integration

PRIVATE, PUBLIC = new_signing_key()
KEY_ENV = "TP_TEST_SFTP_CLIENT_KEY"


@pytest.fixture
def server(sftp_server: SFTPServer, monkeypatch: pytest.MonkeyPatch) -> SFTPServer:
    monkeypatch.setenv(KEY_ENV, sftp_server.private_key)
    monkeypatch.setenv("TP_TEST_SIGNING_KEY", PRIVATE)
    return sftp_server


def configure(root: Path, server: SFTPServer, folder: str, **changes: object) -> Path:
    """The lake's configuration (``support/platform.py``) with one destination ``acme_files``:
    object storage in ``folder`` of the server."""
    path = write_config(root)
    config = yaml.safe_load(path.read_text())
    config["destinations"] = [{"name": "acme_files", "recipient": "acme", "vendor": "sftp",
                               "signing_key": "${TP_TEST_SIGNING_KEY}",
                               "connection": server.connection(folder, KEY_ENV, prefix="acme", **changes)}]
    path.write_text(yaml.safe_dump(config))
    return path


def files(server: SFTPServer, folder: str) -> list[str]:
    """Every file under ``folder``, dot-names included (a file being written counts too)."""
    with server.sftp() as client:
        found, folders = [], [folder]
        while folders:
            current = folders.pop()
            for entry in client.listdir_attr(current):
                if stat.S_ISDIR(entry.st_mode):
                    folders.append(f"{current}/{entry.filename}")
                else:
                    found.append(f"{current}/{entry.filename}"[len(folder) + 1:])
        return sorted(found)


def cli(capsys, config: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--config", str(config), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def another_key(tmp_path: Path, name: str) -> tuple[str, str]:
    """A new Ed25519 key pair: (private key text, public key line)."""
    from transfer_platform_tests.support.sftp_server import keygen

    return keygen(tmp_path / name)


# -- failures: named, with the fix, no secret, nothing written ---------------------------------------


def test_a_wrong_key_an_unknown_host_key_an_unreachable_port_and_a_missing_folder_are_named_without_the_key(
        spark, tmp_path: Path, server: SFTPServer, capsys, caplog, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = server.folder()
    wrong_key, _ = another_key(tmp_path, "wrong_client")
    _, other_host_key = another_key(tmp_path, "other_host")
    monkeypatch.setenv("TP_TEST_WRONG_KEY", wrong_key)
    cases = {
        "wrong key": ({"private_key": "${TP_TEST_WRONG_KEY}"},
                      ["refused user root's key", "private_key", "authorized_keys"]),
        "unknown host key": ({"known_host_key": other_host_key},
                             ["host key other than connection.known_host_key", "administrator"]),
        "unreachable port": ({"port": 9}, ["127.0.0.1:9 cannot be reached", "connection.host and port"]),
        "missing folder": ({"path": f"{folder}/no-such-folder"},
                           ["folder does not exist", f"create {folder}/no-such-folder", "connection.path"]),
    }
    for case, (changes, words) in cases.items():
        config = configure(tmp_path, server, folder, **changes)
        code, out, err = cli(capsys, config, "test-connection", "acme_files")
        assert code == 1, (case, out, err)
        assert out, (case, err)
        first = out.splitlines()[0]
        assert first.startswith("FAIL"), (case, out)
        for word in [*words, "SFTP folder"]:
            assert word in first, (case, first)
        code, out, err = cli(capsys, config, "transfer", "acme_files")
        assert code == 1, (case, out, err)
        for word in words:
            assert word in out + err, (case, out, err)
        shown = out + err + caplog.text
        for secret in (server.private_key, wrong_key):
            assert secret.strip() not in shown, case
            assert "PRIVATE KEY" not in shown, case
        assert files(server, folder) == [], f"{case}: something was written"


def test_test_connection_names_the_step_it_cannot_do_in_the_folder(tmp_path: Path, server: SFTPServer,
                                                                    capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = server.folder()
    config = configure(tmp_path, server, folder)
    (server.chroot / folder.lstrip("/") / "acme").write_text("a file where the prefix's folder goes")
    code, out, err = cli(capsys, config, "test-connection", "acme_files")
    assert code == 1, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith("PASS"), out  # reached and listed
    assert lines[1].startswith("FAIL"), out
    assert f"create folder {folder}/acme" in lines[1], out


# -- the command line: test-connection, dry run, transfer, integrity; manifests verify ---------------


def test_test_connection_and_transfer_from_the_command_line(
        spark, tmp_path: Path, server: SFTPServer, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = server.folder()
    config = configure(tmp_path, server, folder)

    code, out, err = cli(capsys, config, "test-connection", "acme_files")
    assert code == 0, (out, err)
    lines = out.splitlines()
    assert [line.split("  ", 1)[0] for line in lines[:2]] == ["PASS", "PASS"], out
    assert f"SFTP folder {folder} on 127.0.0.1:{server.port}" in lines[0]
    assert files(server, folder) == [], "the probe left a file behind"

    code, out, err = cli(capsys, config, "transfer", "acme_files")
    assert code == 0, (out, err)
    assert json.loads(out)["status"] == "SUCCESS", out
    written = files(server, folder)
    assert not [f for f in written if f.rsplit("/", 1)[-1].startswith(".")], written  # nothing left aside
    assert not [f for f in written if f.endswith("lock.json")], "the lock file outlived its transfer"

    loaded = load_config(config)
    for model in ("items", "notes"):  # what a recipient reads over SFTP is the tenant's rows
        rows = sftp_consumed(server, folder, "acme", loaded.model(model))
        assert rows == lake_rows(tmp_path, model), model
    with server.sftp() as client:
        manifests = []
        for key in sftp_keys(client, folder, "acme/_manifests/"):
            with client.open(f"{folder}/{key}") as file:
                manifests.append(json.loads(file.read()))
    assert {m["model_name"] for m in manifests} == {"items", "notes"}
    for manifest in manifests:  # every manifest verifies with the provider's public key, not with another
        verify_manifest(manifest, PUBLIC)
        assert manifest["bucket_name"] == folder
        with pytest.raises(ValueError, match="another key"):
            verify_manifest(manifest, new_signing_key()[1])
        forged = {**manifest, "files": manifest["files"][:-1] or [{"data_file_key": "x"}]}
        with pytest.raises(ValueError, match="does not match"):
            verify_manifest(forged, PUBLIC)


# -- every type -------------------------------------------------------------------------------------


BASE = day(3, 1) + timedelta(hours=1, microseconds=123_457)
TYPED_ROWS = [
    (1, "acme", BASE, Decimal("12345678901234567890123456789.123456789"), '{"a": [1, 2.5, "x\\"y"], "é": null}',
     "quotes ' \" \\ and é, 😀\nsecond line", True, 0.1, date(1970, 1, 1)),
    (2, "acme", BASE + timedelta(microseconds=1), Decimal("-99999999999999999999999999999.999999999"), "[]",
     "", False, -1.5e300, date(2999, 12, 31)),
    (3, "acme", BASE + timedelta(hours=20, microseconds=999_998), Decimal("-0.000000001"), '"text"', None, None,
     None, None),
    (4, "acme", BASE + timedelta(hours=3), None, None, "NULL", True, 2.0 ** -1074, date(2024, 2, 29)),
]


@pytest.mark.parametrize("tuning", [Tuning(), Tuning(run_rows=0)], ids=["together", "alone"])
def test_every_type_round_trips_exactly(spark, pg_conn, pg_schema, server: SFTPServer, monkeypatch,
                                        tuning: Tuning) -> None:
    """Each window read together into this process, or read alone (a "large" window: Spark's
    executors cannot write over SFTP, so its rows come to this process and go through the store)."""
    pg_conn.execute(f'CREATE TABLE "{pg_schema}".typed (id bigint, organization_id text, updated_at timestamptz, '
                    "amount numeric(38,9), doc jsonb, note text, flag boolean, ratio double precision, born date)")
    with pg_conn.cursor() as cur:
        cur.executemany(f'INSERT INTO "{pg_schema}".typed VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)', TYPED_ROWS)
    folder = server.folder()
    model = events_model(f"{pg_schema}.typed", min_start=day(3, 1))
    model["columns"] = TYPED_COLUMNS
    config = parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": "acme"}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "sftp",
                          "signing_key": "${TP_TEST_SIGNING_KEY}", "connection": server.connection(folder, KEY_ENV)}],
    }, now=day(6, 1))
    assert transfer(spark, config, day(3, 2) + timedelta(hours=1), "t1", tuning=tuning).status == "SUCCESS"

    with server.sftp() as client:
        (data,) = [k for k in sftp_keys(client, folder, "events/") if k.endswith(".parquet")]
        with client.open(f"{folder}/{data}", "rb") as file:
            table = pq.read_table(io.BytesIO(file.read()))
    got = sorted(table.to_pylist(), key=lambda r: r["id"])
    names = [c["name_in_source"] for c in TYPED_COLUMNS]
    want = [dict(zip(names, row, strict=True)) for row in TYPED_ROWS]
    for row in want:
        row["doc"] = None if row["doc"] is None else json.dumps(json.loads(row["doc"]), ensure_ascii=False)
    for row in got:
        row["doc"] = None if row["doc"] is None else json.dumps(json.loads(row["doc"]), ensure_ascii=False)
        row["updated_at"] = row["updated_at"].astimezone(UTC)
    assert got == want
    assert [r["updated_at"].microsecond for r in got] == [123_457, 123_458, 123_455, 123_457]
    assert str(table.schema.field("amount").type) == "decimal128(38, 9)"


# -- one transfer per model: the lock file ------------------------------------------------------------


def test_the_lock_refuses_a_second_transfer_and_a_dead_transfers_lock_is_taken_over(
        tmp_path: Path, server: SFTPServer, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = server.folder()
    config = load_config(configure(tmp_path, server, folder))
    destination, model = config.destination("acme_files"), config.model("items")
    quick = Tuning(lock_wait_seconds=1)
    lock = server.chroot / folder.lstrip("/") / "acme" / "_transfer_platform" / "items" / "lock.json"

    first = writer_for(destination, quick)
    first.lock_model(model, "transfer-one")
    assert json.loads(lock.read_text())["transfer_id"] == "transfer-one"
    second = writer_for(destination, quick)
    with pytest.raises(TransferRunning, match="transfer transfer-one"):
        second.lock_model(model, "transfer-two")
    first.close()
    assert not lock.exists(), "the lock file outlived its transfer"
    second.lock_model(model, "transfer-two")  # free now
    second.close()

    # renewed longer ago than the lease, by a process of another machine: taken over
    stale = json.loads(holder_text("gone"))
    stale |= {"host": "another-machine", "since": (datetime.now(UTC) - timedelta(hours=1)).isoformat()}
    lock.write_text(json.dumps(stale))
    third = writer_for(destination, quick)
    third.lock_model(model, "transfer-three")
    assert json.loads(lock.read_text())["transfer_id"] == "transfer-three"
    assert [p.name for p in lock.parent.iterdir()] == ["lock.json"], "the stale lock was left aside"
    third.close()

    # held by a process of this machine that no longer runs (killed outright): taken over
    lock.write_text(json.dumps(json.loads(holder_text("killed")) | {"pid": 2 ** 22 + 1}))
    fourth = writer_for(destination, quick)
    fourth.lock_model(model, "transfer-four")
    fourth.close()

    # a fresh one of another machine is not
    lock.write_text(json.dumps(stale | {"since": datetime.now(UTC).isoformat()}))
    with pytest.raises(TransferRunning, match="transfer gone"):
        writer_for(destination, quick).lock_model(model, "transfer-five")
    assert json.loads(lock.read_text())["transfer_id"] == "gone"


def test_of_creators_racing_for_a_lock_file_exactly_one_wins(server: SFTPServer) -> None:
    """Each creator its own SSH connection; all released at once, many rounds."""
    folder = server.folder()
    connection = SFTPConnection(**server.connection(folder, KEY_ENV))
    stores = [SFTPStore(connection, "destination 'race'") for _ in range(6)]
    for store in stores:
        store.keys("")  # connected
    def create(store: SFTPStore, name: str, key: str, start: threading.Barrier, won: list[str]) -> None:
        start.wait()
        if store._create_exclusively(key, name.encode()):
            won.append(name)

    for round_ in range(15):
        key = f"locks/m{round_}/lock.json"
        start, won = threading.Barrier(len(stores)), []
        threads = [threading.Thread(target=create, args=(s, f"creator-{i}", key, start, won))
                   for i, s in enumerate(stores)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(won) == 1, (round_, won)
        assert (server.chroot / folder.lstrip("/") / key).read_text() == won[0]
    for store in stores:
        store.release_all()
