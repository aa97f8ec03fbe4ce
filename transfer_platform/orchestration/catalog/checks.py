"""Integrity checks as Dagster asset checks, and the ``integrity`` job that runs them.

One check named ``integrity`` per destination/model transfer asset, declared on the asset's own
op (``assets.py``'s ``transfer__<destination>``, beside ``last_transfer``): a run selecting some of
them runs those checks, one after another (:func:`run_checks`), and moves nothing unless it also
selects assets. An op of checks of its own per destination would make Dagster build, resolve
and snapshot one more op per destination in every job selecting them: at 1,000 destinations, 45%
of the code location's cost. Each check is thin: it captures the run's clock, hands plain values to
:func:`transfer_platform.transfers.integrity.check_integrity` and turns its report into an
``AssetCheckResult`` (ERROR severity, not blocking). A source or destination that cannot be
reached or read is a failed check with the error's message, not a traceback; no secret reaches
the message or the metadata.

The ``integrity`` job is an op job, as ``transfer`` is: launched with ``ops: {run_integrity:
{config: {destination, models}}}`` it runs the checks of one destination (every model it receives,
or those named) and reports each as that asset's ``integrity`` evaluation, exactly as the asset's
own check reports it. An asset job selecting every check instead would make the code server
resolve and snapshot all the transfer ops once more as unselected assets: at 1,000 destinations,
about a third of the code location's CPU. Its runs carry ``transfer_platform/kind=integrity``.
"""


import os
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.timeutil import isoformat
from transfer_platform.errors import ConfigError, TransferPlatformError
from transfer_platform.orchestration.catalog.keys import transfer_asset_key
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.orchestration.runs.lifecycle import heartbeat
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    INTEGRITY_OP,
    KIND_TAG,
    limit_tags,
)
from transfer_platform.transfers.integrity import IntegrityReport, check_integrity, describe

CHECK_NAME = "integrity"
JOB_NAME = "integrity"
REDACTED = "***"


def integrity_check_keys(config: PlatformConfig, destination_name: str) -> list[dg.AssetCheckKey]:
    """The ``integrity`` checks of one destination's transfer assets."""
    destination = config.destination(destination_name)
    return [dg.AssetCheckKey(transfer_asset_key(destination.recipient, destination.name, model.model_name),
                             CHECK_NAME)
            for model in config.models_for(destination)]


class IntegrityConfig(dg.Config):
    destination: str = Field(description="the destination whose models are checked")
    models: list[str] = Field(default_factory=list, description="models to check (empty = every model it receives)")


def integrity_run_config(destination_name: str, models: Iterable[str] = ()) -> dict:
    """The run config of an ``integrity`` job run checking ``models`` (all: empty) of one destination."""
    op_config: dict = {"destination": destination_name}
    if models:
        op_config["models"] = list(models)
    return {"ops": {INTEGRITY_OP: {"config": op_config}}}


@dg.op(name=INTEGRITY_OP, description="run the integrity checks of a destination's models (see the job)")
def integrity_op(context: dg.OpExecutionContext, config: IntegrityConfig, pyspark: LazyPySparkResource,
                 platform: TransferPlatformResource):
    current, run_id = platform.config, context.run.run_id
    try:
        destination = current.destination(config.destination)
    except ConfigError as exc:
        raise dg.Failure(description=str(exc)) from None
    receives = {m.model_name: m for m in current.models_for(destination)}
    if not receives:
        raise dg.Failure(description=f"destination {destination.name!r} receives no enabled model: nothing to check")
    unknown = [name for name in config.models if name not in receives]
    if unknown:
        raise dg.Failure(description=(
            f"destination {destination.name!r} receives no enabled model named {', '.join(map(repr, unknown))} "
            f"(it receives: {', '.join(sorted(receives))}). Fix: name models it receives in "
            f"ops.{INTEGRITY_OP}.config.models, or none to check them all"))
    models = [receives[name] for name in dict.fromkeys(config.models)] or list(receives.values())
    if DESTINATION_TAG not in context.run.tags:  # launched by hand, not through the queue's tags
        context.instance.add_run_tags(run_id, limit_tags(current, destination.name, models, "integrity"))
    model_of_key = {transfer_asset_key(destination.recipient, destination.name, m.model_name): m.model_name
                    for m in models}
    check_keys = [dg.AssetCheckKey(key, CHECK_NAME) for key in model_of_key]
    failed = 0
    for result in run_checks(context, lambda: pyspark.spark_session, current, destination.name, model_of_key,
                             check_keys):
        failed += not result.passed
        context.log_event(as_evaluation(result))
    yield dg.Output(None, metadata={"checks": len(check_keys), "checks_failed": failed})


