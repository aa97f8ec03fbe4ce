"""Magic links' rows (:mod:`transfer_platform.api.links` is their HTTP side): a link is stored by
its token's SHA-256 only, used once (claimed in one statement, so that two saves racing cannot both
use it), and audited in the transaction that changes it."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from transfer_platform.store import audit, events
from transfer_platform.store.api_keys import live_row, secret_hash
from transfer_platform.store.resources import Conflict, NotFound
from transfer_platform.store.tables import magic_links

#: the most links a listing shows
LISTED = 1000


def create(engine: Engine, recipient: str, token: str, *, actor: str, hours: float,
           options: dict[str, Any]) -> tuple[str, datetime]:
    """A new link of ``recipient`` (its name) for ``token``, valid ``hours`` from the database's
    clock; its id and when it expires."""
    link_id = str(uuid.uuid4())
    with engine.begin() as conn:
        expires_at = conn.execute(sa.insert(magic_links).values(
            id=link_id, recipient=recipient, token_hash=secret_hash(token), created_by=actor, options=options,
            expires_at=sa.func.now() + timedelta(hours=hours)).returning(magic_links.c.expires_at)).scalar_one()
        audit.record(conn, actor=actor, action="link", resource_type="magic_link", resource_id=link_id,
                     resource_name=recipient, changes=audit.changes(None, {
                         "recipient": recipient, "expires_at": expires_at.isoformat(), **options}))
    return link_id, expires_at


def listing(engine: Engine, recipient: str | None = None) -> list[sa.Row]:
    """The newest :data:`LISTED` links, of ``recipient`` (its name) or of every recipient."""
    query = sa.select(magic_links).order_by(magic_links.c.created_at.desc())
    if recipient is not None:
        query = query.where(magic_links.c.recipient == recipient)
    with engine.connect() as conn:
        return list(conn.execute(query.limit(LISTED)))


def revoke(engine: Engine, link_id: str, *, actor: str) -> sa.Row:
    """The link expired now (its row after); :class:`NotFound` for an unknown id,
    :class:`Conflict` for a used link (nothing to revoke)."""
    try:
        uuid.UUID(link_id)
    except ValueError:
        raise NotFound(f"no magic link with id {link_id!r}") from None
    with engine.begin() as conn:
        row = conn.execute(sa.select(magic_links).where(magic_links.c.id == link_id).with_for_update()).first()
        if row is None:
            raise NotFound(f"no magic link with id {link_id!r}")
        if row.used_at is not None:
            raise Conflict("this magic link was used: there is nothing to revoke",
                           f"change or delete the destination it created ({row.destination_name})")
        revoked = conn.execute(sa.update(magic_links).where(magic_links.c.id == link_id)
                               .values(expires_at=sa.func.least(magic_links.c.expires_at, sa.func.now()))
                               .returning(magic_links)).one()
        audit.record(conn, actor=actor, action="revoke", resource_type="magic_link", resource_id=link_id,
                     resource_name=row.recipient, changes=audit.changes(
                         {"expires_at": row.expires_at.isoformat()}, {"expires_at": revoked.expires_at.isoformat()}))
    return revoked


def of_token(engine: Engine, token: str) -> sa.Row | None:
    """The link of ``token`` with ``live`` (not expired yet), used or not (the form's last page
    reads what a used one saved); None if there is none."""
    return live_row(engine, magic_links, token)


def claim(engine: Engine, link_id: str) -> bool:
    """Use the link now, if it is still live and unused: whether this call used it."""
    with engine.begin() as conn:
        return conn.execute(sa.update(magic_links).where(
            magic_links.c.id == link_id, magic_links.c.used_at.is_(None), magic_links.c.expires_at > sa.func.now())
            .values(used_at=sa.func.now()).returning(magic_links.c.id)).first() is not None


def give_back(engine: Engine, link_id: str) -> None:
    """A claimed link that saved nothing usable again (the destination could not be created)."""
    with engine.begin() as conn:
        conn.execute(sa.update(magic_links).where(magic_links.c.id == link_id,
                                                  magic_links.c.destination_name.is_(None))
                     .values(used_at=None))


def saved(engine: Engine, link: sa.Row, destination: dict[str, Any], actor: str) -> None:
    """The link names the destination saved through it (``{"id", "name", "vendor"}``), and
    webhooks are told (``magic_link.used``) in the same transaction."""
    with engine.begin() as conn:
        conn.execute(sa.update(magic_links).where(magic_links.c.id == link.id)
                     .values(destination_name=destination["name"]))
        events.emit(conn, "magic_link.used", {
            "magic_link": {"id": link.id}, "recipient": {"name": link.recipient},
            "destination": destination, "actor": actor})
