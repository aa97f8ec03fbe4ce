"""What a committed window tells Dagster: one materialization, with the transfer's metrics."""

from __future__ import annotations

from dagster import AssetKey, AssetMaterialization, DagsterInstance, MetadataValue

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.timeutil import isoformat
from transfer_platform.orchestration.keys import destination_asset_key
from transfer_platform.transfers.runner import PartitionTally, WindowOutcome


def window_metadata(outcome: WindowOutcome, transfer_id: str) -> dict:
    result, bounds = outcome.result, outcome.planned.bounds
    metadata = {
        "rows_transferred": MetadataValue.int(result.rows_transferred),
        "delta_rows_transferred": MetadataValue.int(result.delta_rows_transferred),
        "rows_deleted": MetadataValue.int(result.rows_deleted),
        "versions_superseded": MetadataValue.int(result.versions_superseded),
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


class RunlessReporter:
    """Records windows moved outside a Dagster run (the CLI, the demo) in the instance, one
    materialization per partition (chunks of a partition added up)."""

    def __init__(self, instance: DagsterInstance, config: PlatformConfig, destination: str) -> None:
        self.instance, self.config, self.destination = instance, config, destination
        self._tallies: dict[str, PartitionTally] = {}

    def __call__(self, model: ModelConfig, outcome: WindowOutcome) -> None:
        done = self._tallies.setdefault(model.model_name, PartitionTally()).add(outcome)
        if done is None:
            return
        key = destination_asset_key(self.config, self.destination, model.model_name)
        self.instance.report_runless_asset_event(materialization(key, done, "outside-dagster"))
