"""The ``sftp`` destination against a real SFTP server, when its environment variables are set
(skipped otherwise): a transfer of the lake's two models into a new prefix under the folder, read
back over SFTP with paramiko as a recipient reads it (manifests verified with the public key),
then the prefix deleted.

- ``TRANSFER_PLATFORM_LIVE_SFTP_HOST``, ``_PORT`` (default 22), ``_USER``;
- ``TRANSFER_PLATFORM_LIVE_SFTP_KEY``: the user's private key (OpenSSH or PEM text);
- ``TRANSFER_PLATFORM_LIVE_SFTP_HOST_KEY``: the server's public host key (``ssh-ed25519 AAAA...``);
- ``TRANSFER_PLATFORM_LIVE_SFTP_PATH``: the folder to write under (it must exist).
"""

from __future__ import annotations

import base64
import io
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.manifests import new_signing_key, verify_manifest
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform_tests.support.platform import lake_rows, write_config
from transfer_platform_tests.support.sftp import sftp_keys

pytestmark = pytest.mark.integration

VARS = ("HOST", "USER", "KEY", "HOST_KEY", "PATH")
ENV = {name: f"TRANSFER_PLATFORM_LIVE_SFTP_{name}" for name in (*VARS, "PORT")}
MISSING = [ENV[name] for name in VARS if not os.environ.get(ENV[name])]

skip = pytest.mark.skipif(bool(MISSING), reason=f"the live SFTP lane needs {', '.join(ENV[n] for n in VARS)} "
                                                f"(and optionally {ENV['PORT']}); not set: {', '.join(MISSING)}")


@contextmanager
def live_sftp() -> Iterator:
    """paramiko's own SFTP client of the live server, its host key checked."""
    import paramiko

    host, port = os.environ[ENV["HOST"]], int(os.environ.get(ENV["PORT"]) or 22)
    kind, blob = os.environ[ENV["HOST_KEY"]].split()[:2]
    host_key = paramiko.PKey.from_type_string(kind, base64.b64decode(blob))
    key_text = os.environ[ENV["KEY"]]
    key = next(k for k in (_load(cls, key_text) for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey))
               if k is not None)
    ssh = paramiko.SSHClient()
    ssh.set_missing_host_key_policy(paramiko.RejectPolicy())
    ssh.get_host_keys().add(host if port == 22 else f"[{host}]:{port}", host_key.get_name(), host_key)
    ssh.connect(host, port, username=os.environ[ENV["USER"]], pkey=key, look_for_keys=False, allow_agent=False,
                timeout=15)
    try:
        with ssh.open_sftp() as client:
            yield client
    finally:
        ssh.close()


def _load(cls, text: str):
    import paramiko

    try:
        return cls.from_private_key(io.StringIO(text))
    except (paramiko.SSHException, ValueError):
        return None


@skip
def test_a_transfer_to_the_live_server_is_read_back_over_sftp(spark, tmp_path: Path, monkeypatch) -> None:
    private, public = new_signing_key()
    monkeypatch.setenv("TP_LIVE_SIGNING_KEY", private)
    monkeypatch.chdir(tmp_path)
    root, prefix = os.environ[ENV["PATH"]].rstrip("/"), f"tp-live-{uuid.uuid4().hex[:10]}"
    path = write_config(tmp_path)
    config = yaml.safe_load(path.read_text())
    config["destinations"] = [{"name": "acme_files", "recipient": "acme", "vendor": "sftp",
                               "signing_key": "${TP_LIVE_SIGNING_KEY}",
                               "connection": {"host": os.environ[ENV["HOST"]],
                                              "port": int(os.environ.get(ENV["PORT"]) or 22),
                                              "username": os.environ[ENV["USER"]],
                                              "private_key": "${" + ENV["KEY"] + "}",
                                              "known_host_key": os.environ[ENV["HOST_KEY"]],
                                              "path": root, "prefix": prefix}}]
    path.write_text(yaml.safe_dump(config))
    loaded = load_config(path)
    writer = writer_for(loaded.destination("acme_files"))
    try:
        summaries = run_transfer(TransferRequest(spark=spark, config=loaded,
                                                 order=TransferOrder(destination="acme_files"), writer=writer,
                                                 transfer_id="live-1", now=datetime.now(UTC)), loaded.models)
        assert all(s.status == "SUCCESS" for s in summaries), [(s.model, s.error) for s in summaries]
        for model in ("items", "notes"):
            assert sorted(writer.delivered_rows(loaded.model(model)).to_pylist(), key=lambda r: r["id"]) == \
                lake_rows(tmp_path, model)
    finally:
        writer.close()
    with live_sftp() as client:
        keys = sftp_keys(client, root, f"{prefix}/")
        try:
            manifests = []
            for key in keys:
                if "/_manifests/" in key:
                    with client.open(f"{root}/{key}", "rb") as file:
                        manifests.append(json.loads(file.read()))
            assert {m["model_name"] for m in manifests} == {"items", "notes"}
            for manifest in manifests:
                verify_manifest(manifest, public)
        finally:
            _remove_tree(client, f"{root}/{prefix}")


def _remove_tree(client, folder: str) -> None:
    """Delete ``folder`` and everything under it."""
    import stat

    for entry in client.listdir_attr(folder):
        path = f"{folder}/{entry.filename}"
        if stat.S_ISDIR(entry.st_mode):
            _remove_tree(client, path)
        else:
            client.remove(path)
    client.rmdir(folder)
