"""After a change, ask the Dagster webserver (``api.dagster_url``) to reload every code location
through its public GraphQL API, so the new destination's assets and schedule appear without a
restart. Done in a background thread, changes in a burst coalesced into one reload."""

from __future__ import annotations

import logging
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import httpx

log = logging.getLogger(__name__)

_LOCATIONS = "query { workspaceOrError { __typename ... on Workspace { locationEntries { name } } } }"
_RELOAD = """mutation ($name: String!) { reloadRepositoryLocation(repositoryLocationName: $name) {
  __typename ... on WorkspaceLocationEntry { name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } } }
  ... on Error { message } } }"""


def reload_locations(dagster_url: str, timeout: float = 120.0) -> list[str]:
    """Reload every code location of the webserver at ``dagster_url``; returns their names."""
    endpoint = dagster_url.rstrip("/") + "/graphql"
    with httpx.Client(timeout=timeout) as client:
        answer = client.post(endpoint, json={"query": _LOCATIONS}).raise_for_status().json()
        names = [e["name"] for e in answer["data"]["workspaceOrError"].get("locationEntries", [])]
        for name in names:
            result = client.post(endpoint, json={"query": _RELOAD, "variables": {"name": name}}).raise_for_status().json()
            outcome = result["data"]["reloadRepositoryLocation"]
            if outcome["__typename"] != "WorkspaceLocationEntry":
                log.warning("Dagster did not reload code location %s: %s", name, outcome.get("message", outcome))
            elif (outcome.get("locationOrLoadError") or {}).get("__typename") == "PythonError":
                # loaded with an error: the webserver shows it on the location; say it here too
                log.warning("Dagster reloaded code location %s, which failed to load: %s", name,
                            outcome["locationOrLoadError"]["message"].strip().splitlines()[-1][:500])
    return names


def shown_url(url: str) -> str:
    """``url`` without a user's name or password (``http://***@host:3000``), for logs."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


class Reloader:
    """One reload at a time; changes made while one runs ask for one more after it (a burst of
    1,000 creates costs a few reloads, not 1,000). A webserver that cannot be reached is warned
    about once, until a reload succeeds again (then said at INFO); the API answers regardless."""

    def __init__(self, dagster_url: str) -> None:
        self.dagster_url = dagster_url
        self._lock = threading.Lock()
        self._wanted = False
        self._running = False
        self._failing = False
        #: reloads done (each reloading every code location), and the seconds they took
        self.reloads = 0
        self.reload_seconds = 0.0
        self.failures = 0

    @property
    def busy(self) -> bool:
        """A reload runs or is wanted."""
        with self._lock:
            return self._running or self._wanted

    def request(self) -> None:
        with self._lock:
            self._wanted = True
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._run, name="dagster-reload", daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._wanted:
                    self._running = False
                    log.info("idle after %d reload(s)", self.reloads)
                    return
                self._wanted = False
            began = time.perf_counter()
            try:
                names = reload_locations(self.dagster_url)
            except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
                self.failures += 1
                url = shown_url(self.dagster_url)
                reason = str(exc).replace(self.dagster_url.rstrip("/"), url.rstrip("/")) or type(exc).__name__
                if not self._failing:
                    log.warning("could not ask Dagster at %s to reload its code locations (%s); the change "
                                "appears at its next reload (warned once until a reload succeeds)", url, reason)
                else:
                    log.debug("Dagster at %s still not reachable (%s)", url, reason)
                self._failing = True
            else:
                self.reloads += 1
                seconds = time.perf_counter() - began
                self.reload_seconds += seconds
                log.info("reloaded %d code location(s) in %.1f s", len(names), seconds)
                if self._failing:
                    log.info("Dagster at %s reloaded its code locations again", shown_url(self.dagster_url))
                self._failing = False


def reload_soon(app) -> None:  # a FastAPI app
    reloader = getattr(app.state, "reloader", None)
    if reloader is not None:
        reloader.request()
