"""``GET /audit-log``: who created, changed, deleted, linked, cancelled, paused or enabled what, and
when; newest first, filtered, paginated by cursor (Prequel's ``has_next`` / ``next_url``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request

from transfer_platform.api.edge import ApiError, StoreDep, ok
from transfer_platform.api.schemas import Answer, answers
from transfer_platform.errors import Problem
from transfer_platform.store import audit as store_audit

router = APIRouter()
MAX_PAGE = 100


def _moment(name: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ApiError(422, f"{name}: not an ISO-8601 time with its zone",
                       [Problem(name, f"{text!r} is not an ISO-8601 time with a zone",
                                "write e.g. 2026-01-31T12:00:00Z")])
    return moment


@router.get("/audit-log", name="read the audit log", response_model=Answer, responses=answers(401, 503))
def read_audit_log(request: Request, resources: StoreDep,
                   actor: str | None = None, action: str | None = None,
                   resource_type: str | None = None, resource_id: str | None = None,
                   resource_name: str | None = None,
                   after: Annotated[str | None, Query(description="at or after this time (inclusive)")] = None,
                   before: Annotated[str | None, Query(description="before this time (exclusive)")] = None,
                   page_size: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
                   cursor: Annotated[int | None, Query(ge=1, description="next_url's cursor")] = None):
    equal = {"actor": actor, "action": action, "resource_type": resource_type, "resource_id": resource_id,
             "resource_name": resource_name}
    rows = store_audit.entries(resources.engine, equal, after=_moment("after", after), before=_moment("before", before),
                               below=cursor, limit=page_size + 1)
    has_next = len(rows) > page_size
    rows = rows[:page_size]
    next_url = None
    if has_next:
        params = {k: v for k, v in request.query_params.items() if k != "cursor"}
        next_url = f"{request.url.path}?{urlencode({**params, 'cursor': rows[-1].id})}"
    entries = [{"id": r.id, "at": r.at.isoformat(), "actor": r.actor, "actor_scope": r.actor_scope, "action": r.action,
                "resource_type": r.resource_type, "resource_id": r.resource_id,
                "resource_name": r.resource_name, "changes": r.changes} for r in rows]
    return ok({"audit_log": entries, "has_next": has_next, "next_url": next_url})
