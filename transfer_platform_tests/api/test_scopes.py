"""Scoped credentials through the API (FastAPI's TestClient, the machine's PostgreSQL): every route
of the application declares and enforces what it needs, each key scope on routes of each kind, the
403's one line, the scope in the audit log, the keys made before scopes migrated to ``admin``, the
one-recipient scoped auth token (its form's routes only, its recipient only, until it expires), and
wrong credentials slowed down (429) while the right key is still served."""

from __future__ import annotations

import hashlib
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from transfer_platform.api.scopes import (
    LINK_TOKEN,
    PUBLIC,
    ROUTE_SCOPES,
    SCOPED_TOKEN,
    SHARING_TOKEN,
    SIGNED_URL,
)
from transfer_platform.config.connection_settings import DatabaseConnection
from transfer_platform.store.api_keys import create_key, verify_key
from transfer_platform.store.resources import linked_destinations
from transfer_platform_tests.support.api import Api, write_api_config
from transfer_platform_tests.support.postgres import pg_connection_config

PASSWORD = "pw-" + uuid.uuid4().hex  # trust auth: accepted and ignored by the test server
TOKEN = "X-Prequel-Auth-Token"


def key_of(api: Api, scope: str) -> dict[str, str]:
    _, key = create_key(api.app.state.store.engine, f"{scope}-key", scope)
    return {"X-API-KEY": key}


def rows(api: Api, query: str, **params) -> list:
    with api.app.state.store.engine.connect() as conn:
        return list(conn.execute(sa.text(query), params))


def add_recipient(api: Api, name: str) -> dict:
    answer = api.post("/recipients", {"recipient": {"name": name, "id_in_provider_system": f"{name}-id"}})
    assert answer.status_code == 201, answer.text
    return answer.json()["data"]["recipient"]


def every_route(app) -> set[tuple[str, str]]:
    """(method, path) of every route the application answers, the included routers' too."""
    found: set[tuple[str, str]] = set()

    def walk(routes) -> None:
        for route in routes:
            included = getattr(route, "original_router", None)  # FastAPI's included router
            if included is not None:
                walk(included.routes)
                continue
            found.update((method, route.path) for method in route.methods)

    walk(app.routes)
    return found


def test_every_route_declares_what_it_needs_and_enforces_it(api: Api) -> None:
    routes = every_route(api.app)
    assert routes == set(ROUTE_SCOPES), (
        f"routes without a declared scope (add them to api/scopes.py ROUTE_SCOPES): {routes - set(ROUTE_SCOPES)}; "
        f"declared routes that do not exist: {set(ROUTE_SCOPES) - routes}")
    read = key_of(api, "read")
    for (method, template), needs in sorted(ROUTE_SCOPES.items()):
        if method == "HEAD":
            continue
        path = template.replace("{path:path}", "s/t/f.parquet").format(
            key="nope", transfer_id="nope", webhook_id="nope", link_id="nope", token="x" * 43,
            share="s", schema="default", table="t")
        send = api.client.request
        if needs == PUBLIC:
            assert send(method, path).status_code == 200, path
        elif needs == LINK_TOKEN:
            assert send(method, path, json={}).status_code == 404, (method, path)
        elif needs == SCOPED_TOKEN:
            answer = send(method, path, json={"destination": {}})
            assert answer.status_code == 401, (method, path, answer.text)
        elif needs == SHARING_TOKEN:  # an API key is no bearer token
            answer = send(method, path, headers=read, json={})
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.json()["errorCode"] == "UNAUTHENTICATED"
        elif needs == SIGNED_URL:
            assert send(method, path, headers=read).status_code == 403, (method, path)
        elif needs == "read":
            answer = send(method, path, json={})
            assert answer.status_code == 401, (method, path, answer.text)
        else:
            answer = send(method, path, headers=read, json={})
            assert answer.status_code == 403, (method, path, answer.text)
            assert answer.json()["message"].startswith(
                f"this API key's scopes are [read]; {method} {template} needs {needs}"), answer.json()


