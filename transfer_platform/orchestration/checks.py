"""Integrity checks as Dagster asset checks, and the ``integrity`` job that runs only them.

One check named ``integrity`` per destination/model transfer asset (defined per destination: one
op runs the selected checks of its models, one after another). It is thin: it captures the
run's clock, hands plain values to :func:`transfer_platform.transfers.integrity.check_integrity`
and turns its report into an ``AssetCheckResult`` (ERROR severity, not blocking). A source or
destination that cannot be reached or read is a failed check with the error's message, not a
traceback; no secret reaches the message or the metadata.

The ``integrity`` job selects every check and no asset; launch it for one destination with a
subset (:func:`integrity_check_keys`; the UI's launchpad does the same with its check selection).
Its runs carry ``transfer_platform/kind=integrity``.
"""


import os
from datetime import UTC, datetime

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from transfer_platform.config.models import PlatformConfig
from transfer_platform.core.timeutil import isoformat
from transfer_platform.errors import TransferPlatformError
from transfer_platform.orchestration.keys import transfer_asset_key
from transfer_platform.orchestration.lifecycle import heartbeat
from transfer_platform.orchestration.resources import TransferPlatformResource
from transfer_platform.orchestration.run_tags import KIND_TAG
from transfer_platform.transfers.integrity import IntegrityReport, check_integrity, describe

CHECK_NAME = "integrity"
JOB_NAME = "integrity"
REDACTED = "***"


def integrity_checks(config: PlatformConfig) -> list[dg.AssetChecksDefinition]:
    """The ``integrity`` check of every transfer asset (destination x enabled model), defined
    per destination: one op for its models' checks (Dagster's decorators cost milliseconds per
    op, which adds up over thousands of assets), each check selectable on its own."""
    return [build_integrity_checks(config, destination.name) for destination in config.destinations
            if config.models_for(destination)]


def integrity_check_keys(config: PlatformConfig, destination_name: str) -> list[dg.AssetCheckKey]:
    """The checks of one destination: the subset to launch the ``integrity`` job with."""
    destination = config.destination(destination_name)
    return [dg.AssetCheckKey(transfer_asset_key(destination.recipient, destination.name, model.model_name),
                             CHECK_NAME)
            for model in config.models_for(destination)]


def integrity_job(config: PlatformConfig):  # -> UnresolvedAssetJobDefinition (not exported by dagster)
    """Every ``integrity`` check (not the ``last_transfer`` checks, which transfers report)."""
    keys = [key for destination in config.destinations for key in integrity_check_keys(config, destination.name)]
    return dg.define_asset_job(
        JOB_NAME,
        selection=dg.AssetSelection.checks(*keys),
        tags={KIND_TAG: "integrity"},
        description="compare (primary key, last-modified) of source and destination; launch it "
                    "with the checks of one destination",
    )


def build_integrity_checks(config: PlatformConfig, destination_name: str) -> dg.AssetChecksDefinition:
    destination = config.destination(destination_name)
    recipient = config.recipient(destination.recipient)
    models = {transfer_asset_key(recipient.name, destination_name, m.model_name): m
              for m in config.models_for(destination)}
    specs = [dg.AssetCheckSpec(
        CHECK_NAME, asset=key, blocking=False,
        description=(f"compares (primary key, last-modified) of tenant "
                     f"'{recipient.id_in_provider_system}' rows in source '{model.source_name}' with "
                     f"destination '{destination_name}': missing, stale, incorrect and orphaned "
                     "rows older than the watermark minus the lookback fail it; newer differences "
                     "are pending"),
        metadata={"destination": destination_name, "model": model.model_name},
    ) for key, model in models.items()]

    @dg.multi_asset_check(specs=specs, can_subset=True,
                          name=f"integrity_{destination_name}")
    def _integrity(context: dg.AssetCheckExecutionContext, pyspark: LazyPySparkResource,
                   platform: TransferPlatformResource):
        current = platform.config
        for check_key in sorted(context.selected_asset_check_keys, key=lambda k: k.asset_key.to_string()):
            model = current.model(models[check_key.asset_key].model_name)
            model_name, source_name = model.model_name, model.source_name
            now = datetime.now(UTC)  # the check's clock, captured once and passed down
            try:
                with heartbeat(context.instance, context.run.run_id):
                    report = check_integrity(pyspark.spark_session, current, destination_name, model, now)
            except TransferPlatformError as exc:
                yield error_result(exc, current, destination_name, model_name, check_key)
                continue
            context.log.info(describe(report, source_name))
            yield report_result(report, source_name, check_key)

    return _integrity


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
