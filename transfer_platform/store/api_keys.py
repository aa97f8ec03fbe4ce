"""API keys: 256 random bits shown once at creation, stored as their SHA-256 (a key that long needs
no slow hash: it cannot be guessed from its hash), each with a scope (:data:`SCOPES`)."""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from transfer_platform.store.tables import api_keys

PREFIX = "tpk_"
#: a key's scopes, each allowing what the ones before it do and more: ``read`` (every GET but the
#: webhooks'), ``transfers`` (also request and cancel transfers, run checks), ``admin`` (everything)
SCOPES = ("read", "transfers", "admin")


@dataclass(frozen=True)
class ApiKey:
    id: str
    name: str
    prefix: str
    scope: str


def secret_hash(secret: str) -> str:
    """What the store keeps of an API key, a magic link's or a scoped token's secret: its SHA-256."""
    return hashlib.sha256(secret.encode()).hexdigest()


_hash = secret_hash

#: the longest secret looked up (longer ones are no secret this platform gave)
MAX_SECRET_LENGTH = 128


def live_row(engine: Engine, table: sa.Table, secret: str) -> sa.Row | None:
    """The row of ``table`` whose ``token_hash`` is ``secret``'s, with ``live`` (``expires_at``
    not passed yet); None if there is none."""
    if not 0 < len(secret) <= MAX_SECRET_LENGTH:
        return None
    with engine.connect() as conn:
        return conn.execute(sa.select(table, (table.c.expires_at > sa.func.now()).label("live"))
                            .where(table.c.token_hash == secret_hash(secret))).first()


def create_key(engine: Engine, name: str, scope: str = "admin") -> tuple[ApiKey, str]:
    """A new key named ``name`` with ``scope``; returns it and the key itself (never stored, never
    shown again)."""
    if scope not in SCOPES:
        raise ValueError(f"unknown API key scope {scope!r}; fix: use one of {', '.join(SCOPES)}")
    key = PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(id=str(uuid.uuid4()), name=name, prefix=key[:len(PREFIX) + 6], scope=scope)
    with engine.begin() as conn:
        conn.execute(sa.insert(api_keys).values(id=row.id, name=name, key_hash=_hash(key), prefix=row.prefix,
                                                scope=scope))
    return row, key


def verify_key(engine: Engine, key: str) -> ApiKey | None:
    """The key's record, or ``None`` for an unknown or revoked key."""
    if not key or not key.startswith(PREFIX):
        return None
    with engine.connect() as conn:
        row = conn.execute(sa.select(api_keys.c.id, api_keys.c.name, api_keys.c.prefix, api_keys.c.scope)
                           .where(api_keys.c.key_hash == _hash(key), api_keys.c.revoked_at.is_(None))).first()
    return ApiKey(id=row.id, name=row.name, prefix=row.prefix, scope=row.scope) if row else None


def revoke_key(engine: Engine, key_id_or_name: str) -> int:
    with engine.begin() as conn:
        condition = api_keys.c.name == key_id_or_name
        with contextlib.suppress(ValueError):
            condition = sa.or_(condition, api_keys.c.id == str(uuid.UUID(key_id_or_name)))
        return conn.execute(sa.update(api_keys).where(condition, api_keys.c.revoked_at.is_(None))
                            .values(revoked_at=sa.func.now())).rowcount
