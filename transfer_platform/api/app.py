"""The API's application: the routers assembled, the middleware (the version header, the
failed-credentials limiter, text the store cannot hold) and the handlers that turn each error into
the envelope (:mod:`transfer_platform.api.edge`, which the routers stand on).
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException

from transfer_platform.api import (
    audit,
    links,
    resources,
    scoped_tokens,
    sharing,
    transfers,
    webhooks,
)
from transfer_platform.api.dagster_reload import Reloader
from transfer_platform.api.edge import (
    API_KEY_HEADER,
    API_KEY_SCHEME,
    SCOPED_TOKEN_SCHEME,
    ApiError,
    api_settings,
    error,
    require_api_key,
)
from transfer_platform.api.schemas import answers
from transfer_platform.api.scopes import TOKEN_HEADER, FailedCredentials
from transfer_platform.api.storable import RefuseUnstorableText
from transfer_platform.errors import (
    ConfigError,
    ConnectionFailure,
    DagsterStorageError,
    Problem,
    TransferPlatformError,
)
from transfer_platform.orchestration.instance.sqlite_storage import record_problem
from transfer_platform.store.resources import Conflict, NotFound, ResourceStore

log = logging.getLogger(__name__)

VERSION_HEADER = "X-Prequel-Api-Version"
#: the API version this server speaks (Prequel's dated versions); an older or equal date is accepted
API_VERSION = "2023-12-01"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


_TOKEN = re.compile(r"(/link/)[^/\s?\"]+")


def masked_path(path: str) -> str:
    """A request's path as logs may show it: a magic link's token masked."""
    return _TOKEN.sub(r"\1***", path)


class _LinkTokens(logging.Filter):
    """Access logs name paths; a magic link's path holds its token: it is masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args and isinstance(record.args, tuple):
            record.args = tuple(_masked(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = _masked(record.msg)
        return True


#: a shared folder's signed file URL: its signature masked too (it reads the file until it expires)
_SIGNATURE = re.compile(r"([?&]sig=)[^&\s\"]+")


def _masked(text: str) -> str:
    return _SIGNATURE.sub(r"\1***", _TOKEN.sub(r"\1***", text))


def mask_link_tokens_in_access_logs() -> None:
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _LinkTokens) for f in logger.filters):
        logger.addFilter(_LinkTokens())


def _unstorable(scope: dict[str, Any], problems: list[Problem]) -> JSONResponse:
    """The answer to text the store cannot hold (:mod:`transfer_platform.api.storable`): 422 with
    each problem; on a Delta Sharing route, the protocol's 400 ``INVALID_PARAMETER_VALUE``."""
    message = "invalid request: " + "; ".join(f"{p.path}: {p.message}" for p in problems)
    if scope["path"].startswith(sharing.PREFIX + "/"):
        return JSONResponse({"errorCode": "INVALID_PARAMETER_VALUE", "message": f"{message}; fix: {problems[0].fix}"},
                            status_code=400)
    return error(422, message, problems)


def dagster_storage_error(exc: Exception, reason: str) -> ConnectionFailure:
    """What an error of Dagster's SQLite storage ($DAGSTER_HOME) means, with its fix."""
    home = os.environ.get("DAGSTER_HOME", "")
    return record_problem(home, exc) or DagsterStorageError(home or "$DAGSTER_HOME", f"failed: {reason}", fix=(
        "ask again; if it lasts, check that its files can be written, and give an instance used by many "
        "processes at once PostgreSQL storage (deploy/dagster.production.yaml)"))


def _failed_credential(request: Request, status_code: int) -> bool:
    """A wrong API key or scoped auth token (401 with one sent), or a magic link's unknown token."""
    if status_code == 401:
        return bool(request.headers.get(API_KEY_HEADER) or request.headers.get(TOKEN_HEADER)
                    or request.headers.get("authorization"))  # a Delta Sharing bearer token
    return status_code == 404 and request.url.path.startswith("/link/")


_FIXES = {"missing": "add this field", "extra_forbidden": "remove it (see /openapi.json for the fields)",
          "json_invalid": "send a JSON document", "model_attributes_type": "send a JSON object",
          "dict_type": "send a JSON object"}


def _path_of(location: tuple) -> str:
    """A validation error's field as our problems name it (``destination.name``, ``status``),
    without FastAPI's part of the request (``body``, ``query``) unless that is all there is."""
    parts = location[1:] if len(location) > 1 and location[0] in ("body", "query", "path", "header") else location
    return ".".join(str(p) for p in parts)


def _fix_of(found: dict[str, Any]) -> str:
    """The fix of one of FastAPI's validation errors (its type's, or the document's word)."""
    return _FIXES.get(found["type"], "send a value as /openapi.json describes this field")


