"""The Delta Sharing routes (PROTOCOL.md) under ``/delta-sharing``, the signed file route of a
folder's files, the provider's token routes and the magic link's profile page.

The protocol's routes take ``Authorization: Bearer <token>``: a wrong, expired or revoked token is
401 and nothing else; a share, schema or table the token's recipient does not have is 404, the same
answer whether it exists for another recipient or not at all. Errors are the protocol's
``{"errorCode": ..., "message": ...}``. Every query is in the audit log (actor
``sharing_token:<id>``, the table, its version, the files and rows answered).
"""

from __future__ import annotations

import base64
import html
import json
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from transfer_platform.api.edge import ActorDep, JsonBody, StoreDep, ok
from transfer_platform.api.links import Refused, form_page, live_link, message_page
from transfer_platform.api.schemas import Answer, answers
from transfer_platform.config.parsing import problems_from_validation
from transfer_platform.errors import ConfigError
from transfer_platform.sharing import tables, tokens
from transfer_platform.sharing.tables import (
    SCHEMA,
    Location,
    SharingError,
    bad_parameter,
    not_found,
)
from transfer_platform.store import audit, magic_links
from transfer_platform.store.audit import ScopedActor
from transfer_platform.store.resources import ResourceStore

PREFIX = "/delta-sharing"
VERSION_HEADER = "Delta-Table-Version"
MAX_RESULTS = 500
NDJSON = "application/x-ndjson; charset=utf-8"

#: the protocol's routes: PROTOCOL.md is their document (their errors are its, not the envelope)
protocol_router = APIRouter(prefix=PREFIX, include_in_schema=False)
files_router = APIRouter(prefix=PREFIX, include_in_schema=False)
router = APIRouter(tags=["delta sharing"])  # the provider's, behind an admin key
link_router = APIRouter()  # the magic link's page


def unauthenticated() -> SharingError:
    return SharingError(401, "UNAUTHENTICATED", "missing, wrong, expired or revoked bearer token")


