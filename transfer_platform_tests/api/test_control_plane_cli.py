"""The control plane's commands as an operator runs them (each its own process): a new secret
key, the store's migration, the file imported into the store, API keys created and revoked, and
the API served by ``transfer-platform api`` answering a request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet

import transfer_platform.store
from transfer_platform_tests.support.api import write_api_config
from transfer_platform_tests.support.postgres import pg_connect, pg_connection_config
from transfer_platform_tests.support.processes import free_port

#: the store's migrations: the newest is the revision ``store migrate`` reaches
MIGRATIONS = Path(transfer_platform.store.__file__).parent / "migrations" / "versions"

CLI = [sys.executable, "-m", "transfer_platform.cli"]


def run(*args: str, config: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "--config", str(config), *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.fixture
def env(secret_key: str) -> dict[str, str]:
    return {**os.environ, "TRANSFER_PLATFORM_SECRET_KEY": secret_key}


def test_new_key_is_a_usable_fernet_key() -> None:
    out = subprocess.run([*CLI, "store", "new-key"], capture_output=True, text=True, check=True).stdout.strip()
    assert Fernet(out.encode()).decrypt(Fernet(out.encode()).encrypt(b"x")) == b"x"


def test_migrate_import_keys_and_serve(tmp_path: Path, store_schema: str, env: dict[str, str]) -> None:
    config = write_api_config(tmp_path, store_schema, recipients=[{"name": "acme", "id_in_provider_system": "a'c"}])
    migrated = run("store", "migrate", config=config, env=env)
    assert migrated.returncode == 0, migrated.stderr
    newest = max(f.name[:4] for f in MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert migrated.stdout.strip() == f"store at revision {newest}"
    imported = run("store", "import", config=config, env=env)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout) == {"source": 0, "model": 0, "recipient": 1, "destination": 0}
    assert "remove them from" in imported.stderr
    config.write_text(config.read_text().split("recipients:")[0])

    created = run("api-key", "create", "backend", config=config, env=env)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("tpk_")
    assert len(created.stdout.splitlines()) == 1
    with pg_connect(autocommit=True) as conn:
        stored = conn.execute(f'SELECT key_hash FROM "{store_schema}".api_keys').fetchall()
    assert key not in str(stored)
    reader = run("api-key", "create", "dashboard", "--scope", "read", config=config, env=env)
    assert reader.returncode == 0, reader.stderr
    assert run("api-key", "revoke", "dashboard", "--scope", "read", config=config, env=env).returncode == 2

    port = free_port()
    server = subprocess.Popen([*CLI, "--config", str(config), "-v", "api", "--port", str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        answer = None
        while time.monotonic() < deadline:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/recipients", headers={"X-API-KEY": key}, timeout=5)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()[1]
                time.sleep(0.2)
        assert answer is not None, "the API did not answer within 60 s"
        assert answer.status_code == 200
        assert [(r["name"], r["id_in_provider_system"], r["origin"]) for r in answer.json()["data"]["recipients"]] \
            == [("acme", "a'c", "store")]

        refused = httpx.post(f"http://127.0.0.1:{port}/recipients", headers={"X-API-KEY": reader.stdout.strip()},
                             json={"recipient": {"name": "globex", "id_in_provider_system": "g"}}, timeout=5)
        assert refused.status_code == 403
        assert "POST /recipients needs admin" in refused.json()["message"]
        scoped = httpx.post(f"http://127.0.0.1:{port}/actions/generate-scoped-auth-token", headers={"X-API-KEY": key},
                            json={"recipient_id": "acme"}, timeout=5).json()["data"]["scoped_token"]
        vendors = httpx.get(f"http://127.0.0.1:{port}/public/vendors/destinations",
                            headers={"X-Prequel-Auth-Token": scoped}, timeout=5)
        assert vendors.status_code == 200

        token = "k3yTokenOfALink_0123456789abcdef"
        assert httpx.get(f"http://127.0.0.1:{port}/link/{token}", timeout=5).status_code == 404

        assert run("api-key", "revoke", "backend", config=config, env=env).returncode == 0
        assert httpx.get(f"http://127.0.0.1:{port}/recipients", headers={"X-API-KEY": key}, timeout=5).status_code == 401
        again = run("api-key", "revoke", "backend", config=config, env=env)
        assert again.returncode == 1
        assert "no active API key" in again.stderr
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
    assert "GET /recipients" in out + err  # the access log (--verbose) is on ...
    assert "/link/***" in out + err
    assert token not in out + err  # ... and a link's token is masked in it
    assert key not in out + err
    assert scoped not in out + err


def test_a_file_without_a_store_is_told_how_to_add_one(tmp_path: Path, env: dict[str, str]) -> None:
    config = tmp_path / "transfer_platform.yaml"
    config.write_text("recipients: [{name: acme, id_in_provider_system: acme}]\n")
    answer = run("api-key", "create", "x", config=config, env=env)
    assert answer.returncode == 2
    assert "has no store" in answer.stderr
    assert "store:" in answer.stderr


def test_api_settings_without_a_store_are_refused_not_ignored(tmp_path: Path, env: dict[str, str]) -> None:
    config = tmp_path / "transfer_platform.yaml"
    config.write_text("api: {public_url: 'https://x.example'}\n"
                      "recipients: [{name: acme, id_in_provider_system: acme}]\n")
    answer = run("validate", config=config, env=env)
    assert answer.returncode == 2
    assert "api: has no effect without a store" in answer.stderr


def test_an_unreachable_store_is_named(tmp_path: Path, env: dict[str, str]) -> None:
    connection = {**pg_connection_config("tp_store_x"), "port": 1}
    config = tmp_path / "transfer_platform.yaml"
    config.write_text(json.dumps({"store": {"connection": connection}}))
    answer = run("validate", config=config, env=env)
    assert answer.returncode == 1
    assert "cannot reach the store's database test at 127.0.0.1:1" in answer.stderr
