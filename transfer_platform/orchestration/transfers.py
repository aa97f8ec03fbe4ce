"""Transfers as a user scripts them: enqueue, list with status and metrics, cancel.

A transfer is a Dagster run carrying ``transfer_platform/kind=transfer``: a run of the
``transfer`` job (sensor, ``transfer --enqueue``, the launchpad) or of transfer assets (the UI's
Materialize, backfills). Enqueueing goes through the instance's run coordinator, like the UI, so
the queue's limits apply. Listing reads the runs and their events from the instance: status
(:func:`transfer_platform.orchestration.lifecycle.transfer_status`), timestamps, window, tags and
per-model metrics summed over the windows each run committed.
"""


import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dagster import DagsterEventType, DagsterInstance, RunsFilter

from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.lifecycle import transfer_status
from transfer_platform.orchestration.dagster_internals import launch_job_run
from transfer_platform.orchestration.run_tags import (
    DESTINATION_TAG,
    FULL_REFRESH_TAG,
    KIND_TAG,
    TRIGGER_TAG,
    USER_TAG_PREFIX,
    limit_tags,
    transfer_op_config,
    user_tags_of,
)

WORKSPACE_ENV = "TRANSFER_PLATFORM_WORKSPACE"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
PARTITION_TAG = "dagster/partition"


def workspace_file() -> Path:
    """The workspace the daemon and webserver load (``$TRANSFER_PLATFORM_WORKSPACE``, else the
    repository's ``workspace.yaml``)."""
    if os.environ.get(WORKSPACE_ENV):
        return Path(os.environ[WORKSPACE_ENV])
    return Path(__file__).resolve().parents[2] / "workspace.yaml"


@dataclass(frozen=True)
class TransferOrder:
    destination: str
    models: list[str] = field(default_factory=list)
    full_refresh: bool = False
    start: datetime | None = None
    end: datetime | None = None
    tags: dict[str, str] = field(default_factory=dict)  # the user's, already validated


def enqueue(instance: DagsterInstance, config: PlatformConfig, config_path: Path, order: TransferOrder) -> str:
    """Submit a run of the ``transfer`` job to the instance's queue; returns the transfer id."""
    from transfer_platform.transfers.entry import models_of

    destination = config.destination(order.destination)
    models = models_of(config, destination.name, order.models)
    op_config: dict[str, Any] = {"destination": destination.name, "models": order.models,
                                 "full_refresh": order.full_refresh}
    if order.start is not None:
        op_config["start"] = order.start.isoformat()
    if order.end is not None:
        op_config["end"] = order.end.isoformat()
    tags = {**limit_tags(config, destination.name, models, "transfer"),
            **{USER_TAG_PREFIX + k: v for k, v in order.tags.items()},
            TRIGGER_TAG: "cli"}
    if order.full_refresh:
        tags[FULL_REFRESH_TAG] = "true"
    run_id = str(uuid.uuid4())
    before = os.environ.get("TRANSFER_PLATFORM_CONFIG")
    os.environ["TRANSFER_PLATFORM_CONFIG"] = str(config_path.resolve())  # for the code server
    try:
        launch_job_run(  # as `dagster job launch` (no webserver needed: see dagster_internals)
            instance, str(workspace_file()), "transfer",
            json.dumps({"ops": {"run_transfer": {"config": op_config}}}), json.dumps(tags), run_id)
    finally:
        if before is None:
            os.environ.pop("TRANSFER_PLATFORM_CONFIG", None)
        else:
            os.environ["TRANSFER_PLATFORM_CONFIG"] = before
    return run_id


def cancel(instance: DagsterInstance, run_id: str) -> str:
    """Cancel a pending transfer (CANCELLED) or stop a running one (KILLED); returns the status."""
    run = instance.get_run_by_id(run_id)
    if run is None or run.tags.get(KIND_TAG) not in ("transfer", "integrity"):
        raise LookupError(f"no transfer with id {run_id!r} (see `transfer-platform transfers`)")
    instance.run_coordinator.cancel_run(run_id)
    return describe(instance, instance.get_run_record_by_id(run_id))["status"]


def _window(run) -> tuple[str | None, str | None]:  # a DagsterRun
    op_config = transfer_op_config(run.run_config)
    if op_config:
        return op_config.get("start"), op_config.get("end")
    if RANGE_START_TAG in run.tags:
        return run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG]
    if PARTITION_TAG in run.tags:
        return run.tags[PARTITION_TAG], run.tags[PARTITION_TAG]
    return None, None


def _moment(timestamp: float | None) -> str | None:
    return None if timestamp is None else datetime.fromtimestamp(timestamp, UTC).isoformat()