def recipient_of(request: Request) -> sa.Row:
    """The token's row (its ``recipient``) from ``Authorization: Bearer``, else 401."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    row = tokens.bearer(request.app.state.store.engine, token.strip()) if scheme.lower() == "bearer" else None
    if row is None:
        raise unauthenticated()
    return row


TokenDep = Annotated[sa.Row, Depends(recipient_of)]


def _page(items: list[dict[str, Any]], max_results: int | None, page_token: str | None) -> dict[str, Any]:
    """One page of ``items`` (the protocol's ``maxResults`` / ``pageToken``; the token an offset)."""
    start = 0
    if page_token:
        try:
            start = int(base64.urlsafe_b64decode(page_token.encode()).decode())
        except ValueError:
            raise bad_parameter("pageToken: not a token this server gave (send the nextPageToken of the "
                                "previous answer)") from None
    size = min(max_results or MAX_RESULTS, MAX_RESULTS)
    if size < 1:
        raise bad_parameter("maxResults: must be 1 or more")
    answer: dict[str, Any] = {"items": items[start:start + size]}
    if start + size < len(items):
        answer["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
    return answer


def _share(resources: ResourceStore, row: sa.Row, share: str):
    config = resources.config()
    found = tables.shares_of(config, row.recipient).get(share)
    if found is None:
        raise not_found(f"share {share}")
    return config, found


def _table(resources: ResourceStore, row: sa.Row, share: str, schema: str, table: str):
    config, destination = _share(resources, row, share)
    if schema != SCHEMA:
        raise not_found(f"schema {share}.{schema}")
    if table not in tables.models_of(config, destination):
        raise not_found(f"table {share}.{schema}.{table}")
    location = Location.of(destination)
    return location, location.open(table)


def _table_items(share: str, models) -> list[dict[str, Any]]:
    return [{"name": m, "schema": SCHEMA, "share": share, "shareId": tables.share_id(share),
             "id": tables.table_id(share, m)} for m in models]


@protocol_router.get("/shares", name="delta sharing: list shares")
def list_shares(row: TokenDep, resources: StoreDep, maxResults: Annotated[int | None, Query()] = None,
                pageToken: Annotated[str | None, Query()] = None):
    names = list(tables.shares_of(resources.config(), row.recipient))
    return _page([{"name": n, "id": tables.share_id(n)} for n in names], maxResults, pageToken)


@protocol_router.get("/shares/{share}", name="delta sharing: get a share")
def get_share(share: str, row: TokenDep, resources: StoreDep):
    _share(resources, row, share)
    return {"share": {"name": share, "id": tables.share_id(share)}}


@protocol_router.get("/shares/{share}/schemas", name="delta sharing: list schemas")
def list_schemas(share: str, row: TokenDep, resources: StoreDep,
                 maxResults: Annotated[int | None, Query()] = None,
                 pageToken: Annotated[str | None, Query()] = None):
    _share(resources, row, share)
    return _page([{"name": SCHEMA, "share": share}], maxResults, pageToken)


@protocol_router.get("/shares/{share}/schemas/{schema}/tables", name="delta sharing: list a schema's tables")
def list_tables(share: str, schema: str, row: TokenDep, resources: StoreDep,
                maxResults: Annotated[int | None, Query()] = None,
                pageToken: Annotated[str | None, Query()] = None):
    config, destination = _share(resources, row, share)
    if schema != SCHEMA:
        raise not_found(f"schema {share}.{schema}")
    return _page(_table_items(share, tables.models_of(config, destination)), maxResults, pageToken)


@protocol_router.get("/shares/{share}/all-tables", name="delta sharing: list a share's tables")
def list_all_tables(share: str, row: TokenDep, resources: StoreDep,
                    maxResults: Annotated[int | None, Query()] = None,
                    pageToken: Annotated[str | None, Query()] = None):
    config, destination = _share(resources, row, share)
    return _page(_table_items(share, tables.models_of(config, destination)), maxResults, pageToken)


@protocol_router.head("/shares/{share}/schemas/{schema}/tables/{table}/version",
                      name="delta sharing: a table's version (HEAD)")
@protocol_router.get("/shares/{share}/schemas/{schema}/tables/{table}/version", name="delta sharing: a table's version")
def table_version(share: str, schema: str, table: str, row: TokenDep, resources: StoreDep,
                  startingTimestamp: Annotated[str | None, Query()] = None):
    _, delta = _table(resources, row, share, schema, table)
    version = tables.version_at(delta, startingTimestamp) if startingTimestamp else delta.version()
    return Response(status_code=200, headers={VERSION_HEADER: str(version)})


def _ndjson(lines, version: int) -> Response:
    body = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    return Response(body, media_type=NDJSON, headers={VERSION_HEADER: str(version)})


@protocol_router.get("/shares/{share}/schemas/{schema}/tables/{table}/metadata",
                     name="delta sharing: a table's metadata")
def table_metadata(share: str, schema: str, table: str, row: TokenDep, resources: StoreDep):
    _, delta = _table(resources, row, share, schema, table)
    return _ndjson(tables.header_lines(delta), delta.version())


class QueryBody(BaseModel):
    """``POST .../query``'s body (PROTOCOL.md). Predicates are hints the protocol lets a server
    ignore: every file of the snapshot is answered and the client filters."""

    model_config = ConfigDict(extra="ignore")

    predicateHints: list[str] | None = None
    jsonPredicateHints: str | None = None
    limitHint: int | None = Field(default=None, ge=0)
    version: int | None = Field(default=None, ge=0)
    timestamp: str | None = None
    startingVersion: int | None = None
    endingVersion: int | None = None


@protocol_router.post("/shares/{share}/schemas/{schema}/tables/{table}/query", name="delta sharing: query a table")
def query_table(share: str, schema: str, table: str, request: Request, row: TokenDep, resources: StoreDep,
                body: JsonBody = None):
    try:
        asked = QueryBody.model_validate(body or {})
    except ValidationError as exc:
        problems = problems_from_validation(exc, ())
        raise bad_parameter("; ".join(f"{p.path}: {p.message}" for p in problems)) from None
    if asked.startingVersion is not None or asked.endingVersion is not None:
        raise SharingError(400, "UNSUPPORTED_OPERATION", "startingVersion/endingVersion (a table's changes "
                                                         "between versions) are not served: query one version")
    location, delta = _table(resources, row, share, schema, table)
    delta = tables.snapshot(delta, asked.version, asked.timestamp)
    version = delta.version()
    header = tables.header_lines(delta)
    found = tables.files(delta)
    if asked.limitHint is not None:  # enough files for the limit (the client cuts the rows)
        kept, rows = [], 0
        for entry in found:
            if rows >= asked.limitHint or entry["rows"] is None and kept:
                break
            kept.append(entry)
            rows += entry["rows"] or 0
        found = kept
    seconds = location.destination.sharing.url_seconds
    lines = [*header, *tables.file_lines(location, request.app.state.settings.public_url, table, found, seconds)]
    with resources.engine.begin() as conn:
        audit.record(conn, actor=ScopedActor(f"sharing_token:{row.id}", "sharing"), action="query",
                     resource_type="shared_table", resource_id=f"{share}.{schema}.{table}",
                     resource_name=row.recipient, changes=audit.changes(None, {
                         "version": version, "files": len(found),
                         "rows": sum(e["rows"] or 0 for e in found), "limit_hint": asked.limitHint}))
    return _ndjson(lines, version)


@protocol_router.get("/shares/{share}/schemas/{schema}/tables/{table}/changes",
                     name="delta sharing: a table's changes")
def table_changes(share: str, schema: str, table: str, row: TokenDep, resources: StoreDep):
    _table(resources, row, share, schema, table)
    raise SharingError(400, "UNSUPPORTED_OPERATION",
                       f"table {share}.{schema}.{table} has no change data feed: its changes are not served; "
                       "read its snapshots instead (query with version or timestamp)")


@files_router.head("/files/{path:path}", name="delta sharing: a shared file (HEAD)")
@files_router.get("/files/{path:path}", name="delta sharing: a shared file")
def shared_file(path: str, resources: StoreDep, expires: str = "", sig: str = ""):
    """A folder's file, for a URL a query answered while it has not expired."""
    refused = tables.verify_file_url(path, expires, sig)
    if refused:
        raise SharingError(403, "PERMISSION_DENIED", f"{refused}; fix: query the table again for fresh URLs")
    share, _, rest = path.partition("/")
    model, _, relative = rest.partition("/")
    destination = next((d for d in resources.config().destinations if d.name == share), None)
    if destination is None or not getattr(destination, "sharing", None) or not destination.sharing.enabled:
        raise not_found("file")
    file = tables.folder_file(Location.of(destination), model, relative)
    if file is None:
        raise not_found("file")
    return FileResponse(file, media_type="application/octet-stream")


# -- the provider's routes: a recipient's token ------------------------------------------------


class TokenBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expires_in_days: float = Field(default=tokens.DEFAULT_DAYS, gt=0, le=tokens.MAX_DAYS,
                                   description="how long the token works (default 90 days)")


def _days(body: Any) -> float:
    try:
        return TokenBody.model_validate(body or {}).expires_in_days
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, ())) from None


