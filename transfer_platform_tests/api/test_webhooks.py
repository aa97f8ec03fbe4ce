"""Webhooks through the REST API and the delivery function, against a real local HTTP receiver
(``support/webhook_receiver.py``) and the store in PostgreSQL: the signature verifies with the
secret returned once (checked here with ``hmac``, independently of the code), a receiver down
then up gets each event exactly once, the event id is stable across retries, a Slack payload,
disabled webhooks and unsubscribed events get nothing, secrets never come back. Time is driven
by the delivery function's clock, never by sleeping."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from transfer_platform.store import events as outbox
from transfer_platform.store.tables import audit_log, webhook_deliveries, webhooks
from transfer_platform.webhooks.delivery import MAX_ATTEMPTS, deliver_due, retry_delay
from transfer_platform.webhooks.event_types import EVENT_TYPES
from transfer_platform.webhooks.signing import verify
from transfer_platform_tests.support.api import Api
from transfer_platform_tests.support.webhook_receiver import Receiver, receiver

T0 = datetime.now(UTC)


@pytest.fixture
def hook() -> Iterator[Receiver]:
    with receiver() as running:
        yield running


def create(api: Api, url: str, events: list[str], **fields) -> dict:
    answer = api.post("/webhooks", {"webhook": {"url": url, "events": events, **fields}})
    assert answer.status_code == 201, answer.text
    return answer.json()["data"]["webhook"]


def emit(api: Api, event_type: str, data: dict, dedup_key: str | None = None) -> str:
    with api.app.state.store.engine.begin() as conn:
        return outbox.emit(conn, event_type, data, dedup_key=dedup_key)


def deliver(api: Api, now: datetime, **options):
    return deliver_due(api.app.state.store.engine, now=now, **options)


def expected_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Computed here as a receiver would, without the platform's code."""
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def delivery_row(api: Api, webhook_id: str, event_id: str) -> sa.Row:
    with api.app.state.store.engine.connect() as conn:
        return conn.execute(sa.select(webhook_deliveries).where(
            webhook_deliveries.c.webhook_id == webhook_id, webhook_deliveries.c.event_id == event_id)).one()


# -- signing and the generic payload ------------------------------------------------------------------

def test_a_delivery_is_signed_with_the_secret_returned_once(api: Api, hook: Receiver) -> None:
    webhook = create(api, hook.url, ["recipient.created"])
    secret = webhook["secret"]
    assert secret.startswith("whsec_")
    assert len(secret) > 40
    assert api.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "ac'me"}}).status_code == 201

    report = deliver(api, datetime.now(UTC))

    assert report.delivered == 1
    (request,) = hook.wait_for(1)
    headers = request.headers
    assert headers["X-Transfer-Platform-Signature"] == expected_signature(
        secret, headers["X-Transfer-Platform-Timestamp"], request.body)
    assert headers["X-Transfer-Platform-Signature"] != expected_signature(
        "whsec_another", headers["X-Transfer-Platform-Timestamp"], request.body)
    assert verify(secret, headers["X-Transfer-Platform-Timestamp"], request.body,
                  headers["X-Transfer-Platform-Signature"], now=datetime.now(UTC).timestamp())
    document = json.loads(request.body)
    assert document["type"] == headers["X-Transfer-Platform-Event"] == "recipient.created"
    assert document["id"] == headers["X-Transfer-Platform-Event-Id"]
    assert document["data"]["recipient"]["name"] == "acme"
    assert headers["Content-Type"] == "application/json"
    assert delivery_row(api, webhook["id"], document["id"]).status == "delivered"


def test_the_secret_is_stored_encrypted_and_never_returned_again(api: Api, hook: Receiver) -> None:
    webhook = create(api, hook.url, ["destination.created"])
    secret = webhook["secret"]
    answers = [api.get("/webhooks"), api.get(f"/webhooks/{webhook['id']}"),
               api.patch(f"/webhooks/{webhook['id']}", {"webhook": {"events": ["destination.deleted"]}}),
               api.get(f"/webhooks/{webhook['id']}/deliveries"), api.get("/audit-log")]
    for answer in answers:
        assert answer.status_code in (200, 404), answer.text  # /audit-log: another helper's route
        assert secret not in answer.text
        assert '"secret"' not in answer.text
    with api.app.state.store.engine.connect() as conn:
        stored = conn.execute(sa.select(webhooks.c.secret)).scalar_one()
        logged = json.dumps([dict(r._mapping) for r in conn.execute(sa.select(audit_log))], default=str)
    assert secret not in stored
    assert secret not in logged


