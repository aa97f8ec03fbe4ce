"""Transfers recorded straight into a Dagster instance's run and event storage, with chosen
times, as the transfer job leaves them: what the API's listing and reading tests read back."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import dagster as dg
from dagster._core.events import StepMaterializationData

from transfer_platform.core.lifecycle import MODELS_FAILED_TAG, MODELS_SUCCEEDED_TAG
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    KIND_TAG,
    MODELS_TAG,
    USER_TAG_PREFIX,
)

#: the transfers' clock: every recorded time is relative to it
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def record(instance: dg.DagsterInstance, status: str, *, created: datetime, ended: datetime | None = None,
           destination: str = "acme_delta", tags: dict[str, str] | None = None, metrics: bool = False,
           failure: dict[str, str] | None = None, kind: str = "transfer") -> str:
    """A transfer run as the transfer job leaves it, with chosen times. ``status``: PENDING, RUNNING,
    SUCCESS, ERROR, PARTIAL_FAILURE, CANCELLED or KILLED. ``metrics``: materializations of two
    windows of ``items``; ``failure``: the ``last_transfer`` check's failed evaluation of ``notes``."""
    run_id = str(uuid.uuid4())
    run_tags = {KIND_TAG: kind, DESTINATION_TAG: destination, MODELS_TAG: "items,notes",
                **{USER_TAG_PREFIX + k: v for k, v in (tags or {}).items()}}
    if status in ("ERROR", "PARTIAL_FAILURE"):
        run_tags[MODELS_SUCCEEDED_TAG] = "1" if status == "PARTIAL_FAILURE" else "0"
        run_tags[MODELS_FAILED_TAG] = "1"
    storage = instance.run_storage
    storage.add_historical_run(dg.DagsterRun(job_name="transfer", run_id=run_id, tags=run_tags,
                                             status=dg.DagsterRunStatus.NOT_STARTED), created)

    def event(kind: str, when: datetime) -> None:
        storage.handle_run_event(run_id, dg.DagsterEvent(event_type_value=kind, job_name="transfer"), when)

    if status == "CANCELLED":
        event("PIPELINE_CANCELED", ended)
    elif status != "PENDING":
        event("PIPELINE_START", created + timedelta(seconds=1))
        if status != "RUNNING":
            event({"SUCCESS": "PIPELINE_SUCCESS", "KILLED": "PIPELINE_CANCELED"}.get(status, "PIPELINE_FAILURE"), ended)
    key = dg.AssetKey(["acme", destination, "items"])
    for window in range(2 if metrics else 0):
        store(instance, run_id, dg.DagsterEvent(
            event_type_value="ASSET_MATERIALIZATION", job_name="transfer", step_key="run_transfer",
            event_specific_data=StepMaterializationData(dg.AssetMaterialization(
                asset_key=key, partition=f"2025-01-0{window + 1}",
                metadata={"rows_transferred": 10 + window, "delta_rows_transferred": 2, "rows_deleted": 1,
                          "volume_transferred_in_mb": 0.5, "most_recent_last_updated_at": T0.timestamp()}))))
    if failure:
        store(instance, run_id, dg.DagsterEvent(
            event_type_value="ASSET_CHECK_EVALUATION", job_name="transfer", step_key="run_transfer",
            event_specific_data=dg.AssetCheckEvaluation(
                asset_key=dg.AssetKey(["acme", destination, "notes"]), check_name="last_transfer", passed=False,
                description=f"ERROR: {failure['error']}",
                metadata={"status": dg.MetadataValue.text("ERROR"), "error": dg.MetadataValue.text(failure["error"]),
                          "error_type": dg.MetadataValue.text(failure["error_type"]),
                          "blame": dg.MetadataValue.text(failure["blame"])})))
    return run_id


def store(instance: dg.DagsterInstance, run_id: str, event: dg.DagsterEvent) -> None:
    instance.store_event(dg.EventLogEntry(error_info=None, level=20, user_message="", run_id=run_id,
                                          timestamp=T0.timestamp(), dagster_event=event, job_name="transfer"))