def test_each_scope_on_routes_of_each_kind(api: Api) -> None:
    add_recipient(api, "acme")
    read, transfers = key_of(api, "read"), key_of(api, "transfers")
    recipient = {"recipient": {"name": "globex", "id_in_provider_system": "g"}}
    for headers in (read, transfers):
        for path in ("/recipients", "/recipients/acme", "/destinations", "/audit-log", "/magic-links"):
            assert api.client.get(path, headers=headers).status_code == 200, path
        for method, path, body in (("post", "/recipients", recipient), ("patch", "/recipients/acme", recipient),
                                   ("delete", "/recipients/acme", None), ("post", "/webhooks", {}),
                                   ("get", "/webhooks", None), ("post", "/magic-links", {}),
                                   ("post", "/test-destination", {}),
                                   ("post", "/actions/generate-scoped-auth-token", {"recipient_id": "acme"})):
            answer = api.client.request(method, path, headers=headers, json=body)
            assert answer.status_code == 403, (headers, method, path, answer.text)
    # a read key cannot touch transfers; a transfers key gets past the scope (to the unknown destination)
    for path in ("/destinations/nope/transfer", "/destinations/nope/test-connection",
                 "/destinations/nope/integrity-checks"):
        assert api.client.post(path, headers=read, json={}).status_code == 403, path
        answer = api.client.post(path, headers=transfers, json={})
        assert answer.status_code == 404, (path, answer.text)
    assert api.client.post("/transfers/nope/cancel", headers=read).status_code == 403
    assert [r.name for r in rows(api, "SELECT name FROM resources")] == ["acme"], "nothing written"
    assert rows(api, "SELECT id FROM magic_links") == []
    assert rows(api, "SELECT id FROM webhooks") == []
    # admin does everything
    assert api.post("/recipients", recipient).status_code == 201
    assert api.get("/webhooks").status_code == 200


def test_the_403_names_the_scope_needed_in_one_line(api: Api) -> None:
    answer = api.client.post("/destinations", headers=key_of(api, "read"), json={"destination": {}})
    assert answer.status_code == 403
    assert answer.json() == {"status": "error", "data": None, "message": (
        "this API key's scopes are [read]; POST /destinations needs admin; fix: use a key with scope admin "
        "(transfer-platform api-key create NAME --scope admin)")}


def test_the_audit_log_records_the_actors_scope(api: Api) -> None:
    add_recipient(api, "acme")
    entries = api.client.get("/audit-log", headers=key_of(api, "read")).json()["data"]["audit_log"]
    assert [(e["actor"], e["actor_scope"], e["action"]) for e in entries] == [("api_key:tests", "admin", "create")]
    (row,) = rows(api, "SELECT actor, actor_scope FROM audit_log")
    assert tuple(row) == ("api_key:tests", "admin")


def test_keys_made_before_scopes_keep_working_as_admin(tmp_path: Path, store_schema: str, secret_key: str) -> None:
    from transfer_platform.api.app import create_app
    from transfer_platform.store.database import engine_for, migrate

    connection = DatabaseConnection.model_validate(pg_connection_config(store_schema))
    assert migrate(connection, "0001") == "0001"
    old_key = "tpk_" + uuid.uuid4().hex
    with engine_for(connection).begin() as conn:  # a key as the first revision stores it
        conn.execute(sa.text("INSERT INTO api_keys (id, name, key_hash, prefix) VALUES (:id, 'backend', :hash, 'tpk_')"),
                     {"id": str(uuid.uuid4()), "hash": hashlib.sha256(old_key.encode()).hexdigest()})
    assert migrate(connection) != "0001"
    assert verify_key(engine_for(connection), old_key).scope == "admin"
    with TestClient(create_app(write_api_config(tmp_path, store_schema))) as client:
        answer = client.post("/recipients", headers={"X-API-KEY": old_key},
                             json={"recipient": {"name": "acme", "id_in_provider_system": "a"}})
        assert answer.status_code == 201, answer.text
    with engine_for(connection).begin() as conn, pytest.raises(sa.exc.IntegrityError):
        # a key written without a scope is refused, not made admin
        conn.execute(sa.text("INSERT INTO api_keys (id, name, key_hash, prefix) VALUES (:id, 'x', 'h', 'tpk_')"),
                     {"id": str(uuid.uuid4())})