# -- retries: down, then up; 500 -----------------------------------------------------------------------

def test_a_receiver_down_then_up_gets_the_event_exactly_once_with_the_same_id(api: Api, hook: Receiver) -> None:
    webhook = create(api, hook.url, ["transfer.error"])
    event_id = emit(api, "transfer.error", {"transfer": {"id": "run-1", "status": "ERROR"}}, "transfer.error:run-1")
    hook.answer(500)

    first = deliver(api, T0)
    assert (first.delivered, first.retrying) == (0, 1)
    row = delivery_row(api, webhook["id"], event_id)
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.last_error.startswith("HTTP 500")
    assert row.next_attempt_at == T0 + retry_delay(1)

    hook.down()
    second = deliver(api, T0 + timedelta(seconds=11))
    assert second.retrying == 1
    row = delivery_row(api, webhook["id"], event_id)
    assert row.attempts == 2
    assert "Connect" in row.last_error

    assert deliver(api, T0 + timedelta(seconds=20)).retrying == 0  # not due yet: no attempt
    hook.up()
    hook.answer(200)
    assert deliver(api, T0 + timedelta(seconds=11) + retry_delay(2)).delivered == 1
    assert deliver(api, T0 + timedelta(days=1) - timedelta(minutes=1)).delivered == 0

    requests = hook.wait_for(2)
    assert len(requests) == 2  # the 500 and the delivery; the refused one never arrived
    assert {r.headers["X-Transfer-Platform-Event-Id"] for r in requests} == {event_id}
    assert [r.headers["X-Transfer-Platform-Attempt"] for r in requests] == ["1", "3"]
    row = delivery_row(api, webhook["id"], event_id)
    assert (row.status, row.attempts, row.last_error) == ("delivered", 3, None)


def test_a_delivery_is_given_up_after_the_last_attempt_and_its_error_kept(api: Api, hook: Receiver) -> None:
    webhook = create(api, hook.url, ["transfer.error"])
    event_id = emit(api, "transfer.error", {"transfer": {"id": "run-2"}})
    hook.answer(503)
    now = T0
    for _ in range(MAX_ATTEMPTS):
        deliver(api, now)
        now = delivery_row(api, webhook["id"], event_id).next_attempt_at
    row = delivery_row(api, webhook["id"], event_id)
    assert (row.status, row.attempts) == ("failed", MAX_ATTEMPTS)
    assert row.last_error.startswith("HTTP 503")
    assert len(hook.wait_for(MAX_ATTEMPTS)) == MAX_ATTEMPTS
    deliver(api, now + timedelta(hours=5))
    assert len(hook.requests) == MAX_ATTEMPTS

    (shown,) = api.get(f"/webhooks/{webhook['id']}/deliveries").json()["data"]["deliveries"]
    assert shown["status"] == "failed"
    assert shown["attempts"] == MAX_ATTEMPTS
    assert shown["event_id"] == event_id
    assert shown["last_error"].startswith("HTTP 503")


def test_a_receiver_that_never_answers_costs_one_short_timeout(api: Api, hook: Receiver) -> None:
    webhook = create(api, hook.url, ["transfer.success"])
    event_id = emit(api, "transfer.success", {"transfer": {"id": "run-3"}})
    hook.hang()
    started = datetime.now(UTC)
    report = deliver(api, T0, timeout=0.5)
    assert report.retrying == 1
    assert datetime.now(UTC) - started < timedelta(seconds=5)
    assert "no answer within 0.5 s" in delivery_row(api, webhook["id"], event_id).last_error


def test_retry_delays_grow_and_are_capped() -> None:
    delays = [retry_delay(n).total_seconds() for n in range(1, MAX_ATTEMPTS + 1)]
    assert delays[:4] == [10, 30, 90, 270]
    assert delays == sorted(delays)
    assert max(delays) == 3600


# -- what is sent to whom -----------------------------------------------------------------------------

