"""Each recipient's Delta Sharing bearer token: 256 random bits shown once (in its profile file),
stored as their SHA-256 (:func:`~transfer_platform.store.api_keys.secret_hash`), expiring. A
recipient has at most one token that is not revoked: ``create`` refuses a second, ``rotate``
revokes the one there is and issues another, ``revoke`` ends it. Each change is in the audit log."""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from transfer_platform.store import audit
from transfer_platform.store.api_keys import MAX_SECRET_LENGTH, secret_hash
from transfer_platform.store.resources import Conflict, NotFound
from transfer_platform.store.tables import sharing_tokens

PREFIX = "tpds_"
DEFAULT_DAYS = 90
MAX_DAYS = 3650
#: the profile file's format version (PROTOCOL.md's profile file)
SHARE_CREDENTIALS_VERSION = 1


def _shown(row: sa.Row) -> dict[str, Any]:
    """A token as listings show it: never the token, its prefix only."""
    return {"id": row.id, "recipient": row.recipient, "prefix": row.prefix, "created_by": row.created_by,
            "created_at": row.created_at.isoformat(), "expires_at": row.expires_at.isoformat(),
            "revoked_at": row.revoked_at.isoformat() if row.revoked_at else None}


def issue(engine: Engine, recipient: str, *, actor: str, days: float = DEFAULT_DAYS,
          rotate: bool = False) -> tuple[dict[str, Any], str]:
    """A new token for ``recipient`` (its name); with ``rotate``, the recipient's current token is
    revoked in the same transaction, else a current one that has not expired is a :class:`Conflict`.
    Returns the token's record and the token itself (never stored, never shown again)."""
    if not 0 < days <= MAX_DAYS:
        raise ValueError(f"a sharing token lasts more than 0 and at most {MAX_DAYS} days, not {days}")
    token = PREFIX + secrets.token_urlsafe(32)
    token_id = str(uuid.uuid4())
    with engine.begin() as conn:
        current = conn.execute(sa.select(sharing_tokens, (sharing_tokens.c.expires_at > sa.func.now()).label("live"))
                               .where(sharing_tokens.c.recipient == recipient, sharing_tokens.c.revoked_at.is_(None))
                               .with_for_update()).first()
        if current is not None:
            if current.live and not rotate:
                raise Conflict(f"recipient {recipient} already has a sharing token ({current.prefix}..., "
                               f"until {current.expires_at.isoformat()})",
                               fix="rotate it (a new token, the old one revoked) or revoke it first")
            conn.execute(sa.update(sharing_tokens).where(sharing_tokens.c.id == current.id)
                         .values(revoked_at=sa.func.now()))
        row = conn.execute(sa.insert(sharing_tokens).values(
            id=token_id, recipient=recipient, token_hash=secret_hash(token), prefix=token[:len(PREFIX) + 6],
            created_by=str(actor), expires_at=sa.func.now() + timedelta(days=days))
            .returning(sharing_tokens)).one()
        audit.record(conn, actor=actor, action="rotate" if current is not None else "create",
                     resource_type="sharing_token", resource_id=token_id, resource_name=recipient,
                     changes=audit.changes({"id": current.id} if current is not None else None,
                                           {"id": token_id, "expires_at": row.expires_at.isoformat()}))
    return _shown(row), token


def revoke(engine: Engine, recipient: str, *, actor: str) -> dict[str, Any]:
    """End the recipient's token now; :class:`NotFound` when it has none."""
    with engine.begin() as conn:
        row = conn.execute(sa.update(sharing_tokens)
                           .where(sharing_tokens.c.recipient == recipient, sharing_tokens.c.revoked_at.is_(None))
                           .values(revoked_at=sa.func.now()).returning(sharing_tokens)).first()
        if row is None:
            raise NotFound(f"recipient {recipient} has no sharing token to revoke")
        audit.record(conn, actor=actor, action="revoke", resource_type="sharing_token", resource_id=row.id,
                     resource_name=recipient, changes=audit.changes({"revoked_at": None},
                                                                    {"revoked_at": row.revoked_at.isoformat()}))
    return _shown(row)


def listing(engine: Engine, recipient: str | None = None) -> list[dict[str, Any]]:
    """Every token (revoked ones too), newest first; a recipient's only with ``recipient``."""
    query = sa.select(sharing_tokens).order_by(sharing_tokens.c.created_at.desc())
    if recipient is not None:
        query = query.where(sharing_tokens.c.recipient == recipient)
    with engine.connect() as conn:
        return [_shown(r) for r in conn.execute(query)]


def bearer(engine: Engine, token: str) -> sa.Row | None:
    """The token's row if it works now (known, not revoked, not expired), else None."""
    if not token.startswith(PREFIX) or len(token) > MAX_SECRET_LENGTH:
        return None
    with engine.connect() as conn:
        return conn.execute(sa.select(sharing_tokens).where(
            sharing_tokens.c.token_hash == secret_hash(token), sharing_tokens.c.revoked_at.is_(None),
            sharing_tokens.c.expires_at > sa.func.now())).first()


def profile(endpoint: str, token: str, expires_at: str | datetime) -> dict[str, Any]:
    """The profile file a Delta Sharing client reads (PROTOCOL.md: ``shareCredentialsVersion``,
    ``endpoint``, ``bearerToken``, ``expirationTime``)."""
    return {"shareCredentialsVersion": SHARE_CREDENTIALS_VERSION, "endpoint": endpoint.rstrip("/"),
            "bearerToken": token, "expirationTime": _utc(expires_at)}


def _utc(moment: str | datetime) -> str:
    value = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def recipient_name(store, key: str) -> str:  # store: ResourceStore
    """The recipient's name from its id or name (:class:`NotFound` for an unknown one)."""
    return store.get("recipient", key).name
