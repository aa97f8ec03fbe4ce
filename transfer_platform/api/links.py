"""Magic links: a recipient connects its own destination (Prequel's hosted onboarding form).

The provider creates a one-time link for one recipient (``POST /magic-links``, or the CLI's
``transfer-platform magic-link RECIPIENT``); its URL holds a random token (256 bits) stored only as
its SHA-256, valid for ``api.magic_link_hours``. Whoever opens it gets a plain HTML form (no
external assets) that picks a vendor, takes the connection, tests it with the same checks as
``test-connection`` and saves the destination: for that recipient only (the ``recipient`` the
browser sends is ignored), its secret encrypted at rest, never shown back, never logged. The link
then stops working; the provider sees the destination (its password masked), an audit entry whose
actor is ``magic_link:<id>`` and a ``magic_link.used`` event.

The form offers the destination vendors (``transfer_platform/vendors/``) whose connection is a
flat set of fields (a PostgreSQL or MySQL server, a DuckDB file); a link may narrow them (``vendors``).
"""

from __future__ import annotations

import html
import json
import secrets
import types
import typing
import uuid
from datetime import UTC
from functools import cache
from importlib import resources as package_files
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from transfer_platform import vendors as vendor_registry
from transfer_platform.api.dagster_reload import reload_soon
from transfer_platform.api.edge import (
    ActorDep,
    JsonBody,
    StoreDep,
    api_settings,
    ok,
    unwrap,
)
from transfer_platform.api.schemas import Answer, MagicLinkBody, answers
from transfer_platform.api.wording import for_form
from transfer_platform.config.entries import DestinationBase
from transfer_platform.config.parsing import problems_from_validation
from transfer_platform.config.secrets import EnvRef
from transfer_platform.errors import ConfigError, Problem
from transfer_platform.store import magic_links
from transfer_platform.store.audit import ScopedActor
from transfer_platform.store.resources import (
    NAME_FIELDS,
    Conflict,
    NotFound,
    ResourceStore,
    validate_entry,
)
from transfer_platform.transfers.connection_test import run_connection_test

router = APIRouter()
public_router = APIRouter()