def serve(app: FastAPI, *, host: str, port: int, log_level: str = "warning") -> None:
    """``app`` under uvicorn until stopped. Proxy headers are not read: ``request.client`` stays the
    TCP peer, which the failed-credentials limiter counts by (``X-Forwarded-For`` is the client's to
    write; behind a proxy, the proxy is the peer)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level, proxy_headers=False)


def create_app(config_path: str | Path | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        transfers.close(app)  # the code servers and the Dagster instance the transfer routes opened

    app = FastAPI(title="transfer_platform API", version=API_VERSION, lifespan=lifespan,
                  description="Prequel's export API over the platform's store and Dagster instance.")
    mask_link_tokens_in_access_logs()
    app.state.store = ResourceStore(config_path)
    app.state.config_path = app.state.store.path
    app.state.settings = api_settings(app.state.store.file_raw)
    app.state.reloader = Reloader(app.state.settings.dagster_url) if app.state.settings.dagster_url else None
    app.state.failed_credentials = FailedCredentials(app.state.settings.failed_credentials_per_minute)
    app.add_middleware(RefuseUnstorableText, refuse=_unstorable)  # innermost: inside the version header and the limiter

    @app.middleware("http")
    async def slow_down_wrong_credentials(request: Request, call_next):
        """Only failures count, and only a failure is refused: a right credential is always served."""
        response = await call_next(request)
        if _failed_credential(request, response.status_code):
            client = request.client.host if request.client else "unknown"
            wait = request.app.state.failed_credentials.failed(client)
            if wait is not None:
                response = error(429, f"too many wrong credentials from {client}: more than "
                                       f"{app.state.settings.failed_credentials_per_minute} in a minute; "
                                       f"fix: wait {wait} s (Retry-After) and send the right key or token")
                response.headers["Retry-After"] = str(wait)
        return response

    @app.middleware("http")
    async def api_version(request: Request, call_next):
        asked = request.headers.get(VERSION_HEADER)
        if asked is not None and not (_DATE.match(asked) and asked <= API_VERSION):
            return error(400, f"unsupported {VERSION_HEADER} {asked!r}: this server speaks {API_VERSION} "
                               "(send that date, or leave the header out)")
        response = await call_next(request)
        response.headers[VERSION_HEADER] = API_VERSION
        return response

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error(exc.status_code, str(exc), exc.problems)

    @app.exception_handler(ConfigError)
    async def config_error(request: Request, exc: ConfigError) -> JSONResponse:
        return error(422, "invalid request: " + "; ".join(f"{p.path}: {p.message}" for p in exc.problems),
                     exc.problems)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> JSONResponse:
        return error(404, str(exc))

    @app.exception_handler(Conflict)
    async def conflict(request: Request, exc: Conflict) -> JSONResponse:
        return error(409, f"{exc}" + (f"; fix: {exc.fix}" if exc.fix else ""), exc.problems)

    @app.exception_handler(ConnectionFailure)
    async def unreachable(request: Request, exc: ConnectionFailure) -> JSONResponse:
        return error(503, str(exc))

    @app.exception_handler(OperationalError)
    async def store_unreachable(request: Request, exc: OperationalError) -> JSONResponse:
        connection = request.app.state.store.settings.connection
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
        if isinstance(exc.orig, sqlite3.Error):  # Dagster's own SQLite storage: the store is PostgreSQL's
            return error(503, str(dagster_storage_error(exc, reason)))
        return error(503, f"cannot reach the store's database {connection.database} at "
                           f"{connection.host}:{connection.port}: {reason}; fix: check that the database runs and "
                           "accepts connections (store.connection in the configuration), then retry")

    @app.exception_handler(TransferPlatformError)
    async def platform_error(request: Request, exc: TransferPlatformError) -> JSONResponse:
        return error(422 if exc.blame != "platform" else 500, str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        """FastAPI's and Starlette's own refusals (a body that is not JSON, an unknown path or
        method) in the envelope, with what to do."""
        fix = {400: "send a JSON document (Content-Type: application/json)",
               404: "see /openapi.json for the routes", 405: "see /openapi.json for the route's methods"}
        message = str(exc.detail).rstrip(".") + (f"; fix: {fix[exc.status_code]}" if exc.status_code in fix else "")
        response = error(exc.status_code, message)
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [Problem(_path_of(e["loc"]), e["msg"], _fix_of(e)) for e in exc.errors()]
        return error(422, "invalid request: " + "; ".join(f"{p.path}: {p.message}" for p in problems), problems)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error in %s %s", request.method, masked_path(request.url.path), exc_info=exc)
        return error(500, f"unexpected error: {type(exc).__name__} (the API's log has the traceback)")

    authorized = [Depends(require_api_key), Security(API_KEY_SCHEME)]  # the scheme: for the OpenAPI document
    declared = answers(401, 403, 429)  # every key's route: 403 a scope, 429 the wrong-credential limiter
    app.include_router(resources.router, dependencies=authorized, responses=declared)
    app.include_router(transfers.router, dependencies=authorized, responses=declared)
    app.include_router(webhooks.router, dependencies=authorized, responses=declared)
    app.include_router(audit.router, dependencies=authorized, responses=declared)
    app.include_router(links.router, dependencies=authorized, responses=declared)
    app.include_router(links.public_router)  # the recipient's form: the link's token is its key
    app.include_router(scoped_tokens.router, dependencies=authorized, responses=declared)
    app.include_router(scoped_tokens.public_router, dependencies=[Security(SCOPED_TOKEN_SCHEME)],
                       responses=answers(401, 403, 404, 429, 503))  # the same form, for a scoped auth token
    sharing.install(app, authorized, declared)  # Delta Sharing: a recipient's bearer token, signed file URLs
    return app
