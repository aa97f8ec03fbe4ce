"""What a committed window tells Dagster: one materialization, with the transfer's metrics."""

from __future__ import annotations

from dagster import AssetKey, AssetMaterialization, DagsterInstance, MetadataValue

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.timeutil import isoformat
from transfer_platform.orchestration.keys import transfer_asset_key
from transfer_platform.transfers.runner import WindowOutcome


def window_metadata(outcome: WindowOutcome, transfer_id: str) -> dict:
    result, bounds = outcome.result, outcome.planned.bounds
    metadata = {
        "rows_transferred": MetadataValue.int(result.rows_transferred),
        "delta_rows_transferred": MetadataValue.int(result.delta_rows_transferred),
        "volume_transferred_in_mb": MetadataValue.float(round(result.volume_bytes / 1_048_576, 4)),
        "watermark": MetadataValue.text(isoformat(result.state.watermark) or "unset"),
        "read_from": MetadataValue.text(isoformat(bounds.lower)),
        "read_until": MetadataValue.text(isoformat(bounds.upper)),
        "transfer_id": MetadataValue.text(transfer_id),
        "full_refresh": MetadataValue.bool(outcome.into_refresh),
    }
    if result.state.high_watermark is not None:
        metadata["most_recent_last_updated_at"] = MetadataValue.timestamp(result.state.high_watermark)
    return metadata


def materialization(asset_key: AssetKey, outcome: WindowOutcome, transfer_id: str) -> AssetMaterialization:
    return AssetMaterialization(asset_key=asset_key, partition=outcome.partition_key,
                                metadata=window_metadata(outcome, transfer_id))


def report_window(instance: DagsterInstance, config: PlatformConfig, destination: str,
                  model: ModelConfig, outcome: WindowOutcome) -> None:
    """Record a window moved outside a Dagster run (the CLI, the demo) in the instance."""
    if not outcome.planned.last_of_partition:
        return
    recipient = config.destination(destination).recipient
    key = transfer_asset_key(recipient, model.model_name)
    instance.report_runless_asset_event(materialization(key, outcome, "outside-dagster"))
