"""The REST API under test: a configuration file with a store in a fresh schema of the test
database, the key secrets are stored with, an API key, and a client (FastAPI's TestClient, or
a real ``transfer-platform api`` process where a test needs one); the API over the small platform
with a Dagster instance of its own (:func:`platform_api`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from transfer_platform.config.secrets import SECRET_KEY_ENV
from transfer_platform_tests.support.platform import dagster_home, write_config
from transfer_platform_tests.support.postgres import PG, pg_connect, pg_connection_config


@dataclass
class Api:
    client: TestClient
    key: str
    config_path: Path
    store_schema: str
    app: Any  # the FastAPI application

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-KEY": self.key, "X-Prequel-Api-Version": "2023-12-01"}

    def get(self, path: str, **kwargs):
        return self.client.get(path, headers=self.headers, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs):
        return self.client.post(path, headers=self.headers, json=body, **kwargs)

    def patch(self, path: str, body: Any, **kwargs):
        return self.client.patch(path, headers=self.headers, json=body, **kwargs)

    def delete(self, path: str, **kwargs):
        return self.client.delete(path, headers=self.headers, **kwargs)


def write_api_config(folder: Path, store_schema: str, **sections: Any) -> Path:
    """A configuration file whose store is ``store_schema``, with ``sections`` (sources, models,
    recipients, destinations, api, ...)."""
    document = {"store": {"connection": pg_connection_config(store_schema)},
                "destination_addresses": {"allow": allowed_test_servers()}, **sections}
    path = folder / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def allowed_test_servers() -> list[str]:
    """The addresses of the tests' PostgreSQL and MySQL servers (every port): the tests' recipients
    enter them through magic links, which the address policy refuses unless allowed."""
    from transfer_platform.network.addresses import resolve
    from transfer_platform_tests.support.mysql import MYSQL

    return sorted({address for host, port in ((PG["host"], PG["port"]), (MYSQL["host"], MYSQL["port"]))
                   for address in resolve(host, port)})


@pytest.fixture
def secret_key(monkeypatch: pytest.MonkeyPatch) -> str:
    key = Fernet.generate_key().decode()
    monkeypatch.setenv(SECRET_KEY_ENV, key)
    return key


@pytest.fixture
def store_schema() -> Iterator[str]:
    """A store schema name (created by the migration), dropped afterwards."""
    from transfer_platform.store.database import dispose_engines

    schema = f"tp_store_{uuid.uuid4().hex[:10]}"
    yield schema
    dispose_engines()  # the test's pooled connections (the server's are few)
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def start_api(config_path: Path, store_schema: str) -> Api:
    """Migrate the store, make an API key, and open a client on the application."""
    from transfer_platform.api.app import create_app
    from transfer_platform.store.api_keys import create_key
    from transfer_platform.store.database import migrate

    app = create_app(config_path)
    migrate(app.state.store.settings.connection)
    _, key = create_key(app.state.store.engine, "tests")
    return Api(client=TestClient(app), key=key, config_path=config_path, store_schema=store_schema, app=app)


@pytest.fixture
def api(tmp_path: Path, store_schema: str, secret_key: str) -> Iterator[Api]:
    """The API over a file with no entries of its own (tests add what they need through it)."""
    api = start_api(write_api_config(tmp_path, store_schema), store_schema)
    with api.client:
        yield api


def platform_config(root: Path, store_schema: str) -> Path:
    """The small platform (destinations acme_delta, globex_delta; tenant ``org-glob'ex``) with a store."""
    path = write_config(root, destinations={"acme": {}, "globex": {}})
    document = yaml.safe_load(path.read_text())
    document["store"] = {"connection": pg_connection_config(store_schema)}
    document["destination_addresses"] = {"allow": allowed_test_servers()}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture
def platform_api(tmp_path: Path, store_schema: str, secret_key: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """The API over :func:`platform_config`, ``TRANSFER_PLATFORM_CONFIG`` naming its file and
    ``DAGSTER_HOME`` a fresh Dagster home (the repository's ``dagster.yaml``); the Dagster
    instance the API opened, if any, is disposed of afterwards."""
    path = platform_config(tmp_path, store_schema)
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(path))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home(tmp_path)))
    api = start_api(path, store_schema)
    with api.client:
        yield api
    instance = getattr(api.app.state, "dagster_instance", None)
    if instance is not None:
        instance.dispose()
