"""The SFTP test destination: object storage (vendor ``sftp``) in a fresh folder of the session's
sshd (``support/sftp_server.py``), read as its recipient reads it: over SFTP with its own paramiko
client (never the writer's store), the manifests applied in ``sequence``."""

from __future__ import annotations

import stat

from transfer_platform_tests.support.destinations import (
    SIGNING_KEY_ENV,
    Place,
    TestDestination,
    _consumed,
)

#: the environment variable the SFTP destinations' ``private_key`` names
SFTP_KEY_ENV = "TP_TEST_SFTP_KEY"


def sftp_keys(client, root: str, start: str) -> list[str]:
    """Every file key (relative to ``root``) starting with ``start``, dot-names left out."""
    found, folders = [], [""]
    while folders:
        folder = folders.pop()
        try:
            entries = client.listdir_attr(f"{root}/{folder}".rstrip("/"))
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.filename.startswith("."):
                continue
            key = f"{folder}/{entry.filename}".lstrip("/")
            if stat.S_ISDIR(entry.st_mode):
                folders.append(key)
            elif key.startswith(start):
                found.append(key)
    return sorted(found)


def sftp_consumed(server, root: str, prefix: str, model):
    """The model's rows as a consumer applying the manifests reads them over SFTP."""
    with server.sftp() as client:
        def get(key: str) -> bytes:
            with client.open(f"{root}/{key}", "rb") as file:
                return file.read()

        return _consumed(model, lambda start: sftp_keys(client, root, start), get, prefix)


def sftp(place: Place) -> TestDestination:
    server = place.fixture("sftp_server")
    root, prefix = server.folder(), "acme"
    block = {"vendor": "sftp", "connection": {**server.connection(root, SFTP_KEY_ENV), "prefix": prefix},
             "signing_key": f"${{{SIGNING_KEY_ENV}}}"}
    return TestDestination("sftp", "sftp", block, lambda model: sftp_consumed(server, root, prefix, model),
                           {"env": {SFTP_KEY_ENV: server.private_key}, "server": server, "root": root})