_NAME_MAX = 120  # a destination's name (config/entries.py Name)
#: what the form's pages may load: nothing but themselves (the inline script and style carry a nonce)
_CSP = ("default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
        "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
_NEW_LINK = "ask the provider who sent you this link for a new one"


# -- the vendors the form offers ---------------------------------------------------------------


def _field_kind(annotation: Any) -> str | None:
    """``text``, ``number``, ``password``, ``boolean`` for a flat connection field; ``None`` for
    anything else."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = tuple(a for a in args if a is not type(None))
        if len(args) != 1:
            return None
        annotation = args[0]
    elif typing.get_origin(annotation) is typing.Annotated:
        annotation = args[0]
    if annotation is EnvRef:
        return "password"
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "number"
    if annotation in (str, Path):
        return "text"
    return None


@cache
def form_vendors() -> dict[str, list[dict[str, Any]]]:
    """Destination vendor -> the fields of its connection, for every vendor a form can describe:
    its configuration class requires only ``vendor`` and ``connection`` (a flat model) beyond what
    every destination has (its other settings keep their defaults). Settings a vendor refuses (MySQL's ``schema``) are left out."""
    common = set(DestinationBase.model_fields)
    found: dict[str, list[dict[str, Any]]] = {}
    for name, record in vendor_registry.DESTINATIONS.items():
        cls = record.config
        extra = {name for name, info in cls.model_fields.items() if name not in common and info.is_required()}
        if extra != {"vendor", "connection"}:
            continue  # e.g. an object storage's signing key: the provider's, not the recipient's
        connection = cls.model_fields["connection"].annotation
        if not (isinstance(connection, type) and issubclass(connection, BaseModel)):
            continue
        refused = {r.setting.removeprefix("connection.") for r in record.refuses if r.setting.startswith("connection.")}
        fields = []
        for field_name, info in connection.model_fields.items():
            key = info.alias or field_name
            kind = _field_kind(info.annotation)
            if key in refused or (kind is None and not info.is_required()):
                continue  # a refused setting, or one the form cannot show (left at its default)
            if kind is None:
                fields = None
                break
            field: dict[str, Any] = {"name": key, "type": kind, "required": info.is_required()}
            if key == "port" and info.is_required() and record.default_port:  # a hint: the field is required
                field["placeholder"] = str(record.default_port)
            fields.append(field)
        if fields:
            found[name] = fields
    return found


# -- creating links ----------------------------------------------------------------------------


class LinkRequest(BaseModel):
    """``POST /magic-links``'s ``magic_link``."""

    model_config = ConfigDict(extra="forbid")

    recipient_id: str = Field(min_length=1, description="the recipient's id or name")
    redirect_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    vendors: list[str] | None = Field(default=None, min_length=1)


def _check_vendors(chosen: list[str] | None, path: str) -> list[str] | None:
    if chosen is None:
        return None
    offered = form_vendors()
    unknown = [v for v in chosen if v not in offered]
    if unknown:
        raise ConfigError([Problem(path, f"vendor(s) {', '.join(map(repr, unknown))} cannot be set up "
                                         "through a magic link", f"use some of: {', '.join(offered)}")])
    return list(dict.fromkeys(chosen))


def new_link(store: ResourceStore, recipient: str, *, actor: str, redirect_url: str | None = None,
             hours: float | None = None, vendors: list[str] | None = None) -> dict[str, Any]:
    """A new link for ``recipient`` (id or name): ``{"id", "url", "expires_at"}`` (the URL holds
    the token, which is not stored and cannot be shown again)."""
    try:
        LinkRequest(recipient_id=recipient, redirect_url=redirect_url, vendors=vendors)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, ("magic_link",))) from None
    vendors = _check_vendors(vendors, "magic_link.vendors")
    name = store.get("recipient", recipient).name  # NotFound for an unknown recipient
    settings = api_settings(store.file_raw)
    hours = settings.magic_link_hours if hours is None else hours
    if not 0 < hours <= 24 * 30:
        raise ConfigError([Problem("magic_link.hours", f"{hours} is not between 0 and 720",
                                   "give a number of hours, at most 720 (30 days)")])
    token = secrets.token_urlsafe(32)
    options = {key: value for key, value in (("redirect_url", redirect_url), ("vendors", vendors)) if value}
    link_id, expires_at = magic_links.create(store.engine, name, token, actor=actor, hours=hours, options=options)
    url = f"{settings.public_url.rstrip('/')}/link/{token}"
    return {"id": link_id, "url": url, "expires_at": expires_at.isoformat()}


def create_link(store: ResourceStore, recipient: str, *, actor: str, redirect_url: str | None = None,
                hours: float | None = None) -> str:
    """A new link's URL (what ``transfer-platform magic-link`` prints). Raises :class:`NotFound`
    for an unknown recipient."""
    return new_link(store, recipient, actor=actor, redirect_url=redirect_url, hours=hours)["url"]


def _shown(row: sa.Row) -> dict[str, Any]:
    return {"id": row.id, "recipient": row.recipient, "created_at": row.created_at.isoformat(),
            "expires_at": row.expires_at.isoformat(), "used_at": row.used_at.isoformat() if row.used_at else None,
            "destination_name": row.destination_name, "created_by": row.created_by, **row.options}


@router.post("/magic-links", name="create a magic link", status_code=201, response_model=Answer,
             responses=answers(401, 404, 503))
def post_link(body: MagicLinkBody, resources: StoreDep, actor: ActorDep):
    asked = body.magic_link
    try:
        request = LinkRequest.model_validate(asked)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, ("magic_link",))) from None
    link = new_link(resources, request.recipient_id, actor=actor.name, redirect_url=request.redirect_url,
                    vendors=request.vendors)
    return ok({"magic_link": link}, "send the url to the recipient: it works once, until expires_at",
              status_code=201)


@router.get("/magic-links", name="list magic links", response_model=Answer, responses=answers(401, 404, 503))
def list_links(resources: StoreDep, recipient: str | None = None):
    name = None if recipient is None else resources.get("recipient", recipient).name
    rows = magic_links.listing(resources.engine, name)
    return ok({"magic_links": [_shown(r) for r in rows]})


@router.delete("/magic-links/{link_id}", name="revoke a magic link", response_model=Answer,
                responses=answers(401, 404, 409, 503))