def describe(instance: DagsterInstance, record) -> dict[str, Any]:  # a RunRecord
    """One transfer as ``transfer-platform transfers`` shows it."""
    run = record.dagster_run
    events = instance.get_records_for_run(
        run.run_id, of_type={DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_FAILURE,
                             DagsterEventType.STEP_SUCCESS}).records
    models: dict[str, dict[str, Any]] = {}
    steps_succeeded = 0
    errors = []
    for event in events:
        dagster_event = event.event_log_entry.dagster_event
        if dagster_event.event_type == DagsterEventType.STEP_SUCCESS:
            steps_succeeded += 1
        elif dagster_event.event_type == DagsterEventType.STEP_FAILURE:
            data = dagster_event.step_failure_data
            text = (data.user_failure_data.description if data.user_failure_data else None) or (
                data.error.message.strip().splitlines()[0] if data.error else "failed")
            errors.append({"step": dagster_event.step_key, "error": text})
        else:
            materialization = dagster_event.step_materialization_data.materialization
            metadata = {k: v.value for k, v in materialization.metadata.items()}
            model = models.setdefault(materialization.asset_key.path[-1], {
                "windows": 0, "rows_transferred": 0, "delta_rows_transferred": 0, "rows_deleted": 0,
                "versions_superseded": 0,
                "volume_transferred_in_mb": 0.0, "most_recent_last_updated_at": None})
            model["windows"] += 1
            model["rows_transferred"] += int(metadata.get("rows_transferred", 0))
            model["delta_rows_transferred"] += int(metadata.get("delta_rows_transferred", 0))
            model["rows_deleted"] += int(metadata.get("rows_deleted", 0))
            model["versions_superseded"] += int(metadata.get("versions_superseded", 0))
            model["volume_transferred_in_mb"] += float(metadata.get("volume_transferred_in_mb", 0.0))
            latest = metadata.get("most_recent_last_updated_at")
            if latest is not None:
                model["most_recent_last_updated_at"] = max(model["most_recent_last_updated_at"] or 0, latest)
    for model in models.values():
        model["volume_transferred_in_mb"] = round(model["volume_transferred_in_mb"], 4)
        if model["most_recent_last_updated_at"] is not None:
            model["most_recent_last_updated_at"] = _moment(model["most_recent_last_updated_at"])
    start, end = _window(run)
    return {
        "id": run.run_id,
        "destination": run.tags.get(DESTINATION_TAG),
        "status": transfer_status(run.status.value, dict(run.tags), started=record.start_time is not None,
                                  steps_succeeded=steps_succeeded if errors else 0),
        "full_refresh": run.tags.get(FULL_REFRESH_TAG) == "true" or bool(transfer_op_config(run.run_config).get("full_refresh")),
        "start_transfer_window_at": start,
        "end_transfer_window_at": end,
        "submitted_at": record.create_timestamp.astimezone(UTC).isoformat(),
        "started_at": _moment(record.start_time),
        "ended_at": _moment(record.end_time),
        "rows_transferred": sum(m["rows_transferred"] for m in models.values()),
        "delta_rows_transferred": sum(m["delta_rows_transferred"] for m in models.values()),
        "rows_deleted": sum(m["rows_deleted"] for m in models.values()),
        "versions_superseded": sum(m["versions_superseded"] for m in models.values()),
        "volume_transferred_in_mb": round(sum(m["volume_transferred_in_mb"] for m in models.values()), 4),
        "tags": user_tags_of(dict(run.tags)),
        "models": models,
        "errors": errors,
    }


@dataclass(frozen=True)
class TransferFilter:
    destination: str | None = None
    status: str | None = None
    tags: dict[str, str] = field(default_factory=dict)  # the user's tags, key -> value
    ended_before: datetime | None = None  # exclusive
    ended_after: datetime | None = None  # inclusive
    limit: int = 100


def list_transfers(instance: DagsterInstance, wanted: TransferFilter) -> list[dict[str, Any]]:
    run_tags: dict[str, Any] = {KIND_TAG: "transfer"}
    if wanted.destination:
        run_tags[DESTINATION_TAG] = wanted.destination
    for key, value in wanted.tags.items():
        run_tags[USER_TAG_PREFIX + key] = value
    found = []
    for record in instance.get_run_records(RunsFilter(tags=run_tags)):
        ended = record.end_time
        if wanted.ended_before is not None and (ended is None or ended >= wanted.ended_before.timestamp()):
            continue
        if wanted.ended_after is not None and (ended is None or ended < wanted.ended_after.timestamp()):
            continue
        transfer = describe(instance, record)
        if wanted.status and transfer["status"] != wanted.status:
            continue
        found.append(transfer)
        if len(found) >= wanted.limit:
            break
    return found
