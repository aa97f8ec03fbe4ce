"""Run retention: Dagster keeps every run and its event log forever; this deletes old ones.

Each tick of the ``run_retention`` sensor (its own, so that the ``transfer_schedule`` sensor's
ticks stay short) deletes, with Dagster's public
``DagsterInstance.delete_run`` (the run, its tags and its event log), at most
``dagster.runs_deleted_per_tick`` finished runs (SUCCESS, FAILURE, CANCELED) created more than
``dagster.run_retention_days`` days ago, oldest first. It never deletes:

- a run that has not finished (queued, starting, running, cancelling);
- the newest successful run of each destination and kind (``transfer``, ``integrity``,
  ``delete_sweep``), however old: the sensor reads "has this destination had a successful
  transfer" from the run storage (integrity checks wait for it) and ``transfer-platform transfers``
  lists it as the destination's last delivery.

What deleting an old run loses: its row in ``transfer-platform transfers`` and the UI's run list,
its logs, and the materializations and check evaluations it recorded (a daily partition last
materialized 31 days ago shows as not materialized in the UI). Nothing that moves data reads
them: watermarks and delivered rows live in the destinations.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRecord,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from transfer_platform.config.models import DagsterSettings
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.scheduling.budget import Budget, unlimited
from transfer_platform.orchestration.scheduling.run_tags import DESTINATION_TAG, KIND_TAG

FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]


def purge_runs(instance: DagsterInstance, now: datetime, settings: DagsterSettings,
               budget: Budget | None = None, on_delete: Callable[[str], None] | None = None) -> list[str]:
    """Delete at most ``settings.runs_deleted_per_tick`` finished runs older than the retention,
    oldest first, keeping each destination's newest successful run of each kind; the ids deleted.
    Runs kept for that reason are passed over (read in pages of the same size) so that they never
    stall the purge. Once ``budget`` is spent, the rest waits for the next tick."""
    budget = budget or unlimited()
    cutoff = now - timedelta(days=settings.run_retention_days)
    limit = settings.runs_deleted_per_tick
    newest_success: dict[tuple[str, str], str | None] = {}
    deleted: list[str] = []
    cursor = None
    while len(deleted) < limit:
        page = instance.get_run_records(RunsFilter(statuses=FINISHED, created_before=cutoff),
                                        limit=limit, ascending=True, cursor=cursor)
        for record in page:
            if len(deleted) >= limit:
                break
            if budget.spent():
                budget.leave("old run to delete")
                return deleted
            if _kept(instance, record, newest_success):
                continue
            instance.delete_run(record.dagster_run.run_id)
            deleted.append(record.dagster_run.run_id)
            if on_delete:
                on_delete(record.dagster_run.run_id)
        if len(page) < limit:
            break
        cursor = page[-1].dagster_run.run_id
    return deleted


def _kept(instance: DagsterInstance, record: RunRecord, newest_success: dict[tuple[str, str], str | None]) -> bool:
    tags = record.dagster_run.tags
    destination = tags.get(DESTINATION_TAG)
    if not destination or record.dagster_run.status != DagsterRunStatus.SUCCESS:
        return False
    key = (destination, tags.get(KIND_TAG, ""))
    if key not in newest_success:
        wanted = {DESTINATION_TAG: destination, **({KIND_TAG: key[1]} if key[1] else {})}
        (latest,) = instance.get_run_records(RunsFilter(tags=wanted, statuses=[DagsterRunStatus.SUCCESS]),
                                             limit=1) or (None,)
        newest_success[key] = latest.dagster_run.run_id if latest else None
    return newest_success[key] == record.dagster_run.run_id


def run_retention_sensor() -> SensorDefinition:
    """The sensor that deletes old runs (:func:`purge_runs`), once a minute; it launches nothing."""
    return sensor(name="run_retention", minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING,
                  description="Deletes finished runs older than the configuration's "
                              "dagster.run_retention_days with their event logs (at most "
                              "dagster.runs_deleted_per_tick a tick), keeping each destination's "
                              "newest successful run of each kind.")(evaluate_retention)


def evaluate_retention(context: SensorEvaluationContext, platform: TransferPlatformResource) -> SkipReason:
    settings = platform.config.dagster
    budget = Budget()
    purged = purge_runs(context.instance, datetime.now(UTC), settings, budget)
    if left := budget.summary():
        context.log.warning(left)
    if purged:
        context.log.info(f"deleted {len(purged)} run(s) older than {settings.run_retention_days} day(s) "
                         "with their event logs")
        return SkipReason(f"deleted {len(purged)} run(s) older than {settings.run_retention_days} day(s)")
    return SkipReason(f"no finished run older than {settings.run_retention_days} day(s) to delete")
