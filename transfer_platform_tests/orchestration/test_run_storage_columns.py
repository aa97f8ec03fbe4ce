"""The run storage looks its runs table's columns up once per process, not for every run it adds,
every run event it stores and every run it reads (``dagster_internals.remember_run_columns``,
installed by the shipped run coordinator in every process that opens the instance).

Dagster's SQL run storage asks the database, by reflection, whether the runs table has its
``backfill_id`` column each time it adds a run, and its ``start_time``/``end_time`` columns each
time it stores a run event or reads a run: about ten queries of the system catalog a run, ~1 ms
each, in the daemon's tick and in the run's own path.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml

from transfer_platform.orchestration.speed import dagster_internals
from transfer_platform_tests.support.postgres import PG

READS = 6


def column_look_ups(statements: list[str]) -> int:
    """Queries of a table's columns (SQLAlchemy's reflection reads pg_attribute)."""
    return sum("pg_attribute" in statement for statement in statements)


def home(tmp_path: Path, database: str, *, shipped_coordinator: bool) -> str:
    settings: dict = {"storage": {"postgres": {"postgres_db": {
        "hostname": PG["host"], "port": PG["port"], "db_name": database, "username": PG["user"],
        "scheme": "postgresql+psycopg2"}}}, "telemetry": {"enabled": False}}
    if shipped_coordinator:
        shipped = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "dagster.production.yaml")
                                 .read_text())
        settings["run_coordinator"] = shipped["run_coordinator"]
    folder = tmp_path / ("shipped" if shipped_coordinator else "dagster")
    folder.mkdir()
    (folder / "dagster.yaml").write_text(yaml.safe_dump(settings))
    return str(folder)


def runs_read_and_ended(instance: dg.DagsterInstance) -> None:
    """A run stored, read ``READS`` times, started and ended (two run events)."""
    run = instance.add_run(dg.DagsterRun(job_name="transfer", run_id=str(uuid.uuid4())))
    for _ in range(READS):
        assert instance.get_run_by_id(run.run_id) is not None
    instance.report_run_canceling(run)
    instance.report_run_canceled(run)


@pytest.mark.integration
def test_a_process_asks_for_the_runs_table_columns_once(tmp_path: Path, dagster_database: str,
                                                         statements: list[str]) -> None:
    # control: Dagster's own coordinator asks for every read and run event (the count sees them)
    with dg.DagsterInstance.from_config(home(tmp_path, dagster_database, shipped_coordinator=False)) as instance:
        instance.run_coordinator  # noqa: B018 - opened, as every process that launches or runs runs has it
        runs_read_and_ended(instance)  # the tables are created before the counting starts
        statements.clear()
        runs_read_and_ended(instance)
        assert column_look_ups(statements) >= READS
    with dg.DagsterInstance.from_config(home(tmp_path, dagster_database, shipped_coordinator=True)) as instance:
        instance.run_coordinator  # noqa: B018
        runs_read_and_ended(instance)  # the first asks, once
        statements.clear()
        runs_read_and_ended(instance)
        assert column_look_ups(statements) == 0
        assert instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.CANCELED]))[0].end_time


class FakeStorage:
    """Only what the look-ups' memory touches: its class's look-ups."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers, self.asked = answers, 0

    def has_run_stats_index_cols(self) -> bool:
        self.asked += 1
        return self.answers.pop(0)

    def has_backfill_id_column(self) -> bool:
        return True


def test_columns_not_there_are_asked_for_again_until_they_are() -> None:
    """A storage not yet migrated (``dagster instance migrate`` adds the columns while the process
    runs) is asked again each time; once the columns are there, never again."""
    storage = FakeStorage([False, False, True, False])
    assert dagster_internals.remember_run_columns(storage)
    assert [storage.has_run_stats_index_cols() for _ in range(5)] == [False, False, True, True, True]
    assert storage.asked == 3
    assert dagster_internals.remember_run_columns(storage)  # installed once: the same memory
    assert storage.has_run_stats_index_cols()
    assert storage.asked == 3


def test_a_storage_without_the_look_up_is_left_as_it_is() -> None:
    class NotSql:
        pass

    assert not dagster_internals.remember_run_columns(NotSql())
