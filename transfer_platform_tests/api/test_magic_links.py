"""Magic links through the API (FastAPI's TestClient, the machine's PostgreSQL): the provider's
routes, the recipient's form's answers, the link's scope, one use and expiry, the token stored
hashed, the audit log, and the CLI command. The form in a real browser:
``test_magic_links_browser.py``."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from transfer_platform.config.secrets import SECRET_KEY_ENV
from transfer_platform_tests.support.api import Api
from transfer_platform_tests.support.mysql import (
    mysql_connect,
    mysql_connection_config,
    mysql_ident,
)
from transfer_platform_tests.support.postgres import pg_connection_config

CLI = str(Path(sys.executable).with_name("transfer-platform"))
PASSWORD = "pw-" + uuid.uuid4().hex  # trust auth: accepted and ignored by the test server



def add_recipient(api: Api, name: str) -> dict:
    answer = api.post("/recipients", {"recipient": {"name": name, "id_in_provider_system": f"{name}-id"}})
    assert answer.status_code == 201, answer.text
    return answer.json()["data"]["recipient"]


def new_link(api: Api, recipient: str, **options) -> dict:
    answer = api.post("/magic-links", {"magic_link": {"recipient_id": recipient, **options}})
    assert answer.status_code == 201, answer.text
    return answer.json()["data"]["magic_link"]


def path_of(url: str) -> str:
    return urlsplit(url).path


def connection(schema: str, **changes) -> dict:
    return {**pg_connection_config(schema), "password": PASSWORD, **changes}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rows(api: Api, query: str, **params) -> list:
    with api.app.state.store.engine.connect() as conn:
        return list(conn.execute(sa.text(query), params))


def test_the_provider_creates_a_link_its_token_stored_hashed_and_audited(api: Api):
    add_recipient(api, "acme")
    link = new_link(api, "acme", redirect_url="https://provider.example/onboarded")
    assert link["url"].startswith("http://127.0.0.1:8000/link/")
    token = link["url"].rsplit("/", 1)[1]
    assert len(token) >= 43
    (stored,) = rows(api, "SELECT * FROM magic_links")
    assert str(stored.id) == link["id"]
    assert stored.recipient == "acme"
    assert stored.created_by == "api_key:tests"
    assert stored.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in str(tuple(stored)), "the token itself is never stored"
    assert stored.options == {"redirect_url": "https://provider.example/onboarded"}
    assert stored.used_at is None
    assert stored.expires_at.isoformat() == link["expires_at"]
    hours = (stored.expires_at - stored.created_at).total_seconds() / 3600
    assert hours == pytest.approx(24), "api.magic_link_hours' default"
    (entry,) = rows(api, "SELECT * FROM audit_log WHERE resource_type = 'magic_link'")
    assert (entry.actor, entry.action, entry.resource_id, entry.resource_name) == \
        ("api_key:tests", "link", link["id"], "acme")
    assert token not in str(entry.changes)
    listed = api.get("/magic-links").json()["data"]["magic_links"]
    assert [each["id"] for each in listed] == [link["id"]]
    assert "token" not in str(listed)


def test_the_provider_routes_need_the_key_the_form_does_not(api: Api):
    add_recipient(api, "acme")
    link = new_link(api, "acme")
    body = {"magic_link": {"recipient_id": "acme"}}
    for headers in ({}, {"X-API-KEY": "tpk_wrong"}, {"X-API-KEY": ""}):
        answer = api.client.post("/magic-links", json=body, headers=headers)
        assert answer.status_code == 401, answer.text
        assert api.client.get("/magic-links", headers=headers).status_code == 401
    assert len(rows(api, "SELECT id FROM magic_links")) == 1
    page = api.client.get(path_of(link["url"]))
    assert page.status_code == 200
    assert "acme" in page.text
    assert "Content-Security-Policy" in page.headers
    assert page.headers["Referrer-Policy"] == "no-referrer"
    for attribute in ("src=", "href=\"http", "url("):
        assert attribute not in page.text, "no external assets"


def test_bad_link_requests_are_refused_with_the_field(api: Api):
    add_recipient(api, "acme")
    unknown = api.post("/magic-links", {"magic_link": {"recipient_id": "nobody"}})
    assert unknown.status_code == 404
    assert "nobody" in unknown.json()["message"]
    cases = {"magic_link.redirect_url": {"recipient_id": "acme", "redirect_url": "javascript:alert(1)"},
             "magic_link.vendors": {"recipient_id": "acme", "vendors": ["s3"]},
             "magic_link.color": {"recipient_id": "acme", "color": "red"}}
    for field, body in cases.items():
        answer = api.post("/magic-links", {"magic_link": body})
        assert answer.status_code == 422, (field, answer.text)
        assert field in [e["path"] for e in answer.json()["errors"]], answer.json()
    assert api.post("/magic-links", {"recipient_id": "acme"}).status_code == 422
    assert rows(api, "SELECT id FROM magic_links") == []


def test_a_link_creates_a_destination_for_its_recipient_only(api: Api, dst_schema: str):
    add_recipient(api, "acme")
    add_recipient(api, "globex")
    link = new_link(api, "acme")
    form = path_of(link["url"])
    body = {"destination": {"vendor": "postgres", "recipient": "globex", "connection": connection(dst_schema)}}
    tested = api.client.post(form + "/test", json=body)
    assert tested.status_code == 200, tested.text
    assert tested.json()["data"]["passed"], tested.json()
    assert PASSWORD not in tested.text
    saved = api.client.post(form + "/destination", json=body)
    assert saved.status_code == 201, saved.text
    assert PASSWORD not in saved.text
    name = saved.json()["data"]["destination"]["name"]
    assert name == f"acme_postgres_{uuid.UUID(link['id']).hex[:8]}"
    shown = api.get(f"/destinations/{name}").json()["data"]["destination"]
    assert shown["recipient"] == "acme", "the recipient the browser sent is ignored"
    assert shown["connection"]["password"] == "***"
    (row,) = rows(api, "SELECT document FROM resources WHERE kind = 'destination'")
    assert PASSWORD not in str(row.document)
    assert set(row.document["connection"]["password"]) == {"encrypted"}
    (used,) = rows(api, "SELECT used_at, destination_name FROM magic_links")
    assert used.used_at is not None
    assert used.destination_name == name
    (entry,) = rows(api, "SELECT actor, action FROM audit_log WHERE resource_type = 'destination'")
    assert tuple(entry) == (f"magic_link:{link['id']}", "create")
    (event,) = rows(api, "SELECT data FROM events WHERE type = 'magic_link.used'")
    assert event.data["destination"]["name"] == name
    assert event.data["recipient"] == {"name": "acme"}
    assert PASSWORD not in str(rows(api, "SELECT * FROM audit_log")) + str(rows(api, "SELECT * FROM events"))
    done = api.client.get(form + "/done")
    assert done.status_code == 200
    assert name in done.text


def test_a_link_works_once(api: Api, dst_schema: str):
    add_recipient(api, "acme")
    link = new_link(api, "acme")
    form = path_of(link["url"])
    body = {"destination": {"vendor": "postgres", "name": "acme_first", "connection": connection(dst_schema)}}
    assert api.client.post(form + "/destination", json=body).status_code == 201
    again = {"destination": {**body["destination"], "name": "acme_second"}}
    for path in ("/test", "/destination"):
        answer = api.client.post(form + path, json=again)
        assert answer.status_code == 410, answer.text
        assert "used" in answer.json()["message"]
    page = api.client.get(form)
    assert page.status_code == 410
    assert "new one" in page.text
    assert [d["name"] for d in api.get("/destinations").json()["data"]["destinations"]] == ["acme_first"]


def test_an_expired_or_unknown_link_is_refused(api: Api, dst_schema: str):
    add_recipient(api, "acme")
    link = new_link(api, "acme")
    rows_changed = api.app.state.store.engine
    with rows_changed.begin() as conn:
        conn.execute(sa.text("UPDATE magic_links SET expires_at = now() - interval '1 minute'"))
    form = path_of(link["url"])
    body = {"destination": {"vendor": "postgres", "connection": connection(dst_schema)}}
    page = api.client.get(form)
    assert page.status_code == 410
    assert "expired" in page.text
    assert api.client.post(form + "/destination", json=body).status_code == 410
    for token in ("x" * 43, "", "a" * 500):
        assert api.client.get(f"/link/{token}").status_code == 404
        assert api.client.post(f"/link/{token}/test", json=body).status_code in (404, 405)
    assert api.get("/destinations").json()["data"]["destinations"] == []


def test_bad_fields_are_named_and_a_failed_check_saves_nothing(api: Api, dst_schema: str):
    add_recipient(api, "acme")
    form = path_of(new_link(api, "acme", vendors=["postgres"])["url"])
    bad = {"destination": {"vendor": "postgres", "connection": connection(dst_schema, port="abc", host="")}}
    answer = api.client.post(form + "/test", json=bad)
    assert answer.status_code == 422
    paths = {e["path"] for e in answer.json()["errors"]}
    assert paths == {"destination.connection.port", "destination.connection.host"}, answer.json()
    assert PASSWORD not in answer.text
    other = {"destination": {"vendor": "mysql", "connection": connection(dst_schema)}}
    answer = api.client.post(form + "/test", json=other)
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["path"] == "destination.vendor"
    wrong_port = {"destination": {"vendor": "postgres", "connection": connection(dst_schema, port=closed_port())}}
    answer = api.client.post(form + "/test", json=wrong_port)
    assert answer.status_code == 200
    assert not answer.json()["data"]["passed"]
    failed = [c for c in answer.json()["data"]["checks"] if c["outcome"] == "FAIL"]
    assert failed, answer.json()
    assert failed[0]["fix"], answer.json()
    saved = api.client.post(form + "/destination", json=wrong_port)
    assert saved.status_code == 422
    assert saved.json()["data"]["checks"]
    assert api.get("/destinations").json()["data"]["destinations"] == []
    assert rows(api, "SELECT used_at FROM magic_links")[0].used_at is None, "a refused save keeps the link"


def test_a_taken_name_is_refused_and_the_link_kept(api: Api, dst_schema: str):
    add_recipient(api, "acme")
    created = api.post("/destinations", {"destination": {
        "name": "acme_pg", "recipient": "acme", "vendor": "postgres", "connection": pg_connection_config(dst_schema)}})
    assert created.status_code == 201, created.text
    form = path_of(new_link(api, "acme")["url"])
    body = {"destination": {"vendor": "postgres", "name": "acme_pg", "connection": connection(dst_schema + "_2")}}
    answer = api.client.post(form + "/destination", json=body)
    assert answer.status_code == 409
    assert answer.json()["errors"][0]["path"] == "destination.name"
    same_place = {"destination": {"vendor": "postgres", "connection": connection(dst_schema)}}
    answer = api.client.post(form + "/destination", json=same_place)
    assert answer.status_code == 422, "a destination sharing another's place is refused as validate refuses it"
    assert rows(api, "SELECT used_at FROM magic_links")[0].used_at is None


def test_the_cli_prints_a_link(api: Api):
    add_recipient(api, "acme")
    env = {**os.environ, SECRET_KEY_ENV: os.environ[SECRET_KEY_ENV]}
    done = subprocess.run([CLI, "--config", str(api.config_path), "magic-link", "acme"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    url = done.stdout.strip()
    assert url.startswith("http://127.0.0.1:8000/link/")
    assert "\n" not in url
    (row,) = rows(api, "SELECT created_by, recipient FROM magic_links")
    assert tuple(row) == ("cli", "acme")
    assert api.client.get(path_of(url)).status_code == 200
    missing = subprocess.run([CLI, "--config", str(api.config_path), "magic-link", "nobody"], capture_output=True,
                             text=True, env=env, timeout=120)
    assert missing.returncode == 1
    assert "nobody" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_recipient_connects_a_mysql_database(api: Api):
    database = f"ml_{uuid.uuid4().hex[:10]}"
    with mysql_connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {mysql_ident(database)}")
    try:
        add_recipient(api, "acme")
        form = path_of(new_link(api, "acme", vendors=["mysql"])["url"])
        page = api.client.get(form)
        assert '"mysql"' in page.text
        assert '"postgres"' not in page.text, "the link's vendors only"
        body = {"destination": {"vendor": "mysql", "connection": {**mysql_connection_config(database), "password": ""}}}
        tested = api.client.post(form + "/test", json=body)
        assert tested.status_code == 200, tested.text
        assert tested.json()["data"]["passed"], tested.json()
        saved = api.client.post(form + "/destination", json=body)
        assert saved.status_code == 201, saved.text
        shown = api.get(f"/destinations/{saved.json()['data']['destination']['name']}").json()["data"]["destination"]
        assert shown["vendor"] == "mysql"
        assert shown["connection"] == {**mysql_connection_config(database)}, "an empty password is left out"
    finally:
        with mysql_connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {mysql_ident(database)}")


def test_the_provider_revokes_a_link_before_it_is_used(api: Api, dst_schema: str):
    add_recipient(api, "acme")
    link = new_link(api, "acme")
    form = path_of(link["url"])
    assert api.client.get(form).status_code == 200
    answer = api.delete(f"/magic-links/{link['id']}")
    assert answer.status_code == 200, answer.text
    page = api.client.get(form)
    assert page.status_code == 410
    assert "expired" in page.text
    body = {"destination": {"vendor": "postgres", "connection": connection(dst_schema)}}
    assert api.client.post(form + "/destination", json=body).status_code == 410
    (entry,) = api.get("/audit-log", params={"action": "revoke"}).json()["data"]["audit_log"]
    assert (entry["resource_type"], entry["resource_id"], entry["actor"]) == ("magic_link", link["id"], "api_key:tests")
    assert api.delete(f"/magic-links/{uuid.uuid4()}").status_code == 404
    assert api.delete("/magic-links/not-an-id").status_code == 404


def test_a_used_link_has_nothing_to_revoke(api: Api, dst_schema: str):
    add_recipient(api, "acme")
    link = new_link(api, "acme")
    body = {"destination": {"vendor": "postgres", "name": "acme_pg", "connection": connection(dst_schema)}}
    assert api.client.post(path_of(link["url"]) + "/destination", json=body).status_code == 201
    answer = api.delete(f"/magic-links/{link['id']}")
    assert answer.status_code == 409
    assert "acme_pg" in answer.json()["message"]


def test_the_forms_fixes_speak_to_the_recipient_who_typed_the_password(api: Api, dst_schema: str):
    """The recipient typed the password into the form: a failed login's fix names what it
    entered, not an environment variable of the provider's configuration file."""
    add_recipient(api, "acme")
    form = path_of(new_link(api, "acme", vendors=["postgres"])["url"])
    body = {"destination": {"vendor": "postgres",
                            "connection": connection(dst_schema, database=f"missing_{uuid.uuid4().hex[:8]}")}}
    answer = api.client.post(form + "/test", json=body)
    assert answer.status_code == 200, answer.text
    (failed,) = [c for c in answer.json()["data"]["checks"] if c["outcome"] == "FAIL"]
    assert failed["check"].startswith("log in"), failed
    assert failed["fix"] == "check the username, database and the password you entered", failed
    assert "variable" not in answer.text


