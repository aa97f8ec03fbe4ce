"""The real ``dagster-daemon run`` against the repository's ``workspace.yaml`` and ``dagster.yaml``.

Transfers are enqueued as ``transfer-platform transfer --enqueue`` does (``transfers.enqueue``),
the daemon's queue starts them in real run-worker processes (each with its own Spark JVM), and the
run records' start/end times show that the limits held. The ``transfer_schedule`` sensor is left
running: it enqueues the scheduled transfer of the one *enabled* destination (``globex_delta``), and
that run is part of the analysis; ``acme_delta`` is disabled, so only the test's runs go there.

:class:`RunningPlatform` (also used by ``test_lifecycle_processes``) starts the daemon and one code
server for submissions (``TRANSFER_PLATFORM_WORKSPACE`` points ``enqueue`` at it instead of starting
a code server per submission) in their own sessions, and kills both process groups and every
process left with its ``DAGSTER_HOME`` (run workers, Spark JVMs) at the end.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import dagster as dg
import pytest

from transfer_platform.orchestration.runs.transfers import (
    TransferFilter,
    list_transfers,
)
from transfer_platform_tests.support.daemon import (
    FINISHED,
    running_platform,
)
from transfer_platform_tests.support.platform import delivered, lake_rows

pytestmark = pytest.mark.integration

# each run starts its own JVM: C1-only JIT and the serial GC halve a short run's start-up here


def test_daemon_runs_queued_transfers_within_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = {"acme": {"max_concurrent_transfers": 1, "is_enabled": False},
                    "globex": {"max_concurrent_transfers": 2, "is_enabled": True}}
    with running_platform(tmp_path, monkeypatch, destinations=destinations, window=None) as platform:
        instance = platform.instance
        acme = [platform.enqueue("acme_delta"), platform.enqueue("acme_delta", ["items"]),
                platform.enqueue("acme_delta", ["notes"])]

        def scheduled() -> list[dg.DagsterRun]:
            return instance.get_runs(dg.RunsFilter(tags={".dagster/transfer_platform/trigger": "sensor"}))

        platform.wait_for("the sensor's scheduled transfer of globex_delta", lambda: bool(scheduled()), 120)
        (sensor_run,) = scheduled()
        assert sensor_run.tags["transfer_platform/destination"] == "globex_delta"
        run_ids = [*acme, sensor_run.run_id]

        snapshots: list[dict[str, dg.DagsterRunStatus]] = []

        def all_finished() -> bool:
            snapshots.append({i: instance.get_run_by_id(i).status for i in run_ids})
            return all(status in FINISHED for status in snapshots[-1].values())

        platform.wait_for("every transfer to finish", all_finished, 420)

        records = {i: platform.record(i) for i in run_ids}
        for run_id, record in records.items():
            assert record.dagster_run.status == dg.DagsterRunStatus.SUCCESS, (
                f"{run_id} ended {record.dagster_run.status}\n{platform.daemon_log_tail()}")

        def interval(run_id: str) -> tuple[float, float]:
            return records[run_id].start_time, records[run_id].end_time

        def overlap(a: str, b: str) -> bool:
            (a_start, a_end), (b_start, b_end) = interval(a), interval(b)
            return a_start < b_end and b_start < a_end

        for a, b in itertools.combinations(acme, 2):
            assert not overlap(a, b), "two transfers ran at once on acme_delta (max_concurrent_transfers 1)"
        # the limit was exercised, not met by chance: an acme transfer waited while another ran
        assert any(sum(snap[i] == dg.DagsterRunStatus.STARTED for i in acme) == 1
                   and any(snap[i] == dg.DagsterRunStatus.QUEUED for i in acme) for snap in snapshots)
        # and different destinations did run at the same time (the limits are not one global lock)
        assert any(overlap(a, sensor_run.run_id) for a in acme)

        listed = {t["id"]: t for t in list_transfers(instance, TransferFilter())}
        for run_id in run_ids:
            assert listed[run_id]["status"] == "SUCCESS"
            assert listed[run_id]["started_at"]
            assert listed[run_id]["ended_at"]

    for recipient in ("acme", "globex"):
        for table in ("items", "notes"):
            expected = lake_rows(tmp_path, table, recipient)
            assert expected, (recipient, table)
            assert delivered(tmp_path, recipient, table) == expected, (recipient, table)
