"""The ``delete_sweep`` job: the hard-delete sweep of a destination's models, as Dagster runs it.

The ``transfer_schedule`` sensor enqueues it per model on the model's
``delete_sweep_frequency_minutes`` (``delete_detection: sweep``); launch it by hand with
``ops: {sweep_deletes: {config: {destination: ..., models: [...]}}}``. Its runs carry the same
queue tags as a transfer of those models (``transfer_platform/kind=delete_sweep``), so the queue
never starts it beside a transfer of the same destination and model; the model's lock in the
destination keeps them apart outside the queue too. Each model's result is a log line and output
metadata (rows compared, rows deleted); a model that fails does not stop the others and fails
the run with its reason.
"""

from datetime import UTC, datetime

from dagster import Config, Failure, MetadataValue, OpExecutionContext, Output, job, op
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from transfer_platform.errors import ConfigError, TransferPlatformError
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.runs.lifecycle import heartbeat
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    KIND_TAG,
    limit_tags,
)
from transfer_platform.transfers.delete_sweep import sweep_deletes

KIND = "delete_sweep"


class DeleteSweepConfig(Config):
    destination: str = Field(description="the destination to sweep")
    models: list[str] = Field(default_factory=list,
                              description="models to sweep (empty = every model with delete_detection: sweep)")


@op(name="sweep_deletes", description="remove destination rows whose key is gone from the source")
def delete_sweep_op(context: OpExecutionContext, config: DeleteSweepConfig, pyspark: LazyPySparkResource,
                    platform: TransferPlatformResource) -> Output:
    current = platform.config
    destination = current.destination(config.destination)
    swept = {m.model_name: m for m in current.models_for(destination) if m.delete_detection == "sweep"}
    unknown = [m for m in config.models if m not in swept]
    if unknown:
        raise Failure(description=str(ConfigError(
            f"destination {destination.name!r} sweeps no model(s) {unknown}; models with "
            f"delete_detection: sweep there: {sorted(swept)}")))
    models = [swept[m] for m in config.models] if config.models else list(swept.values())
    if DESTINATION_TAG not in context.run.tags:  # run in process: say at least what it touches
        context.instance.add_run_tags(context.run.run_id, limit_tags(current, destination.name, models, KIND))
    reports, errors = [], []
    with heartbeat(context.instance, context.run.run_id):
        for model in models:
            try:
                report = sweep_deletes(pyspark.spark_session, current, destination.name, model,
                                       datetime.now(UTC), context.run.run_id)
            except TransferPlatformError as exc:
                context.log.error(f"model {model.model_name}: {exc}")
                errors.append(f"{model.model_name}: {exc}")
                continue
            context.log.info(f"model {model.model_name}: compared {report.rows_compared} rows, "
                             f"deleted {report.rows_deleted}")
            reports.append(report.as_dict())
    metadata = {"models": MetadataValue.json(reports),
                "rows_deleted": sum(r["rows_deleted"] for r in reports)}
    if errors:
        raise Failure(description="; ".join(errors), metadata=metadata)
    return Output(None, metadata=metadata)


@job(name="delete_sweep", tags={KIND_TAG: KIND},
     description="The hard-delete sweep of a destination's models (delete_detection: sweep).")
def delete_sweep_job():
    delete_sweep_op()
