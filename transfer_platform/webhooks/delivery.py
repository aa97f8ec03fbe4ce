"""Delivering events to webhooks: fan-out, a signed POST, retries with backoff, once per event.

Each call of :func:`deliver_due` (the daemon's ``webhook_delivery`` sensor every 15 seconds,
``transfer-platform webhooks deliver``, or any process holding the store):

1. **fans out** the events of the last :data:`FAN_OUT_WINDOW` to the webhooks subscribed to
   their type: one ``webhook_deliveries`` row per (event, webhook), ``pending`` (``skipped`` for a
   disabled webhook; an event older than the webhook is not its). The row's primary key makes
   this idempotent, so several deliverers can fan out at once;
2. **delivers** each pending row that is due, each in its own transaction that holds the row's
   lock (``FOR UPDATE SKIP LOCKED``) through the POST: two deliverers never send the same
   (event, webhook) together, and a sent one is marked ``delivered`` before the lock is let go.
   A 2xx answer within :data:`TIMEOUT_SECONDS` delivers; anything else (an error status, a
   refused connection, a timeout, a redirect) is retried after :func:`retry_delay` and, after
   :data:`MAX_ATTEMPTS`, marked ``failed`` with the last error kept.

Should a deliverer die between a receiver's 2xx and its commit, the event is sent again with the
same ``X-Transfer-Platform-Event-Id``: receivers de-duplicate on it.

Nothing here runs in a transfer's process: a transfer only leaves a row in its run storage, the
``transfer_events`` sensor turns it into an event, and a receiver that is down delays only its
own deliveries.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from transfer_platform.config.secrets import decrypt_secret
from transfer_platform.errors import ConfigError
from transfer_platform.store.tables import events, webhook_deliveries, webhooks
from transfer_platform.webhooks.payloads import body as payload_body
from transfer_platform.webhooks.signing import signature

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5.0
MAX_ATTEMPTS = 10
#: the delay before the second attempt; each next one three times longer, at most MAX_DELAY
FIRST_DELAY = timedelta(seconds=10)
MAX_DELAY = timedelta(hours=1)
#: events older than this are not fanned out any more (a deliverer down longer loses them)
FAN_OUT_WINDOW = timedelta(days=1)
WORKERS = 8
USER_AGENT = "transfer-platform-webhooks/1"

EVENT_ID_HEADER = "X-Transfer-Platform-Event-Id"
EVENT_HEADER = "X-Transfer-Platform-Event"
TIMESTAMP_HEADER = "X-Transfer-Platform-Timestamp"
SIGNATURE_HEADER = "X-Transfer-Platform-Signature"
ATTEMPT_HEADER = "X-Transfer-Platform-Attempt"


def retry_delay(attempts: int) -> timedelta:
    """How long after its ``attempts``-th failed attempt a delivery is tried again: 10 s, 30 s,
    90 s, 4.5 min, 13.5 min, 40.5 min, then hourly (about 5 hours over 10 attempts)."""
    return min(FIRST_DELAY * 3 ** max(attempts - 1, 0), MAX_DELAY)


@dataclass
class DeliveryReport:
    fanned_out: int = 0
    delivered: int = 0
    retrying: int = 0
    failed: int = 0

    def summary(self) -> str:
        return (f"{self.fanned_out} new delivery(ies); {self.delivered} delivered, {self.retrying} to retry, "
                f"{self.failed} given up")


# -- fan-out -----------------------------------------------------------------------------------------

def _fan_out_statement(now: datetime, *, webhook_id: str | None = None, status: sa.ColumnElement | None = None):
    """INSERT a delivery row for each (recent event, webhook subscribed to its type) lacking one."""
    candidates = (
        sa.select(events.c.id, webhooks.c.id,
                  status if status is not None else
                  sa.case((webhooks.c.is_enabled, "pending"), else_="skipped"),
                  sa.literal(now, sa.DateTime(timezone=True)))
        .select_from(events.join(webhooks, webhooks.c.events.has_key(events.c.type)))
        .where(events.c.occurred_at >= webhooks.c.created_at,
               events.c.occurred_at >= now - FAN_OUT_WINDOW,
               ~sa.exists().where(webhook_deliveries.c.event_id == events.c.id,
                                  webhook_deliveries.c.webhook_id == webhooks.c.id)))
    if webhook_id is not None:
        candidates = candidates.where(webhooks.c.id == webhook_id)
    return (insert(webhook_deliveries)
            .from_select(["event_id", "webhook_id", "status", "next_attempt_at"], candidates)
            .on_conflict_do_nothing())


def fan_out(conn: sa.Connection, now: datetime) -> int:
    return len(conn.execute(_fan_out_statement(now).returning(webhook_deliveries.c.event_id)).all())


def settle_change(conn: sa.Connection, webhook_id: str, update, now: datetime | None = None) -> sa.CursorResult:
    """Change a webhook's subscribed types or enable it again (``update``: the UPDATE, run here,
    in the caller's transaction, the webhook's row locked) so that the change applies to events
    from now on: the events that occurred until now get their fate under the old settings first
    (pending, or skipped while it was disabled), and those the new settings would add are skipped."""
    now = now or datetime.now(UTC)
    conn.execute(_fan_out_statement(now, webhook_id=webhook_id))
    result = conn.execute(update)
    conn.execute(_fan_out_statement(now, webhook_id=webhook_id, status=sa.literal("skipped")))
    return result


# -- one delivery ------------------------------------------------------------------------------------

_DUE = (
    sa.select(webhook_deliveries.c.event_id, webhook_deliveries.c.webhook_id, webhook_deliveries.c.attempts,
              events.c.type, events.c.occurred_at, events.c.data, webhooks.c.url, webhooks.c.format,
              webhooks.c.secret)
    .select_from(webhook_deliveries.join(events, events.c.id == webhook_deliveries.c.event_id)
                 .join(webhooks, webhooks.c.id == webhook_deliveries.c.webhook_id))
    .where(webhook_deliveries.c.status == "pending", webhooks.c.is_enabled)
    .order_by(webhook_deliveries.c.next_attempt_at)
    .limit(1)
    .with_for_update(of=webhook_deliveries, skip_locked=True)
)


def request_for(row, now: datetime) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one attempt (the secret decrypted only here)."""
    content = payload_body(row.event_id, row.type, row.occurred_at, row.data, row.format)
    timestamp = int(now.timestamp())
    secret = decrypt_secret(row.secret, f"webhook {row.webhook_id} signing secret")
    return content, {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_ID_HEADER: row.event_id,
        EVENT_HEADER: row.type,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(secret, timestamp, content),
        ATTEMPT_HEADER: str(row.attempts + 1),
    }


