"""The provider's address policy (``transfer_platform/network/addresses.py``), tried from outside:
a recipient's magic-link form and a provider's API key aim destinations at the provider's own
network (its PostgreSQL, a private address, the cloud metadata address, IPv6 loopback, a name
resolving to loopback), with a port that answers and one that does not; each is refused before
any connection with one message, nothing saved. The allow list opens what the provider names;
a link's destination later pointed elsewhere in the store is refused by the next transfer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
import yaml

from transfer_platform.network.addresses import REFUSED
from transfer_platform_tests.support.api import Api, platform_config, start_api, write_api_config
from transfer_platform_tests.support.platform import dagster_home
from transfer_platform_tests.support.postgres import PG, pg_connection_config

CLI = str(Path(sys.executable).with_name("transfer-platform"))


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: (host, port): the provider's PostgreSQL, a closed port beside it, private, link-local (cloud
#: metadata), IPv6 loopback, a name that resolves to loopback
REFUSED_PLACES = [("127.0.0.1", PG["port"]), ("127.0.0.1", closed_port()), ("10.0.0.1", 5432),
                  ("169.254.169.254", 80), ("::1", PG["port"]), ("localhost", PG["port"])]


def api_with(tmp_path: Path, store_schema: str, **addresses) -> Iterator[Api]:
    api = start_api(write_api_config(tmp_path, store_schema, destination_addresses=addresses), store_schema)
    with api.client:
        yield api


@pytest.fixture
def closed_api(tmp_path: Path, store_schema: str, secret_key: str) -> Iterator[Api]:
    """No allow list; the provider's own destinations checked too."""
    yield from api_with(tmp_path, store_schema, check_provider_destinations=True)


def rows(api: Api, query: str) -> list:
    with api.app.state.store.engine.connect() as conn:
        return list(conn.execute(sa.text(query)))


def link_form(api: Api, recipient: str = "acme") -> str:
    if api.get(f"/recipients/{recipient}").status_code == 404:
        assert api.post("/recipients", {"recipient": {"name": recipient, "id_in_provider_system": "t1"}}).status_code == 201
    answer = api.post("/magic-links", {"magic_link": {"recipient_id": recipient}})
    assert answer.status_code == 201, answer.text
    return urlsplit(answer.json()["data"]["magic_link"]["url"]).path


def postgres(host: str, port: int, schema: str = "public") -> dict:
    return {"vendor": "postgres", "connection": {**pg_connection_config(schema), "host": host, "port": port}}


def refusal(answer) -> tuple[int, str, str]:
    """The status and the one problem (its field and message) of a refused request."""
    errors = answer.json().get("errors") or []
    assert len(errors) == 1, answer.text
    return answer.status_code, errors[0]["path"], errors[0]["message"]


def test_a_link_may_not_reach_the_providers_network(closed_api: Api):
    form = link_form(closed_api)
    answers = set()
    for host, port in REFUSED_PLACES:
        for step in ("test", "destination"):
            answer = closed_api.client.post(f"{form}/{step}", json={"destination": postgres(host, port)})
            answers.add(refusal(answer))
            assert "checks" not in answer.text, f"{host}:{port}: nothing was tried"
    assert answers == {(422, "destination.connection.host", REFUSED)}, "one message, open port or closed"
    assert closed_api.get("/destinations").json()["data"]["destinations"] == []
    assert rows(closed_api, "SELECT used_at FROM magic_links")[0].used_at is None, "the link is kept"
    duckdb = {"vendor": "duckdb", "connection": {"path": "/tmp/acme.duckdb"}}
    answer = closed_api.client.post(f"{form}/test", json={"destination": duckdb})
    assert refusal(answer)[:2] == (422, "destination.connection.path"), "a local path is the provider's machine"


def test_the_providers_api_follows_the_policy_when_turned_on(closed_api: Api, tmp_path: Path, store_schema: str):
    closed_api.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "t1"}})
    answers = set()
    for host, port in REFUSED_PLACES:
        document = {"name": "acme_pg", "recipient": "acme", **postgres(host, port)}
        answers.add(refusal(closed_api.post("/test-destination", {"destination": document})))
        answers.add(refusal(closed_api.post("/destinations", {"destination": document})))
    s3 = {"name": "acme_s3", "recipient": "acme", "vendor": "s3", "signing_key": "${NO_KEY}",
          "connection": {"bucket": "acme", "endpoint_url": "http://169.254.169.254/latest"}}
    answers.add(refusal(closed_api.post("/destinations", {"destination": s3})))
    bigquery = {"name": "acme_bq", "recipient": "acme", "vendor": "bigquery",
                "connection": {"project": "p", "dataset": "d", "api_endpoint": "http://[::1]:9050"}}
    answers.add(refusal(closed_api.post("/test-destination", {"destination": bigquery})))
    assert answers == {(422, "destination.connection.host", REFUSED),
                       (422, "destination.connection.endpoint_url", REFUSED),
                       (422, "destination.connection.api_endpoint", REFUSED)}
    assert closed_api.get("/destinations").json()["data"]["destinations"] == []


