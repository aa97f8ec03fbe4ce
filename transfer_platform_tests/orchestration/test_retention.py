"""Retention bounds Dagster's storage: old finished runs are deleted with their event logs by the
``run_retention`` sensor's tick (``dagster.run_retention_days``, at most
``dagster.runs_deleted_per_tick`` a tick), newer and unfinished runs stay, each destination keeps
its newest successful run; a bad setting is refused; the shipped instance files' tick-history
retention loads. A real Dagster instance (SQLite storage), real runs and events, no mocks.
"""

from __future__ import annotations

import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.scheduler.instigation import InstigatorType, TickStatus

from transfer_platform.config.loading import load_config
from transfer_platform.config.models import DagsterSettings
from transfer_platform.definitions import build_definitions
from transfer_platform.errors import ConfigError
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.instance.retention import purge_runs
from transfer_platform.orchestration.scheduling.run_tags import DESTINATION_TAG, KIND_TAG
from transfer_platform_tests.support.platform import REPO, write_config

pytestmark = [pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

NOW = datetime.now(UTC)


@pytest.fixture
def instance():
    with dg.instance_for_test() as test_instance:
        yield test_instance


def make_run(instance: dg.DagsterInstance, status: dg.DagsterRunStatus, age_days: float,
             destination: str | None = None, kind: str = "transfer") -> str:
    """A run created ``age_days`` ago, in ``status``, with a log event of its own."""
    tags = {DESTINATION_TAG: destination, KIND_TAG: kind} if destination else {}
    run = instance.add_run(dg.DagsterRun(job_name="noop", run_id=str(uuid.uuid4()), tags=tags, status=status))
    instance.report_engine_event(f"event of {run.run_id}", run)
    created = (NOW - timedelta(days=age_days)).replace(tzinfo=None)  # run storage keeps naive UTC
    with instance.run_storage.connect() as conn:  # create times cannot be given: age the row
        from dagster._core.storage.runs.schema import RunsTable
        conn.execute(RunsTable.update().where(RunsTable.c.run_id == run.run_id)
                     .values(create_timestamp=created))
    return run.run_id


def exists(instance: dg.DagsterInstance, run_id: str) -> bool:
    return instance.get_run_by_id(run_id) is not None


def events(instance: dg.DagsterInstance, run_id: str) -> int:
    return len(instance.all_logs(run_id))


def test_old_finished_runs_are_deleted_with_their_events_newer_and_unfinished_kept(instance) -> None:
    old = [make_run(instance, status, 40) for status in
           (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)]
    unfinished = [make_run(instance, status, 40) for status in
                  (dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
                   dg.DagsterRunStatus.CANCELING)]
    recent = make_run(instance, dg.DagsterRunStatus.SUCCESS, 29)
    assert all(events(instance, run_id) == 1 for run_id in old)

    deleted = purge_runs(instance, NOW, DagsterSettings(run_retention_days=30))

    assert sorted(deleted) == sorted(old)
    for run_id in old:
        assert not exists(instance, run_id)
        assert events(instance, run_id) == 0  # the event log went with the run
    for run_id in [*unfinished, recent]:
        assert exists(instance, run_id)
        assert events(instance, run_id) == 1


def test_at_most_the_bound_a_tick_oldest_first(instance) -> None:
    runs = [make_run(instance, dg.DagsterRunStatus.SUCCESS, 60 - i) for i in range(7)]  # oldest first
    settings = DagsterSettings(run_retention_days=30, runs_deleted_per_tick=3)
    assert purge_runs(instance, NOW, settings) == runs[:3]
    assert [exists(instance, r) for r in runs] == [False] * 3 + [True] * 4
    assert purge_runs(instance, NOW, settings) == runs[3:6]
    assert purge_runs(instance, NOW, settings) == runs[6:]
    assert purge_runs(instance, NOW, settings) == []


def test_each_destination_keeps_its_newest_success_and_kept_runs_do_not_stall_the_purge(instance) -> None:
    # three destinations idle for 40+ days: each keeps its newest successful transfer and
    # integrity run; the 2-a-tick bound still reaches the deletable runs behind them
    kept, deletable = [], []
    for name in ("a", "b", "c"):
        deletable.append(make_run(instance, dg.DagsterRunStatus.SUCCESS, 50, name))
        kept.append(make_run(instance, dg.DagsterRunStatus.SUCCESS, 45, name))
        deletable.append(make_run(instance, dg.DagsterRunStatus.FAILURE, 44, name))  # newer, but failed
        kept.append(make_run(instance, dg.DagsterRunStatus.SUCCESS, 43, name, kind="integrity"))
    settings = DagsterSettings(run_retention_days=30, runs_deleted_per_tick=2)
    deleted = []
    for _ in range(4):
        deleted += purge_runs(instance, NOW, settings)
    assert sorted(deleted) == sorted(deletable)
    assert all(exists(instance, r) for r in kept)
    # once a newer success exists, the old one goes
    make_run(instance, dg.DagsterRunStatus.SUCCESS, 1, "a")
    assert purge_runs(instance, NOW, settings) == [kept[0]]


def test_the_sensor_tick_purges(instance, tmp_path: Path) -> None:
    config_path = write_config(tmp_path, destinations={"acme": {"is_enabled": False}})
    raw = yaml.safe_load(config_path.read_text())
    raw["dagster"] = {"run_retention_days": 10, "runs_deleted_per_tick": 1}
    config_path.write_text(yaml.safe_dump(raw))
    old = [make_run(instance, dg.DagsterRunStatus.FAILURE, 20) for _ in range(2)]
    sensor = build_definitions(str(config_path)).resolve_sensor_def("run_retention")
    sensor(dg.build_sensor_context(instance=instance, resources={
        "platform": TransferPlatformResource(config_path=str(config_path))}))
    assert [exists(instance, r) for r in old] == [False, True]


@pytest.mark.parametrize(("setting", "value"), [("run_retention_days", 0), ("run_retention_days", "soon"),
                                           ("runs_deleted_per_tick", 0), ("runs_deleted_per_tick", 100_000)])
def test_a_bad_setting_is_refused_naming_it(tmp_path: Path, setting: str, value) -> None:
    config_path = write_config(tmp_path)
    raw = yaml.safe_load(config_path.read_text())
    raw["dagster"] = {setting: value}
    config_path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=f"dagster.{setting}"):
        load_config(config_path)


def test_the_defaults(tmp_path: Path) -> None:
    settings = load_config(write_config(tmp_path)).dagster
    assert (settings.run_retention_days, settings.runs_deleted_per_tick) == (30, 200)


@pytest.mark.parametrize("file", ["dagster.yaml", "deploy/dagster.production.yaml"])
def test_the_shipped_instance_files_bound_tick_history(tmp_path: Path, monkeypatch, file: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / file, home / "dagster.yaml")
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    settings.pop("storage", None)  # the tick retention is what is checked here, not PostgreSQL
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(write_config(tmp_path)))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        sensor_days = instance.get_tick_retention_settings(InstigatorType.SENSOR)
        schedule_days = instance.get_tick_retention_settings(InstigatorType.SCHEDULE)
    # every finished tick goes within a month (Dagster's default keeps all but skipped sensor ticks)
    for days in (sensor_days, schedule_days):
        assert all(0 < days[status] <= 30 for status in (TickStatus.SKIPPED, TickStatus.SUCCESS, TickStatus.FAILURE)), days
    assert sensor_days[TickStatus.SKIPPED] == 7
