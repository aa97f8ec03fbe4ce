"""One partitioned asset per destination/model, built from the configuration.

Keyed ``<recipient>/<destination>/<model>`` and grouped per destination (see ``keys.py``): a
recipient with several destinations has one asset per destination and model. The assets of one
destination that share a partitioning sit behind one subsettable ``multi_asset`` op
(``transfer__<destination>``): each pair keeps its own key, group, partitions, lineage and checks,
and a run selecting some of them moves only those, model after model. One op per pair would make
10,000 ops for 1,000 recipients x 10 models, which Dagster takes about 40 s to load.

The body hands the selected models to the one entry point of a transfer
(``transfers/entry.py``'s ``Transfer``; ``reporting.transfer_events`` turns it into Dagster's
events): each model's windows move one by one and the body yields one ``AssetMaterialization``
per window as soon as that window's data and watermark have committed (the specs are ``skippable``): a run
over many windows (single-run backfill) shows each window materialized as it finishes, and a
failure in window k keeps the windows before k. An IO manager cannot do this: Dagster calls
``handle_output`` once for the whole range and records its own events only after it returns
(see docs/design.md).

With ``dry_run: true`` in the op's config the body only plans (``transfers/dry_run.py``): one log
line and one ``AssetObservation`` with the plan per selected model, nothing moved or materialized.
"""


from collections.abc import Iterator

from dagster import (
    AssetCheckEvaluation,
    AssetExecutionContext,
    AssetMaterialization,
    AssetObservation,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Config,
    Failure,
    MetadataValue,
    TimeWindowPartitionsDefinition,
    multi_asset,
)
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.planning import ModelWindowing, windowing_for
from transfer_platform.orchestration.catalog.checks import CHECK_NAME as INTEGRITY
from transfer_platform.orchestration.catalog.checks import integrity_spec, run_checks
from transfer_platform.orchestration.catalog.keys import (
    SOURCE_GROUP,
    source_asset_key,
    transfer_asset_key,
    transfer_group,
)
from transfer_platform.orchestration.catalog.last_transfer import CHECK_NAME as LAST_TRANSFER
from transfer_platform.orchestration.catalog.last_transfer import (
    as_result,
    check_spec,
    failure_description,
    for_partition,
    latest,
)
from transfer_platform.orchestration.catalog.partitions import partitions_for, windows_for_keys
from transfer_platform.orchestration.catalog.reporting import step_events, step_transfer
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.scheduling.run_tags import (
    FULL_REFRESH_TAG,
    KIND_TAG,
    limit_tags,
)
from transfer_platform.transfers.entry import Transfer
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import ModelSummary


