"""The daemon's webhook sensors (in the code location that does the instance's upkeep, and only
when the configuration has a store): ``transfer_events`` writes an event per finished transfer
or failed integrity run, ``webhook_delivery`` delivers what is due. Both launch nothing."""

from __future__ import annotations

from datetime import UTC, datetime

from dagster import (
    DefaultSensorStatus,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from transfer_platform.config.parsing import read_file
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.store.database import engine_for
from transfer_platform.store.resources import store_settings


def _engine(platform: TransferPlatformResource):
    settings = store_settings(read_file(platform.config_path)[1], platform.config_path)
    return None if settings is None else engine_for(settings.connection)


def _recipient_of(platform: TransferPlatformResource):
    def lookup(destination: str) -> str | None:
        try:  # the whole file, not this shard's share
            return TransferPlatformResource(config_path=platform.config_path).config.destination(destination).recipient
        except Exception:  # noqa: BLE001 - a destination since removed: the event says None
            return None
    return lookup


def evaluate_transfer_events(context: SensorEvaluationContext, platform: TransferPlatformResource) -> SkipReason:
    from transfer_platform.webhooks.transfer_events import record_run_events

    engine = _engine(platform)
    if engine is None:
        return SkipReason("the configuration has no store: no webhooks")
    recorded = record_run_events(context.instance, engine, context.cursor, datetime.now(UTC),
                                 _recipient_of(platform))
    context.update_cursor(recorded.cursor)
    waiting = f"; {recorded.held} failed run(s) wait for the sweep" if recorded.held else ""
    return SkipReason(f"{len(recorded.emitted)} event(s) written{waiting}")


def evaluate_delivery(context: SensorEvaluationContext, platform: TransferPlatformResource) -> SkipReason:
    from transfer_platform.webhooks.delivery import deliver_due

    engine = _engine(platform)
    if engine is None:
        return SkipReason("the configuration has no store: no webhooks")
    report = deliver_due(engine, now=datetime.now(UTC))
    if report.retrying or report.failed:
        context.log.warning(report.summary())
    return SkipReason(report.summary())


def webhook_sensors() -> list[SensorDefinition]:
    return [
        sensor(name="transfer_events", minimum_interval_seconds=15, default_status=DefaultSensorStatus.RUNNING,
               description="Writes one webhook event per finished transfer run (transfer.success, .error, "
                           ".partial_failure, .expired, .orphaned) and per integrity run with a failed "
                           "check, into the store's outbox.")(evaluate_transfer_events),
        sensor(name="webhook_delivery", minimum_interval_seconds=15, default_status=DefaultSensorStatus.RUNNING,
               description="Delivers the store's events to the webhooks subscribed to them: signed POSTs, "
                           "retried with backoff.")(evaluate_delivery),
    ]
