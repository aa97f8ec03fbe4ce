"""Text the store cannot hold (a NUL character, a lone surrogate, percent-encoded bytes that are not
UTF-8) is refused with 422 wherever it is sent: a path's parameter, a query's name or value, a JSON
body's key or value at any depth; the problem names where, with a fix, and nothing is stored. The
API over the machine's PostgreSQL (FastAPI's TestClient: a server error fails the test)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from transfer_platform.api.storable import body_problems, query_problems
from transfer_platform_tests.support.api import Api


def stored(api: Api) -> list[tuple[str, ...]]:
    """What the API wrote: its entries and its audit log."""
    with api.app.state.store.engine.connect() as conn:
        return [*conn.execute(sa.text("SELECT kind, name FROM resources")),
                *conn.execute(sa.text("SELECT action, resource_name FROM audit_log"))]


def post_json(api: Api, path: str, body: Any):
    """``body`` as JSON with every non-ASCII character escaped (a lone surrogate as ``\\ud800``)."""
    return api.client.post(path, content=json.dumps(body).encode(),
                           headers={**api.headers, "Content-Type": "application/json"})


def refused(answer, path: str) -> dict:
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["status"] == "error"
    (problem,) = [p for p in body["errors"] if p["path"] == path] or [None]
    assert problem is not None, (path, body)
    assert problem["fix"], problem
    assert body["message"].startswith(f"invalid request: {path}: ")
    return problem


@pytest.mark.parametrize(("url", "path"), [
    ("/transfers?destination_id=a%00b", "query.destination_id"),
    ("/destinations/a%00b", "path.key"),
    ("/audit-log?actor=a%00b", "query.actor"),
    ("/magic-links?recipient=%00", "query.recipient"),
    ("/destinations/a%00b/transfers", "path.key"),
    ("/webhooks/a%00b", "path.webhook_id"),
    ("/link/a%00b", "path.token"),
], ids=["transfers-filter", "destination-by-key", "audit-log-actor", "magic-links-filter",
        "a-destinations-transfers", "webhook-by-id", "magic-link-token"])
def test_a_nul_in_a_path_or_a_query_is_refused_naming_the_parameter(api: Api, url: str, path: str) -> None:
    problem = refused(api.get(url), path)
    assert "NUL" in problem["message"]
    assert problem["fix"] == "remove the NUL character (%00 in a URL, \\u0000 in JSON)"


@pytest.mark.parametrize(("url", "path", "shown"), [
    ("/destinations/a%FFb", "path.key", "a%FFb"),
    ("/destinations/%ED%A0%80", "path.key", "%ED%A0%80"),  # a surrogate's bytes: no UTF-8
    ("/audit-log?actor=%C3", "query.actor", "%C3"),  # half of é
    ("/audit-log?act%FFor=x", "query.act%FFor", "act%FFor"),
], ids=["path-byte-ff", "path-surrogate-bytes", "query-half-a-character", "query-name"])
def test_percent_encoded_bytes_that_are_not_utf8_are_refused(api: Api, url: str, path: str, shown: str) -> None:
    problem = refused(api.get(url), path)
    assert problem["message"].endswith(f"'{shown}' is not UTF-8 once percent-decoded"), problem


@pytest.mark.parametrize("bad", ["\u0000", "\ud800"], ids=["nul", "lone-surrogate"])
def test_a_body_with_unstorable_text_is_refused_and_nothing_is_stored(api: Api, bad: str) -> None:
    answer = post_json(api, "/recipients", {"recipient": {"name": "acme", "id_in_provider_system": f"a{bad}b"}})
    problem = refused(answer, "recipient.id_in_provider_system")
    assert f"'a\\u{ord(bad):04x}b'" in problem["message"]
    assert stored(api) == []
    # the same text as a field's name, and deep in a body that is otherwise well formed
    refused(post_json(api, "/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "a",
                                                         f"x{bad}": 1}}), f"recipient.x\\u{ord(bad):04x}")
    refused(post_json(api, "/magic-links", {"magic_link": {"recipient_id": "acme", "vendors": ["postgres", bad]}}),
            "magic_link.vendors[1]")
    assert stored(api) == []


def test_a_body_that_is_not_utf8_is_refused(api: Api) -> None:
    answer = api.client.post("/recipients", content=b'{"recipient": {"name": "acme", "id_in_provider_system": "\xff"}}',
                             headers={**api.headers, "Content-Type": "application/json"})
    problem = refused(answer, "body")
    assert problem["message"].startswith("is not UTF-8 (the byte 0xFF at offset ")
    assert stored(api) == []


def test_text_the_store_can_hold_passes(api: Api) -> None:
    """Non-ASCII text, a surrogate pair (one emoji) and %-encoded UTF-8 are text: accepted."""
    answer = post_json(api, "/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "é\U0001F600ü"}})
    assert answer.status_code == 201, answer.text
    assert api.get("/audit-log?actor=%C3%A9").status_code == 200
    assert api.get("/recipients/acme").json()["data"]["recipient"]["id_in_provider_system"] == "é\U0001F600ü"


def test_a_delta_sharing_route_answers_in_the_protocols_form(api: Api) -> None:
    answer = api.client.get("/delta-sharing/shares/a%00b", headers={"Authorization": "Bearer x"})
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["errorCode"] == "INVALID_PARAMETER_VALUE"
    assert body["message"].startswith("invalid request: path.share: ")
    assert "; fix: remove the NUL character" in body["message"]


@pytest.mark.parametrize(("document", "paths"), [
    ({"a": "ok"}, []),
    ({"a": {"b": [{"c": "x\x00"}]}}, ["a.b[0].c"]),
    ({"a\x00": "ok", "b": "\udfff"}, ["a\\u0000", "b"]),
    ("\x00", ["body"]),
    ({"a": ["\ud83d\ude00"]}, ["a[0]"]),  # two halves decoded separately are still two lone surrogates
], ids=["clean", "deep-value", "key-and-value", "top-level", "halves"])
def test_body_problems_name_each_place(document: Any, paths: list[str]) -> None:
    assert [p.path for p in body_problems(document)] == paths


def test_a_very_deep_body_is_walked_without_recursion() -> None:
    document: Any = "\x00"
    for _ in range(100_000):
        document = [document]
    (problem,) = body_problems(document)
    assert problem.path.endswith("[0][0]")
    assert len(problem.path) <= len("...") + 200


@pytest.mark.parametrize(("query", "paths"), [
    (b"a=1&b=%C3%A9", []),
    (b"a=%00", ["query.a"]),
    (b"a=x+y&%00=1", ["query.\\u0000"]),
    (b"a=%E2%82", ["query.a"]),
], ids=["clean", "nul-value", "nul-name", "cut-character"])
def test_query_problems_name_each_parameter(query: bytes, paths: list[str]) -> None:
    assert [p.path for p in query_problems(query)] == paths