def endpoint(request: Request) -> str:
    return request.app.state.settings.public_url.rstrip("/") + PREFIX


def _issued(request: Request, resources: ResourceStore, key: str, actor: str, body: Any, *, rotate: bool):
    recipient = tokens.recipient_name(resources, key)
    shown, token = tokens.issue(resources.engine, recipient, actor=actor, days=_days(body), rotate=rotate)
    return ok({"sharing_token": shown, "profile": tokens.profile(endpoint(request), token, shown["expires_at"])},
              "hand the profile file to the recipient: its token is not shown again", status_code=201)


@router.post("/recipients/{key}/sharing-token", name="create a recipient's sharing token", status_code=201,
             response_model=Answer, responses=answers(401, 404, 409, 503))
def create_token(key: str, request: Request, resources: StoreDep, actor: ActorDep, body: JsonBody = None):
    return _issued(request, resources, key, actor.name, body, rotate=False)


@router.post("/recipients/{key}/sharing-token/rotate", name="rotate a recipient's sharing token", status_code=201,
             response_model=Answer, responses=answers(401, 404, 503))
def rotate_token(key: str, request: Request, resources: StoreDep, actor: ActorDep, body: JsonBody = None):
    return _issued(request, resources, key, actor.name, body, rotate=True)


@router.delete("/recipients/{key}/sharing-token", name="revoke a recipient's sharing token", response_model=Answer,
               responses=answers(401, 404, 503))