def _post(client: httpx.Client, url: str, content: bytes, headers: dict[str, str]) -> str | None:
    """None when the receiver took it (2xx), else what went wrong (no URL in it: a Slack URL is
    a credential)."""
    try:
        response = client.post(url, content=content, headers=headers)
    except httpx.TimeoutException:
        return f"no answer within {client.timeout.read or TIMEOUT_SECONDS:g} s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {str(exc).strip()[:200] or 'connection failed'}"
    if 200 <= response.status_code < 300:
        return None
    return f"HTTP {response.status_code}: {response.text.strip()[:200]}"


def deliver_one(engine: sa.Engine, client: httpx.Client, now: datetime) -> str | None:
    """Claim the most overdue delivery nobody else holds, make one attempt and record it;
    returns ``delivered``, ``retrying``, ``failed``, or None when nothing is due."""
    with engine.begin() as conn:
        row = conn.execute(_DUE.where(webhook_deliveries.c.next_attempt_at <= now)).first()
        if row is None:
            return None
        try:
            content, headers = request_for(row, now)
            error = _post(client, row.url, content, headers)
        except ConfigError as exc:  # the secret cannot be decrypted (the key is not set)
            error = str(exc).strip().splitlines()[-1][:300]
        attempts = row.attempts + 1
        key = (webhook_deliveries.c.event_id == row.event_id) & (webhook_deliveries.c.webhook_id == row.webhook_id)
        if error is None:
            values = {"status": "delivered", "delivered_at": now, "last_error": None}
            outcome = "delivered"
        elif attempts >= MAX_ATTEMPTS:
            values = {"status": "failed", "last_error": error}
            outcome = "failed"
        else:
            values = {"next_attempt_at": now + retry_delay(attempts), "last_error": error}
            outcome = "retrying"
        conn.execute(sa.update(webhook_deliveries).where(key).values(attempts=attempts, **values))
    if error is not None:
        log.warning("webhook %s, event %s (%s): attempt %d failed: %s", row.webhook_id, row.event_id,
                    row.type, attempts, error)
    return outcome


# -- all that is due ---------------------------------------------------------------------------------

def deliver_due(engine: sa.Engine, *, now: datetime | None = None, limit: int = 500, workers: int = WORKERS,
                timeout: float = TIMEOUT_SECONDS, budget_seconds: float = 40.0) -> DeliveryReport:
    """Fan out new events, then make every due attempt (at most ``limit``, ``workers`` at a time),
    starting no new one after ``budget_seconds``. ``now``: the clock (tests pass their own)."""
    now = now or datetime.now(UTC)
    report = DeliveryReport()
    with engine.begin() as conn:
        report.fanned_out = fan_out(conn, now)
    started, lock = time.monotonic(), threading.Lock()
    claimed = 0

    def work(client: httpx.Client) -> None:
        nonlocal claimed
        while True:
            with lock:
                if claimed >= limit or time.monotonic() - started > budget_seconds:
                    return
                claimed += 1
            outcome = deliver_one(engine, client, now)
            if outcome is None:
                return
            with lock:
                setattr(report, outcome, getattr(report, outcome) + 1)

    with httpx.Client(timeout=timeout, follow_redirects=False) as client, ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(work, client) for _ in range(workers)]:
            future.result()
    return report
