"""What a refusal of the API says: every problem has a fix that tells what to do (the
identifier-length refusals, pydantic's bounds and types, the cross-checks), and names an entry of
the configuration by its name (``recipients.acme``), never by its position among the file's and the
store's entries. The API over the machine's PostgreSQL (FastAPI's TestClient)."""

from __future__ import annotations

from typing import Any

import pytest

from transfer_platform_tests.support.api import Api
from transfer_platform_tests.support.postgres import pg_connection_config

LONG = "n" * 121  # one more than a name may have


def destination(name: str, recipient: str = "acme", **connection: Any) -> dict:
    return {"name": name, "recipient": recipient, "vendor": "postgres",
            "connection": {**pg_connection_config("tp_refusals"), "password": "pw", **connection}}


def mysql(name: str, database: str) -> dict:
    return {"name": name, "recipient": "acme", "vendor": "mysql",
            "connection": {"host": "127.0.0.1", "port": 3306, "database": database, "username": "root"}}


@pytest.fixture
def with_recipient(api: Api) -> Api:
    answer = api.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "acme"}})
    assert answer.status_code == 201, answer.text
    return api


#: (route, body, the problem's path, its fix): each must be refused with that fix
IDENTIFIER_LENGTHS = [
    ("/recipients", {"recipient": {"name": LONG, "id_in_provider_system": "x"}}, "recipient.name",
     "shorten it to at most 120 characters"),
    ("/destinations", {"destination": destination(LONG)}, "destination.name", "shorten it to at most 120 characters"),
    ("/sources", {"source": {"name": LONG, "vendor": "postgres", "connection": pg_connection_config()}},
     "source.name", "shorten it to at most 120 characters"),
    ("/models", {"model": {"model_name": LONG}}, "model.model_name", "shorten it to at most 120 characters"),
    ("/destinations", {"destination": destination("acme_pg", schema="s" * 64)}, "destination",
     "use a schema name of at most 63 bytes"),
    ("/destinations", {"destination": destination("acme_pg", database="d" * 64)}, "destination",
     "use a database name of at most 63 bytes"),
    ("/destinations", {"destination": mysql("acme_my", "d" * 65)}, "destination",
     "use a database name of at most 64 characters"),
]


@pytest.mark.parametrize(("route", "body", "path", "fix"), IDENTIFIER_LENGTHS,
                         ids=["recipient", "destination", "source", "model", "pg-schema", "pg-database",
                              "mysql-database"])
def test_a_name_too_long_is_refused_with_its_fix(with_recipient: Api, route: str, body: dict, path: str,
                                                 fix: str) -> None:
    answer = with_recipient.post(route, body)
    assert answer.status_code == 422, answer.text
    fixes = {problem["path"]: problem["fix"] for problem in answer.json()["errors"]}
    assert fixes.get(path) == fix, answer.json()


#: other refusals, each problem of which must have a fix
OTHERS = [
    ("post", "/recipients", {"recipient": {"name": "", "id_in_provider_system": "x"}}),
    ("post", "/recipients", {"recipient": {"name": "a b", "id_in_provider_system": 5}}),
    ("post", "/recipients", {"recipient": {"name": "r", "id_in_provider_system": "x",
                                           "default_full_refresh_min_start_time_epoch": -1}}),
    ("post", "/recipients", {"recipient": {"name": "r", "id_in_provider_system": "x",
                                           "default_full_refresh_min_start_time_epoch": 99_999_999_999}}),
    ("post", "/destinations", {"destination": destination("d", frequency_minutes=7)}),
    ("post", "/destinations", {"destination": destination("d", port="five")}),
    ("post", "/destinations", {"destination": destination("d", recipient="nobody")}),
    ("post", "/destinations", {"destination": {**destination("d"), "enabled_models": "all"}}),
    ("post", "/destinations", {"destination": {**destination("d"), "is_enabled": "maybe"}}),
    ("post", "/models", {"model": {"model_name": "m", "columns": {}}}),
    ("post", "/webhooks", {"webhook": {"url": "ftp://x", "events": ["nope"]}}),
    ("post", "/magic-links", {"magic_link": {"recipient_id": "acme", "vendors": ["nope"]}}),
    ("get", "/audit-log?page_size=0", None),
    ("get", "/transfers?status=NOPE", None),
    ("patch", "/recipients/acme", {"recipient": {"name": "other"}}),
    ("delete", "/recipients/acme", None),  # in use by a destination
]


def test_every_refusal_has_a_fix(with_recipient: Api) -> None:
    api = with_recipient
    assert api.post("/destinations", {"destination": destination("acme_pg")}).status_code == 201
    walked = 0
    for method, route, body in [(m, r, b) for r, b, _, _ in IDENTIFIER_LENGTHS for m in ("post",)] + OTHERS:
        answer = api.client.request(method, route, headers=api.headers, json=body)
        assert 400 <= answer.status_code < 500, (route, body, answer.text)
        errors = answer.json().get("errors")
        if errors is None:  # a one-line refusal (a conflict): its fix is in its message
            assert "; fix: " in answer.json()["message"], (method, route, answer.json())
            continue
        walked += len(errors)
        empty = [problem for problem in errors if not problem["fix"].strip()]
        assert not empty, (method, route, body, empty)
    assert walked >= len(IDENTIFIER_LENGTHS) + len(OTHERS) - 1


def test_an_entry_is_named_by_its_name_not_its_position(with_recipient: Api) -> None:
    api = with_recipient
    for n in range(4):  # the entry refused is not the first of its list
        assert api.post("/recipients", {"recipient": {"name": f"r{n}", "id_in_provider_system": f"r{n}"}}).status_code == 201
    assert api.post("/destinations", {"destination": destination("acme_pg")}).status_code == 201
    cases = [
        (api.post("/recipients", {"recipient": {"name": "late", "id_in_provider_system": "late",
                                                "default_full_refresh_min_start_time_epoch": 99_999_999_999}}),
         422, "recipients.late.default_full_refresh_min_start_time_epoch"),
        (api.post("/destinations", {"destination": destination("other_pg", recipient="nobody", schema="tp_refusals_other")}),
         422, "destinations.other_pg.recipient"),
        (api.delete("/recipients/acme"), 409, "destinations.acme_pg.recipient"),  # still in use
    ]
    for answer, status, path in cases:
        assert answer.status_code == status, answer.text
        body = answer.json()
        assert [problem["path"] for problem in body["errors"]] == [path], body
        assert "[" not in body["message"], body["message"]


def test_a_position_without_a_name_is_named_too() -> None:
    from transfer_platform.config.parsing import entries_by_name

    names = {"recipients": ["acme", "globex"]}
    assert entries_by_name("recipients[1] (globex).id_in_provider_system") == "recipients.globex.id_in_provider_system"
    assert entries_by_name("recipients[1].name", names) == "recipients.globex.name"
    assert entries_by_name("see models[0] (events) and sources[2] (src)") == "see models.events and sources.src"
    assert entries_by_name("recipients[7].name", names) == "recipients[7].name"  # unknown: left as it is
    assert entries_by_name("webhook.events[0]") == "webhook.events[0]"
