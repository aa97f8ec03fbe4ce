"""A change through the API reaches the real Dagster without a restart (issue 27, part 2).

The production shape: ``dagster-webserver`` and ``dagster-daemon`` each load ``workspace.yaml``
(each runs the code location in a gRPC server it starts itself), the configuration file names a
store, and the API's ``api.dagster_url`` is the webserver. A recipient and a destination created
through the API must show up as assets in the webserver's GraphQL and get a run launched by the
``transfer_schedule`` sensor within 60 s of the API's answer; deleting the destination removes its
assets. The run queue is held (``max_concurrent_runs: 0``): the test needs the sensor's run to
exist, not to move data.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import httpx
import pytest
import yaml
from cryptography.fernet import Fernet

from transfer_platform.config.secrets import SECRET_KEY_ENV
from transfer_platform.orchestration.scheduling.run_tags import DESTINATION_TAG
from transfer_platform_tests.support.api import start_api, write_api_config
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.daemon import PATIENCE, VENV_BIN, stop_processes
from transfer_platform_tests.support.events import create_events
from transfer_platform_tests.support.platform import REPO, dagster_home
from transfer_platform_tests.support.postgres import pg_connect, pg_connection_config
from transfer_platform_tests.support.processes import free_port

pytestmark = pytest.mark.integration

#: what issue 27 promises: from the API's answer to the assets in Dagster and the sensor's run
WITHIN_SECONDS = 60.0

ASSETS = "query { assetNodes { assetKey { path } } }"
LOCATIONS = """query { workspaceOrError { ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def graphql(url: str, query: str) -> dict:
    answer = httpx.post(url + "/graphql", json={"query": query}, timeout=30).raise_for_status().json()
    assert "errors" not in answer, answer
    return answer["data"]


def asset_paths(url: str) -> set[tuple[str, ...]]:
    return {tuple(node["assetKey"]["path"]) for node in graphql(url, ASSETS)["assetNodes"]}


def wait_until(what: str, condition, deadline_seconds: float, logs: list[Path] = ()):
    """Poll ``condition`` until it returns something true; ``deadline_seconds`` only bounds a failure."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}" for log in logs)
            raise TimeoutError(f"timed out after {deadline_seconds:.0f} s waiting for {what}\n{tails}")
        time.sleep(0.25)


@dataclass
class Dagster:
    root: Path
    config_path: Path
    store_schema: str
    url: str
    instance: dg.DagsterInstance
    logs: list[Path]

    def runs_of(self, destination: str) -> list[dg.DagsterRun]:
        return list(self.instance.get_runs(dg.RunsFilter(tags={DESTINATION_TAG: destination})))


@pytest.fixture(scope="module")
def dagster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dagster]:
    """A store, a source table, a configuration file whose ``api.dagster_url`` is a real webserver,
    and that webserver and a daemon, both loading the shipped ``workspace.yaml``."""
    root = tmp_path_factory.mktemp("api_dagster")
    suffix = uuid.uuid4().hex[:10]
    store_schema, source_schema = f"tp_store_{suffix}", f"tp_src_{suffix}"
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{source_schema}"')
        create_events(conn, source_schema)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    start = datetime.now(UTC) - timedelta(days=2)
    config_path = write_api_config(
        root, store_schema,
        sources=[{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        models=[events_model(f"{source_schema}.events", min_start=start)],
        api={"dagster_url": url})
    home = dagster_home(root)
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    settings["run_coordinator"]["config"]["max_concurrent_runs"] = 0  # runs wait in the queue
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    processes: list[subprocess.Popen] = []
    logs = [root / "webserver.log", root / "daemon.log"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SECRET_KEY_ENV, Fernet.generate_key().decode())
        patch.setenv("DAGSTER_HOME", str(home))
        patch.setenv("TRANSFER_PLATFORM_CONFIG", str(config_path))
        patch.delenv("TRANSFER_PLATFORM_SHARD", raising=False)
        instance = dg.DagsterInstance.from_config(str(home))  # creates the storage before two processes race
        try:
            # the store exists before Dagster loads the file (the API migrates it too)
            from transfer_platform.config.models import StoreSettings
            from transfer_platform.store.database import migrate

            migrate(StoreSettings.model_validate({"connection": pg_connection_config(store_schema)}).connection)
            env = dict(os.environ)
            workspace = str(REPO / "workspace.yaml")
            processes.append(subprocess.Popen(
                [str(VENV_BIN / "dagster-webserver"), "-w", workspace, "-h", "127.0.0.1", "-p", str(port)],
                env=env, cwd=root, stdout=logs[0].open("w"), stderr=subprocess.STDOUT, start_new_session=True))
            processes.append(subprocess.Popen(
                [str(VENV_BIN / "dagster-daemon"), "run", "-w", workspace],
                env=env, cwd=root, stdout=logs[1].open("w"), stderr=subprocess.STDOUT, start_new_session=True))

            def loaded():
                for process in processes:
                    assert process.poll() is None, f"a Dagster process exited: {logs}"
                with suppress(httpx.HTTPError):
                    entries = graphql(url, LOCATIONS)["workspaceOrError"]["locationEntries"]
                    if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                        error = entries[0]["locationOrLoadError"]
                        assert error["__typename"] != "PythonError", error["message"]
                        return True
                return False

            wait_until("the webserver to load the code location", loaded, 180 * PATIENCE, logs)
            yield Dagster(root, config_path, store_schema, url, instance, logs)
        finally:
            stop_processes(processes, home, instance)
            with pg_connect(autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{store_schema}" CASCADE')
                conn.execute(f'DROP SCHEMA IF EXISTS "{source_schema}" CASCADE')


def onboard(api, name: str, dst_schema: str) -> None:
    """A recipient and its PostgreSQL destination (every 15 minutes) through the API."""
    answer = api.post("/recipients", {"recipient": {"name": name, "id_in_provider_system": f"org-{name}"}})
    assert answer.status_code == 201, answer.text
    answer = api.post("/destinations", {"destination": {
        "name": f"{name}_pg", "vendor": "postgres", "recipient": name, "frequency_minutes": 15,
        "connection": pg_connection_config(dst_schema)}})
    assert answer.status_code == 201, answer.text


def test_a_destination_created_through_the_api_reaches_dagster_within_a_minute(dagster: Dagster,
                                                                              record_property) -> None:
    name = f"acme_{uuid.uuid4().hex[:6]}"
    destination, key = f"{name}_pg", (name, f"{name}_pg", "events")
    api = start_api(dagster.config_path, dagster.store_schema)
    with api.client:
        assert key not in asset_paths(dagster.url)
        onboard(api, name, f"tp_dst_{name}")
        answered = time.monotonic()

        wait_until(f"the asset {'/'.join(key)} in the webserver", lambda: key in asset_paths(dagster.url),
                   WITHIN_SECONDS * PATIENCE, dagster.logs)
        assets_after = time.monotonic() - answered
        runs = wait_until(f"a run of {destination} launched by the sensor", lambda: dagster.runs_of(destination),
                          WITHIN_SECONDS * PATIENCE, dagster.logs)
        run_after = time.monotonic() - answered
        timings = f"assets in the webserver {assets_after:.1f} s, the sensor's run {run_after:.1f} s after the API's answer"
        record_property("timings", timings)  # in the JUnit report (--junitxml)
        assert assets_after <= WITHIN_SECONDS, timings
        assert run_after <= WITHIN_SECONDS, timings
        assert runs[0].tags.get("dagster/sensor_name") == "transfer_schedule", runs[0].tags
        assert runs[0].job_name == "transfer"

        answer = api.delete(f"/destinations/{destination}")
        assert answer.status_code == 200, answer.text
        wait_until(f"the asset {'/'.join(key)} gone from the webserver",
                   lambda: key not in asset_paths(dagster.url), WITHIN_SECONDS * PATIENCE, dagster.logs)


def test_an_unreachable_webserver_fails_no_request(dagster: Dagster, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """``api.dagster_url`` at a closed port: the API answers 201, warns once (without the URL's
    password), and the change appears at the webserver's next reload."""
    closed = free_port()
    document = yaml.safe_load(dagster.config_path.read_text())
    document["api"]["dagster_url"] = f"http://admin:hunter2-secret@127.0.0.1:{closed}"
    config_path = tmp_path / "transfer_platform.yaml"
    config_path.write_text(yaml.safe_dump(document))
    name = f"globex_{uuid.uuid4().hex[:6]}"
    key = (name, f"{name}_pg", "events")
    api = start_api(config_path, dagster.store_schema)
    with caplog.at_level(logging.WARNING, logger="transfer_platform.api.dagster_reload"), api.client:
        onboard(api, name, f"tp_dst_{name}")  # two changes, each answered 201
        reloader = api.app.state.reloader
        wait_until("the API's reloads to end", lambda: not reloader.busy, 30 * PATIENCE)
        warnings = [r.getMessage() for r in caplog.records if r.name == "transfer_platform.api.dagster_reload"]
        assert len(warnings) == 1, warnings
        assert str(closed) in warnings[0], warnings
        assert "hunter2" not in warnings[0], warnings
        assert key not in asset_paths(dagster.url)

    # the webserver's next reload (here asked by hand, as any later change through the API does)
    from transfer_platform.api.dagster_reload import reload_locations

    assert reload_locations(dagster.url) == ["transfer_platform"]
    wait_until(f"the asset {'/'.join(key)} after the next reload", lambda: key in asset_paths(dagster.url),
               WITHIN_SECONDS * PATIENCE, dagster.logs)
