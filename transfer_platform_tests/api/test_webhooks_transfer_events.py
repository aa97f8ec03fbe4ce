"""Transfer events from real Dagster runs: the real ``transfer`` job executed in process against a
real instance, then the ``transfer_events`` and ``webhook_delivery`` sensors evaluated as the
daemon does (``build_sensor_context``), delivering to a real local receiver. A receiver that is
down never touches the transfer: the run ends as fast, the event waits and is delivered later."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa
import yaml

from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.runs.lifecycle import sweep
from transfer_platform.store.database import engine_for, migrate
from transfer_platform.store.resources import store_settings
from transfer_platform.store.tables import events, webhook_deliveries
from transfer_platform.webhooks import subscriptions
from transfer_platform.webhooks.delivery import deliver_due
from transfer_platform_tests.support.dagster import transfer_run_config
from transfer_platform_tests.support.platform import write_config
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.webhook_receiver import Receiver, receiver

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

TRANSFER_EVENTS = ["transfer.error", "transfer.success", "transfer.partial_failure", "transfer.expired",
                   "transfer.orphaned"]


@pytest.fixture
def platform(tmp_path: Path, store_schema: str, secret_key: str) -> Path:
    """The small lake -> Delta platform (acme_delta), with a store."""
    path = write_config(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["store"] = {"connection": pg_connection_config(store_schema)}
    path.write_text(yaml.safe_dump(document))
    migrate(store_settings(document).connection)
    return path


@pytest.fixture
def engine(platform: Path) -> sa.Engine:
    return engine_for(store_settings(yaml.safe_load(platform.read_text())).connection)


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as test_instance:
        yield test_instance


@pytest.fixture
def hook() -> Iterator[Receiver]:
    with receiver() as running:
        yield running


def run_transfer(platform: Path, instance: dg.DagsterInstance, **op_config) -> dg.ExecuteInProcessResult:
    job = build_definitions(str(platform)).resolve_job_def("transfer")
    return job.execute_in_process(run_config=transfer_run_config("acme_delta", **op_config), instance=instance,
                                  raise_on_error=False)


class Sensors:
    """The code location's webhook sensors, evaluated as the daemon would, cursor kept."""

    def __init__(self, platform: Path, instance: dg.DagsterInstance) -> None:
        self.defs = build_definitions(str(platform))
        self.instance = instance
        self.resource = TransferPlatformResource(config_path=str(platform))
        self.cursor: str | None = None

    def tick(self, name: str) -> str:
        context = dg.build_sensor_context(instance=self.instance, cursor=self.cursor if name == "transfer_events" else None,
                                          resources={"platform": self.resource})
        result = next(s for s in self.defs.sensors if s.name == name)(context)
        if name == "transfer_events":
            self.cursor = context.cursor
        return result.skip_message if hasattr(result, "skip_message") else str(result)


def outbox(engine: sa.Engine) -> list[sa.Row]:
    with engine.connect() as conn:
        return conn.execute(sa.select(events).order_by(events.c.occurred_at)).all()


def wait_until_settled(instance: dg.DagsterInstance, run_id: str, deadline: float = 5) -> None:
    """Run storage timestamps are the writers' clocks: the sensor leaves the last 2 s for later."""
    end = time.monotonic() + deadline
    record = instance.get_run_record_by_id(run_id)
    while datetime.now(UTC).timestamp() - record.update_timestamp.timestamp() < 2.1:
        assert time.monotonic() < end
        time.sleep(0.05)


def test_a_failed_transfer_is_one_event_delivered_later_while_the_receiver_is_down(
        platform: Path, engine: sa.Engine, instance: dg.DagsterInstance, hook: Receiver) -> None:
    webhook, secret = subscriptions.create(engine, {"url": hook.url, "events": TRANSFER_EVENTS}, actor="tests")
    hook.down()
    started = time.monotonic()
    result = run_transfer(platform, instance, models=["no_such_model"])
    took = time.monotonic() - started
    assert not result.success
    assert took < 20, f"the transfer took {took:.1f} s"
    assert outbox(engine) == []  # nothing in the run's own process

    sensors = Sensors(platform, instance)
    assert {"transfer_events", "webhook_delivery"} <= {s.name for s in sensors.defs.sensors}
    wait_until_settled(instance, result.run_id)
    assert "wait for the sweep" in sensors.tick("transfer_events")  # ERROR or ORPHANED? the sweep says
    assert outbox(engine) == []
    sweep(instance, datetime.now(UTC))
    wait_until_settled(instance, result.run_id)
    sensors.tick("transfer_events")
    (event,) = outbox(engine)
    assert (event.type, event.dedup_key) == ("transfer.error", f"transfer.error:{result.run_id}")
    transfer = event.data["transfer"]
    assert transfer["id"] == result.run_id
    assert transfer["status"] == "ERROR"
    assert (transfer["destination"], transfer["recipient"]) == ("acme_delta", "acme")
    assert "no_such_model" in transfer["error"]["title"]
    assert transfer["error"]["blame"] == "platform"
    assert transfer["ended_at"] is not None

    sensors.tick("transfer_events")  # again, and from scratch: still one event
    sensors.cursor = None
    sensors.tick("transfer_events")
    assert len(outbox(engine)) == 1

    assert "1 to retry" in sensors.tick("webhook_delivery")  # down: refused, retried later
    hook.up()
    deliver_due(engine, now=datetime.now(UTC) + timedelta(minutes=1))
    (request,) = hook.wait_for(1)
    assert request.headers["X-Transfer-Platform-Event-Id"] == event.id
    assert json.loads(request.body)["data"]["transfer"]["id"] == result.run_id
    with engine.connect() as conn:
        assert conn.execute(sa.select(webhook_deliveries.c.status)).scalar_one() == "delivered"
    assert webhook.id
    assert secret