def new_token(api: Api, recipient: str, **options) -> dict:
    answer = api.post("/actions/generate-scoped-auth-token", {"recipient_id": recipient, **options})
    assert answer.status_code == 201, answer.text
    return answer.json()["data"]


def form_body(schema: str, **destination) -> dict:
    return {"destination": {"vendor": "postgres", "connection": {**pg_connection_config(schema), "password": PASSWORD},
                            **destination}}


def test_a_scoped_token_tests_and_saves_for_its_recipient_only(api: Api, dst_schema: str) -> None:
    acme = add_recipient(api, "acme")
    add_recipient(api, "globex")
    token = new_token(api, acme["id"])
    assert token["recipient_id"] == acme["id"]
    (stored,) = rows(api, "SELECT * FROM scoped_tokens")
    assert stored.token_hash == hashlib.sha256(token["scoped_token"].encode()).hexdigest()
    assert token["scoped_token"] not in str(tuple(stored)), "the token itself is never stored"
    assert 3590 <= (stored.expires_at - stored.created_at).total_seconds() <= 3600, "an hour by default"
    headers = {TOKEN: token["scoped_token"]}

    vendors = api.client.get("/public/vendors/destinations", headers=headers)
    assert vendors.status_code == 200
    assert "postgres" in vendors.json()["data"]["vendors"]
    tested = api.client.post("/public/test-destination", headers=headers, json=form_body(dst_schema))
    assert tested.status_code == 200, tested.text
    assert tested.json()["data"]["passed"], tested.json()
    for other in ({"recipient": "globex"}, {"recipient_id": "globex"}):
        for path in ("/public/test-destination", "/public/destinations"):
            answer = api.client.post(path, headers=headers, json=form_body(dst_schema, name="acme_x", **other))
            assert answer.status_code == 403, answer.text
            assert answer.json()["message"].startswith("this scoped auth token is for recipient 'acme', not 'globex'")
    for method, path in (("get", "/destinations"), ("get", "/recipients/globex"), ("post", "/magic-links"),
                         ("get", "/transfers"), ("post", "/actions/generate-scoped-auth-token")):
        answer = api.client.request(method, path, headers=headers, json={})
        assert answer.status_code == 403, (path, answer.text)
        assert "scoped auth token" in answer.json()["message"]
    assert rows(api, "SELECT name FROM resources WHERE kind = 'destination'") == [], "nothing written"

    saved = api.client.post("/public/destinations", headers=headers,
                            json=form_body(dst_schema, name="acme_pg", recipient_id=acme["id"]))
    assert saved.status_code == 201, saved.text
    assert PASSWORD not in saved.text
    shown = api.get("/destinations/acme_pg").json()["data"]["destination"]
    assert shown["recipient"] == "acme"
    (entry,) = rows(api, "SELECT actor, actor_scope FROM audit_log WHERE resource_type = 'destination'")
    assert tuple(entry) == (f"scoped_token:{token['id']}", "form")
    (generated,) = rows(api, "SELECT actor, actor_scope, resource_name FROM audit_log WHERE action = 'generate'")
    assert tuple(generated) == ("api_key:tests", "admin", "acme")
    # the recipient chose its address: the destination stays under the address policy, as a link's
    assert "acme_pg" in linked_destinations(api.app.state.store.file_raw, str(api.config_path))


