"""The run queue passes over a run as soon as it is queued, not at the daemon's next interval
(``orchestration/speed/queue_wake.py``), with PostgreSQL run storage as production has it.

The daemon here passes over its queue every hour: a run launched within minutes was launched
because it was queued (its NOTIFY woke the pass), never by the interval.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from transfer_platform.orchestration.speed import queue_wake
from transfer_platform_tests.support.daemon import FINISHED, running_platform
from transfer_platform_tests.support.postgres import PG

pytestmark = pytest.mark.integration

HOUR = 3600


def postgres_settings(database: str, interval: float) -> dict:
    return {"storage": {"postgres": {"postgres_db": {
                "hostname": PG["host"], "port": PG["port"], "db_name": database, "username": PG["user"],
                "scheme": "postgresql+psycopg2"}}},
            "run_coordinator": {"module": "transfer_platform.orchestration.scheduling.coordinator",
                                "class": "TransferRunCoordinator",
                                "config": {"max_concurrent_runs": 4, "dequeue_interval_seconds": interval,
                                           "pooled_storage_connections": True}}}


def test_a_queued_run_is_launched_at_once_not_at_the_next_interval(tmp_path: Path, monkeypatch, dagster_database):
    destinations = {"acme": {"is_enabled": False}}  # no scheduled run: only the test's
    with running_platform(tmp_path, monkeypatch, destinations=destinations, window=None,
                          instance_settings=postgres_settings(dagster_database, HOUR)) as platform:
        instance = platform.instance

        def daemon_passed() -> bool:  # its first pass (at start) is behind us
            beats = instance.get_daemon_heartbeats()
            return "QUEUED_RUN_COORDINATOR" in beats

        platform.wait_for("the daemon's run queue to start", daemon_passed, 120)
        for _ in range(2):  # the second run is queued long after any pass the daemon made at start
            run_id = platform.enqueue("acme_delta")
            platform.wait_for(f"run {run_id} to finish (launched at once, or in an hour)",
                              lambda r=run_id: instance.get_run_by_id(r).status in FINISHED, 240)
            record = platform.record(run_id)
            assert record.dagster_run.status == dg.DagsterRunStatus.SUCCESS, platform.daemon_log_tail()
            assert record.start_time - record.create_timestamp.timestamp() < HOUR / 2


def test_notify_reaches_a_listener_of_the_run_storage(tmp_path: Path, monkeypatch, dagster_database):
    home = tmp_path / "home"
    home.mkdir()
    import yaml

    (home / "dagster.yaml").write_text(yaml.safe_dump(postgres_settings(dagster_database, 1)))
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(tmp_path / "none.yaml"))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        listener = queue_wake.listener_for(instance)
        assert listener is queue_wake.listener_for(instance)  # one per process and database
        assert listener.listening.wait(60)
        listener.event.clear()
        queue_wake.notify(instance)
        assert listener.event.wait(60)