class TransferRunConfig(Config):
    """Run configuration of transfer assets (the launchpad's ``ops: {transfer__<destination>: {config: ...}}``)."""

    full_refresh: bool = Field(
        default=False,
        description="rebuild the whole table from the configured start aside and swap it in "
                    "(same as the run tag transfer_platform/full_refresh=true)",
    )
    dry_run: bool = Field(
        default=False,
        description="only plan: log the windows, read bounds and row counts per model and record "
                    "them as an observation of each asset; move nothing, record no materialization",
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
    """One subsettable multi-asset per destination and partitioning: each destination/model pair is
    its own asset (key, group, partitions, lineage, checks), and the op behind them is shared. A
    definition per pair made 10,000 ops for 1,000 recipients x 10 models, which Dagster takes
    about 40 s to build; grouping makes 1,000."""
    assets = []
    partitions: dict[tuple, TimeWindowPartitionsDefinition | None] = {}  # one per partitioning, shared
    for destination_name, name, members in _transfer_ops(config):
        partitioning = _partitioning(members[0][1])
        if partitioning not in partitions:
            partitions[partitioning] = partitions_for(members[0][1])
        assets.append(build_transfer_assets(config, destination_name, members, name,
                                            partitions_def=partitions[partitioning]))
    return assets


def _transfer_ops(config: PlatformConfig) -> Iterator[tuple[str, str, list[tuple[ModelConfig, ModelWindowing]]]]:
    """(destination, op name, its models) of each transfer op, in configuration order."""
    names: set[str] = set()
    for destination in config.destinations:
        groups: dict[tuple, list[tuple[ModelConfig, ModelWindowing]]] = {}
        for model in config.models_for(destination):
            windowing = windowing_for(config, destination.name, model)
            groups.setdefault(_partitioning(windowing), []).append((model, windowing))
        for index, members in enumerate(groups.values()):
            name = f"transfer__{destination.name}" + (f"__{index}" if index else "")
            while name in names:  # destination "a" group 1 and destination "a__1"
                name += "_"
            names.add(name)
            yield destination.name, name, members


def _partitioning(windowing: ModelWindowing) -> tuple:
    grid = windowing.grid
    return (None,) if grid is None else (grid.cron, grid.fmt, grid.floor(windowing.configured_start))


def _spec(config: PlatformConfig, destination_name: str, model: ModelConfig, windowing: ModelWindowing) -> AssetSpec:
    destination = config.destination(destination_name)
    recipient = config.recipient(destination.recipient)
    window_text = (f"windows of {windowing.max_window_seconds} s (grid {windowing.grid.cron})"
                   if windowing.grid else "one window per transfer (no max_transfer_time_window_seconds)")
    return AssetSpec(
        key=transfer_asset_key(recipient.name, destination.name, model.model_name),
        group_name=transfer_group(destination.name),
        deps=[source_asset_key(model)],
        skippable=True,  # yields materializations itself, window by window
        kinds={"spark", destination.vendor},
        tags={"transfer_platform/destination": destination.name,
              "transfer_platform/recipient": recipient.name},
        description=(f"{model.description or model.model_name}: rows of tenant "
                     f"'{recipient.id_in_provider_system}' delivered to {destination.vendor} destination "
                     f"'{destination.name}'; {window_text}."),
        metadata={"destination": destination.name, "model": model.model_name,
                  "lookback_seconds": windowing.lookback_seconds,
                  "configured_start": windowing.configured_start.isoformat()},
    )


def build_transfer_assets(config: PlatformConfig, destination_name: str,
                          members: list[tuple[ModelConfig, ModelWindowing]], name: str,
                          partitions_def: TimeWindowPartitionsDefinition | None) -> AssetsDefinition:
    """The assets of ``members`` (models of one destination on one partitioning) behind one op
    named ``name``. A run selecting some of them moves only those, model after model.
    ``partitions_def``: the partitioning's, one object shared among destinations (Dagster compares
    and hashes partitions definitions per asset: one object is cheaper)."""
    specs = [_spec(config, destination_name, model, windowing) for model, windowing in members]
    # each asset key's model, in configuration order (a run moves the selected ones in this order)
    model_of_key = {spec.key: model.model_name for spec, (model, _) in zip(specs, members, strict=True)}
    key_of_model = {name: key for key, name in model_of_key.items()}

    @multi_asset(
        name=name,
        specs=specs,
        # each asset's last_transfer check, which its transfers report, and its integrity check,
        # which runs when selected (`Execute checks`, or the integrity job reports it)
        check_specs=[*(check_spec(spec.key) for spec in specs),
                     *(integrity_spec(config, destination_name, model) for model, _ in members)],
        can_subset=True,
        partitions_def=partitions_def,
        backfill_policy=BackfillPolicy.single_run() if partitions_def else None,
        description=f"transfers to destination '{destination_name}'",
    )
    def _transfer(context: AssetExecutionContext, config: TransferRunConfig, pyspark: LazyPySparkResource,
                  platform: TransferPlatformResource):
        current = platform.config
        models = [current.model(name) for key, name in model_of_key.items() if key in context.selected_asset_keys]
        run_id = context.run.run_id
        checked = {key for key in context.selected_asset_check_keys if key.name == LAST_TRANSFER}
        integrity = [key for key in context.selected_asset_check_keys if key.name == INTEGRITY]
        def checks() -> Iterator:  # the selected integrity checks, after what the run moved
            return run_checks(context, lambda: pyspark.spark_session, current, destination_name, model_of_key,
                              integrity)
        if not models:  # only checks selected ("Execute checks"): the last
            for check_key in checked:  # transfer's outcome again, the integrity checks run
                yield as_result(latest(context.instance, check_key.asset_key, run_id))
            yield from checks()
            return
        planned = list(context.partition_keys) if partitions_def is not None else []
        if KIND_TAG not in context.run.tags:  # run in process (materialize()): not queued, not tagged
            context.instance.add_run_tags(run_id, limit_tags(current, destination_name, models, "transfer"))
        order = TransferOrder(
            destination=destination_name, models=[m.model_name for m in models],
            full_refresh=config.full_refresh or context.run.tags.get(FULL_REFRESH_TAG, "").lower() == "true",
            partitions=windows_for_keys(partitions_def, planned) if partitions_def is not None else None,
            dry_run=config.dry_run, trigger="dagster")
        transfer = step_transfer(context, pyspark, current, order)
        if order.dry_run:
            yield from _dry_run(context, transfer, key_of_model)
            for check_key in checked:  # nothing moved: the last outcome stands
                yield as_result(latest(context.instance, check_key.asset_key, run_id))
            yield from checks()
            return
        def as_step(event: AssetMaterialization | AssetCheckEvaluation) -> Iterator:
            if isinstance(event, AssetMaterialization):
                yield event
            elif event.asset_check_key in checked:  # a result of this step (where Dagster planned it:
                for partition in planned:  # once per partition in a partitioned run)
                    context.log_event(for_partition(event, partition))
                yield as_result(event)
            else:  # a check not selected (a backfill selects none): an event
                context.log_event(event)

        yield from step_events(context, transfer, key_of_model, as_step)
        if transfer.failed:
            raise _failure(destination_name, transfer.failed, len(transfer.summaries))
        yield from checks()

    return _transfer


def _dry_run(context: AssetExecutionContext, transfer: Transfer, key_of_model: dict) -> Iterator[AssetObservation]:
    """The plan instead of the transfer: per model one log line and one ``AssetObservation``
    carrying its plan (an observation, not a materialization: nothing moved)."""
    plans = transfer.plan()
    for plan in plans:
        (context.log.warning if plan.error else context.log.info)(plan.summary_line())
        yield AssetObservation(asset_key=key_of_model[plan.model], metadata={
            "dry_run": True, "plan": MetadataValue.json(plan.as_dict()),
            "windows": len(plan.windows), "rows": plan.rows})
    failed = [p for p in plans if p.error is not None]
    if failed:
        raise Failure(description="\n\n".join(f"model {p.model!r}: {p.error}" for p in failed),
                      metadata={"destination": transfer.destination, "model": ", ".join(p.model for p in failed)})


def _failure(destination_name: str, failed: list[ModelSummary], total: int) -> Failure:
    """A clear failure in the UI instead of a traceback: the one-line error first, then one
    paragraph per failed model."""
    return Failure(description=failure_description(failed, total), metadata={
        "destination": destination_name,
        "model": ", ".join(s.model for s in failed),
        "error_type": ", ".join(sorted({s.error_type for s in failed})),
        "blame": ", ".join(sorted({str(s.blame) for s in failed})),
    })
