"""Faults of the REST API's store (its PostgreSQL, through the proxy of the tests) and of a webhook
receiver (through the proxy too):

- the store's connections dropped or reset while the API holds them, or refused outright: a
  request answers 2xx having written once, or 503 with a one-line reason having written nothing;
  once the store is back the next request succeeds, with no retry of the client's own;
- a receiver's connection reset after it read the POST (the answer lost): the delivery is retried
  with the same event id, and is marked delivered once the receiver answers.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from transfer_platform.store import events as outbox
from transfer_platform.store.tables import webhook_deliveries
from transfer_platform.webhooks.delivery import deliver_due
from transfer_platform_tests.support.api import start_api
from transfer_platform_tests.support.faults import record
from transfer_platform_tests.support.postgres import PG, pg_connection_config
from transfer_platform_tests.support.tcp_proxy import tcp_proxy
from transfer_platform_tests.support.webhook_receiver import receiver

pytestmark = pytest.mark.integration


def recipients(api) -> list[str]:
    answer = api.get("/recipients")
    assert answer.status_code == 200, answer.text
    return sorted(r["name"] for r in answer.json()["data"]["recipients"])


@pytest.mark.parametrize(("fault", "after_bytes"), [("drop", 0), ("drop", 300), ("reset", 300), ("down", 0)])
def test_the_store_lost_mid_request_writes_once_or_not_at_all(tmp_path, store_schema, secret_key, fault,
                                                              after_bytes):
    with tcp_proxy(PG["host"], PG["port"]) as proxy:
        path = tmp_path / "transfer_platform.yaml"
        path.write_text(yaml.safe_dump({"store": {"connection": {**pg_connection_config(store_schema),
                                                                  "port": proxy.port}}}))
        api = start_api(path, store_schema)
        with api.client:
            assert recipients(api) == []  # the pool holds a connection through the proxy
            if fault == "down":  # the server gone: open connections dropped, new ones refused
                proxy.fault("drop")
                proxy.fault("refuse")
            else:  # between requests (0 bytes), or inside the request's own queries
                proxy.fault(fault, after_bytes=after_bytes)
            answer = api.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "org-1"}})
            if answer.status_code == 201:
                outcome = "the pool reconnected: 201, written once"
            else:
                assert answer.status_code == 503, answer.text
                error = answer.json()["message"]
                assert "\n" not in error, error
                assert "store" in error, error
                outcome = "503, one line: " + error.split(":")[0].replace(store_schema, "<db>").replace(
                    f":{proxy.port}", "")
            proxy.heal()
            healed = time.monotonic()
            if answer.status_code != 201:  # the client's own retry, the store back
                again = api.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": "org-1"}})
                assert again.status_code == 201, again.text
            recovered_in = time.monotonic() - healed
            assert recipients(api) == ["acme"]  # written once
    what = "drop + refuse (store down)" if fault == "down" else (
        f"{fault} after {after_bytes} B" if after_bytes else f"{fault} (idle pool)")
    record(what, "store (API request)", outcome, recovered_in)


def test_a_webhook_answer_lost_is_retried_with_the_same_event_id(tmp_path, store_schema, secret_key):
    with receiver() as hook, tcp_proxy("127.0.0.1", hook.port) as proxy:
        path = tmp_path / "transfer_platform.yaml"
        path.write_text(yaml.safe_dump({"store": {"connection": pg_connection_config(store_schema)}}))
        api = start_api(path, store_schema)
        with api.client:
            url = f"http://127.0.0.1:{proxy.port}/hooks"
            created = api.post("/webhooks", {"webhook": {"url": url, "events": ["transfer.error"]}})
            assert created.status_code == 201, created.text
            engine = api.app.state.store.engine
            with engine.begin() as conn:
                event_id = outbox.emit(conn, "transfer.error", {"transfer_id": "t1"})
            # the request reaches the receiver, which holds its answer; then the link is reset
            hook.hang()
            now = datetime.now(UTC)
            reports = []
            worker = threading.Thread(target=lambda: reports.append(deliver_due(engine, now=now, timeout=20)))
            worker.start()
            hook.wait_for(1)
            proxy.fault("reset")
            worker.join(30)
            hook.release()
            (first,) = reports
            assert (first.delivered, first.retrying) == (0, 1), first
            with engine.connect() as conn:
                row = conn.execute(webhook_deliveries.select()).one()
            assert row.last_error, row
            assert "\n" not in row.last_error, row.last_error
            healed = time.monotonic()
            second = deliver_due(engine, now=now + timedelta(hours=1))
            recovered_in = time.monotonic() - healed
            assert second.delivered == 1, second
            got = hook.wait_for(2)
            ids = {r.headers["X-Transfer-Platform-Event-Id"] for r in got}
            assert ids == {event_id}, ids  # the retry carries the same id: the receiver de-duplicates
            assert deliver_due(engine, now=now + timedelta(days=1)).delivered == 0  # delivered: done
    record("reset after the request (answer lost)", "webhook receiver",
           "retried with the same event id, delivered (receiver de-duplicates)", recovered_in)
