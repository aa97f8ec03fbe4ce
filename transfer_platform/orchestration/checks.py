"""Integrity checks as Dagster asset checks, and the ``integrity`` job that runs only them.

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

The ``integrity`` job selects every check and no asset; launch it for one destination with a
subset (:func:`integrity_check_keys`, or the destination's ops: the UI's launchpad does the same
with its check selection). Its runs carry ``transfer_platform/kind=integrity``.
"""


import os
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.timeutil import isoformat
from transfer_platform.errors import TransferPlatformError
from transfer_platform.orchestration.keys import transfer_asset_key
from transfer_platform.orchestration.lifecycle import heartbeat
from transfer_platform.orchestration.run_tags import KIND_TAG
from transfer_platform.transfers.integrity import IntegrityReport, check_integrity, describe

CHECK_NAME = "integrity"
JOB_NAME = "integrity"
REDACTED = "***"


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
