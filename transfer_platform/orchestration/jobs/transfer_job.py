"""The ``transfer`` job: one transfer of one destination (Prequel's "create a transfer").

Sensors and ``transfer-platform transfer --enqueue`` submit it to the instance's run queue with
run config ``ops: {run_transfer: {config: {destination, models, full_refresh, start, end, dry_run}}}``. Its one
op moves every requested model window by window from the watermark (or the given range) and
reports each committed window as a materialization of that destination/model asset and partition,
exactly as the asset body does: the assets show every window moved, whoever moved it.

A model that fails does not stop the others. At the end the run carries the tags
``transfer_platform/models_succeeded`` and ``/models_failed``; if any model failed, the op fails
with every model's error in its description and metadata, so the run is red in the UI and the
transfer's status is PARTIAL_FAILURE (some models succeeded) or ERROR (none did).

With ``dry_run: true`` the op only plans (``transfers/dry_run.py``): it logs one line per model
and attaches the plan as its output's metadata; it moves nothing and reports no materialization.
"""


from dagster import (
    AssetCheckEvaluation,
    AssetMaterialization,
    Config,
    Failure,
    MetadataValue,
    OpExecutionContext,
    Output,
    job,
    op,
)
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from transfer_platform.errors import ConfigError
from transfer_platform.orchestration.catalog.keys import transfer_asset_key
from transfer_platform.orchestration.catalog.last_transfer import failure_description
from transfer_platform.orchestration.catalog.reporting import step_events, step_transfer
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    KIND_TAG,
    TRANSFER_OP,
    limit_tags,
    order_of_run,
)
from transfer_platform.transfers.dry_run import plan_as_dict
from transfer_platform.transfers.entry import Transfer


class TransferConfig(Config):
    destination: str = Field(description="the destination to transfer to")
    models: list[str] = Field(default_factory=list, description="models to move (empty = all enabled)")
    full_refresh: bool = Field(default=False, description="rebuild from the configured start, aside")
    start: str | None = Field(default=None, description="start_transfer_window_at (ISO-8601, inclusive)")
    end: str | None = Field(default=None, description="end_transfer_window_at (ISO-8601, exclusive)")
    dry_run: bool = Field(default=False, description="only plan: log the windows, read bounds and row "
                                                      "counts per model; move and record nothing")


@op(name=TRANSFER_OP, description="move a destination's models window by window (see the job)")
def transfer_op(context: OpExecutionContext, config: TransferConfig, pyspark: LazyPySparkResource,
                platform: TransferPlatformResource):
    current, run_id = platform.config, context.run.run_id
    # what the run was asked (the sensor's tick among its tags: its runs share a staged read)
    order = order_of_run(config.model_dump(), context.run.tags)
    destination = current.destination(order.destination)
    queued = DESTINATION_TAG in context.run.tags
    if not queued:  # run in process (not through the queue): say at least where it goes
        context.instance.add_run_tags(run_id, {DESTINATION_TAG: destination.name, KIND_TAG: "transfer"})
    try:
        transfer = step_transfer(context, pyspark, current, order)
    except ConfigError as exc:  # a model the destination does not receive
        raise Failure(description=str(exc)) from None
    models = transfer.models
    if not queued:
        context.instance.add_run_tags(run_id, limit_tags(current, destination.name, models, "transfer"))
    if order.dry_run:
        yield _dry_run(context, transfer)
        return
    key_of_model = {m.model_name: transfer_asset_key(destination.recipient, destination.name, m.model_name)
                    for m in models}
    def log(event: AssetMaterialization | AssetCheckEvaluation) -> tuple:
        context.log_event(event)
        return ()

    for _ in step_events(context, transfer, key_of_model, log):
        pass
    summary = MetadataValue.json({s.model: s.as_dict() for s in transfer.summaries})
    failed = transfer.failed
    if failed:
        raise Failure(description=failure_description(failed, len(transfer.summaries)), metadata={
            "models": summary, "models_failed": len(failed), "models_succeeded": len(transfer.summaries) - len(failed)})
    yield Output(None, metadata={"models": summary})


def _dry_run(context: OpExecutionContext, transfer: Transfer) -> Output:
    """The plan instead of the transfer: one log line per model, the plan as output metadata."""
    plans = transfer.plan()
    for plan in plans:
        (context.log.warning if plan.error else context.log.info)(plan.summary_line())
    whole = plan_as_dict(transfer.destination, transfer.now, plans)
    failed = [p for p in plans if p.error is not None]
    if failed:
        raise Failure(description="; ".join(f"{p.model}: {p.error}" for p in failed),
                      metadata={"plan": MetadataValue.json(whole)})
    return Output(None, metadata={"plan": MetadataValue.json(whole), "dry_run": True,
                                  "windows": whole["windows"], "rows": whole["rows"]})


@job(name="transfer", tags={KIND_TAG: "transfer"},
     description="One transfer of one destination: every requested model, window by window.")
def transfer_job():
    transfer_op()