def revoke_link(link_id: str, resources: StoreDep, actor: ActorDep):
    """The link stops working now (it shows as expired); a used link has nothing to revoke."""
    revoked = magic_links.revoke(resources.engine, link_id, actor=actor.name)
    return ok({"magic_link": _shown(revoked)}, "the link no longer works")


# -- the recipient's pages -------------------------------------------------------------------------


class Refused(Exception):
    """The link cannot be used: unknown (404), or expired or used (410)."""

    def __init__(self, status_code: int, title: str, message: str) -> None:
        self.status_code, self.title, self.message = status_code, title, message
        super().__init__(message)


def live_link(store: ResourceStore, token: str) -> sa.Row:
    """The link of ``token`` if it can still be used, else :class:`Refused`."""
    row = magic_links.of_token(store.engine, token)
    if row is None:
        raise Refused(404, "This link is not valid",
                      f"No link has this address (it may have been copied incompletely): {_NEW_LINK}.")
    if row.used_at is not None:
        raise Refused(410, "This link has been used",
                      "A destination was already saved through this link, which works only once. To "
                      f"change it or connect another, {_NEW_LINK}.")
    if not row.live:
        raise Refused(410, "This link has expired",
                      f"It was valid until {row.expires_at:%Y-%m-%d %H:%M} UTC: {_NEW_LINK}.")
    return row


@cache
def _template(name: str) -> str:
    return package_files.files("transfer_platform.api").joinpath("templates", name).read_text(encoding="utf-8")