@dg.job(name=JOB_NAME, tags={KIND_TAG: "integrity"},
        description="The integrity checks of one destination (every model it receives, or those named), "
                    "each reported on its transfer asset.")
def integrity_job():
    integrity_op()


def as_evaluation(result: dg.AssetCheckResult) -> dg.AssetCheckEvaluation:
    """A check's result as the evaluation an op job reports (the asset's own check yields the result)."""
    return dg.AssetCheckEvaluation(asset_key=result.asset_key, check_name=result.check_name, passed=result.passed,
                                   severity=result.severity, description=result.description,
                                   metadata=result.metadata)


def integrity_spec(config: PlatformConfig, destination_name: str, model: ModelConfig) -> dg.AssetCheckSpec:
    """The ``integrity`` check of one destination/model transfer asset (declared on its op)."""
    destination = config.destination(destination_name)
    recipient = config.recipient(destination.recipient)
    return dg.AssetCheckSpec(
        CHECK_NAME, asset=transfer_asset_key(recipient.name, destination_name, model.model_name), blocking=False,
        description=(f"compares (primary key, last-modified) of tenant "
                     f"'{recipient.id_in_provider_system}' rows in source '{model.source_name}' with "
                     f"destination '{destination_name}': missing, stale, incorrect and orphaned "
                     "rows older than the watermark minus the lookback fail it; newer differences "
                     "are pending"),
        metadata={"destination": destination_name, "model": model.model_name},
    )


def run_checks(context: dg.OpExecutionContext, spark: Callable[[], Any], current: PlatformConfig,
               destination_name: str, model_of_key: dict[dg.AssetKey, str],
               check_keys: Iterable[dg.AssetCheckKey]) -> Iterator[dg.AssetCheckResult]:
    """The selected ``integrity`` checks of one destination's op, one after another (``spark()``:
    the run's session, started at the first check that needs it); ``model_of_key``: each asset
    key's model."""
    for check_key in sorted(check_keys, key=lambda k: k.asset_key.to_string()):
        model = current.model(model_of_key[check_key.asset_key])
        now = datetime.now(UTC)  # the check's clock, captured once and passed down
        try:
            with heartbeat(context.instance, context.run.run_id):
                report = check_integrity(spark(), current, destination_name, model, now)
        except TransferPlatformError as exc:
            yield error_result(exc, current, destination_name, model.model_name, check_key)
            continue
        context.log.info(describe(report, model.source_name))
        yield report_result(report, model.source_name, check_key)


def report_result(report: IntegrityReport, source_name: str, key: dg.AssetCheckKey) -> dg.AssetCheckResult:
    metadata = {name: dg.MetadataValue.int(value) for name, value in report.counts.items()}
    metadata["examples"] = dg.MetadataValue.json(report.examples)
    metadata["horizon"] = dg.MetadataValue.text(isoformat(report.horizon) or "unset (no watermark yet)")
    metadata["watermark"] = dg.MetadataValue.text(isoformat(report.watermark) or "unset")
    metadata["lookback_seconds"] = dg.MetadataValue.int(report.lookback_seconds)
    metadata["repair_windows"] = dg.MetadataValue.json(
        [[isoformat(w.start), isoformat(w.end)] for w in report.repair_windows])
    return dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=report.passed,
                               severity=dg.AssetCheckSeverity.ERROR,
                               description=describe(report, source_name), metadata=metadata)


def error_result(exc: TransferPlatformError, config: PlatformConfig, destination_name: str,
                 model_name: str, key: dg.AssetCheckKey) -> dg.AssetCheckResult:
    """A check that could not compare: failed, with the error's message (secrets masked)."""
    message = redact(f"the integrity check could not run: {exc}", secrets_of(config, destination_name, model_name))
    return dg.AssetCheckResult(
        asset_key=key.asset_key, check_name=key.name,
        passed=False, severity=dg.AssetCheckSeverity.ERROR, description=message,
        metadata={"error_type": dg.MetadataValue.text(type(exc).__name__),
                  "error": dg.MetadataValue.text(message),
                  "blame": dg.MetadataValue.text(exc.blame)})


def secrets_of(config: PlatformConfig, destination_name: str, model_name: str) -> list[str]:
    """The passwords the check may have used (read from their variables now, never stored)."""
    connections = [config.destination(destination_name).connection,
                   config.source(config.model(model_name).source_name).connection]
    secrets = []
    for connection in connections:
        ref = getattr(connection, "password", None)
        value = None if ref is None else os.environ.get(ref.env)
        if value:
            secrets.append(value)
    return secrets


def redact(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text
