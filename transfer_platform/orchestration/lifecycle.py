"""The heartbeat of running transfers and the sweep that finds expired and orphaned ones.

Dagster knows QUEUED .. SUCCESS/FAILURE/CANCELED; the lifecycle (statuses read off a run by
:func:`transfer_platform.core.lifecycle.transfer_status`) needs more, so:

- CANCELLED vs KILLED: a cancelled run that never started vs one stopped while running;
- PARTIAL_FAILURE vs ERROR: some models succeeded (run tags of the transfer job, or the run's
  steps for asset runs) vs none did;
- EXPIRED: Dagster has no timeout for queued runs, so :func:`sweep` cancels runs pending longer
  than 6 hours and tags them;
- ORPHANED: the default run launcher cannot see a dead worker (SIGKILL, a lost machine), so every
  running transfer writes a heartbeat run tag every ``HEARTBEAT_SECONDS``; :func:`sweep` marks a
  running transfer whose heartbeat is older than ``ORPHANED_AFTER`` as failed and tags it.

The sweep runs on every tick of the transfer sensor (and from ``transfer-platform transfers``).
"""


import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta

from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from transfer_platform.core.lifecycle import (
    EXPIRE_AFTER,
    EXPIRED_TAG,
    HEARTBEAT_TAG,
    MODELS_FAILED_TAG,
    MODELS_SUCCEEDED_TAG,
    ORPHANED_AFTER,
    ORPHANED_TAG,
)
from transfer_platform.orchestration.run_tags import KIND_TAG, KINDS


def heartbeat_seconds() -> float:
    return float(os.environ.get("TRANSFER_PLATFORM_HEARTBEAT_SECONDS", "30"))


@contextmanager
def heartbeat(instance: DagsterInstance, run_id: str, every: float | None = None) -> Iterator[None]:
    """Write the run's heartbeat tag now and every ``every`` seconds until the block ends."""
    interval = heartbeat_seconds() if every is None else every
    stop = threading.Event()

    def beat() -> None:
        instance.add_run_tags(run_id, {HEARTBEAT_TAG: datetime.now(UTC).isoformat()})

    beat()

    def loop() -> None:
        while not stop.wait(interval):
            with suppress(Exception):  # a missed beat is retried at the next interval
                beat()

    thread = threading.Thread(target=loop, name=f"heartbeat-{run_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def record_model_outcomes(instance: DagsterInstance, run_id: str, succeeded: int, failed: int) -> None:
    """Add one step's models to the run's ``models_succeeded`` / ``models_failed`` tags, which
    tell PARTIAL_FAILURE from ERROR. Added, not set: a Materialize or backfill run has one step
    per destination and partitioning, each with several models (steps run one after the other,
    in the run's one process)."""
    tags = instance.get_run_by_id(run_id).tags
    instance.add_run_tags(run_id, {
        MODELS_SUCCEEDED_TAG: str(int(tags.get(MODELS_SUCCEEDED_TAG, 0)) + succeeded),
        MODELS_FAILED_TAG: str(int(tags.get(MODELS_FAILED_TAG, 0)) + failed)})


def sweep(instance: DagsterInstance, now: datetime) -> dict[str, list[str]]:
    """Cancel transfers pending for longer than 6 hours (EXPIRED) and fail running transfers whose
    heartbeat stopped (ORPHANED). Returns the run ids of each."""
    expired, orphaned = [], []
    queued = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.QUEUED],
                                                 tags={KIND_TAG: list(KINDS)}))
    for record in queued:
        if now - record.create_timestamp.astimezone(UTC) > EXPIRE_AFTER:
            instance.add_run_tags(record.dagster_run.run_id, {EXPIRED_TAG: "true"})
            instance.run_coordinator.cancel_run(record.dagster_run.run_id)
            expired.append(record.dagster_run.run_id)
    running = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.STARTED],
                                                  tags={KIND_TAG: list(KINDS)}))
    for record in running:
        run = record.dagster_run
        beat = run.tags.get(HEARTBEAT_TAG)
        last = datetime.fromisoformat(beat) if beat else datetime.fromtimestamp(record.start_time or 0, UTC)
        if now - last > ORPHANED_AFTER:
            instance.add_run_tags(run.run_id, {ORPHANED_TAG: "true"})
            instance.report_run_failed(
                run, f"orphaned: no heartbeat since {last.isoformat()} (the worker died without a "
                     "word); the next transfer cleans what it left in staging and resumes")
            orphaned.append(run.run_id)
    orphaned += _killed_workers(instance, now)
    return {"expired": expired, "orphaned": orphaned}


#: what Dagster's code server writes when the run worker it launched died under it
_WORKER_DIED = ("was terminated by signal", "unexpectedly exited")
SWEPT_TAG = "transfer_platform/swept"


def _killed_workers(instance: DagsterInstance, now: datetime) -> list[str]:
    """Failed transfers whose worker was killed (the code server noticed and failed the run
    itself, so no heartbeat went stale): ORPHANED too. Each failed run is looked at once."""
    found = []
    failed = instance.get_run_records(RunsFilter(
        statuses=[DagsterRunStatus.FAILURE], tags={KIND_TAG: list(KINDS)},
        updated_after=now - timedelta(days=1)))
    for record in failed:
        run = record.dagster_run
        if SWEPT_TAG in run.tags or ORPHANED_TAG in run.tags:
            continue
        events = instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ENGINE_EVENT).records
        died = any(any(text in (e.event_log_entry.message or "") for text in _WORKER_DIED) for e in events)
        instance.add_run_tags(run.run_id, {SWEPT_TAG: "true", **({ORPHANED_TAG: "true"} if died else {})})
        if died:
            found.append(run.run_id)
    return found
