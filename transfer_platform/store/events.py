"""Events the platform tells webhooks about, written to an outbox table in the same transaction
as the change they report; :mod:`transfer_platform.webhooks` delivers them."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from transfer_platform.config.secrets import mask_secrets
from transfer_platform.store.tables import events


def emit(conn: sa.Connection, event_type: str, data: dict[str, Any], *, dedup_key: str | None = None) -> str | None:
    """Record one event; returns its id, or ``None`` when ``dedup_key`` was recorded before (an
    event about the same fact, e.g. ``transfer.error:<transfer id>``, is recorded once)."""
    event_id = str(uuid.uuid4())
    statement = insert(events).values(id=event_id, type=event_type, data=mask_secrets(data), dedup_key=dedup_key)
    if dedup_key is not None:
        statement = statement.on_conflict_do_nothing(index_elements=["dedup_key"])
    result = conn.execute(statement)
    return event_id if result.rowcount else None