def test_a_slack_webhook_gets_a_text_with_the_same_signature_headers(api: Api, hook: Receiver) -> None:
    webhook = create(api, hook.url, ["transfer.partial_failure"], format="slack")
    emit(api, "transfer.partial_failure", {"transfer": {
        "id": "run-4", "status": "PARTIAL_FAILURE", "destination": "acme_pg", "recipient": "acme",
        "models": {"items": {"rows_transferred": 4, "error": None},
                   "notes": {"rows_transferred": 0, "error": {"error_code": "SourceError",
                                                              "title": "table notes is missing",
                                                              "blame": "provider"}}}}})
    deliver(api, datetime.now(UTC))
    (request,) = hook.wait_for(1)
    document = json.loads(request.body)
    assert list(document) == ["text"]
    text = document["text"]
    assert "PARTIAL_FAILURE" in text
    assert "acme_pg" in text
    assert "notes: table notes is missing" in text
    assert "[blame: provider]" in text
    assert "run-4" in text
    assert request.headers["X-Transfer-Platform-Signature"] == expected_signature(
        webhook["secret"], request.headers["X-Transfer-Platform-Timestamp"], request.body)
    assert request.headers["X-Transfer-Platform-Event"] == "transfer.partial_failure"


def test_only_subscribed_events_reach_only_enabled_webhooks(api: Api, hook: Receiver) -> None:
    with receiver() as other:
        errors = create(api, hook.url, ["transfer.error"])
        paused = create(api, other.url, ["transfer.error", "transfer.success"], is_enabled=False)
        error_id = emit(api, "transfer.error", {"transfer": {"id": "a"}})
        emit(api, "transfer.success", {"transfer": {"id": "b"}})
        emit(api, "destination.created", {"destination": {"name": "d"}})
        deliver(api, datetime.now(UTC))
        (request,) = hook.wait_for(1)
        assert request.headers["X-Transfer-Platform-Event-Id"] == error_id

        # enabled again: the events of while it was paused stay unsent, the next ones arrive
        answer = api.patch(f"/webhooks/{paused['id']}", {"webhook": {"is_enabled": True}})
        assert answer.json()["data"]["webhook"]["is_enabled"] is True
        later = emit(api, "transfer.success", {"transfer": {"id": "c"}})
        deliver(api, datetime.now(UTC))
        (received,) = other.wait_for(1)
        assert received.headers["X-Transfer-Platform-Event-Id"] == later
        assert len(hook.requests) == 1
        assert errors["id"] != paused["id"]


def test_a_subscription_change_applies_to_later_events(api: Api, hook: Receiver) -> None:
    webhook = create(api, hook.url, ["transfer.error"])
    before = emit(api, "transfer.error", {"transfer": {"id": "a"}})
    emit(api, "transfer.success", {"transfer": {"id": "b"}})  # not subscribed when it occurred
    api.patch(f"/webhooks/{webhook['id']}", {"webhook": {"events": ["transfer.success"]}})
    after = emit(api, "transfer.success", {"transfer": {"id": "c"}})
    deliver(api, datetime.now(UTC))
    requests = hook.wait_for(2)
    assert sorted(r.headers["X-Transfer-Platform-Event-Id"] for r in requests) == sorted([before, after])


