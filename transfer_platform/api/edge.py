"""The HTTP edge every router stands on: who asks (an API key and its scope), the store, the request
body's wrapper, and the answer envelope with its errors.

Every answer is Prequel's envelope, ``{"status": "success" | "error", "data": ..., "message": ...}``;
request bodies are wrapped by resource (``{"destination": {...}}``) and validated by the
configuration file's own models. Errors are JSON with a status code a client can act on: 401
(no or a wrong API key, and nothing else said), 403 (a key whose scope does not allow the route, see
:mod:`transfer_platform.api.scopes`), 429 (too many wrong credentials from one address), 404 (unknown
id), 409 (a conflict), 422 (a bad body or parameter, each problem with its field path and fix), 503
(the store or a database unreachable).

Routers import this module and never the application (:mod:`transfer_platform.api.app`), which
imports the routers to assemble itself: the modules of ``api/`` import one another in one direction
(``transfer_platform_tests/config/test_import_direction.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Body, Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import ValidationError

from transfer_platform.api.scopes import TOKEN_HEADER, allows, needed_scope
from transfer_platform.config.models import ApiSettings
from transfer_platform.config.parsing import entries_by_name, problems_from_validation
from transfer_platform.errors import ConfigError, Problem
from transfer_platform.store.api_keys import verify_key
from transfer_platform.store.audit import ScopedActor
from transfer_platform.store.resources import ResourceStore

API_KEY_HEADER = "X-API-KEY"


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


def ok(data: Any, message: str = "", status_code: int = 200) -> JSONResponse:
    return JSONResponse({"status": "success", "data": data, "message": message}, status_code=status_code)


#: the fix of a problem that names none (every refusal tells what to do)
_ANY_FIX = "correct this value: docs/api.md and docs/configuration.md describe each field"


def error(status_code: int, message: str, problems: list[Problem] = ()) -> JSONResponse:
    """The error envelope; an entry of the configuration is named by its name (``recipients.acme``),
    never by its position in the merged configuration."""
    body: dict[str, Any] = {"status": "error", "data": None, "message": entries_by_name(message)}
    if problems:
        body["errors"] = [{"path": entries_by_name(p.path), "message": entries_by_name(p.message),
                           "fix": p.fix or _ANY_FIX} for p in problems]
    return JSONResponse(body, status_code=status_code)


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
    try:
        return ApiSettings.model_validate(file_raw.get("api") or {})
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, ("api",))) from None


#: how the OpenAPI document names the key (the check itself is :func:`require_api_key`)
API_KEY_SCHEME = APIKeyHeader(name=API_KEY_HEADER, auto_error=False, scheme_name="api_key",
                              description="an API key: `transfer-platform api-key create NAME`")

#: how the OpenAPI document names a recipient's scoped auth token (the form's ``/public/`` routes)
SCOPED_TOKEN_SCHEME = APIKeyHeader(name=TOKEN_HEADER, auto_error=False, scheme_name="scoped_auth_token",
                                   description="a recipient's token: POST /actions/generate-scoped-auth-token")
