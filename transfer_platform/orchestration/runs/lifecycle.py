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

from dagster import DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.lifecycle import (
    EXPIRE_AFTER,
    EXPIRED_TAG,
    HEARTBEAT_TAG,
    MODELS_FAILED_TAG,
    MODELS_SUCCEEDED_TAG,
    ORPHANED_AFTER,
    ORPHANED_TAG,
    ended_status,
    transfer_status,
)
from transfer_platform.orchestration.scheduling.budget import Budget, unlimited
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    HIDDEN_PREFIX,
    KIND_TAG,
    KINDS,
    MODELS_TAG,
    ROWS_TAG,
    STATUS_TAG,
)


@contextmanager
def heartbeat(instance: DagsterInstance, run_id: str, every: float | None = None) -> Iterator[None]:
    """Write the run's heartbeat tag now and every ``every`` seconds until the block ends."""
    interval = float(os.environ.get("TRANSFER_PLATFORM_HEARTBEAT_SECONDS", "30")) if every is None else every
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


def record_model_outcomes(instance: DagsterInstance, run_id: str, succeeded: int, failed: int,
                          rows: int = 0) -> None:
    """Add one step's models to the run's ``models_succeeded`` / ``models_failed`` tags, which
    tell PARTIAL_FAILURE from ERROR, and write the visible ``status`` and ``rows_transferred``
    tags the runs list shows. Added, not set: a Materialize or backfill run has one step
    per destination and partitioning, each with several models (steps run one after the other,
    in the run's one process)."""
    tags = instance.get_run_by_id(run_id).tags
    succeeded += int(tags.get(MODELS_SUCCEEDED_TAG, 0))
    failed += int(tags.get(MODELS_FAILED_TAG, 0))
    instance.add_run_tags(run_id, {
        MODELS_SUCCEEDED_TAG: str(succeeded), MODELS_FAILED_TAG: str(failed),
        STATUS_TAG: ended_status(succeeded, failed),
        ROWS_TAG: str(int(tags.get(ROWS_TAG, 0)) + rows)})


def record_interrupted(instance: DagsterInstance, run_id: str, rows: int = 0) -> str:
    """A run stopped while it moved rows: KILLED when a user cancelled it (Dagster marks the run
    CANCELING first), else ERROR (its process was stopped: ``dagster dev`` ending, a signal).
    Writes the visible tags and returns the status."""
    run = instance.get_run_by_id(run_id)
    status = "KILLED" if run.status in (DagsterRunStatus.CANCELING, DagsterRunStatus.CANCELED) else "ERROR"
    instance.add_run_tags(run_id, {STATUS_TAG: status, ROWS_TAG: str(int(run.tags.get(ROWS_TAG, 0)) + rows)})
    return status


