"""The audit log: who changed what, when (secrets masked)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from transfer_platform.config.secrets import mask_secrets
from transfer_platform.store.tables import audit_log


def changes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """``{field path: {"from": old, "to": new}}`` for every leaf that differs (secrets masked)."""
    found: dict[str, Any] = {}

    def walk(old: Any, new: Any, path: str) -> None:
        if isinstance(old, dict) and isinstance(new, dict) and set(old) != {"encrypted"} and set(new) != {"encrypted"}:
            for key in sorted(set(old) | set(new)):
                walk(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        elif old != new:
            found[path or "(all)"] = {"from": mask_secrets(old), "to": mask_secrets(new)}

    walk(before or {}, after or {}, "")
    return found


class ScopedActor(str):
    """An actor's name (``api_key:<name>``) that also carries the scope it acted with; it passes
    through the store's functions as the plain ``actor`` string they take, and :func:`record`
    writes its scope beside it."""

    scope: str

    def __new__(cls, name: str, scope: str) -> ScopedActor:
        actor = super().__new__(cls, name)
        actor.scope = scope
        return actor


def record(conn: sa.Connection, *, actor: str, action: str, resource_type: str, resource_id: str | None,
           resource_name: str | None, changes: dict[str, Any] | None = None) -> None:
    """One entry, written in the caller's transaction (so it exists exactly when the change does);
    the actor's scope too when it is a :class:`ScopedActor` (the command line's ``cli`` has none)."""
    conn.execute(sa.insert(audit_log).values(actor=str(actor), actor_scope=getattr(actor, "scope", None), action=action, resource_type=resource_type,
                                             resource_id=resource_id, resource_name=resource_name,
                                             changes=mask_secrets(changes or {})))


def entries(engine: Engine, equal: dict[str, str | None], *, after: datetime | None = None,
            before: datetime | None = None, below: int | None = None, limit: int) -> list[sa.Row]:
    """The newest ``limit`` entries (newest first) whose columns named in ``equal`` hold its values
    (``None``: any), at or after ``after``, before ``before``, with ids below ``below`` (a
    page's cursor)."""
    query = sa.select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
    for column, value in equal.items():
        if value is not None:
            query = query.where(audit_log.c[column] == value)  # bound parameters: data, never SQL
    if after is not None:
        query = query.where(audit_log.c.at >= after)
    if before is not None:
        query = query.where(audit_log.c.at < before)
    if below is not None:
        query = query.where(audit_log.c.id < below)
    with engine.connect() as conn:
        return list(conn.execute(query))
