"""The ``transfer_schedule`` sensor: what it requests at each tick, its cursor, and its sweep.

Time-dependent behaviour goes through ``schedule_requests(config, cursor, now)`` with chosen
clocks; the sensor itself is evaluated with ``build_sensor_context`` against a real instance
under the real clock (what that clock allows). The sweep (EXPIRED, ORPHANED) runs against a
queued instance with the shipped ``dagster.yaml``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.events import DagsterEvent, DagsterEventType

from transfer_platform.config.loading import load_config
from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.lifecycle import EXPIRED_TAG, HEARTBEAT_TAG, ORPHANED_TAG
from transfer_platform.core.schedule import Due, due, latest_tick
from transfer_platform.core.timeutil import isoformat
from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.catalog.checks import integrity_run_config
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.runs.lifecycle import heartbeat, sweep
from transfer_platform.orchestration.runs.transfers import describe
from transfer_platform.orchestration.scheduling.budget import Budget
from transfer_platform.orchestration.scheduling.run_tags import MODELS_TAG, limit_tags
from transfer_platform.orchestration.scheduling.sensors import (
    MISSED_TICKS_TAG,
    SCHEDULED_FOR_TAG,
    TRIGGER_TAG,
    schedule_requests,
)
from transfer_platform_tests.support.dagster import (
    CONFIG_ENV,
    MOCKED_LAUNCHER,
    launch,
    queued_home,
    transfer_run_config,
    workspace,
)
from transfer_platform_tests.support.platform import write_config

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

FREQUENCIES = {"acme_delta": 15, "globex_delta": 360, "hooli_delta": 0}  # enabled ones
DISABLED = "initech_delta"


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def key(destination: str, tick: datetime) -> str:
    return f"{destination}@{isoformat(tick)}"


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    """acme every 15 min; globex every 6 h, items only; hooli daily (frequency 0);
    initech hourly but ``is_enabled: false``."""
    path = write_config(tmp_path, destinations={
        "acme": {"frequency_minutes": 15, "max_concurrent_transfers": 2},
        "globex": {"frequency_minutes": 360, "enabled_models": ["items"]},
    })
    raw = yaml.safe_load(path.read_text())
    for name, extra in (("initech", {"frequency_minutes": 60, "is_enabled": False}),
                        ("hooli", {"frequency_minutes": 0})):
        raw["recipients"].append({"name": name, "id_in_provider_system": f"org-{name}"})
        raw["destinations"].append({"name": f"{name}_delta", "recipient": name, "vendor": "delta",
                                    "connection": {"path": f"dest_{name}"}, **extra})
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture
def config(config_path: Path) -> PlatformConfig:
    return load_config(config_path)


def by_destination(requests: list[dg.RunRequest]) -> dict[str, dg.RunRequest]:
    return {r.run_config["ops"]["run_transfer"]["config"]["destination"]: r for r in requests}


# -- schedule_requests with chosen clocks -------------------------------------------------------------

def test_first_sight_requests_every_enabled_destination_at_its_tick(config: PlatformConfig) -> None:
    now = at(2025, 5, 6, 10, 7, 30)
    requests, cursor = schedule_requests(config, {}, now)
    found = by_destination(requests)
    assert set(found) == set(FREQUENCIES)  # initech is disabled: never requested
    ticks = {"acme_delta": at(2025, 5, 6, 10, 0), "globex_delta": at(2025, 5, 6, 6, 0),
             "hooli_delta": at(2025, 5, 6)}
    assert {d: r.run_key for d, r in found.items()} == {d: key(d, t) for d, t in ticks.items()}
    assert cursor == {d: isoformat(t) for d, t in ticks.items()}
    for destination, request in found.items():
        models = config.models_for(config.destination(destination))
        assert request.run_config == {"ops": {"run_transfer": {"config": {"destination": destination}}}}
        assert request.tags == {**limit_tags(config, destination, models, "transfer"),
                                SCHEDULED_FOR_TAG: isoformat(ticks[destination]),
                                MISSED_TICKS_TAG: "0", TRIGGER_TAG: "sensor"}
    assert found["globex_delta"].tags[MODELS_TAG] == "items"
    assert found["acme_delta"].tags[".dagster/transfer_platform/dest_slots_2"] == "acme_delta"


def test_each_tick_is_requested_once_with_a_stable_run_key(config: PlatformConfig) -> None:
    first, cursor = schedule_requests(config, {}, at(2025, 5, 6, 10, 7))
    # the same tick, cursor saved: nothing; the cursor stays
    again, same = schedule_requests(config, cursor, at(2025, 5, 6, 10, 14, 59))
    assert again == []
    assert same == cursor
    # the same tick, cursor lost (the sensor died before saving it): the same run keys, which the
    # daemon de-duplicates
    replay, _ = schedule_requests(config, {}, at(2025, 5, 6, 10, 14))
    assert [r.run_key for r in replay] == [r.run_key for r in first]
    # the next tick of acme only
    following, cursor2 = schedule_requests(config, cursor, at(2025, 5, 6, 10, 15))
    assert [r.run_key for r in following] == [key("acme_delta", at(2025, 5, 6, 10, 15))]
    assert cursor2 == {**cursor, "acme_delta": isoformat(at(2025, 5, 6, 10, 15))}


def test_a_day_of_evaluations_gives_unique_run_keys_per_tick(config: PlatformConfig) -> None:
    cursor: dict[str, str] = {}
    keys: list[str] = []
    now = at(2025, 5, 31, 23, 50)
    while now < at(2025, 6, 2, 0, 5):
        requests, cursor = schedule_requests(config, cursor, now)
        keys += [r.run_key for r in requests]
        now += timedelta(minutes=1)
    assert len(keys) == len(set(keys))
    per_destination = {d: sorted(k for k in keys if k.startswith(d + "@")) for d in FREQUENCIES}
    assert len(per_destination["acme_delta"]) == 1 + 4 * 24 + 1  # 23:45, every 15 min of June 1, 00:00
    assert len(per_destination["globex_delta"]) == 1 + 4 + 1  # May 31 18:00, 4 ticks, June 2 00:00
    assert per_destination["hooli_delta"] == [key("hooli_delta", at(2025, 5, 31)), key("hooli_delta", at(2025, 6, 1)),
                                              key("hooli_delta", at(2025, 6, 2))]
    assert not any(k.startswith(DISABLED) for k in keys)


def test_catch_up_after_downtime_is_one_request_counting_missed_ticks(config: PlatformConfig) -> None:
    cursor = {"acme_delta": isoformat(at(2025, 5, 6, 10, 15)),
              "globex_delta": isoformat(at(2025, 5, 5, 18, 0)),
              "hooli_delta": isoformat(at(2025, 5, 2))}
    requests, new_cursor = schedule_requests(config, cursor, at(2025, 5, 6, 13, 40))
    found = by_destination(requests)
    assert {d: (r.run_key, r.tags[MISSED_TICKS_TAG]) for d, r in found.items()} == {
        "acme_delta": (key("acme_delta", at(2025, 5, 6, 13, 30)), "12"),  # 10:30 .. 13:15
        "globex_delta": (key("globex_delta", at(2025, 5, 6, 12, 0)), "2"),  # 00:00, 06:00
        "hooli_delta": (key("hooli_delta", at(2025, 5, 6)), "3"),  # May 3, 4, 5
    }
    assert new_cursor == {"acme_delta": isoformat(at(2025, 5, 6, 13, 30)),
                          "globex_delta": isoformat(at(2025, 5, 6, 12, 0)),
                          "hooli_delta": isoformat(at(2025, 5, 6))}


def test_a_disabled_destination_is_never_requested_even_with_a_cursor(config: PlatformConfig) -> None:
    cursor = {DISABLED: isoformat(at(2025, 5, 1))}
    for hour in range(0, 24, 5):
        requests, new_cursor = schedule_requests(config, cursor, at(2025, 5, 6, hour, 1))
        assert DISABLED not in by_destination(requests)
        assert DISABLED not in new_cursor


def test_requests_are_valid_runs_of_the_transfer_job(config_path: Path, config: PlatformConfig) -> None:
    job = build_definitions(str(config_path)).resolve_job_def("transfer")
    requests, _ = schedule_requests(config, {}, at(2025, 5, 6, 10, 7))
    for request in requests:
        assert dg.validate_run_config(job, request.run_config)
        assert request.job_name in (None, "transfer")


# -- the sensor itself, under the real clock ----------------------------------------------------------

def evaluate(config_path: Path, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    sensor = build_definitions(str(config_path)).resolve_sensor_def("transfer_schedule")
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor,
        resources={"platform": TransferPlatformResource(config_path=str(config_path))})
    return sensor(context)


def evaluate_between_ticks(config_path: Path, instance: dg.DagsterInstance, cursor: str | None
                           ) -> tuple[dg.SensorResult, datetime]:
    """Evaluate the sensor; retry once if a 15-minute tick fell between the clock readings."""
    for _ in range(2):
        before = datetime.now(UTC)
        result = evaluate(config_path, instance, cursor)
        if latest_tick(15, before) == latest_tick(15, datetime.now(UTC)):
            return result, before
    raise AssertionError("two tick boundaries in two evaluations")


def test_the_sensor_requests_enabled_destinations_and_advances_its_cursor(config_path: Path,
                                                                         config: PlatformConfig) -> None:
    sensor = build_definitions(str(config_path)).resolve_sensor_def("transfer_schedule")
    # the jobs it launches, and the transfer assets as a job: the UI shows it as their automation
    assert sorted(job.name for job in sensor.jobs) == ["delete_sweep", "integrity", "transfer", "transfer_assets"]
    with dg.instance_for_test() as instance:
        result, now = evaluate_between_ticks(config_path, instance, None)
        expected = {d: latest_tick(f, now) for d, f in FREQUENCIES.items()}
        found = by_destination(result.run_requests)
        assert {d: r.run_key for d, r in found.items()} == {d: key(d, t) for d, t in expected.items()}
        assert json.loads(result.cursor) == {d: isoformat(t) for d, t in expected.items()}
        for destination, request in found.items():
            models = config.models_for(config.destination(destination))
            assert limit_tags(config, destination, models, "transfer").items() <= request.tags.items()
            assert request.tags[TRIGGER_TAG] == "sensor"

        # evaluated again from the same cursor: the same run keys; from the new cursor: nothing
        replay, _ = evaluate_between_ticks(config_path, instance, None)
        assert sorted(r.run_key for r in replay.run_requests) == sorted(r.run_key for r in result.run_requests)
        settled, _ = evaluate_between_ticks(config_path, instance, result.cursor)
        assert settled.run_requests == []
        assert settled.skip_reason.skip_message == "no destination is due"
        assert json.loads(settled.cursor) == json.loads(result.cursor)


def test_the_sensor_catches_up_a_stale_cursor_with_one_request(config_path: Path) -> None:
    with dg.instance_for_test() as instance:
        stale = datetime.now(UTC) - timedelta(days=2, hours=1)
        cursor = {d: isoformat(latest_tick(f, stale)) for d, f in FREQUENCIES.items()}
        result, now = evaluate_between_ticks(config_path, instance, json.dumps(cursor))
        found = by_destination(result.run_requests)
        assert set(found) == set(FREQUENCIES)
        for destination, frequency in FREQUENCIES.items():
            expected = due(frequency, latest_tick(frequency, stale), now)
            assert isinstance(expected, Due)
            assert expected.missed >= 1
            assert found[destination].run_key == key(destination, expected.tick)
            assert found[destination].tags[MISSED_TICKS_TAG] == str(expected.missed)


# -- the sweep: EXPIRED and ORPHANED -------------------------------------------------------------------

@pytest.fixture
def queued(config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple]:
    monkeypatch.setenv(CONFIG_ENV, str(config_path))
    home = queued_home(tmp_path, run_launcher=MOCKED_LAUNCHER)
    with dg.DagsterInstance.from_config(str(home)) as instance, workspace(instance) as context:
        yield instance, context


def test_sweep_expires_transfers_pending_for_more_than_six_hours(queued) -> None:
    instance, context = queued
    run = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))
    created = instance.get_run_record_by_id(run.run_id).create_timestamp
    assert sweep(instance, created + timedelta(hours=5, minutes=59)) == {"expired": [], "orphaned": []}
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.QUEUED

    assert sweep(instance, datetime.now(UTC) + timedelta(hours=7)) == {"expired": [run.run_id], "orphaned": []}
    swept = instance.get_run_by_id(run.run_id)
    assert swept.status == dg.DagsterRunStatus.CANCELED
    assert swept.tags[EXPIRED_TAG] == "true"
    transfer = describe(instance, instance.get_run_record_by_id(run.run_id))
    assert transfer["status"] == "EXPIRED"
    assert transfer["started_at"] is None
    # swept once: a later sweep has nothing left to do
    assert sweep(instance, datetime.now(UTC) + timedelta(hours=8)) == {"expired": [], "orphaned": []}


def test_a_sweep_out_of_time_leaves_an_expired_transfer_for_the_next_sweep(queued) -> None:
    instance, context = queued
    run = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))
    later, budget = datetime.now(UTC) + timedelta(hours=7), Budget(0)
    assert sweep(instance, later, budget=budget) == {"expired": [], "orphaned": []}
    left = instance.get_run_by_id(run.run_id)
    assert left.status == dg.DagsterRunStatus.QUEUED  # untouched: neither cancelled nor tagged
    assert EXPIRED_TAG not in left.tags
    assert budget.left == {"expired run to cancel": 1}
    assert sweep(instance, later) == {"expired": [run.run_id], "orphaned": []}  # the next sweep does it


def test_the_sensor_sweeps_on_each_tick(queued, config_path: Path) -> None:
    """Under the real clock: a fresh pending transfer is left alone; a running one whose heartbeat
    stopped 10 minutes ago is failed as ORPHANED by the sensor's own evaluation."""
    instance, context = queued
    pending = launch(instance, context, "transfer", run_config=transfer_run_config("globex_delta"))
    running = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))
    mark_started(instance, running)
    stopped = datetime.now(UTC) - timedelta(minutes=10)
    instance.add_run_tags(running.run_id, {HEARTBEAT_TAG: stopped.isoformat()})

    evaluate(config_path, instance, None)

    assert instance.get_run_by_id(pending.run_id).status == dg.DagsterRunStatus.QUEUED
    orphaned = instance.get_run_by_id(running.run_id)
    assert orphaned.status == dg.DagsterRunStatus.FAILURE
    assert orphaned.tags[ORPHANED_TAG] == "true"
    assert describe(instance, instance.get_run_record_by_id(running.run_id))["status"] == "ORPHANED"
    messages = [e.dagster_event.message or "" for e in instance.all_logs(running.run_id) if e.dagster_event]
    assert any(f"no heartbeat since {stopped.isoformat()}" in m for m in messages)