def test_a_successful_transfer_event_carries_each_models_metrics(
        platform: Path, engine: sa.Engine, instance: dg.DagsterInstance, hook: Receiver, spark) -> None:
    subscriptions.create(engine, {"url": hook.url, "events": ["transfer.success"], "format": "slack"}, actor="tests")
    result = run_transfer(platform, instance)
    assert result.success
    sensors = Sensors(platform, instance)
    wait_until_settled(instance, result.run_id)
    sensors.tick("transfer_events")
    (event,) = outbox(engine)
    transfer = event.data["transfer"]
    assert (event.type, transfer["status"], transfer["recipient"]) == ("transfer.success", "SUCCESS", "acme")
    assert set(transfer["models"]) == {"items", "notes"}
    assert transfer["models"]["items"]["rows_transferred"] == 12
    assert transfer["models"]["items"]["error"] is None
    assert transfer["error"] is None
    assert transfer["rows_transferred"] == 24

    sensors.tick("webhook_delivery")
    (request,) = hook.wait_for(1)
    assert "Transfer SUCCESS" in json.loads(request.body)["text"]


def test_the_webhook_sensors_are_in_one_code_location_and_only_with_a_store(platform: Path, tmp_path: Path) -> None:
    names = {s.name for s in build_definitions(str(platform)).sensors}
    assert {"transfer_events", "webhook_delivery"} <= names
    assert not {"transfer_events", "webhook_delivery"} & {s.name for s in build_definitions(str(platform), shard="1/2").sensors}
    plain = write_config(tmp_path / "plain")
    assert not {"transfer_events", "webhook_delivery"} & {s.name for s in build_definitions(str(plain)).sensors}


def test_a_failed_integrity_check_is_one_event_naming_the_destination_and_model(
        platform: Path, engine: sa.Engine, instance: dg.DagsterInstance, hook: Receiver) -> None:
    from transfer_platform.orchestration.catalog.checks import JOB_NAME, integrity_run_config

    document = yaml.safe_load(platform.read_text())
    document["recipients"].append({"name": "globex", "id_in_provider_system": "org-'g'"})
    document["destinations"].append({"name": "globex_pg", "recipient": "globex", "vendor": "postgres",
                                     "connection": {**pg_connection_config("nowhere"), "port": 1}})
    platform.write_text(yaml.safe_dump(document))
    subscriptions.create(engine, {"url": hook.url, "events": ["integrity_check.failed"]}, actor="tests")

    defs = build_definitions(str(platform))
    result = defs.resolve_job_def(JOB_NAME).execute_in_process(
        run_config=integrity_run_config("globex_pg"), instance=instance, raise_on_error=False)
    assert result.success  # a failed check does not fail the run
    assert not any(e.passed for e in result.get_asset_check_evaluations())

    sensors = Sensors(platform, instance)
    wait_until_settled(instance, result.run_id)
    sensors.tick("transfer_events")
    (event,) = outbox(engine)
    assert (event.type, event.dedup_key) == ("integrity_check.failed", f"integrity_check.failed:{result.run_id}")
    check = event.data["integrity_check"]
    assert (check["destination"], check["recipient"]) == ("globex_pg", "globex")
    assert {f["model"] for f in check["failed"]} == {"items", "notes"}
    assert all("cannot reach PostgreSQL destination 'globex_pg'" in f["description"] for f in check["failed"])
    sensors.cursor = None
    sensors.tick("transfer_events")  # from scratch: still one event
    assert len(outbox(engine)) == 1

    sensors.tick("webhook_delivery")
    (request,) = hook.wait_for(1)
    assert request.headers["X-Transfer-Platform-Event"] == "integrity_check.failed"
    assert json.loads(request.body)["data"]["integrity_check"]["run_id"] == result.run_id