def revoke_token(key: str, resources: StoreDep, actor: ActorDep):
    recipient = tokens.recipient_name(resources, key)
    return ok({"sharing_token": tokens.revoke(resources.engine, recipient, actor=actor.name)},
              f"the sharing token of {recipient} is revoked")


@router.get("/sharing-tokens", name="list sharing tokens", response_model=Answer, responses=answers(401, 404, 503))
def list_tokens(resources: StoreDep, recipient: str | None = None):
    name = tokens.recipient_name(resources, recipient) if recipient else None
    return ok({"sharing_tokens": tokens.listing(resources.engine, name)})


# -- the magic link's page: the recipient downloads its profile file ------------------------------


@link_router.get("/link/{token}/sharing-profile", name="the recipient's sharing profile page",
                 include_in_schema=False)
def profile_page(token: str, resources: StoreDep):
    try:
        link = live_link(resources, token)
    except Refused as refused:
        return message_page(refused.status_code, refused.title, refused.message)
    shares = list(tables.shares_of(resources.config(), link.recipient))
    if not shares:
        return message_page(404, "Nothing is shared with you yet",
                            "The provider shares no tables with you over Delta Sharing: ask them to turn it on.")
    return form_page("sharing.html", 200, {"recipient": html.escape(link.recipient),
                                          "shares": html.escape(", ".join(shares)),
                                          "expires_at": f"{link.expires_at:%Y-%m-%d %H:%M} UTC"})


@link_router.post("/link/{token}/sharing-profile", name="download the recipient's sharing profile",
                  include_in_schema=False)
def profile_download(token: str, request: Request, resources: StoreDep):
    """Issues the recipient a new token (its earlier one revoked) and answers its profile file; the
    link is used by then (a second download needs a new link)."""
    try:
        link = live_link(resources, token)
    except Refused as refused:
        return message_page(refused.status_code, refused.title, refused.message)
    if not tables.shares_of(resources.config(), link.recipient):
        return message_page(404, "Nothing is shared with you yet",
                            "The provider shares no tables with you over Delta Sharing: ask them to turn it on.")
    if not magic_links.claim(resources.engine, link.id):
        return message_page(410, "This link has been used", "Ask the provider for a new link.")
    shown, secret = tokens.issue(resources.engine, link.recipient, actor=ScopedActor(f"magic_link:{link.id}", "form"),
                                 rotate=True)
    document = json.dumps(tokens.profile(endpoint(request), secret, shown["expires_at"]), indent=2)
    return Response(document, media_type="application/json", headers={
        "Content-Disposition": f'attachment; filename="{link.recipient}.share"', "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"})


def install(app: FastAPI, authorized: list, responses: dict) -> None:
    """The routers and the protocol's error answers, on the API's application."""

    @app.exception_handler(SharingError)
    async def sharing_error(request: Request, exc: SharingError) -> JSONResponse:
        return JSONResponse({"errorCode": exc.code, "message": str(exc)}, status_code=exc.status_code)

    app.include_router(protocol_router)
    app.include_router(files_router)
    app.include_router(router, dependencies=authorized, responses=responses)
    app.include_router(link_router)