def test_the_provider_opens_addresses_and_its_own_destinations_are_not_checked(
        tmp_path: Path, store_schema: str, secret_key: str, dst_schema: str):
    for api in api_with(tmp_path, store_schema, allow=[f"127.0.0.1:{PG['port']}"]):
        form = link_form(api)
        opened = api.client.post(f"{form}/test", json={"destination": postgres("127.0.0.1", PG["port"], dst_schema)})
        assert opened.status_code == 200, opened.text
        assert opened.json()["data"]["passed"], opened.text
        other_port = api.client.post(f"{form}/test", json={"destination": postgres("127.0.0.1", closed_port())})
        assert refusal(other_port) == (422, "destination.connection.host", REFUSED), "only the port allowed"
        # the provider's own destination (an API key with every right): not checked by default
        document = {"name": "acme_own", "recipient": "acme", **postgres("::1", PG["port"], dst_schema)}
        assert api.post("/destinations", {"destination": document}).status_code == 201


def test_a_link_destination_pointed_elsewhere_later_is_refused_at_connect(
        tmp_path: Path, store_schema: str, secret_key: str, dst_schema: str, monkeypatch: pytest.MonkeyPatch):
    path = platform_config(tmp_path, store_schema)
    document = yaml.safe_load(path.read_text())
    document["destination_addresses"] = {"allow": [f"127.0.0.1:{PG['port']}"]}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home(tmp_path)))
    api = start_api(path, store_schema)
    with api.client:
        form = link_form(api)
        saved = api.client.post(f"{form}/destination", json={"destination": {
            "name": "acme_pg", **postgres("127.0.0.1", PG["port"], dst_schema)}})
        assert saved.status_code == 201, saved.text
        with api.app.state.store.engine.begin() as conn:  # the address changes behind the API's back
            conn.execute(sa.text("UPDATE resources SET document = jsonb_set(document, '{connection,host}', "
                                 "'\"10.0.0.1\"') WHERE name = 'acme_pg'"))
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home")}
    started = time.monotonic()
    for command in (["transfer", "acme_pg"], ["test-connection", "acme_pg"]):
        done = subprocess.run([CLI, "--config", str(path), *command], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode != 0, done.stdout
        assert f"destinations.acme_pg.connection.host: {REFUSED}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 60, "refused before Spark starts"
    assert not rows_in(dst_schema), "nothing was written"


def rows_in(schema: str) -> list:
    from transfer_platform_tests.support.postgres import pg_connect

    with pg_connect() as conn:
        return list(conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                 (schema,)))


def test_every_resolution_of_a_guarded_pair_is_checked_and_libpq_gets_the_checked_address():
    """At each connection: a host:port pair of a destination under the policy is checked again
    whenever any client resolves it (here the policy narrows, as a DNS answer would change);
    libpq and the JDBC URL of the destination's settings get the checked address, not the name.
    The same name at another port, and settings without the destination's mark (a source's),
    are not judged."""
    from transfer_platform.config.connection_settings import DatabaseConnection
    from transfer_platform.network import addresses
    from transfer_platform.runtime.connections import postgres_connect_kwargs, postgres_jdbc_url

    host, other_port = "localhost", closed_port()
    opened = addresses.AddressPolicy(allow=(addresses.parse_allowed("127.0.0.0/8"), addresses.parse_allowed("::1")))
    connection = DatabaseConnection(host=host, port=PG["port"], database="test", username="u")
    source = DatabaseConnection(host=host, port=PG["port"], database="test", username="u")
    connection._address_guard = addresses.Guard(opened, "destinations.acme_pg.connection.host")
    pair = (host, PG["port"])
    addresses._guarded[pair] = opened
    try:
        assert postgres_connect_kwargs(connection, what="t")["hostaddr"] == "127.0.0.1"
        assert postgres_jdbc_url(connection).startswith(f"jdbc:postgresql://127.0.0.1:{PG['port']}/")
        addresses._install()
        socket.create_connection(pair, timeout=5).close()
        addresses._guarded[pair] = addresses.AddressPolicy()  # the same pair, now refused
        connection._address_guard = addresses.Guard(addresses.AddressPolicy(), "destinations.acme_pg.connection.host")
        with pytest.raises(socket.gaierror, match="not an address this platform may connect to"):
            socket.create_connection(pair, timeout=5)
        with pytest.raises(addresses.AddressRefused, match="destinations.acme_pg.connection.host: is not an address"):
            postgres_connect_kwargs(connection, what="t")
        # the provider's own connections to the same name: another port, or settings not marked
        assert socket.getaddrinfo(host, other_port)
        assert "hostaddr" not in postgres_connect_kwargs(source, what="sources.src")
        assert postgres_jdbc_url(source).startswith(f"jdbc:postgresql://{host}:{PG['port']}/")
    finally:
        addresses._guarded.pop(pair, None)
    socket.create_connection(pair, timeout=5).close()  # a pair not guarded: as before
