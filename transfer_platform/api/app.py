"""The API's application: authentication, the answer envelope, errors, and the routers.

Every answer is Prequel's envelope, ``{"status": "success" | "error", "data": ..., "message": ...}``;
request bodies are wrapped by resource (``{"destination": {...}}``) and validated by the
configuration file's own models. Errors are JSON with a status code a client can act on: 401
(no or a wrong API key, and nothing else said), 403 (a key whose scope does not allow the route, see
:mod:`transfer_platform.api.scopes`), 429 (too many wrong credentials from one address), 404 (unknown id), 409 (a conflict), 422 (a bad body
or parameter, each problem with its field path and fix), 503 (the store or a database unreachable).
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException

from transfer_platform.api.dagster_reload import Reloader
from transfer_platform.api.scopes import TOKEN_HEADER, FailedCredentials, allows, needed_scope
from transfer_platform.api.storable import RefuseUnstorableText
from transfer_platform.config.models import ApiSettings
from transfer_platform.config.parsing import entries_by_name
from transfer_platform.errors import ConfigError, ConnectionFailure, Problem, TransferPlatformError
from transfer_platform.store.api_keys import verify_key
from transfer_platform.store.audit import ScopedActor
from transfer_platform.store.resources import Conflict, NotFound, ResourceStore

log = logging.getLogger(__name__)

API_KEY_HEADER = "X-API-KEY"
VERSION_HEADER = "X-Prequel-Api-Version"
#: the API version this server speaks (Prequel's dated versions); an older or equal date is accepted
API_VERSION = "2023-12-01"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ApiError(Exception):
    """An answer other than success, raised anywhere in a route."""

    def __init__(self, status_code: int, message: str, problems: list[Problem] | None = None) -> None:
        self.status_code = status_code
        self.problems = problems or []
        super().__init__(message)


@dataclass(frozen=True)
class Actor:
    """Who makes a request: an API key (``api_key:<name>``) or a magic link (``magic_link:<id>``);
    ``name`` carries the key's scope into the audit log."""

    name: ScopedActor

    @property
    def scope(self) -> str:
        return self.name.scope


_TOKEN = re.compile(r"(/link/)[^/\s?\"]+")


def masked_path(path: str) -> str:
    """A request's path as logs may show it: a magic link's token masked."""
    return _TOKEN.sub(r"\1***", path)


class _LinkTokens(logging.Filter):
    """Access logs name paths; a magic link's path holds its token: it is masked."""

    _TOKEN = _TOKEN

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


def ok(data: Any, message: str = "", status_code: int = 200) -> JSONResponse:
    return JSONResponse({"status": "success", "data": data, "message": message}, status_code=status_code)


#: the fix of a problem that names none (every refusal tells what to do)
_ANY_FIX = "correct this value: docs/api.md and docs/configuration.md describe each field"


def _error(status_code: int, message: str, problems: list[Problem] = ()) -> JSONResponse:
    """The error envelope; an entry of the configuration is named by its name (``recipients.acme``),
    never by its position in the merged configuration."""
    body: dict[str, Any] = {"status": "error", "data": None, "message": entries_by_name(message)}
    if problems:
        body["errors"] = [{"path": entries_by_name(p.path), "message": entries_by_name(p.message),
                           "fix": p.fix or _ANY_FIX} for p in problems]
    return JSONResponse(body, status_code=status_code)


def _unstorable(scope: dict[str, Any], problems: list[Problem]) -> JSONResponse:
    """The answer to text the store cannot hold (:mod:`transfer_platform.api.storable`): 422 with
    each problem; on a Delta Sharing route, the protocol's 400 ``INVALID_PARAMETER_VALUE``."""
    from transfer_platform.api.sharing import PREFIX

    message = "invalid request: " + "; ".join(f"{p.path}: {p.message}" for p in problems)
    if scope["path"].startswith(PREFIX + "/"):
        return JSONResponse({"errorCode": "INVALID_PARAMETER_VALUE", "message": f"{message}; fix: {problems[0].fix}"},
                            status_code=400)
    return _error(422, message, problems)