@pytest.mark.parametrize("host", ["h" * 10_000, "a" * 64 + ".example", "db..example"],
                         ids=["10-kB-host", "label-over-63", "empty-label"])
def test_a_host_that_is_no_host_name_is_named_not_a_fault(api: Api, dst_schema: str, host: str):
    add_recipient(api, "acme")
    form = path_of(new_link(api, "acme", vendors=["postgres"])["url"])
    body = {"destination": {"vendor": "postgres", "connection": connection(dst_schema, host=host)}}
    for answer in (api.client.post(form + "/test", json=body),
                   api.post("/test-destination", {"destination": {"name": "acme_pg", "recipient": "acme", **body["destination"]}})):
        assert answer.status_code == 422, answer.text
        assert [e["path"] for e in answer.json()["errors"]] == ["destination.connection.host"]
        assert "\n" not in answer.json()["message"]
        assert "label" in answer.json()["message"]
        assert len(answer.text) < 2_000  # the 10 kB host is not echoed back whole


def test_a_links_token_is_masked_in_the_log_of_an_unexpected_error(api: Api, dst_schema: str,
                                                                   caplog: pytest.LogCaptureFixture):
    from fastapi.testclient import TestClient

    add_recipient(api, "acme")
    form = path_of(new_link(api, "acme", vendors=["postgres"])["url"])
    token = form.rsplit("/", 1)[1]
    with api.app.state.store.engine.begin() as conn:  # the store loses a table: a fault, not a bad request
        conn.execute(sa.text("ALTER TABLE magic_links RENAME TO magic_links_gone"))
    client = TestClient(api.app, raise_server_exceptions=False)
    body = {"destination": {"vendor": "postgres", "connection": connection(dst_schema)}}
    with caplog.at_level("ERROR", logger="transfer_platform.api.app"):
        answer = client.post(form + "/test", json=body)
    assert answer.status_code == 500, answer.text
    (logged,) = [r for r in caplog.records if r.name == "transfer_platform.api.app"]
    text = logged.getMessage() + caplog.text
    assert "POST /link/***/test" in logged.getMessage()
    assert token not in text