def sweep(instance: DagsterInstance, now: datetime, config: PlatformConfig | None = None,
          budget: Budget | None = None) -> dict[str, list[str]]:
    """Cancel transfers pending for longer than 6 hours (EXPIRED) and fail running transfers whose
    heartbeat stopped (ORPHANED). Returns the run ids of each. Each gets its visible ``status``
    tag; with ``config``, the ``last_transfer`` check of each of its models fails with the reason.
    Transfers cancelled while pending (from the UI, which writes no tag) get their status too.
    Once ``budget`` is spent, the runs not looked at yet are left (untagged) for the next sweep."""
    budget = budget or unlimited()
    expired, orphaned = [], []
    queued = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.QUEUED],
                                                 tags={KIND_TAG: list(KINDS)}))
    for record in queued:
        if now - record.create_timestamp.astimezone(UTC) > EXPIRE_AFTER:
            if budget.spent():
                budget.leave("expired run to cancel")
                continue
            instance.add_run_tags(record.dagster_run.run_id, {EXPIRED_TAG: "true", STATUS_TAG: "EXPIRED"})
            instance.run_coordinator.cancel_run(record.dagster_run.run_id)
            expired.append(record.dagster_run.run_id)
            _report(instance, config, record.dagster_run, "EXPIRED",
                    f"pending for more than {EXPIRE_AFTER} without starting: the run queue's limits or "
                    "a stopped dagster-daemon kept it waiting; it was cancelled")
    running = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.STARTED],
                                                  tags={KIND_TAG: list(KINDS)}))
    for record in running:
        run = record.dagster_run
        beat = run.tags.get(HEARTBEAT_TAG)
        last = datetime.fromisoformat(beat) if beat else datetime.fromtimestamp(record.start_time or 0, UTC)
        if now - last > ORPHANED_AFTER:
            if budget.spent():
                budget.leave("orphaned run to fail")
                continue
            message = (f"orphaned: no heartbeat since {last.isoformat()} (the worker died without a "
                       "word); the next transfer cleans what it left in staging and resumes")
            instance.add_run_tags(run.run_id, {ORPHANED_TAG: "true", STATUS_TAG: "ORPHANED"})
            instance.report_run_failed(run, message)
            orphaned.append(run.run_id)
            _report(instance, config, run, "ORPHANED", message)
    for run_id in _killed_workers(instance, now, budget):
        orphaned.append(run_id)
        _report(instance, config, instance.get_run_by_id(run_id), "ORPHANED",
                "orphaned: the run's worker process was killed; the next transfer cleans what it "
                "left in staging and resumes")
    _label_cancelled(instance, now, budget)
    return {"expired": expired, "orphaned": orphaned}


def _report(instance: DagsterInstance, config: PlatformConfig | None, run: DagsterRun, status: str,
            message: str) -> None:
    """The ``last_transfer`` check of each model of a transfer the sweep ended."""
    from transfer_platform.orchestration.catalog.keys import transfer_asset_key
    from transfer_platform.orchestration.catalog.last_transfer import outcome, report_runless

    if config is None or run.tags.get(KIND_TAG) != "transfer" or DESTINATION_TAG not in run.tags:
        return
    try:
        destination = config.destination(run.tags[DESTINATION_TAG])
    except Exception:  # noqa: BLE001 - a destination since removed from the configuration
        return
    models = [m for m in run.tags.get(MODELS_TAG, "").split(",") if m]
    report_runless(instance, [
        outcome(transfer_asset_key(destination.recipient, destination.name, model), status, run.run_id,
                error=message, error_type=status, blame="platform") for model in models])


def _label_cancelled(instance: DagsterInstance, now: datetime, budget: Budget) -> None:
    """The status tag of transfers cancelled without one (cancelled from the UI while pending)."""
    for record in instance.get_run_records(RunsFilter(
            statuses=[DagsterRunStatus.CANCELED], tags={KIND_TAG: list(KINDS)},
            updated_after=now - timedelta(days=1))):
        run = record.dagster_run
        if STATUS_TAG not in run.tags:
            if budget.spent():
                budget.leave("cancelled run to label")
                continue
            instance.add_run_tags(run.run_id, {STATUS_TAG: transfer_status(
                run.status.value, dict(run.tags), started=record.start_time is not None)})


#: what Dagster's code server writes when the run worker it launched died under it
_WORKER_DIED = ("was terminated by signal", "unexpectedly exited")
SWEPT_TAG = f"{HIDDEN_PREFIX}/swept"


def _killed_workers(instance: DagsterInstance, now: datetime, budget: Budget) -> list[str]:
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
        if budget.spent():
            budget.leave("failed run to look at")
            continue
        events = instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ENGINE_EVENT).records
        died = any(any(text in (e.event_log_entry.message or "") for text in _WORKER_DIED) for e in events)
        status = "ORPHANED" if died else run.tags.get(STATUS_TAG) or transfer_status(
            run.status.value, dict(run.tags), started=record.start_time is not None)  # died before it said
        instance.add_run_tags(run.run_id, {SWEPT_TAG: "true", STATUS_TAG: status,
                                           **({ORPHANED_TAG: "true"} if died else {})})
        if died:
            found.append(run.run_id)
    return found