def dagster_storage_error(exc: Exception, reason: str) -> ConnectionFailure:
    """What an error of Dagster's SQLite storage ($DAGSTER_HOME) means, with its fix."""
    from transfer_platform.errors import DagsterStorageError
    from transfer_platform.orchestration.instance.sqlite_storage import record_problem

    home = os.environ.get("DAGSTER_HOME", "")
    return record_problem(home, exc) or DagsterStorageError(home or "$DAGSTER_HOME", f"failed: {reason}", fix=(
        "ask again; if it lasts, check that its files can be written, and give an instance used by many "
        "processes at once PostgreSQL storage (deploy/dagster.production.yaml)"))


def store(request: Request) -> ResourceStore:
    return request.app.state.store


def require_api_key(request: Request) -> Actor:
    """Every route but the magic-link pages and the scoped auth token's depends on this: a valid
    key whose scope allows the route."""
    key = request.headers.get(API_KEY_HEADER, "")
    if not key and request.headers.get(TOKEN_HEADER):
        raise ApiError(403, f"a scoped auth token ({TOKEN_HEADER}) only tests and saves its recipient's destination "
                            "(POST /public/test-destination, POST /public/destinations); fix: call this route "
                            f"from the provider's backend with an API key in {API_KEY_HEADER}")
    found = verify_key(request.app.state.store.engine, key) if key else None
    if found is None:
        raise ApiError(401, f"missing or invalid API key (send it in the {API_KEY_HEADER} header)")
    needed, route = needed_scope(request)
    if not allows(found.scope, needed):
        raise ApiError(403, f"this API key's scopes are [{found.scope}]; {route} needs {needed}; fix: use a key "
                            f"with scope {needed} (transfer-platform api-key create NAME --scope {needed})")
    return Actor(ScopedActor(f"api_key:{found.name}", found.scope))


def _failed_credential(request: Request, status_code: int) -> bool:
    """A wrong API key or scoped auth token (401 with one sent), or a magic link's unknown token."""
    if status_code == 401:
        return bool(request.headers.get(API_KEY_HEADER) or request.headers.get(TOKEN_HEADER)
                    or request.headers.get("authorization"))  # a Delta Sharing bearer token
    return status_code == 404 and request.url.path.startswith("/link/")


#: the dependencies routes declare (FastAPI's Annotated form)
StoreDep = Annotated[ResourceStore, Depends(store)]
ActorDep = Annotated[Actor, Depends(require_api_key)]
JsonBody = Annotated[Any, Body()]


def unwrap(body: Any, name: str) -> Any:
    """A request body's resource (``{"destination": {...}}``)."""
    if not isinstance(body, dict) or name not in body:
        raise ApiError(422, f"the body must be an object with a {name!r} member",
                       [Problem(name, "missing", f"send {{\"{name}\": {{...}}}}")])
    return body[name]


def api_settings(file_raw: dict[str, Any]) -> ApiSettings:
    from pydantic import ValidationError

    from transfer_platform.config.parsing import problems_from_validation

    try:
        return ApiSettings.model_validate(file_raw.get("api") or {})
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, ("api",))) from None


#: how the OpenAPI document names the key (the check itself is :func:`require_api_key`)
API_KEY_SCHEME = APIKeyHeader(name=API_KEY_HEADER, auto_error=False, scheme_name="api_key",
                              description="an API key: `transfer-platform api-key create NAME`")

_FIXES = {"missing": "add this field", "extra_forbidden": "remove it (see /openapi.json for the fields)",
          "json_invalid": "send a JSON document", "model_attributes_type": "send a JSON object",
          "dict_type": "send a JSON object"}


#: how the OpenAPI document names a recipient's scoped auth token (the form's ``/public/`` routes)
SCOPED_TOKEN_SCHEME = APIKeyHeader(name=TOKEN_HEADER, auto_error=False, scheme_name="scoped_auth_token",
                                   description="a recipient's token: POST /actions/generate-scoped-auth-token")


def _path_of(location: tuple) -> str:
    """A validation error's field as our problems name it (``destination.name``, ``status``),
    without FastAPI's part of the request (``body``, ``query``) unless that is all there is."""
    parts = location[1:] if len(location) > 1 and location[0] in ("body", "query", "path", "header") else location
    return ".".join(str(p) for p in parts)