def test_an_expired_wrong_or_foreign_origin_token_writes_nothing(api: Api, dst_schema: str) -> None:
    add_recipient(api, "acme")
    short = new_token(api, "acme", expires_in_seconds=1)
    body = form_body(dst_schema, name="acme_pg")
    deadline = time.monotonic() + 30
    while True:  # the token works until its expiry, then never again
        answer = api.client.post("/public/test-destination", headers={TOKEN: short["scoped_token"]}, json=body)
        if answer.status_code != 200:
            break
        assert time.monotonic() < deadline, "the token did not expire"
        time.sleep(0.2)
    assert answer.status_code == 401, answer.text
    assert answer.json()["message"].startswith("this scoped auth token expired at ")
    assert "fix: ask the provider's backend for a new one" in answer.json()["message"]
    assert api.client.post("/public/destinations", headers={TOKEN: short["scoped_token"]}, json=body).status_code == 401
    for wrong in ("x" * 43, short["scoped_token"] + "x"):
        assert api.client.post("/public/destinations", headers={TOKEN: wrong}, json=body).status_code == 401
    pinned = new_token(api, "acme", application_origin="https://app.provider.example")
    answer = api.client.post("/public/destinations", json=body,
                             headers={TOKEN: pinned["scoped_token"], "Origin": "https://evil.example"})
    assert answer.status_code == 403, answer.text
    assert rows(api, "SELECT name FROM resources WHERE kind = 'destination'") == [], "nothing written"
    bad = api.post("/actions/generate-scoped-auth-token", {"recipient_id": "acme", "expires_in_seconds": 0})
    assert bad.status_code == 422
    assert api.post("/actions/generate-scoped-auth-token", {"recipient_id": "nobody"}).status_code == 404


def test_wrong_credentials_are_slowed_down_and_the_right_key_still_served(api: Api) -> None:
    allowed = api.app.state.settings.failed_credentials_per_minute
    for _ in range(allowed):
        assert api.client.get("/recipients", headers={"X-API-KEY": "tpk_wrong"}).status_code == 401
    for path, credentials in (("/recipients", {"X-API-KEY": "tpk_wrong"}),
                              ("/public/vendors/destinations", {TOKEN: "wrong"})):
        answer = api.client.get(path, headers=credentials)
        assert answer.status_code == 429, answer.text
        assert 1 <= int(answer.headers["Retry-After"]) <= 60
        assert answer.json()["message"].startswith("too many wrong credentials from testclient")
    assert api.client.get(f"/link/{'x' * 43}").status_code == 429, "a magic link's wrong token counts too"
    # the right key is never refused, however many wrong ones came before from the same client
    assert api.get("/recipients").status_code == 200
    assert api.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "a"}}).status_code == 201
    assert api.client.get("/recipients", headers={"X-API-KEY": "tpk_wrong"}).status_code == 429


def test_the_docs_scopes_table_says_which_gets_read_cannot_make() -> None:
    """docs/api.md's table says ``read`` allows every GET but those it names; each GET the scopes
    table keeps for ``admin`` is named there as such (every ``/webhooks`` route, or by its path)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    assert text.count("- **Authentication**") == 1, "the Authentication convention is stated once"
    rows = {line.split("|")[1].strip(): line.split("|")[2] for line in text.splitlines()
            if line.startswith("| `") and line.split("|")[1].strip() in ("`read`", "`transfers`", "`admin`")}
    read, admin = rows["`read`"], rows["`admin`"]
    assert "every `GET` below" in read
    for (method, path), needs in ROUTE_SCOPES.items():
        if method != "GET" or needs != "admin":
            continue
        if path.startswith("/webhooks"):
            assert "but the webhooks'" in read, read
            assert "every `/webhooks` route" in admin, admin
        else:
            assert f"`GET {path}`" in read, (path, "not named as an exception of read")
            assert f"`GET {path}`" in admin, (path, "not named as admin's")
