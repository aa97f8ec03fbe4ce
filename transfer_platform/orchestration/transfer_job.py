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


from datetime import UTC, datetime

from dagster import (
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

from transfer_platform.core.timeutil import utc
from transfer_platform.errors import ConfigError
from transfer_platform.orchestration.keys import transfer_asset_key
from transfer_platform.orchestration.last_transfer import ended, failure_description, stopped
from transfer_platform.orchestration.lifecycle import heartbeat
from transfer_platform.orchestration.reporting import materialization
from transfer_platform.orchestration.resources import TransferPlatformResource
from transfer_platform.orchestration.run_tags import DESTINATION_TAG, KIND_TAG, limit_tags
from transfer_platform.transfers.dry_run import plan_as_dict, plan_transfer
from transfer_platform.transfers.runner import (
    ModelSummary,
    PartitionTally,
    TransferRequest,
    transfer_models,
)


class TransferConfig(Config):
    destination: str = Field(description="the destination to transfer to")
    models: list[str] = Field(default_factory=list, description="models to move (empty = all enabled)")
    full_refresh: bool = Field(default=False, description="rebuild from the configured start, aside")
    start: str | None = Field(default=None, description="start_transfer_window_at (ISO-8601, inclusive)")
    end: str | None = Field(default=None, description="end_transfer_window_at (ISO-8601, exclusive)")
    dry_run: bool = Field(default=False, description="only plan: log the windows, read bounds and row "
                                                      "counts per model; move and record nothing")


def _moment(text: str | None) -> datetime | None:
    return None if text is None else utc(datetime.fromisoformat(text))


@op(name="run_transfer", description="move a destination's models window by window (see the job)")
def transfer_op(context: OpExecutionContext, config: TransferConfig, pyspark: LazyPySparkResource,
                platform: TransferPlatformResource):
    now = datetime.now(UTC)
    current = platform.config
    destination = current.destination(config.destination)
    queued = DESTINATION_TAG in context.run.tags
    if not queued:  # run in process (not through the queue): say at least where it goes
        context.instance.add_run_tags(context.run.run_id, {DESTINATION_TAG: destination.name,
                                                           KIND_TAG: "transfer"})
    enabled = {m.model_name: m for m in current.models_for(destination)}
    unknown = [m for m in config.models if m not in enabled]
    if unknown:
        raise Failure(description=str(ConfigError(
            f"destination {destination.name!r} does not receive model(s) {unknown}; it receives "
            f"{sorted(enabled)}")))
    models = [enabled[m] for m in config.models] if config.models else list(enabled.values())
    if not queued:
        context.instance.add_run_tags(context.run.run_id,
                                      limit_tags(current, destination.name, models, "transfer"))
    if config.dry_run:
        yield _dry_run(context, pyspark, current, destination.name, models, now, config)
        return
    tallies: dict[str, PartitionTally] = {}
    key_of_model = {m.model_name: transfer_asset_key(destination.recipient, destination.name, m.model_name)
                    for m in models}

    writer = platform.writer(destination.name)
    request = TransferRequest(
        spark=pyspark.spark_session, config=current, destination=destination.name, writer=writer,
        transfer_id=context.run.run_id, now=now, full_refresh=config.full_refresh, log=context.log,
        start=_moment(config.start), end=_moment(config.end),
    )
    summaries: list[ModelSummary] = []
    try:
        with heartbeat(context.instance, context.run.run_id):
            for model, outcome in transfer_models(request, models, summaries):
                done = tallies.setdefault(model.model_name, PartitionTally()).add(outcome)
                if done is not None:
                    context.log_event(materialization(key_of_model[model.model_name], done, context.run.run_id))
    except BaseException as exc:  # reported on the models' last_transfer check, then raised on
        replacement, evaluations = stopped(context.instance, context.run.run_id, exc, summaries,
                                           [m.model_name for m in models], key_of_model)
        for evaluation in evaluations:
            context.log_event(evaluation)
        if replacement is exc:
            raise
        raise replacement from None
    finally:
        writer.close()
    failed, evaluations = ended(context.instance, context.run.run_id, summaries, [m.model_name for m in models],
                                key_of_model)
    for evaluation in evaluations:
        context.log_event(evaluation)
    summary = {s.model: s.as_dict() for s in summaries}
    if failed:
        raise Failure(
            description=failure_description(failed, len(summaries)),
            metadata={"models": MetadataValue.json(summary), "models_failed": len(failed),
                      "models_succeeded": len(summaries) - len(failed)},
        )
    yield Output(None, metadata={"models": MetadataValue.json(summary)})


def _dry_run(context: OpExecutionContext, pyspark: LazyPySparkResource, current, destination: str,
             models: list, now: datetime, config: TransferConfig) -> Output:
    """The plan instead of the transfer: one log line per model, the plan as output metadata."""
    plans = plan_transfer(pyspark.spark_session, current, destination, models, now,
                          full_refresh=config.full_refresh, start=_moment(config.start), end=_moment(config.end))
    for plan in plans:
        (context.log.warning if plan.error else context.log.info)(plan.summary_line())
    whole = plan_as_dict(destination, now, plans)
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
