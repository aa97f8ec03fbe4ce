"""Webhook subscriptions in the store: created, listed, changed and deleted (by the REST API),
each change audited. The signing secret is made here, returned once by :func:`create`, stored
encrypted (:func:`transfer_platform.config.secrets.encrypt_secret`) and never shown again.

Which events a webhook receives: those that occur while it exists, is enabled and subscribes to
their type. Events already fanned out before a change keep their fate (a pending delivery of an
event that occurred while the webhook was enabled is still made after a pause); a change of the
subscribed types or a re-enable applies to events that occur from then on
(:func:`transfer_platform.webhooks.delivery.settle_change`).
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa

from transfer_platform.config.secrets import encrypt_secret
from transfer_platform.errors import ConfigError, Problem
from transfer_platform.store import audit
from transfer_platform.store.resources import NotFound
from transfer_platform.store.tables import events, webhook_deliveries, webhooks
from transfer_platform.webhooks.event_types import EVENT_TYPES, FORMATS
from transfer_platform.webhooks.signing import new_secret

FIELDS = ("url", "events", "format", "is_enabled")
RESOURCE_TYPE = "webhook"


@dataclass(frozen=True)
class Webhook:
    id: str
    url: str
    events: list[str]
    format: str
    is_enabled: bool
    created_at: datetime | None

    def shown(self) -> dict[str, Any]:
        """What the API returns: never the secret."""
        return {"id": self.id, "url": self.url, "events": list(self.events), "format": self.format,
                "is_enabled": self.is_enabled,
                "created_at": self.created_at.isoformat() if self.created_at else None}

    def audited(self) -> dict[str, Any]:
        """What the audit log keeps: the URL without its path and query (a Slack incoming
        webhook's path is its credential)."""
        return {"url": masked_url(self.url), "events": list(self.events), "format": self.format,
                "is_enabled": self.is_enabled}


def masked_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/***" if parts.path.strip("/") or parts.query \
        else f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _row(row: sa.Row) -> Webhook:
    return Webhook(id=row.id, url=row.url, events=list(row.events), format=row.format,
                   is_enabled=row.is_enabled, created_at=row.created_at)


# -- validation -------------------------------------------------------------------------------------

def validate(fields: Any, *, partial: bool = False) -> dict[str, Any]:
    """A webhook's fields (``partial``: a PATCH's, any subset); raises :class:`ConfigError` with
    one problem per bad field (``webhook.events[1]``) and its fix."""
    if not isinstance(fields, dict):
        raise ConfigError([Problem("webhook", "expected an object",
                                   'send {"webhook": {"url": ..., "events": [...]}}')])
    problems = [Problem(f"webhook.{name}", "unknown field", f"the fields are {', '.join(FIELDS)}")
                for name in fields if name not in FIELDS]
    if not partial:
        problems += [Problem(f"webhook.{name}", "missing", f"send the webhook's {name}")
                     for name in ("url", "events") if name not in fields]
    if "url" in fields:
        problems += _url_problems(fields["url"])
    if "events" in fields:
        problems += _events_problems(fields["events"])
    if "format" in fields and fields["format"] not in FORMATS:
        problems.append(Problem("webhook.format", f"unknown format {fields['format']!r}",
                                f"one of: {', '.join(FORMATS)}"))
    if "is_enabled" in fields and not isinstance(fields["is_enabled"], bool):
        problems.append(Problem("webhook.is_enabled", "expected true or false", "send a JSON boolean"))
    if problems:
        raise ConfigError(problems)
    return {name: fields[name] for name in FIELDS if name in fields}


def _url_problems(url: Any) -> list[Problem]:
    fix = "an absolute http:// or https:// URL, e.g. https://example.com/hooks/transfers"
    if not isinstance(url, str):
        return [Problem("webhook.url", "expected a string", fix)]
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        return [Problem("webhook.url", f"not a URL: {exc}", fix)]
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        return [Problem("webhook.url", f"{url!r} is not an http(s) URL", fix)]
    return []


def _events_problems(types: Any) -> list[Problem]:
    valid = f"valid event types: {', '.join(EVENT_TYPES)}"
    if not isinstance(types, list) or not types:
        return [Problem("webhook.events", "expected a non-empty list of event types", valid)]
    return [Problem(f"webhook.events[{i}]", f"unknown event type {name!r}", valid)
            for i, name in enumerate(types) if name not in EVENT_TYPES]


# -- reading ----------------------------------------------------------------------------------------

def list_all(engine: sa.Engine) -> list[Webhook]:
    with engine.connect() as conn:
        return [_row(r) for r in conn.execute(sa.select(webhooks).order_by(webhooks.c.created_at, webhooks.c.id))]


def _get(conn: sa.Connection, webhook_id: str, *, lock: bool = False) -> sa.Row:
    row = None
    with contextlib.suppress(ValueError):
        query = sa.select(webhooks).where(webhooks.c.id == str(uuid.UUID(webhook_id)))
        row = conn.execute(query.with_for_update() if lock else query).first()
    if row is None:
        raise NotFound(f"no webhook with id {webhook_id!r} (GET /webhooks lists them)")
    return row


def get(engine: sa.Engine, webhook_id: str) -> Webhook:
    with engine.connect() as conn:
        return _row(_get(conn, webhook_id))


def deliveries(engine: sa.Engine, webhook_id: str, *, status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """The webhook's deliveries, newest event first."""
    with engine.connect() as conn:
        _get(conn, webhook_id)
        query = (sa.select(webhook_deliveries, events.c.type, events.c.occurred_at)
                 .join(events, events.c.id == webhook_deliveries.c.event_id)
                 .where(webhook_deliveries.c.webhook_id == webhook_id)
                 .order_by(events.c.occurred_at.desc(), events.c.id).limit(limit))
        if status:
            query = query.where(webhook_deliveries.c.status == status)
        return [{"event_id": r.event_id, "event": r.type, "occurred_at": r.occurred_at.isoformat(),
                 "status": r.status, "attempts": r.attempts,
                 "next_attempt_at": r.next_attempt_at.isoformat() if r.status == "pending" else None,
                 "delivered_at": r.delivered_at.isoformat() if r.delivered_at else None,
                 "last_error": r.last_error} for r in conn.execute(query)]


# -- writing ----------------------------------------------------------------------------------------

def create(engine: sa.Engine, body: Any, *, actor: str) -> tuple[Webhook, str]:
    """A new webhook and its signing secret (returned here only)."""
    fields = {"format": "generic", "is_enabled": True, **validate(body)}
    secret = new_secret()
    with engine.begin() as conn:
        row = conn.execute(sa.insert(webhooks).values(
            id=str(uuid.uuid4()), secret=encrypt_secret(secret), **fields).returning(webhooks)).one()
        created = _row(row)
        audit.record(conn, actor=actor, action="create", resource_type=RESOURCE_TYPE, resource_id=created.id,
                     resource_name=masked_url(created.url), changes=audit.changes(None, created.audited()))
    return created, secret


def update(engine: sa.Engine, webhook_id: str, body: Any, *, actor: str) -> Webhook:
    from transfer_platform.webhooks.delivery import settle_change

    patch = validate(body, partial=True)
    with engine.begin() as conn:
        current = _row(_get(conn, webhook_id, lock=True))
        statement = sa.update(webhooks).where(webhooks.c.id == current.id).values(**patch).returning(webhooks)
        if patch.get("events", current.events) != current.events or (
                patch.get("is_enabled") is True and not current.is_enabled):
            row = settle_change(conn, current.id, statement).one()
        else:
            row = conn.execute(statement).one()
        updated = _row(row)
        action = "update"
        if set(patch) == {"is_enabled"} and patch["is_enabled"] != current.is_enabled:
            action = "enable" if patch["is_enabled"] else "pause"
        audit.record(conn, actor=actor, action=action, resource_type=RESOURCE_TYPE, resource_id=current.id,
                     resource_name=masked_url(updated.url), changes=audit.changes(current.audited(), updated.audited()))
    return updated


def delete(engine: sa.Engine, webhook_id: str, *, actor: str) -> Webhook:
    """The webhook and its deliveries (pending ones are not made)."""
    with engine.begin() as conn:
        current = _row(_get(conn, webhook_id, lock=True))
        conn.execute(sa.delete(webhooks).where(webhooks.c.id == current.id))
        audit.record(conn, actor=actor, action="delete", resource_type=RESOURCE_TYPE, resource_id=current.id,
                     resource_name=masked_url(current.url), changes=audit.changes(current.audited(), None))
    return current
