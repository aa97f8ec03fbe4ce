"""Scoped auth tokens (Prequel's): the provider's own front end shows the destination form.

The provider's backend, with an ``admin`` key, asks ``POST /actions/generate-scoped-auth-token``
``{"recipient_id": ..., "application_origin": ..., "expires_in_seconds": ...}`` and hands the
token to its front end, which sends it in ``X-Prequel-Auth-Token`` to the form's three routes:
``GET /public/vendors/destinations`` (the vendors and their fields), ``POST /public/test-destination``
and ``POST /public/destinations`` (test and save a destination, ``{"destination": {"name", "vendor",
"connection"}}``) for the token's recipient, exactly as a magic link's form does. The token does
nothing else: any other route answers 403. It is 256 random bits stored as its SHA-256, valid for an
hour unless asked otherwise (at most a day), and works until then (a front end may test and save
more than once). With ``application_origin``, a request must also come from that origin (its
``Origin`` header). The actor in the audit log is ``scoped_token:<id>``, of scope ``form``.
"""

from __future__ import annotations

import secrets
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from transfer_platform.api.dagster_reload import reload_soon
from transfer_platform.api.edge import ActorDep, ApiError, JsonBody, StoreDep, ok, unwrap
from transfer_platform.api.links import checked_destination, offered_vendors
from transfer_platform.api.scopes import TOKEN_HEADER
from transfer_platform.config.parsing import problems_from_validation
from transfer_platform.errors import ConfigError
from transfer_platform.store import scoped_tokens
from transfer_platform.store.audit import ScopedActor
from transfer_platform.store.resources import ResourceStore

DEFAULT_SECONDS = 3600
_NEW_TOKEN = "ask the provider's backend for a new one (POST /actions/generate-scoped-auth-token)"

router = APIRouter()  # behind an admin key
public_router = APIRouter()  # the token is the credential


class TokenRequest(BaseModel):
    """``POST /actions/generate-scoped-auth-token``'s body (Prequel's fields, not wrapped)."""

    model_config = ConfigDict(extra="forbid")

    recipient_id: str = Field(min_length=1, description="the recipient's id or name")
    application_origin: str | None = Field(
        default=None, pattern=r"^https?://[^/\s]+$",
        description="the front end's origin (scheme://host[:port]); requests with the token must come from it")
    expires_in_seconds: int = Field(default=DEFAULT_SECONDS, ge=1, le=24 * 3600,
                                    description="how long the token works (default an hour, at most a day)")


@router.post("/actions/generate-scoped-auth-token", name="generate a scoped auth token", status_code=201)
def generate(body: JsonBody, resources: StoreDep, actor: ActorDep):
    try:
        asked = TokenRequest.model_validate(body)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, ())) from None
    recipient = resources.get("recipient", asked.recipient_id)  # NotFound for an unknown recipient
    token = secrets.token_urlsafe(32)
    options = {"application_origin": asked.application_origin} if asked.application_origin else {}
    token_id, expires_at = scoped_tokens.issue(resources.engine, recipient.name, token, actor=actor.name,
                                               seconds=asked.expires_in_seconds, options=options)
    return ok({"scoped_token": token, "id": token_id, "recipient_id": recipient.id,
               "expires_at": expires_at.isoformat()},
              f"send it in {TOKEN_HEADER} from the front end: it tests and saves destinations for "
              f"{recipient.name} only, until expires_at", status_code=201)


def _live_token(request: Request, resources: ResourceStore) -> sa.Row:
    """The token's row if it works now; else 401 (unknown, expired) or 403 (another origin)."""
    token = request.headers.get(TOKEN_HEADER, "")
    row = scoped_tokens.of_token(resources.engine, token)
    if row is None:
        raise ApiError(401, f"missing or unknown scoped auth token (send it in the {TOKEN_HEADER} header); "
                            f"fix: {_NEW_TOKEN}")
    if not row.live:
        raise ApiError(401, f"this scoped auth token expired at {row.expires_at.isoformat()}; fix: {_NEW_TOKEN}")
    origin = row.options.get("application_origin")
    if origin and request.headers.get("origin") != origin:
        raise ApiError(403, f"this scoped auth token works only from {origin} (the Origin header); "
                            "fix: call from that page, or generate a token for this origin")
    return row


def _for_its_recipient(resources: ResourceStore, row: sa.Row, body: Any) -> Any:
    """The form's body without its recipient, refused if it names another recipient than the token's."""
    asked = unwrap(body, "destination")
    if not isinstance(asked, dict):
        return asked
    asked = dict(asked)
    for field in ("recipient", "recipient_id"):
        named = asked.pop(field, None)
        if named is None:
            continue
        recipient = resources.get("recipient", row.recipient)
        if named not in (recipient.name, recipient.id):
            raise ApiError(403, f"this scoped auth token is for recipient {row.recipient!r}, not {named!r}; "
                                f"fix: {_NEW_TOKEN} for that recipient")
    return asked


@public_router.get("/public/vendors/destinations", name="the form's vendors (scoped auth token)")
def vendors(request: Request, resources: StoreDep):
    row = _live_token(request, resources)
    return ok({"recipient": row.recipient, "vendors": offered_vendors(row)})


@public_router.post("/public/test-destination", name="test the form's destination (scoped auth token)")
def test_destination(request: Request, body: JsonBody, resources: StoreDep):
    row = _live_token(request, resources)
    _, result = checked_destination(resources, row, _for_its_recipient(resources, row, body))
    return ok(result, "every check passed: save the destination" if result["passed"]
              else "some checks failed: apply their fixes and test again")


@public_router.post("/public/destinations", name="save the form's destination (scoped auth token)",
                    status_code=201)
def save_destination(request: Request, body: JsonBody, resources: StoreDep):
    """Saved only when every check passes, for the token's recipient."""
    row = _live_token(request, resources)
    document, result = checked_destination(resources, row, _for_its_recipient(resources, row, body))
    if not result["passed"]:
        return JSONResponse({"status": "error", "data": result,
                             "message": "some checks failed: apply their fixes, test again, then save"},
                            status_code=422)
    created = resources.create("destination", document, actor=ScopedActor(f"scoped_token:{row.id}", "form"))
    reload_soon(request.app)
    return ok({"destination": {"id": created.id, "name": created.name, "vendor": document["vendor"]}},
              f"destination {created.name} saved", status_code=201)