def test_sweep_spares_a_running_transfer_that_beats(queued) -> None:
    instance, context = queued
    run = launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))
    mark_started(instance, run)
    with heartbeat(instance, run.run_id, every=3600):
        beat = datetime.fromisoformat(instance.get_run_by_id(run.run_id).tags[HEARTBEAT_TAG])
    assert sweep(instance, beat + timedelta(minutes=2, seconds=59)) == {"expired": [], "orphaned": []}
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
    assert sweep(instance, beat + timedelta(minutes=3, seconds=1)) == {"expired": [], "orphaned": [run.run_id]}
    assert describe(instance, instance.get_run_record_by_id(run.run_id))["status"] == "ORPHANED"


@pytest.mark.integration
def test_every_run_kind_the_sweep_watches_writes_a_heartbeat(config_path: Path, config: PlatformConfig,
                                                             spark) -> None:
    job = build_definitions(str(config_path)).resolve_job_def("integrity")
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(run_config=integrity_run_config("acme_delta"), instance=instance,
                                        raise_on_error=False)
        assert result.success
        run = instance.get_run_by_id(result.run_id)
        assert run.tags["transfer_platform/kind"] == "integrity"  # the sweep watches it
        assert HEARTBEAT_TAG in run.tags


def mark_started(instance: dg.DagsterInstance, run: dg.DagsterRun) -> None:
    """What the run worker reports when it starts (the mocked launcher starts nothing)."""
    event = DagsterEvent(DagsterEventType.RUN_START.value, job_name=run.job_name, message="started")
    instance.report_dagster_event(event, run_id=run.run_id)
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
