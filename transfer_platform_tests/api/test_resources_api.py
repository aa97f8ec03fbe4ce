"""Recipients, destinations, sources and models through the REST API, as a provider's backend uses
it: Prequel's envelope and wrapped bodies, the file's own validation with field paths, secrets
encrypted at rest and never returned, conflicts and unknown ids answered as such, every change in
the audit log, and the platform's configuration (what Dagster and the CLI load) holding the store's
entries."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from transfer_platform.config.loading import load_config
from transfer_platform_tests.support.api import Api, start_api, write_api_config
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.postgres import pg_connect, pg_connection_config

PASSWORD = "Sup3r-secret;pa'ss"
SOURCE = {"name": "src", "vendor": "postgres", "connection": pg_connection_config()}
MODEL = events_model("public.api_events", min_start=datetime(2024, 1, 1, tzinfo=UTC))


def destination(name: str, recipient: str, schema: str, **extra) -> dict:
    return {"name": name, "recipient": recipient, "vendor": "postgres",
            "connection": {**pg_connection_config(schema), "password": PASSWORD}, **extra}


def stored_text(api: Api) -> str:
    """Everything the store holds, as text."""
    with pg_connect(autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (api.store_schema,)).fetchall()
        return "\n".join(str(conn.execute(f'SELECT * FROM "{api.store_schema}"."{table}"').fetchall())
                         for (table,) in rows)


@pytest.fixture
def onboarded(api: Api) -> Api:
    """A source, a model and a recipient whose id holds both quotes."""
    assert api.post("/sources", {"source": SOURCE}).status_code == 201
    assert api.post("/models", {"model": MODEL}).status_code == 201
    answer = api.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "ac'me\"; --"}})
    assert answer.status_code == 201, answer.json()
    return api


def test_every_route_needs_a_valid_api_key_and_says_nothing_else(api: Api) -> None:
    for method, path in (("get", "/recipients"), ("post", "/destinations"), ("get", "/audit-log"),
                         ("delete", "/recipients/x"), ("post", "/test-destination")):
        for headers in ({}, {"X-API-KEY": "tpk_wrong"}, {"X-API-KEY": api.key + "x"}):
            answer = api.client.request(method, path, headers=headers, json={"recipient": {}})
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.json() == {"status": "error", "data": None,
                                     "message": "missing or invalid API key (send it in the X-API-KEY header)"}


def test_a_revoked_key_is_refused(api: Api) -> None:
    from transfer_platform.store.api_keys import revoke_key

    assert api.get("/recipients").status_code == 200
    assert revoke_key(api.app.state.store.engine, "tests") == 1
    assert api.get("/recipients").status_code == 401


def test_a_recipient_and_its_destination_reach_the_platforms_configuration(onboarded: Api, dst_schema: str) -> None:
    answer = onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", dst_schema,
                                                                        frequency_minutes=15)})
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["status"] == "success"
    created = body["data"]["destination"]
    assert created["connection"]["password"] == "***"
    assert onboarded.get(f"/destinations/{created['id']}").json()["data"]["destination"]["name"] == "acme_pg"
    assert onboarded.get("/destinations/acme_pg").json()["data"]["destination"]["id"] == created["id"]
    assert [d["name"] for d in onboarded.get("/destinations").json()["data"]["destinations"]] == ["acme_pg"]

    config = load_config(onboarded.config_path)  # what the definitions, the runs and the CLI load
    loaded = config.destination("acme_pg")
    assert loaded.frequency_minutes == 15
    assert config.recipient("acme").id_in_provider_system == "ac'me\"; --"
    assert loaded.connection.password.resolve("test").get_secret_value() == PASSWORD
    assert [m.model_name for m in config.models] == [MODEL["model_name"]]


def test_secrets_are_stored_encrypted_and_never_returned_or_logged(onboarded: Api, dst_schema: str,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    created = onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", dst_schema)})
    assert created.status_code == 201
    onboarded.patch("/destinations/acme_pg", {"destination": {"connection": {"password": PASSWORD + "2"}}})
    texts = [created.text, onboarded.get("/destinations/acme_pg").text, onboarded.get("/destinations").text,
             onboarded.get("/audit-log").text, stored_text(onboarded), caplog.text]
    for text in texts:
        assert PASSWORD not in text
    assert "encrypted" in stored_text(onboarded)
    assert load_config(onboarded.config_path).destination("acme_pg").connection.password.resolve(
        "test").get_secret_value() == PASSWORD + "2"


def test_a_masked_secret_sent_back_keeps_the_stored_one(onboarded: Api, dst_schema: str) -> None:
    shown = onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", dst_schema)}).json()
    connection = shown["data"]["destination"]["connection"]
    assert onboarded.patch("/destinations/acme_pg", {"destination": {"connection": connection,
                                                                     "frequency_minutes": 60}}).status_code == 200
    loaded = load_config(onboarded.config_path).destination("acme_pg")
    assert loaded.frequency_minutes == 60
    assert loaded.connection.password.resolve("test").get_secret_value() == PASSWORD


@pytest.mark.parametrize(("body", "path", "fix"), [
    ({"port": "five"}, "destination.connection.port", ""),
    ({"colour": "red"}, "destination.colour", "remove it or check its spelling"),
    ({"frequency_minutes": 7}, "destination.frequency_minutes", ""),
    ({"name": "a b"}, "destination.name", "use only letters, digits and underscores"),
])
def test_a_bad_body_gets_422_naming_the_field_and_its_fix(onboarded: Api, dst_schema: str, body: dict,
                                                          path: str, fix: str) -> None:
    document = destination("acme_pg", "acme", dst_schema)
    for key, value in body.items():
        if key == "port":
            document["connection"]["port"] = value
        else:
            document[key] = value
    answer = onboarded.post("/destinations", {"destination": document})
    assert answer.status_code == 422, answer.text
    errors = answer.json()["errors"]
    assert path in [e["path"] for e in errors], errors
    assert all(fix in e["fix"] for e in errors if e["path"] == path)
    assert onboarded.get("/destinations").json()["data"]["destinations"] == []


def test_an_unknown_vendor_and_an_unwrapped_body_are_refused(onboarded: Api, dst_schema: str) -> None:
    unknown = onboarded.post("/destinations", {"destination": {**destination("d", "acme", dst_schema), "vendor": "oracle"}})
    assert unknown.status_code == 422
    assert "postgres" in unknown.json()["errors"][0]["fix"]
    bare = onboarded.post("/destinations", destination("d", "acme", dst_schema))
    assert bare.status_code == 422
    assert bare.json()["errors"][0]["path"] == "destination"
    not_json = onboarded.client.post("/destinations", headers=onboarded.headers, content=b"{not json")
    assert not_json.status_code == 422


def test_a_destination_in_another_recipients_place_is_refused_as_validate_refuses_it(onboarded: Api, dst_schema: str) -> None:
    assert onboarded.post("/recipients", {"recipient": {"name": "globex", "id_in_provider_system": "globex"}}).status_code == 201
    assert onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", dst_schema)}).status_code == 201
    answer = onboarded.post("/destinations", {"destination": destination("globex_pg", "globex", dst_schema)})
    assert answer.status_code == 422
    assert "same place" in answer.json()["message"]
    assert [d["name"] for d in onboarded.get("/destinations").json()["data"]["destinations"]] == ["acme_pg"]


def test_schema_names_postgresql_would_truncate_are_refused_so_two_recipients_never_share_one(onboarded: Api) -> None:
    """PostgreSQL keeps 63 bytes of a name: two schemas differing after byte 63 are one schema."""
    assert onboarded.post("/recipients", {"recipient": {"name": "globex", "id_in_provider_system": "globex"}}).status_code == 201
    for name, recipient in (("acme_pg", "acme"), ("globex_pg", "globex")):
        answer = onboarded.post("/destinations", {"destination": destination(name, recipient, "q" * 63 + f"_for_{recipient}")})
        assert answer.status_code == 422, answer.json()
        message = answer.json()["message"]
        assert f"connection.schema is {63 + len(f'_for_{recipient}')} bytes long" in message
        assert "at most 63 bytes" in message
    assert onboarded.get("/destinations").json()["data"]["destinations"] == []
    assert onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", "q" * 63)}).status_code == 201


def test_a_mysql_database_name_over_64_characters_is_refused_where_it_is_entered(onboarded: Api) -> None:
    mysql = {"name": "acme_my", "recipient": "acme", "vendor": "mysql",
             "connection": {"host": "127.0.0.1", "port": 3306, "database": "d" * 65, "username": "root"}}
    answer = onboarded.post("/destinations", {"destination": mysql})
    assert answer.status_code == 422, answer.json()
    assert "at most 64 characters" in answer.json()["message"]


def test_a_destination_of_an_unknown_recipient_is_refused(onboarded: Api, dst_schema: str) -> None:
    answer = onboarded.post("/destinations", {"destination": destination("x", "nobody", dst_schema)})
    assert answer.status_code == 422
    assert "unknown recipient 'nobody'" in answer.json()["message"]


def test_unknown_ids_get_404_and_taken_names_409(onboarded: Api) -> None:
    for path in ("/recipients/nope", "/destinations/00000000-0000-0000-0000-000000000000", "/models/x", "/sources/x"):
        answer = onboarded.get(path)
        assert answer.status_code == 404, path
        assert answer.json()["status"] == "error"
    assert onboarded.patch("/recipients/nope", {"recipient": {"id_in_provider_system": "x"}}).status_code == 404
    assert onboarded.delete("/recipients/nope").status_code == 404
    again = onboarded.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "other"}})
    assert again.status_code == 409
    assert "acme" in again.json()["message"]


def test_a_name_cannot_change_and_a_recipient_in_use_cannot_go(onboarded: Api, dst_schema: str) -> None:
    onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", dst_schema)})
    renamed = onboarded.patch("/destinations/acme_pg", {"destination": {"name": "other"}})
    assert renamed.status_code == 409
    in_use = onboarded.delete("/recipients/acme")
    assert in_use.status_code == 409
    assert "acme_pg" in in_use.json()["errors"][0]["path"]
    assert onboarded.delete("/destinations/acme_pg").status_code == 200
    assert onboarded.delete("/recipients/acme").status_code == 200
    assert onboarded.get("/recipients/acme").status_code == 404


def test_client_text_is_data_never_sql(onboarded: Api) -> None:
    hostile = "x'); DROP TABLE resources; --"
    assert onboarded.post("/recipients", {"recipient": {"name": "hostile", "id_in_provider_system": hostile}}).status_code == 201
    assert onboarded.get("/audit-log", params={"actor": hostile, "resource_name": hostile}).status_code == 200
    assert onboarded.get(f"/recipients/{hostile}").status_code == 404
    assert onboarded.get("/recipients/hostile").json()["data"]["recipient"]["id_in_provider_system"] == hostile
    assert len(onboarded.get("/recipients").json()["data"]["recipients"]) == 2


def test_the_files_entries_are_listed_and_changed_only_in_the_file(tmp_path, store_schema: str, secret_key: str) -> None:
    path = write_api_config(tmp_path, store_schema, sources=[SOURCE], models=[MODEL],
                            recipients=[{"name": "acme", "id_in_provider_system": "acme"}])
    api = start_api(path, store_schema)
    listed = api.get("/recipients").json()["data"]["recipients"]
    assert [(r["name"], r["origin"]) for r in listed] == [("acme", "file")]
    assert api.get(f"/recipients/{listed[0]['id']}").status_code == 200
    answer = api.patch("/recipients/acme", {"recipient": {"id_in_provider_system": "x"}})
    assert answer.status_code == 409
    assert "configuration file" in answer.json()["message"]
    assert api.delete("/models/events").status_code == 409


def test_the_audit_log_records_who_changed_what_with_secrets_masked(onboarded: Api, dst_schema: str) -> None:
    onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", dst_schema)})
    onboarded.patch("/destinations/acme_pg", {"destination": {"frequency_minutes": 60}})
    onboarded.patch("/destinations/acme_pg", {"destination": {"is_enabled": False}})
    onboarded.patch("/destinations/acme_pg", {"destination": {"is_enabled": True}})
    onboarded.delete("/destinations/acme_pg")
    entries = onboarded.get("/audit-log", params={"resource_type": "destination"}).json()["data"]["audit_log"]
    assert [e["action"] for e in entries] == ["delete", "enable", "pause", "update", "create"]
    assert {e["actor"] for e in entries} == {"api_key:tests"}
    assert entries[3]["changes"] == {"frequency_minutes": {"from": None, "to": 60}}
    assert entries[4]["changes"]["connection"]["to"]["password"] == "***"
    everything = onboarded.get("/audit-log").json()["data"]["audit_log"]
    assert {e["resource_type"] for e in everything} == {"source", "model", "recipient", "destination"}
    paused = onboarded.get("/audit-log", params={"action": "pause"}).json()["data"]["audit_log"]
    assert [e["resource_name"] for e in paused] == ["acme_pg"]


def test_the_audit_log_pages_with_next_url_and_time_filters(onboarded: Api) -> None:
    for i in range(5):
        onboarded.post("/recipients", {"recipient": {"name": f"r{i}", "id_in_provider_system": f"r{i}"}})
    seen, url = [], "/audit-log?resource_type=recipient&page_size=2"
    while url:
        body = onboarded.get(url).json()["data"]
        assert len(body["audit_log"]) <= 2
        seen += [e["resource_name"] for e in body["audit_log"]]
        url = body["next_url"]
        assert body["has_next"] == (url is not None)
    assert seen == ["r4", "r3", "r2", "r1", "r0", "acme"]
    future = onboarded.get("/audit-log", params={"after": "2999-01-01T00:00:00Z"}).json()["data"]["audit_log"]
    assert future == []
    bad = onboarded.get("/audit-log", params={"after": "yesterday"})
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["path"] == "after"
    assert onboarded.get("/audit-log", params={"page_size": 101}).status_code == 422


def test_test_destination_runs_the_connection_checks_without_saving(onboarded: Api, dst_schema: str) -> None:
    good = onboarded.post("/test-destination", {"destination": destination("acme_pg", "acme", dst_schema)})
    assert good.status_code == 200, good.text
    assert good.json()["data"]["passed"] is True
    assert all(c["outcome"] == "PASS" for c in good.json()["data"]["checks"])
    closed = destination("acme_pg", "acme", dst_schema)
    closed["connection"]["port"] = 1
    bad = onboarded.post("/test-destination", {"destination": closed})
    assert bad.status_code == 200
    assert bad.json()["data"]["passed"] is False
    failed = [c for c in bad.json()["data"]["checks"] if c["outcome"] == "FAIL"]
    assert failed
    assert failed[0]["fix"]
    assert onboarded.get("/destinations").json()["data"]["destinations"] == []
    with pg_connect(autocommit=True) as conn:
        assert conn.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                            (dst_schema,)).fetchone() is None  # the probe left nothing behind


def test_a_saved_destination_can_be_tested(onboarded: Api, dst_schema: str) -> None:
    onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", dst_schema)})
    answer = onboarded.post("/destinations/acme_pg/test-connection")
    assert answer.status_code == 200
    assert answer.json()["data"]["passed"] is True
    assert onboarded.post("/destinations/nope/test-connection").status_code == 404


def test_an_unsupported_api_version_is_refused_and_the_served_one_is_named(api: Api) -> None:
    answer = api.client.get("/recipients", headers={**api.headers, "X-Prequel-Api-Version": "2099-01-01"})
    assert answer.status_code == 400
    assert "2023-12-01" in answer.json()["message"]
    assert api.get("/recipients").headers["X-Prequel-Api-Version"] == "2023-12-01"


def test_the_openapi_document_lists_the_resources(api: Api) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    for path in ("/recipients", "/destinations/{key}", "/test-destination", "/audit-log"):
        assert path in paths


def test_a_store_entry_without_the_secret_key_is_named(onboarded: Api, dst_schema: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from transfer_platform.errors import ConfigError

    onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", dst_schema)})
    monkeypatch.delenv("TRANSFER_PLATFORM_SECRET_KEY")
    with pytest.raises(ConfigError, match="TRANSFER_PLATFORM_SECRET_KEY"):
        load_config(onboarded.config_path).destination("acme_pg").connection.password.resolve("x")
    monkeypatch.setenv("TRANSFER_PLATFORM_SECRET_KEY", "kG0e2kB8pLgq0W4uJvHn0m6o2mJp8cQ8mA2u7r9pY1c=")  # another key
    with pytest.raises(ConfigError, match="cannot be decrypted"):
        load_config(onboarded.config_path).destination("acme_pg").connection.password.resolve("x")


def test_an_unreachable_store_gets_503_and_names_it(tmp_path, secret_key: str) -> None:
    from fastapi.testclient import TestClient

    from transfer_platform.api.app import create_app

    path = write_api_config(tmp_path, "tp_store_none")
    text = path.read_text().replace("port: 5432", "port: 1")
    path.write_text(text)
    client = TestClient(create_app(path))
    answer = client.get("/recipients", headers={"X-API-KEY": "tpk_x"})
    assert answer.status_code == 503
    message = answer.json()["message"]
    assert message.startswith("cannot reach the store's database test at 127.0.0.1:1: ")
    assert message.endswith("; fix: check that the database runs and accepts connections (store.connection "
                            "in the configuration), then retry")
    assert "\n" not in message


def test_the_file_imports_into_the_store(tmp_path, store_schema: str, secret_key: str) -> None:
    from transfer_platform.store.resources import ResourceStore

    path = write_api_config(tmp_path, store_schema, sources=[SOURCE], models=[MODEL],
                            recipients=[{"name": "acme", "id_in_provider_system": "acme"}])
    start_api(path, store_schema)
    counts = ResourceStore(path).import_file()
    assert counts == {"source": 1, "model": 1, "recipient": 1, "destination": 0}
    assert ResourceStore(path).import_file() == {"source": 0, "model": 0, "recipient": 0, "destination": 0}
    text = path.read_text()
    path.write_text(text[:text.index("sources:")])  # the entries now live in the store only
    config = load_config(path)
    assert [r.name for r in config.recipients] == ["acme"]


def test_two_api_processes_check_against_each_others_changes(onboarded: Api, dst_schema: str) -> None:
    from transfer_platform.store.resources import ResourceStore

    other = ResourceStore(onboarded.config_path)  # a second API process on the same store
    assert onboarded.post("/recipients", {"recipient": {"name": "globex", "id_in_provider_system": "g"}}).status_code == 201
    other.create("destination", destination("globex_pg", "globex", dst_schema), actor="other")
    answer = onboarded.post("/destinations", {"destination": destination("acme_pg", "acme", dst_schema)})
    assert answer.status_code == 422  # the other's destination holds that place
    assert "same place" in answer.json()["message"]
    assert onboarded.delete("/destinations/globex_pg").status_code == 200
    other.create("destination", destination("acme_pg", "acme", dst_schema), actor="other")  # free again
    again = onboarded.patch("/destinations/acme_pg", {"destination": {"frequency_minutes": 60}})
    assert again.status_code == 200
    assert other.get("destination", "acme_pg").document["frequency_minutes"] == 60
