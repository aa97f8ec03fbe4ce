"""The production instance settings of docs/operations.md (deploy/dagster.production.yaml) load for real:
storage on PostgreSQL (dagster-postgres) and transfer_platform's run coordinator with the
configuration's limits."""

from __future__ import annotations

import shutil
import uuid

import dagster as dg
import pytest

from transfer_platform.orchestration.scheduling.run_tags import dest_slots_key, model_key
from transfer_platform_tests.support.dagster import launch, transfer_run_config, workspace
from transfer_platform_tests.support.platform import REPO, write_config
from transfer_platform_tests.support.postgres import PG

pytestmark = pytest.mark.integration


def test_production_settings_store_runs_in_postgres_and_queue_them_under_the_limits(
        tmp_path, monkeypatch, dagster_database):
    config_path = write_config(tmp_path, destinations={"acme": {"max_concurrent_transfers": 2}})
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.production.yaml", home / "dagster.yaml")
    for key, value in {"DAGSTER_PG_HOST": PG["host"], "DAGSTER_PG_PORT": str(PG["port"]),
                       "DAGSTER_PG_DB": dagster_database, "DAGSTER_PG_USERNAME": PG["user"],
                       "DAGSTER_PG_PASSWORD": "", "TRANSFER_PLATFORM_CONFIG": str(config_path)}.items():
        monkeypatch.setenv(key, value)

    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.run_coordinator).__name__ == "TransferRunCoordinator"
        rules = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert {"key": dest_slots_key(2), "value": {"applyLimitPerUniqueValue": True}, "limit": 2} in rules
        assert {"key": model_key("items"), "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in rules
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 16
        run = instance.create_run_for_job(dg.GraphDefinition("noop").to_job(), run_id=str(uuid.uuid4()))
        assert instance.get_run_by_id(run.run_id) is not None  # stored in PostgreSQL
        instance.report_engine_event("stored with a NOTIFY to listeners", run)  # the event log too
        assert any("stored with a NOTIFY to listeners" in (r.message or "") for r in instance.all_logs(run.run_id))


def test_production_settings_keep_storage_connections_open_while_runs_are_created_and_queued(
        tmp_path, monkeypatch, dagster_database):
    """The daemon creates and queues a sensor tick's runs (~20 storage queries each); with the
    shipped settings they reuse open connections instead of opening one per query (1,000 runs:
    ~20,000 PostgreSQL connections, half of the tick's time: docs/operations.md)."""
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    config_path = write_config(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.production.yaml", home / "dagster.yaml")
    for key, value in {"DAGSTER_PG_HOST": PG["host"], "DAGSTER_PG_PORT": str(PG["port"]),
                       "DAGSTER_PG_DB": dagster_database, "DAGSTER_PG_USERNAME": PG["user"],
                       "DAGSTER_PG_PASSWORD": "", "TRANSFER_PLATFORM_CONFIG": str(config_path)}.items():
        monkeypatch.setenv(key, value)
    opened = []

    def count(*_args) -> None:
        opened.append(1)

    with dg.DagsterInstance.from_config(str(home)) as instance, workspace(instance) as context:
        instance.run_coordinator  # noqa: B018 - opened as the daemon has it
        launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))  # connections opened
        event.listen(Pool, "connect", count)
        try:
            runs = 20
            for _ in range(runs):
                launch(instance, context, "transfer", run_config=transfer_run_config("acme_delta"))
        finally:
            event.remove(Pool, "connect", count)
        runs += 1
        assert instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED])) == runs
    assert len(opened) <= 6, f"{len(opened)} PostgreSQL connections opened for {runs} runs"
