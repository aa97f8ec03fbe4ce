"""After a change, ask the Dagster webserver (``api.dagster_url``) to reload every code location
through its public GraphQL API, so the new destination's assets and schedule appear without a
restart. Done in a background thread, changes in a burst coalesced into one reload."""

from __future__ import annotations

import logging
import threading

import httpx

log = logging.getLogger(__name__)

_LOCATIONS = "query { workspaceOrError { __typename ... on Workspace { locationEntries { name } } } }"
_RELOAD = """mutation ($name: String!) { reloadRepositoryLocation(repositoryLocationName: $name) {
  __typename ... on WorkspaceLocationEntry { name } ... on PythonError { message } } }"""


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
    return names


class Reloader:
    """One reload at a time; a change made while one runs asks for one more after it."""

    def __init__(self, dagster_url: str) -> None:
        self.dagster_url = dagster_url
        self._lock = threading.Lock()
        self._wanted = False
        self._running = False

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
                    return
                self._wanted = False
            try:
                reload_locations(self.dagster_url)
            except (httpx.HTTPError, KeyError, TypeError) as exc:
                log.warning("could not ask Dagster at %s to reload its code locations (%s); the change "
                            "appears at its next reload", self.dagster_url, exc)


def reload_soon(app) -> None:  # a FastAPI app
    reloader = getattr(app.state, "reloader", None)
    if reloader is not None:
        reloader.request()