def form_page(name: str, status_code: int, values: dict[str, str]) -> HTMLResponse:
    """One of the form's pages (``templates/``), its inline script and style allowed by a nonce of its own."""
    nonce = secrets.token_urlsafe(16)
    text = _template(name)
    for key, value in {**values, "nonce": nonce}.items():
        text = text.replace("{{" + key + "}}", value)
    return HTMLResponse(text, status_code=status_code, headers={
        "Content-Security-Policy": _CSP.format(nonce=nonce), "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})


def message_page(status_code: int, title: str, message: str) -> HTMLResponse:
    return form_page("message.html", status_code, {"title": html.escape(title), "message": html.escape(message)})


def _script_json(value: Any) -> str:
    """JSON safe inside ``<script type="application/json">``."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def offered_vendors(link: sa.Row) -> dict[str, list[dict[str, Any]]]:
    """The vendors the form of ``link`` (a magic link's or a scoped auth token's row) offers: those
    it was narrowed to, else every one a form can describe."""
    every = form_vendors()
    chosen = link.options.get("vendors")
    return {v: every[v] for v in chosen if v in every} if chosen else every


def _default_name(link: sa.Row, vendor: str) -> str:
    suffix = f"_{vendor}_{uuid.UUID(link.id).hex[:8]}"
    return link.recipient[:_NAME_MAX - len(suffix)] + suffix


@public_router.get("/link/{token}", name="the recipient's form", include_in_schema=False)
def link_page(token: str, resources: StoreDep):
    try:
        link = live_link(resources, token)
    except Refused as refused:
        return message_page(refused.status_code, refused.title, refused.message)
    data = {"recipient": link.recipient, "vendors": offered_vendors(link),
            "names": {v: _default_name(link, v) for v in offered_vendors(link)},
            "expires_at": link.expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    return form_page("link.html", 200, {"recipient": html.escape(link.recipient), "expires_at": data["expires_at"],
                                        "data": _script_json(data)})


def _document(link: sa.Row, body: Any) -> dict[str, Any]:
    """The destination the form describes, for the link's recipient whatever the browser sent;
    empty fields left out (a required one is then reported missing)."""
    if not isinstance(body, dict):
        raise ConfigError([Problem("destination", "expected an object", "send {\"vendor\": ..., \"connection\": {...}}")])
    unknown = sorted(set(body) - {"name", "vendor", "connection", "recipient"})
    if unknown:
        raise ConfigError([Problem(f"destination.{key}", "unknown field", "send only name, vendor and connection")
                           for key in unknown])
    offered = offered_vendors(link)
    chosen = body.get("vendor")
    if chosen not in offered:
        raise ConfigError([Problem("destination.vendor", f"{chosen!r} cannot be chosen here",
                                   f"choose one of: {', '.join(offered)}")])
    connection = body.get("connection")
    if not isinstance(connection, dict):
        raise ConfigError([Problem("destination.connection", "expected an object", "fill in the connection's fields")])
    connection = {key: value.strip() if isinstance(value, str) and key != "password" else value
                  for key, value in connection.items() if value not in (None, "")}
    name = body.get("name")
    name = name.strip() if isinstance(name, str) and name.strip() else _default_name(link, chosen)
    return {"name": name, "recipient": link.recipient, "vendor": chosen, "connection": connection}


def checked_destination(resources: ResourceStore, link: sa.Row, body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The destination (validated, its secret encrypted) and the result of its checks."""
    document = validate_entry("destination", _document(link, body))
    name = document[NAME_FIELDS["destination"]]
    try:
        resources.get("destination", name)
    except NotFound:
        pass
    else:
        raise Conflict(f"a destination named {name!r} exists", "choose another name",
                       [Problem("destination.name", "is taken", "choose another name")])
    checks = run_connection_test(resources.candidate_config("destination", document, linked=True), name)
    failed = sum(check.failed for check in checks)
    return document, {"passed": not failed, "checks": [_for_recipient(check.as_dict()) for check in checks]}


def _for_recipient(check: dict[str, str]) -> dict[str, str]:
    """A check's fix as the form's recipient reads it (it typed the password; it has no variable)."""
    return {**check, "fix": for_form(check["fix"])}


def _refused_json(refused: Refused) -> JSONResponse:
    return JSONResponse({"status": "error", "data": None, "message": f"{refused.title}. {refused.message}"},
                        status_code=refused.status_code)


@public_router.post("/link/{token}/test", name="test the form's destination", include_in_schema=False)
def link_test(token: str, body: JsonBody, resources: StoreDep):
    try:
        link = live_link(resources, token)
    except Refused as refused:
        return _refused_json(refused)
    _, result = checked_destination(resources, link, unwrap(body, "destination"))
    return ok(result, "every check passed: save the destination" if result["passed"]
              else "some checks failed: apply their fixes and test again")


@public_router.post("/link/{token}/destination", name="save the form's destination", include_in_schema=False)
def link_save(token: str, request: Request, body: JsonBody, resources: StoreDep):
    """Saved only when every check passes. The link is claimed first (one use, even when two
    saves race), given back if the destination cannot be created."""
    try:
        link = live_link(resources, token)
    except Refused as refused:
        return _refused_json(refused)
    document, result = checked_destination(resources, link, unwrap(body, "destination"))
    if not result["passed"]:
        return JSONResponse({"status": "error", "data": result,
                             "message": "some checks failed: apply their fixes, test again, then save"},
                            status_code=422)
    if not magic_links.claim(resources.engine, link.id):
        try:
            live_link(resources, token)
        except Refused as refused:
            return _refused_json(refused)
        return _refused_json(Refused(410, "This link cannot be used", _NEW_LINK))
    actor = ScopedActor(f"magic_link:{link.id}", "form")
    try:
        created = resources.create("destination", document, actor=actor)
    except BaseException:
        magic_links.give_back(resources.engine, link.id)
        raise
    saved = {"id": created.id, "name": created.name, "vendor": document["vendor"]}
    magic_links.saved(resources.engine, link, saved, actor)
    reload_soon(request.app)
    return ok({"destination": saved, "redirect_url": link.options.get("redirect_url")},
              f"destination {created.name} saved", status_code=201)


@public_router.get("/link/{token}/done", name="the form's last page", include_in_schema=False)
def link_done(token: str, resources: StoreDep):
    """Shown after a save (the link is used by then: only its own recipient's destination is named)."""
    row = magic_links.of_token(resources.engine, token)
    if row is None or row.destination_name is None:
        return RedirectResponse(f"../{token}", status_code=303) if row is not None else \
            message_page(404, "This link is not valid", f"No link has this address: {_NEW_LINK}.")
    return message_page(200, "Your destination is connected",
                        f"The destination {row.destination_name} was saved and tested: data will arrive "
                        "in it from the next transfer. You can close this page.")
