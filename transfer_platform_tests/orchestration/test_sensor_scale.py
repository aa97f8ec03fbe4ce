"""The ``transfer_schedule`` sensor with many destinations: it reads the run storage in the same
number of queries whatever the number of destinations (an operator adding recipients must not
push a tick towards Dagster's 60 s sensor timeout), it still tells delivered destinations (a
successful transfer: integrity checks start) from the others, and a tick that runs out of time
leaves the rest, untouched, for the next tick instead of failing.

Queries are counted on a real Dagster instance whose storage is PostgreSQL (as in production),
with SQLAlchemy's statement events; nothing stands in for the database.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.core.timeutil import isoformat
from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.scheduling import sensors
from transfer_platform.orchestration.scheduling.budget import BUDGET_ENV, Budget
from transfer_platform.orchestration.scheduling.run_tags import DESTINATION_TAG, KIND_TAG
from transfer_platform.orchestration.scheduling.sensors import has_succeeded, schedule_requests
from transfer_platform_tests.support.postgres import PG, pg_connect
from transfer_platform_tests.support.scale import write_scale_config

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
              pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")]


@pytest.fixture(scope="module")
def instance(tmp_path_factory) -> Iterator[dg.DagsterInstance]:
    """A Dagster instance whose run, event log and schedule storage are a fresh PostgreSQL database."""
    name = f"tp_sensor_{uuid.uuid4().hex[:8]}"
    with pg_connect(autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"postgres": {"postgres_db": {
        "hostname": PG["host"], "port": PG["port"], "db_name": name, "username": PG["user"], "password": "",
        "scheme": "postgresql+psycopg2"}}}, "telemetry": {"enabled": False}}))
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            yield instance
    finally:
        with pg_connect(autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def tick(config_path: Path, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    sensor = build_definitions(str(config_path)).resolve_sensor_def("transfer_schedule")
    context = dg.build_sensor_context(instance=instance, cursor=cursor,
                                      resources={"platform": TransferPlatformResource(config_path=str(config_path))})
    return sensor(context)


def counted_tick(config_path: Path, instance: dg.DagsterInstance, cursor: str | None,
                 statements: list[str]) -> tuple[dg.SensorResult, int]:
    sensor = build_definitions(str(config_path)).resolve_sensor_def("transfer_schedule")
    context = dg.build_sensor_context(instance=instance, cursor=cursor,
                                      resources={"platform": TransferPlatformResource(config_path=str(config_path))})
    statements.clear()
    result = sensor(context)
    return result, len(statements)


def store_transfer(instance: dg.DagsterInstance, destination: str, status: dg.DagsterRunStatus,
                   kind: str = "transfer") -> None:
    instance.add_run(dg.DagsterRun(job_name="transfer", run_id=str(uuid.uuid4()), status=status,
                                   tags={KIND_TAG: kind, DESTINATION_TAG: destination}))


def wipe(instance: dg.DagsterInstance) -> None:
    instance.wipe()


def integrity_destinations(result: dg.SensorResult) -> set[str]:
    return {r.run_key.split("@")[0].removeprefix("integrity:") for r in result.run_requests or []
            if r.run_key.startswith("integrity:")}


def test_a_tick_reads_the_run_storage_as_often_with_forty_destinations_as_with_two(
        tmp_path: Path, instance: dg.DagsterInstance, statements: list[str]) -> None:
    wipe(instance)
    few, many = write_scale_config(tmp_path, 2), write_scale_config(tmp_path, 40)
    for destination in range(0, 40, 3):  # d0, d3, ... delivered; d1, d2, ... not (in both configurations)
        store_transfer(instance, f"d{destination}", dg.DagsterRunStatus.SUCCESS)
    store_transfer(instance, "d5", dg.DagsterRunStatus.FAILURE)

    tick(few, instance, None)  # the storage's first use reads its tables' columns, once per process
    first_few, queries_few = counted_tick(few, instance, None, statements)
    first_many, queries_many = counted_tick(many, instance, None, statements)
    assert len(first_many.run_requests) > len(first_few.run_requests)  # the many did more work
    assert queries_many == queries_few, "the first tick's queries grow with the destinations"

    idle_few, idle_queries_few = counted_tick(few, instance, first_few.cursor, statements)
    idle_many, idle_queries_many = counted_tick(many, instance, first_many.cursor, statements)
    assert not idle_few.run_requests
    assert not idle_many.run_requests
    assert idle_queries_many == idle_queries_few, "an idle tick's queries grow with the destinations"


def test_destinations_with_a_successful_transfer_get_their_integrity_checks_and_the_others_wait(
        tmp_path: Path, instance: dg.DagsterInstance) -> None:
    wipe(instance)
    config_path = write_scale_config(tmp_path, 6)
    store_transfer(instance, "d0", dg.DagsterRunStatus.SUCCESS)
    store_transfer(instance, "d1", dg.DagsterRunStatus.FAILURE)  # tried, failed: not delivered
    store_transfer(instance, "d2", dg.DagsterRunStatus.STARTED)  # first transfer still running
    store_transfer(instance, "d3", dg.DagsterRunStatus.SUCCESS, kind="integrity")  # not a transfer
    store_transfer(instance, "d4", dg.DagsterRunStatus.FAILURE)
    store_transfer(instance, "d4", dg.DagsterRunStatus.SUCCESS)  # failed once, then succeeded

    first = tick(config_path, instance, None)
    assert integrity_destinations(first) == {"d0", "d4"}
    assert {r.run_key.split("@")[0] for r in first.run_requests if r.job_name == "transfer"} == {
        f"d{i}" for i in range(6)}  # transfers are due for all, delivered or not

    store_transfer(instance, "d1", dg.DagsterRunStatus.SUCCESS)  # its retry succeeded
    second = tick(config_path, instance, first.cursor)
    assert integrity_destinations(second) == {"d1"}  # d0's and d4's were requested already today


def test_the_delivered_set_pages_through_many_runs_of_one_destination(instance: dg.DagsterInstance) -> None:
    wipe(instance)
    store_transfer(instance, "old", dg.DagsterRunStatus.SUCCESS)
    for _ in range(5):  # newer than old's: they fill the first pages
        store_transfer(instance, "busy", dg.DagsterRunStatus.SUCCESS)
    store_transfer(instance, "failed", dg.DagsterRunStatus.FAILURE)
    delivered = has_succeeded(instance, page=2)
    assert delivered.among(["busy", "old", "failed", "unknown"]) == {"busy", "old"}
    assert delivered("old")
    assert not delivered("failed")

    budget = Budget(0)  # out of time after the first page: old is found next tick
    assert has_succeeded(instance, page=2, budget=budget).among(["busy", "old", "failed"]) == {"busy"}
    assert budget.left == {"destination whose first success to look up": 2}


def test_a_spent_budget_leaves_the_rest_for_the_next_tick_untouched(tmp_path: Path) -> None:
    config = load_config(write_scale_config(tmp_path, 5))
    now = datetime.now(UTC)
    clock = itertools.count()  # one second per look at the clock: spent at the third look
    budget = Budget(3, clock=lambda: float(next(clock)))
    requests, cursor = schedule_requests(config, {}, now, budget)
    done = {r.run_key.split("@")[0] for r in requests}
    assert len(done) == 2
    assert set(cursor) == done
    assert budget.left == {"transfer": 3}
    assert "left for the next tick: 3 transfer" in budget.summary()

    rest, cursor = schedule_requests(config, cursor, now)
    assert {r.run_key.split("@")[0] for r in rest} == {f"d{i}" for i in range(5)} - done  # once each
    assert set(cursor) == {f"d{i}" for i in range(5)}
    assert schedule_requests(config, cursor, now)[0] == []


def test_a_sensor_tick_out_of_time_requests_nothing_says_so_and_the_next_tick_does_it_all(
        tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    wipe(instance)
    config_path = write_scale_config(tmp_path, 3)
    store_transfer(instance, "d0", dg.DagsterRunStatus.SUCCESS)
    monkeypatch.setenv(BUDGET_ENV, "0")
    starved = tick(config_path, instance, None)
    assert not starved.run_requests
    assert "left for the next tick: 1 integrity check, 3 transfer" in starved.skip_reason.skip_message
    assert json.loads(starved.cursor) == {}  # nothing recorded as done

    monkeypatch.delenv(BUDGET_ENV)
    fed = tick(config_path, instance, starved.cursor)
    today = isoformat(datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0))
    assert sorted(r.run_key for r in fed.run_requests) == sorted(
        [f"d{i}@{today}" for i in range(3)] + [f"integrity:d0@{today}"])


# -- many new destinations at once: their first runs spread ------------------------------------------

def set_frequency(path: Path, minutes: int) -> Path:
    raw = yaml.safe_load(path.read_text())
    for destination in raw["destinations"]:
        destination["frequency_minutes"] = minutes
    path.write_text(yaml.safe_dump(raw))
    return path


def expected_first_runs(count: int, frequency_minutes: int, per_tick: int) -> list[timedelta]:
    """The i-th new destination's first run after the tick that first saw them: in groups of
    ``per_tick``, spread over the frequency's period, or over the ticks the groups need if that is
    shorter."""
    groups = -(-count // per_tick)
    span = min(timedelta(minutes=frequency_minutes or 1440), timedelta(seconds=groups * sensors.TICK_SECONDS))
    return [span * (i // per_tick) / groups for i in range(count)]


@pytest.mark.parametrize(("count", "per_tick", "frequency_minutes"), [
    (31, 1, 15),  # 31 ticks of 30 s are longer than 15 minutes: spread over the frequency's period
    (6, 2, 0),  # daily: over the 3 ticks that 2 first runs a tick need
])
def test_first_runs_of_many_new_destinations_are_spread_and_each_is_requested_once_at_its_time(
        tmp_path: Path, count: int, per_tick: int, frequency_minutes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sensors, "FIRST_RUNS_PER_TICK", per_tick)
    config = load_config(set_frequency(write_scale_config(tmp_path, count), frequency_minutes))
    start = datetime(2026, 12, 1, 10, 0, 3, tzinfo=UTC)
    offsets = expected_first_runs(count, frequency_minutes, per_tick)
    if frequency_minutes == 15:
        assert offsets[-1] == timedelta(minutes=15) * 30 / 31  # the last of 31 groups of one
    ticks = [start + timedelta(seconds=sensors.TICK_SECONDS * n) for n in range(40)]  # the daemon's
    first_seen: dict[str, datetime] = {}
    cursor: dict[str, str] = {}
    for now in ticks:
        requests, cursor = schedule_requests(config, cursor, now)
        for request in requests:
            destination = request.run_key.split("@")[0]
            if frequency_minutes == 0:
                assert destination not in first_seen, f"{destination} requested twice in one day"
            first_seen.setdefault(destination, now)
    assert first_seen == {f"d{i}": next(t for t in ticks if t >= start + offsets[i]) for i in range(count)}
    assert not [k for k in cursor if k.startswith(sensors.FIRST_PREFIX)]  # all requested: no plan kept


def test_a_few_new_destinations_all_run_at_once(tmp_path: Path) -> None:
    config = load_config(write_scale_config(tmp_path, 5))  # fewer than FIRST_RUNS_PER_TICK
    requests, cursor = schedule_requests(config, {}, datetime.now(UTC))
    assert len(requests) == 5
    assert not [k for k in cursor if k.startswith(sensors.FIRST_PREFIX)]


def test_the_sensor_on_a_real_instance_requests_the_first_new_destinations_and_plans_the_rest(
        tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    wipe(instance)
    monkeypatch.setattr(sensors, "FIRST_RUNS_PER_TICK", 2)
    config_path = set_frequency(write_scale_config(tmp_path, 6), 15)
    before = datetime.now(UTC)
    result = tick(config_path, instance, None)
    after = datetime.now(UTC)
    assert [r.run_key.split("@")[0] for r in result.run_requests] == ["d0", "d1"]  # the first group
    cursor = json.loads(result.cursor)
    planned = {name: datetime.fromisoformat(cursor[sensors.FIRST_PREFIX + name]) for name in
               (f"d{i}" for i in range(2, 6))}
    offsets = expected_first_runs(6, 15, 2)  # 3 groups of 2 (3 ticks: shorter than 15 minutes): 0, 0, 30, 30, 60, 60 s
    assert offsets[2:] == [timedelta(seconds=s) for s in (30, 30, 60, 60)]
    for i in range(2, 6):
        assert before + offsets[i] <= planned[f"d{i}"] <= after + offsets[i]
        assert planned[f"d{i}"] - planned["d2"] == offsets[i] - offsets[2]
    # the next tick before any planned time requests nothing more and keeps the plan
    again = tick(config_path, instance, result.cursor)
    if datetime.now(UTC) < planned["d2"]:
        assert not again.run_requests
        assert {k: v for k, v in json.loads(again.cursor).items() if k.startswith(sensors.FIRST_PREFIX)} == {
            k: v for k, v in cursor.items() if k.startswith(sensors.FIRST_PREFIX)}
