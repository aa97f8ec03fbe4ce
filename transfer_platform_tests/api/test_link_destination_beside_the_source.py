"""The address policy judges only the connections a recipient's entries cause.

The docs' own test-machine setup, as a provider runs it: the source PostgreSQL on 127.0.0.1:5432;
the recipient's warehouse on the same host at another port (a TCP relay in front of the same
server); ``destination_addresses.allow`` opening only the warehouse's address. The recipient saves
its destination through its magic link's page (Chromium); then the transfer runs through the
command line and through the daemon (requested through the API), and delivers the recipient's rows, while the
source on the same host name is read as the provider's own connection. In the same API process,
after the link's save, the provider's own destination on the source's address still passes its
test: no policy is remembered per host name. A destination of the recipient's that its
policy refuses at transfer time fails in one line naming its setting, blamed on the recipient.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import httpx
import pytest
import sqlalchemy as sa
import yaml
from selenium import webdriver
from selenium.webdriver.common.by import By

from transfer_platform.network.addresses import REFUSED
from transfer_platform.orchestration.scheduling.run_tags import DESTINATION_TAG
from transfer_platform_tests.support.api import Api, write_api_config
from transfer_platform_tests.support.browser import (
    chromium,
    fill_and_test,
    free_socket,
    serving,
    wait,
)
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.daemon import PATIENCE, VENV_BIN, stop_processes
from transfer_platform_tests.support.events import create_events, insert_rows, make_rows, normalize
from transfer_platform_tests.support.platform import REPO, dagster_home
from transfer_platform_tests.support.postgres import (
    PG,
    destination_rows,
    pg_connect,
    pg_connection_config,
)
from transfer_platform_tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

CLI = str(VENV_BIN / "transfer-platform")
TENANTS = ["org-acme", "org-glob'ex"]


@dataclass
class Setup:
    root: Path
    config_path: Path
    source_schema: str
    warehouse: TcpProxy  # the recipient's server: the same PostgreSQL, at another port
    api: Api
    env: dict[str, str]
    rows: list


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as session:
        yield session


@pytest.fixture
def setup(tmp_path: Path, store_schema: str, secret_key: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    """The source table, the warehouse's relay, the configuration, a Dagster home, and the API
    served by a real uvicorn server in this process (the long-lived API process)."""
    from transfer_platform.api.app import create_app
    from transfer_platform.store.api_keys import create_key
    from transfer_platform.store.database import migrate

    suffix = uuid.uuid4().hex[:8]
    source_schema = f"tp_src_{suffix}"
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    rows = make_rows(TENANTS, 20, [start, start + timedelta(days=1)], seed=62)
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{source_schema}"')
        create_events(conn, source_schema)
        insert_rows(conn, source_schema, rows)
    warehouse = TcpProxy(PG["host"], PG["port"])
    sock, base = free_socket()
    config_path = write_api_config(
        tmp_path, store_schema,
        sources=[{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        models=[events_model(f"{source_schema}.events", min_start=start)], api={"public_url": base})
    document = yaml.safe_load(config_path.read_text())
    # only the warehouse's address: the source's (127.0.0.1:5432) is not opened
    document["destination_addresses"] = {"allow": [f"127.0.0.1:{warehouse.port}"]}
    config_path.write_text(yaml.safe_dump(document, sort_keys=False))
    home = dagster_home(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(config_path))
    monkeypatch.delenv("TRANSFER_PLATFORM_SHARD", raising=False)
    app = create_app(config_path)
    migrate(app.state.store.settings.connection)
    _, key = create_key(app.state.store.engine, "tests")
    try:
        with serving(app, sock), httpx.Client(base_url=base, timeout=120) as client:
            api = Api(client=client, key=key, config_path=config_path, store_schema=store_schema, app=app)
            answer = api.post("/recipients", {"recipient": {"name": "acme", "id_in_provider_system": TENANTS[0]}})
            assert answer.status_code == 201, answer.text
            yield Setup(tmp_path, config_path, source_schema, warehouse, api, dict(os.environ), rows)
    finally:
        warehouse.close()
        instance = getattr(app.state, "dagster_instance", None)
        if instance is not None:
            instance.dispose()
        with pg_connect(autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{source_schema}" CASCADE')


def save_through_the_page(setup: Setup, browser: webdriver.Chrome, schema: str) -> str:
    """The recipient ``acme`` opens its magic link in Chromium, enters its warehouse (PostgreSQL
    on 127.0.0.1 at the relay's port), tests it and saves; the destination's name."""
    answer = setup.api.post("/magic-links", {"magic_link": {"recipient_id": "acme"}})
    assert answer.status_code == 201, answer.text
    browser.get(answer.json()["data"]["magic_link"]["url"])
    fill_and_test(browser, "postgres", {"host": "127.0.0.1", "port": setup.warehouse.port, "database": PG["dbname"],
                                        "username": PG["user"], "schema": schema})
    browser.find_element(By.ID, "save").click()

    def saved() -> list[str]:
        listed = setup.api.get("/destinations").json()["data"]["destinations"]
        return [d["name"] for d in listed if d["recipient"] == "acme" and d["connection"].get("schema") == schema]

    (name,) = wait(browser, lambda _: saved(), "the destination saved through the page")
    return name


def acme_rows(setup: Setup) -> list:
    return normalize([r for r in setup.rows if r[1] == TENANTS[0]])


def delivered(schema: str) -> list:
    with pg_connect() as conn:
        return destination_rows(conn, schema)


@pytest.fixture
def schemas() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    with pg_connect(autocommit=True) as conn:
        for schema in made:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def new_schema(schemas: list[str]) -> str:
    schema = f"tp_dst_{uuid.uuid4().hex[:8]}"
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    schemas.append(schema)
    return schema


def test_a_link_destination_beside_the_source_transfers_through_the_cli_and_the_daemon(
        setup: Setup, schemas: list[str], browser: webdriver.Chrome) -> None:
    api = setup.api
    schema = new_schema(schemas)
    name = save_through_the_page(setup, browser, schema)

    # the provider's own destination on the source's address, in the same API process after the
    # link's save: not judged by the recipient's policy (provider destinations are not checked)
    own_schema = new_schema(schemas)
    own = {"name": "acme_own", "recipient": "acme", "vendor": "postgres", "connection": pg_connection_config(own_schema)}
    tested = api.post("/test-destination", {"destination": own})
    assert tested.status_code == 200, tested.text
    assert tested.json()["data"]["passed"], tested.text
    assert api.post("/destinations", {"destination": own}).status_code == 201
    tested = api.post("/destinations/acme_own/test-connection")
    assert tested.status_code == 200, tested.text
    assert tested.json()["data"]["passed"], tested.text

    # the command line: the source (127.0.0.1:5432, not allowed) is read, the warehouse written
    before = setup.warehouse.connections
    done = subprocess.run([CLI, "--config", str(setup.config_path), "transfer", name], env=setup.env,
                          cwd=setup.root, capture_output=True, text=True, timeout=300 * PATIENCE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert delivered(schema) == acme_rows(setup)
    assert setup.warehouse.connections > before, "the destination was written through its own address"

    # the daemon: a transfer requested through the API (a full refresh), run by a forked run worker
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'UPDATE "{setup.source_schema}".events SET payload = %s WHERE organization_id = %s',
                     ("refreshed", TENANTS[0]))
    daemon_log = setup.root / "daemon.log"
    instance = dg.DagsterInstance.from_config(os.environ["DAGSTER_HOME"])  # the storage, before the daemon
    daemon = subprocess.Popen([str(VENV_BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                              env=setup.env, cwd=setup.root, stdout=daemon_log.open("w"),
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        answer = api.post(f"/destinations/{name}/transfer", {"full_refresh": True})
        assert answer.status_code == 201, answer.text
        run_id = answer.json()["data"]["transfer_id"]
        record = wait_for_run(instance, run_id, daemon_log)
        assert record.dagster_run.status == dg.DagsterRunStatus.SUCCESS, run_failure(instance, run_id)
        assert record.dagster_run.tags[DESTINATION_TAG] == name
        shown = api.get(f"/transfers/{run_id}").json()["data"]["transfer"]
        assert shown["status"] == "SUCCESS", shown
    finally:
        stop_processes([daemon], Path(os.environ["DAGSTER_HOME"]), instance)
    rows = delivered(schema)
    assert rows == [(i, o, u, "refreshed") for i, o, u, _ in acme_rows(setup)]
    assert {r[1] for r in rows} == {TENANTS[0]}, "only the recipient's rows"


def test_a_link_destination_its_policy_refuses_fails_in_one_line_blamed_on_the_recipient(
        setup: Setup, schemas: list[str], browser: webdriver.Chrome) -> None:
    api = setup.api
    schema = new_schema(schemas)
    name = save_through_the_page(setup, browser, schema)
    with api.app.state.store.engine.begin() as conn:  # later pointed at the source's address
        conn.execute(sa.text("UPDATE resources SET document = jsonb_set(document, '{connection,port}', "
                             f"'{PG['port']}') WHERE name = :name"), {"name": name})
    instance = dg.DagsterInstance.from_config(os.environ["DAGSTER_HOME"])
    answer = api.post(f"/destinations/{name}/transfer", {})
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["data"]["transfer_id"]
    daemon_log = setup.root / "daemon.log"
    daemon = subprocess.Popen([str(VENV_BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                              env=setup.env, cwd=setup.root, stdout=daemon_log.open("w"),
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        record = wait_for_run(instance, run_id, daemon_log)
    finally:
        stop_processes([daemon], Path(os.environ["DAGSTER_HOME"]), instance)
    assert record.dagster_run.status == dg.DagsterRunStatus.FAILURE
    shown = api.get(f"/transfers/{run_id}").json()["data"]["transfer"]
    (error,) = shown["errors"]
    setting = f"destinations.{name}.connection.host"
    assert error["title"].startswith(f"{setting}: {REFUSED}"), error
    assert "\n" not in error["title"], error
    assert "a bug" not in error["title"], error
    assert "Fix: give the public name or address of your own server" in error["title"], error
    assert (error["error_code"], error["blame"]) == ("AddressRefused", "recipient"), error
    assert not delivered_tables(schema), "nothing was written"


def delivered_tables(schema: str) -> list:
    with pg_connect() as conn:
        return list(conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                 (schema,)))


def wait_for_run(instance: dg.DagsterInstance, run_id: str, log: Path) -> dg.RunRecord:
    """The run's record once it finished; the deadline (times PATIENCE) only bounds a failure."""
    deadline = time.monotonic() + 300 * PATIENCE
    finished = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
    while True:
        record = instance.get_run_record_by_id(run_id)
        if record is not None and record.dagster_run.status in finished:
            return record
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} did not finish; daemon log:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)


def run_failure(instance: dg.DagsterInstance, run_id: str) -> str:
    """The run's failure events, for an assertion's message."""
    records = instance.all_logs(run_id)
    return "\n".join(str(e.dagster_event.event_specific_data)[:2000] for e in records
                     if e.dagster_event is not None and e.dagster_event.is_failure)