def test_two_deliverers_at_once_send_each_event_once(api: Api, hook: Receiver) -> None:
    create(api, hook.url, ["transfer.success"])
    ids = [emit(api, "transfer.success", {"transfer": {"id": str(i)}}) for i in range(24)]
    hook.delay = 0.02
    now = datetime.now(UTC)
    threads = [threading.Thread(target=deliver, args=(api, now), kwargs={"workers": 4}) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    counts = Counter(r.headers["X-Transfer-Platform-Event-Id"] for r in hook.wait_for(len(ids)))
    assert counts == Counter(ids)


def test_an_event_older_than_the_webhook_is_not_sent(api: Api, hook: Receiver) -> None:
    emit(api, "transfer.error", {"transfer": {"id": "old"}})
    create(api, hook.url, ["transfer.error"])
    assert deliver(api, datetime.now(UTC)).fanned_out == 0
    assert hook.requests == []


# -- the API: validation, 404, audit -------------------------------------------------------------------

@pytest.mark.parametrize(("body", "path", "says"), [
    pytest.param({"url": "http://x/h", "events": ["transfer.failed"]}, "webhook.events[0]", "transfer.error",
                 id="unknown-event-lists-valid-ones"),
    pytest.param({"url": "ftp://x/h", "events": ["transfer.error"]}, "webhook.url", "http", id="not-http"),
    pytest.param({"url": "hooks", "events": ["transfer.error"]}, "webhook.url", "http", id="relative-url"),
    pytest.param({"url": "http://x/h", "events": []}, "webhook.events", "valid event types", id="no-events"),
    pytest.param({"events": ["transfer.error"]}, "webhook.url", "url", id="missing-url"),
    pytest.param({"url": "http://x/h", "events": ["transfer.error"], "format": "teams"}, "webhook.format",
                 "slack", id="unknown-format"),
    pytest.param({"url": "http://x/h", "events": ["transfer.error"], "is_enabled": "yes"},
                 "webhook.is_enabled", "boolean", id="enabled-not-boolean"),
    pytest.param({"url": "http://x/h", "events": ["transfer.error"], "secret": "mine"}, "webhook.secret",
                 "fields are", id="secret-is-not-the-clients"),
])
def test_a_bad_webhook_is_refused_naming_the_field_and_the_fix(api: Api, body: dict, path: str, says: str) -> None:
    answer = api.post("/webhooks", {"webhook": body})
    assert answer.status_code == 422, answer.text
    problems = {p["path"]: p for p in answer.json()["errors"]}
    assert path in problems
    assert says in problems[path]["message"] + problems[path]["fix"]
    assert api.get("/webhooks").json()["data"]["webhooks"] == []


def test_the_unknown_event_error_lists_every_valid_type(api: Api) -> None:
    answer = api.post("/webhooks", {"webhook": {"url": "https://x.example/h", "events": ["nope"]}})
    fix = answer.json()["errors"][0]["fix"]
    assert all(name in fix for name in EVENT_TYPES)


def test_an_unknown_webhook_is_404_and_a_body_without_webhook_422(api: Api) -> None:
    for path in ("/webhooks/nope", "/webhooks/00000000-0000-0000-0000-000000000000",
                 "/webhooks/00000000-0000-0000-0000-000000000000/deliveries"):
        assert api.get(path).status_code == 404
    assert api.patch("/webhooks/nope", {"webhook": {"is_enabled": False}}).status_code == 404
    assert api.delete("/webhooks/nope").status_code == 404
    assert api.post("/webhooks", {"url": "http://x/h"}).status_code == 422
    assert api.post("/webhooks", ["not", "an", "object"]).status_code == 422
    assert api.get("/webhooks").status_code == 200
    assert api.client.get("/webhooks").status_code == 401  # no API key


def test_each_change_is_audited_with_the_url_masked(api: Api, hook: Receiver) -> None:
    webhook = create(api, "https://hooks.slack.com/services/T0/B0/sekrit", ["transfer.error"], format="slack")
    api.patch(f"/webhooks/{webhook['id']}", {"webhook": {"is_enabled": False}})
    api.patch(f"/webhooks/{webhook['id']}", {"webhook": {"events": ["transfer.error", "transfer.expired"]}})
    assert api.delete(f"/webhooks/{webhook['id']}").status_code == 200
    assert api.get(f"/webhooks/{webhook['id']}").status_code == 404
    with api.app.state.store.engine.connect() as conn:
        rows = conn.execute(sa.select(audit_log).where(audit_log.c.resource_type == "webhook")
                            .order_by(audit_log.c.id)).all()
    assert [r.action for r in rows] == ["create", "pause", "update", "delete"]
    assert {r.actor for r in rows} == {"api_key:tests"}
    assert {r.resource_id for r in rows} == {webhook["id"]}
    assert rows[1].changes == {"is_enabled": {"from": True, "to": False}}
    assert rows[2].changes["events"]["to"] == ["transfer.error", "transfer.expired"]
    assert "sekrit" not in json.dumps([dict(r._mapping) for r in rows], default=str)
    assert rows[0].resource_name == "https://hooks.slack.com/***"


def test_the_delivery_command_delivers_what_is_due(api: Api, hook: Receiver, capsys) -> None:
    from transfer_platform.cli import main

    create(api, hook.url, ["destination.deleted"])
    emit(api, "destination.deleted", {"destination": {"name": "gone"}})
    assert main(["webhooks", "deliver", "--config", str(api.config_path)]) == 0
    assert "1 delivered" in capsys.readouterr().out
    assert len(hook.wait_for(1)) == 1