def _fix_of(error: dict[str, Any]) -> str:
    """The fix of one of FastAPI's validation errors (its type's, or the document's word)."""
    return _FIXES.get(error["type"], "send a value as /openapi.json describes this field")


def serve(app: FastAPI, *, host: str, port: int, log_level: str = "warning") -> None:
    """``app`` under uvicorn until stopped. Proxy headers are not read: ``request.client`` stays the
    TCP peer, which the failed-credentials limiter counts by (``X-Forwarded-For`` is the client's to
    write; behind a proxy, the proxy is the peer)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level, proxy_headers=False)


def create_app(config_path: str | Path | None = None) -> FastAPI:
    from transfer_platform.api import audit, links, resources, scoped_tokens, transfers, webhooks
    from transfer_platform.api.schemas import answers

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
                response = _error(429, f"too many wrong credentials from {client}: more than "
                                       f"{app.state.settings.failed_credentials_per_minute} in a minute; "
                                       f"fix: wait {wait} s (Retry-After) and send the right key or token")
                response.headers["Retry-After"] = str(wait)
        return response

    @app.middleware("http")
    async def api_version(request: Request, call_next):
        asked = request.headers.get(VERSION_HEADER)
        if asked is not None and not (_DATE.match(asked) and asked <= API_VERSION):
            return _error(400, f"unsupported {VERSION_HEADER} {asked!r}: this server speaks {API_VERSION} "
                               "(send that date, or leave the header out)")
        response = await call_next(request)
        response.headers[VERSION_HEADER] = API_VERSION
        return response

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status_code, str(exc), exc.problems)

    @app.exception_handler(ConfigError)
    async def config_error(request: Request, exc: ConfigError) -> JSONResponse:
        return _error(422, "invalid request: " + "; ".join(f"{p.path}: {p.message}" for p in exc.problems),
                      exc.problems)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(Conflict)
    async def conflict(request: Request, exc: Conflict) -> JSONResponse:
        return _error(409, f"{exc}" + (f"; fix: {exc.fix}" if exc.fix else ""), exc.problems)

    @app.exception_handler(ConnectionFailure)
    async def unreachable(request: Request, exc: ConnectionFailure) -> JSONResponse:
        return _error(503, str(exc))

    @app.exception_handler(OperationalError)
    async def store_unreachable(request: Request, exc: OperationalError) -> JSONResponse:
        connection = request.app.state.store.settings.connection
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
        if isinstance(exc.orig, sqlite3.Error):  # Dagster's own SQLite storage: the store is PostgreSQL's
            return _error(503, str(dagster_storage_error(exc, reason)))
        return _error(503, f"cannot reach the store's database {connection.database} at "
                           f"{connection.host}:{connection.port}: {reason}; fix: check that the database runs and "
                           "accepts connections (store.connection in the configuration), then retry")

    @app.exception_handler(TransferPlatformError)
    async def platform_error(request: Request, exc: TransferPlatformError) -> JSONResponse:
        return _error(422 if exc.blame != "platform" else 500, str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        """FastAPI's and Starlette's own refusals (a body that is not JSON, an unknown path or
        method) in the envelope, with what to do."""
        fix = {400: "send a JSON document (Content-Type: application/json)",
               404: "see /openapi.json for the routes", 405: "see /openapi.json for the route's methods"}
        message = str(exc.detail).rstrip(".") + (f"; fix: {fix[exc.status_code]}" if exc.status_code in fix else "")
        response = _error(exc.status_code, message)
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [Problem(_path_of(e["loc"]), e["msg"], _fix_of(e)) for e in exc.errors()]
        return _error(422, "invalid request: " + "; ".join(f"{p.path}: {p.message}" for p in problems), problems)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error in %s %s", request.method, masked_path(request.url.path), exc_info=exc)
        return _error(500, f"unexpected error: {type(exc).__name__} (the API's log has the traceback)")

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
    from transfer_platform.api import sharing

    sharing.install(app, authorized, declared)  # Delta Sharing: a recipient's bearer token, signed file URLs
    return app
