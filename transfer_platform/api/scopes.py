"""Who may call which route: each API key's scope, the scope every route needs, and the limiter of
failed credentials.

A key's scope is one of :data:`~transfer_platform.store.api_keys.SCOPES` (``read`` < ``transfers``
< ``admin``, each allowing what the one before does). :data:`ROUTE_SCOPES` names what every route
of the application needs; a route missing from it needs ``admin`` (and the suite's test of every
route fails, so a new route is declared on purpose). A key whose scope falls short gets 403 naming
the scope the route needs.

:class:`FailedCredentials` slows down a client that keeps presenting wrong credentials (an API key,
a scoped auth token, a magic link's token): past ``api.failed_credentials_per_minute`` failures in a
minute from one address, each further failure is answered 429 with ``Retry-After``. A right
credential is always served: only failures are counted and refused. The count lives in the API
process (each process counts its own clients).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque

from fastapi import Request

from transfer_platform.store.api_keys import SCOPES

#: the header a scoped auth token is sent in (:mod:`transfer_platform.api.scoped_tokens`)
TOKEN_HEADER = "X-Prequel-Auth-Token"
#: what a route needs besides a key of a scope: its own credential in the path (the magic link's
#: token), a scoped auth token (``X-Prequel-Auth-Token``), or nothing (the OpenAPI document)
LINK_TOKEN, SCOPED_TOKEN, PUBLIC = "magic link token", "scoped auth token", "nothing"
#: a Delta Sharing route: a recipient's bearer token; a shared folder's file: its URL's signature
SHARING_TOKEN, SIGNED_URL = "sharing bearer token", "signed URL"
_SHARED_TABLE = "/delta-sharing/shares/{share}/schemas/{schema}/tables/{table}"

#: (method, path) -> what the route needs; ``{kind}`` stands for recipients, destinations, sources, models
_RESOURCE_SCOPES = {
    ("GET", "/{kind}"): "read",
    ("GET", "/{kind}/{key}"): "read",
    ("POST", "/{kind}"): "admin",
    ("PATCH", "/{kind}/{key}"): "admin",
    ("DELETE", "/{kind}/{key}"): "admin",
}
ROUTE_SCOPES: dict[tuple[str, str], str] = {
    **{(method, path.format(kind=kind, key="{key}")): scope
       for (method, path), scope in _RESOURCE_SCOPES.items()
       for kind in ("recipients", "destinations", "sources", "models")},
    # connects to any address the body names, from the provider's network
    ("POST", "/test-destination"): "admin",
    # the checks of a destination as saved: nothing written
    ("POST", "/destinations/{key}/test-connection"): "transfers",
    ("POST", "/destinations/{key}/transfer"): "transfers",
    ("GET", "/transfers"): "read",
    ("GET", "/destinations/{key}/transfers"): "read",
    ("GET", "/transfers/{transfer_id}"): "read",
    ("POST", "/transfers/{transfer_id}/cancel"): "transfers",
    ("POST", "/destinations/{key}/integrity-checks"): "transfers",
    ("GET", "/destinations/{key}/integrity-checks"): "read",
    # a webhook's URL can be its receiver's credential (a Slack incoming webhook's path)
    ("GET", "/webhooks"): "admin",
    ("POST", "/webhooks"): "admin",
    ("GET", "/webhooks/{webhook_id}"): "admin",
    ("PATCH", "/webhooks/{webhook_id}"): "admin",
    ("DELETE", "/webhooks/{webhook_id}"): "admin",
    ("GET", "/webhooks/{webhook_id}/deliveries"): "admin",
    ("GET", "/audit-log"): "read",
    ("POST", "/magic-links"): "admin",
    ("GET", "/magic-links"): "read",
    ("DELETE", "/magic-links/{link_id}"): "admin",
    ("POST", "/actions/generate-scoped-auth-token"): "admin",
    ("GET", "/link/{token}"): LINK_TOKEN,
    ("POST", "/link/{token}/test"): LINK_TOKEN,
    ("POST", "/link/{token}/destination"): LINK_TOKEN,
    ("GET", "/link/{token}/done"): LINK_TOKEN,
    ("GET", "/public/vendors/destinations"): SCOPED_TOKEN,
    ("POST", "/public/test-destination"): SCOPED_TOKEN,
    ("POST", "/public/destinations"): SCOPED_TOKEN,
    ("POST", "/recipients/{key}/sharing-token"): "admin",
    ("POST", "/recipients/{key}/sharing-token/rotate"): "admin",
    ("DELETE", "/recipients/{key}/sharing-token"): "admin",
    ("GET", "/sharing-tokens"): "admin",
    ("GET", "/link/{token}/sharing-profile"): LINK_TOKEN,
    ("POST", "/link/{token}/sharing-profile"): LINK_TOKEN,
    ("GET", "/delta-sharing/shares"): SHARING_TOKEN,
    ("GET", "/delta-sharing/shares/{share}"): SHARING_TOKEN,
    ("GET", "/delta-sharing/shares/{share}/schemas"): SHARING_TOKEN,
    ("GET", "/delta-sharing/shares/{share}/schemas/{schema}/tables"): SHARING_TOKEN,
    ("GET", "/delta-sharing/shares/{share}/all-tables"): SHARING_TOKEN,
    ("GET", f"{_SHARED_TABLE}/version"): SHARING_TOKEN,
    ("HEAD", f"{_SHARED_TABLE}/version"): SHARING_TOKEN,
    ("GET", f"{_SHARED_TABLE}/metadata"): SHARING_TOKEN,
    ("POST", f"{_SHARED_TABLE}/query"): SHARING_TOKEN,
    ("GET", f"{_SHARED_TABLE}/changes"): SHARING_TOKEN,
    ("GET", "/delta-sharing/files/{path:path}"): SIGNED_URL,
    ("HEAD", "/delta-sharing/files/{path:path}"): SIGNED_URL,
    ("GET", "/openapi.json"): PUBLIC,
    ("HEAD", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("HEAD", "/docs"): PUBLIC,
    ("GET", "/docs/oauth2-redirect"): PUBLIC,
    ("HEAD", "/docs/oauth2-redirect"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("HEAD", "/redoc"): PUBLIC,
}


def needed_scope(request: Request) -> tuple[str, str]:
    """The scope the request's route needs, and the route as ``METHOD /path/{param}``."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    method = request.method
    return ROUTE_SCOPES.get((method, path), "admin"), f"{method} {path}"


def allows(scope: str, needed: str) -> bool:
    return scope in SCOPES and needed in SCOPES and SCOPES.index(scope) >= SCOPES.index(needed)


class FailedCredentials:
    """Failed credential attempts per client address in the last ``window`` seconds (in memory,
    at most ``max_clients`` addresses, the least recent forgotten first)."""

    def __init__(self, per_window: int, window: float = 60.0, max_clients: int = 10_000) -> None:
        self.per_window, self.window, self.max_clients = per_window, window, max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def failed(self, client: str) -> int | None:
        """Count a failure of ``client``: ``None`` while it is within the limit, else the seconds it
        should wait (``Retry-After``)."""
        now = time.monotonic()
        with self._lock:
            times = self._failures.pop(client, None) or deque()
            while times and times[0] <= now - self.window:
                times.popleft()
            times.append(now)
            self._failures[client] = times
            while len(self._failures) > self.max_clients:
                self._failures.popitem(last=False)
            if len(times) <= self.per_window:
                return None
            return max(1, math.ceil(times[-self.per_window] + self.window - now))
