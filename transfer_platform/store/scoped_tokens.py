"""Scoped auth tokens' rows (:mod:`transfer_platform.api.scoped_tokens` is their HTTP side): a token
is stored by its SHA-256 only, and audited in the transaction that issues it."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from transfer_platform.store import audit
from transfer_platform.store.api_keys import live_row, secret_hash
from transfer_platform.store.tables import scoped_tokens


def issue(engine: Engine, recipient: str, token: str, *, actor: str, seconds: int,
          options: dict[str, Any]) -> tuple[str, datetime]:
    """A new token of ``recipient`` (its name), valid ``seconds`` from the database's clock; its id
    and when it expires."""
    token_id = str(uuid.uuid4())
    with engine.begin() as conn:
        expires_at = conn.execute(sa.insert(scoped_tokens).values(
            id=token_id, recipient=recipient, token_hash=secret_hash(token), created_by=str(actor),
            options=options, expires_at=sa.func.now() + timedelta(seconds=seconds))
            .returning(scoped_tokens.c.expires_at)).scalar_one()
        audit.record(conn, actor=actor, action="generate", resource_type="scoped_token",
                     resource_id=token_id, resource_name=recipient, changes=audit.changes(None, {
                         "recipient": recipient, "expires_at": expires_at.isoformat(), **options}))
    return token_id, expires_at


def of_token(engine: Engine, token: str) -> sa.Row | None:
    """The token's row with ``live`` (not expired yet); None if there is none."""
    return live_row(engine, scoped_tokens, token)
