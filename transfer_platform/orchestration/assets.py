"""One partitioned asset per recipient/model, built from the configuration.

The asset body moves its windows one by one and yields one ``AssetMaterialization`` per window as
soon as that window's data and watermark have committed (``output_required=False``): a run over
many windows (single-run backfill) shows each window materialized as it finishes, and a failure in
window k keeps the windows before k. An IO manager cannot do this: Dagster calls
``handle_output`` once for the whole range and records its own events only after it returns
(see the README's design section).
"""


from datetime import UTC, datetime

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Config,
    Failure,
    asset,
)
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.errors import TransferPlatformError
from transfer_platform.orchestration.keys import SOURCE_GROUP, source_asset_key, transfer_asset_key
from transfer_platform.orchestration.lifecycle import heartbeat
from transfer_platform.orchestration.partitions import partitions_for, windows_for_keys
from transfer_platform.orchestration.reporting import materialization
from transfer_platform.orchestration.resources import TransferPlatformResource
from transfer_platform.orchestration.run_tags import FULL_REFRESH_TAG, KIND_TAG, limit_tags
from transfer_platform.transfers.runner import (
    PartitionTally,
    TransferRequest,
    WindowOutcome,
    transfer_model,
    windowing_for,
)


class TransferRunConfig(Config):
    """Run configuration of a transfer asset (the launchpad's ``ops: {<asset>: {config: ...}}``)."""

    full_refresh: bool = Field(
        default=False,
        description="rebuild the whole table from the configured start aside and swap it in "
                    "(same as the run tag transfer_platform/full_refresh=true)",
    )


def source_specs(config: PlatformConfig) -> list[AssetSpec]:
    specs: dict = {}
    for model in config.models:
        key = source_asset_key(model)
        source = config.source(model.source_name)
        what = model.source_table or "custom source_query"
        specs[key] = AssetSpec(key=key, group_name=SOURCE_GROUP,
                               description=f"{what} in {source.vendor} source '{source.name}'",
                               kinds={source.vendor})
    return list(specs.values())


def transfer_assets(config: PlatformConfig) -> list[AssetsDefinition]:
    assets = []
    for destination in config.destinations:
        for model in config.models_for(destination):
            assets.append(build_transfer_asset(config, destination.name, model))
    return assets


def build_transfer_asset(config: PlatformConfig, destination_name: str, model: ModelConfig) -> AssetsDefinition:
    destination = config.destination(destination_name)
    recipient = config.recipient(destination.recipient)
    windowing = windowing_for(config, destination_name, model)
    partitions_def = partitions_for(windowing)
    key = transfer_asset_key(recipient.name, model.model_name)
    window_text = (f"windows of {windowing.max_window_seconds} s (grid {windowing.grid.cron})"
                   if windowing.grid else "one window per transfer (no max_transfer_time_window_seconds)")

    @asset(
        key=key,
        group_name=recipient.name,
        deps=[source_asset_key(model)],
        partitions_def=partitions_def,
        backfill_policy=BackfillPolicy.single_run() if partitions_def else None,
        output_required=False,
        kinds={"spark", destination.vendor},
        tags={"transfer_platform/destination": destination.name},
        description=(f"{model.description or model.model_name}: rows of tenant "
                     f"'{recipient.id_in_provider_system}' delivered to {destination.vendor} destination "
                     f"'{destination.name}'; {window_text}."),
        metadata={"destination": destination.name, "model": model.model_name,
                  "lookback_seconds": windowing.lookback_seconds,
                  "configured_start": windowing.configured_start.isoformat()},
    )
    def _transfer(context: AssetExecutionContext, config: TransferRunConfig, pyspark: LazyPySparkResource,
                  platform: TransferPlatformResource):
        now = datetime.now(UTC)  # the run's clock, captured once and passed down
        current = platform.config
        model_now = current.model(model.model_name)
        partitions = None
        if partitions_def is not None:
            partitions = windows_for_keys(partitions_def, list(context.partition_keys))
        writer = platform.writer(destination_name)
        request = TransferRequest(
            spark=pyspark.spark_session, config=current, destination=destination_name, writer=writer,
            transfer_id=context.run.run_id, now=now,
            full_refresh=config.full_refresh or context.run.tags.get(FULL_REFRESH_TAG, "").lower() == "true",
            log=context.log,
        )
        if KIND_TAG not in context.run.tags:  # run in process (materialize()): not queued, not tagged
            context.instance.add_run_tags(context.run.run_id,
                                          limit_tags(current, destination_name, [model_now], "transfer"))
        try:
            tally = PartitionTally()
            with heartbeat(context.instance, context.run.run_id):
                for item in transfer_model(request, model_now, partitions=partitions):
                    done = tally.add(item) if isinstance(item, WindowOutcome) else None
                    if done is not None:
                        yield materialization(key, done, context.run.run_id)
        except TransferPlatformError as exc:
            # a clear, one-paragraph failure in the UI instead of a traceback
            raise Failure(description=str(exc), metadata={
                "destination": destination_name, "model": model.model_name,
                "error_type": type(exc).__name__, "blame": exc.blame,
            }) from None
        finally:
            writer.close()

    return _transfer
