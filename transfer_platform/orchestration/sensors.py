"""The sensor that enqueues incremental transfers, and keeps the lifecycle honest.

One sensor reads the configuration (it scales better than a schedule per destination) and, for
each destination with ``is_enabled: true``, requests a run of the ``transfer`` job at every tick
of its ``frequency_minutes`` (aligned to midnight UTC; see :mod:`transfer_platform.core.schedule`).
The run key ``<destination>@<tick>`` makes the daemon drop a second request for the same tick; the
cursor remembers the last tick enqueued per destination, so after downtime the missed ticks are
caught up by one transfer. A disabled destination is never requested. Runs go through the queue
(the run coordinator adds the limit tags), so a transfer that cannot start waits as PENDING.

Each tick also runs the lifecycle sweep: pending transfers older than 6 hours are cancelled
(EXPIRED), running ones without a heartbeat are failed (ORPHANED).
"""


import json
from datetime import UTC, datetime

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.schedule import due
from transfer_platform.core.timeutil import isoformat
from transfer_platform.orchestration.lifecycle import sweep
from transfer_platform.orchestration.resources import TransferPlatformResource
from transfer_platform.orchestration.run_tags import PREFIX, limit_tags
from transfer_platform.orchestration.transfer_job import transfer_job

SCHEDULED_FOR_TAG = f"{PREFIX}/scheduled_for"
MISSED_TICKS_TAG = f"{PREFIX}/missed_ticks"
TRIGGER_TAG = f"{PREFIX}/trigger"


def schedule_requests(config: PlatformConfig, cursor: dict[str, str], now: datetime
                      ) -> tuple[list[RunRequest], dict[str, str]]:
    """The run requests due at ``now`` and the new cursor (destination -> last tick enqueued)."""
    requests, new_cursor = [], {}
    for destination in config.destinations:
        if not destination.is_enabled:
            continue
        last = cursor.get(destination.name)
        last_tick = datetime.fromisoformat(last) if last else None
        new_cursor[destination.name] = last or ""
        when = due(destination.frequency_minutes, last_tick, now)
        if when is None:
            continue
        models = config.models_for(destination)
        tags = {**limit_tags(config, destination.name, models, "transfer"),
                SCHEDULED_FOR_TAG: isoformat(when.tick),
                MISSED_TICKS_TAG: str(when.missed), TRIGGER_TAG: "sensor"}
        requests.append(RunRequest(
            run_key=f"{destination.name}@{isoformat(when.tick)}",
            run_config={"ops": {"run_transfer": {"config": {"destination": destination.name}}}},
            tags=tags,
        ))
        new_cursor[destination.name] = isoformat(when.tick)
    return requests, {k: v for k, v in new_cursor.items() if v}


@sensor(name="transfer_schedule", job=transfer_job, minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Enqueues each enabled destination's incremental transfer on its frequency "
                    "(aligned to midnight UTC); cancels transfers pending > 6 h, fails orphaned ones.")
def transfer_schedule_sensor(context: SensorEvaluationContext, platform: TransferPlatformResource):
    now = datetime.now(UTC)
    swept = sweep(context.instance, now)
    for kind, run_ids in swept.items():
        for run_id in run_ids:
            context.log.warning(f"transfer {run_id} {kind}")
    cursor = json.loads(context.cursor) if context.cursor else {}
    requests, new_cursor = schedule_requests(platform.config, cursor, now)
    if not requests:
        return SensorResult(skip_reason=SkipReason("no destination is due"), cursor=json.dumps(new_cursor))
    return SensorResult(run_requests=requests, cursor=json.dumps(new_cursor, sort_keys=True))
