"""The ``last_transfer`` asset check: the outcome of each model's latest transfer, on its asset.

A transfer that fails records no materialization, so without this the asset, the catalog and the
lineage stay green while a recipient stops receiving rows. Every transfer asset carries a
non-blocking ``last_transfer`` check (declared with the transfer assets), and every transfer
reports it for each model it ran, whichever path ran it (the ``transfer`` job of the sensor and
the CLI, the UI's Materialize, a backfill):

- SUCCESS: passed, with rows and windows moved;
- ERROR: failed (severity ERROR) with the one-line error first, then its type, who is to blame
  (provider / recipient / platform, as in :mod:`transfer_platform.errors`) and the full error;
- KILLED: failed (severity WARN): cancelled by a user while it ran (committed windows stay);
- ORPHANED / EXPIRED: failed (ERROR), reported by the sweep (:mod:`.lifecycle`).

Executing the check by itself (the UI's "Execute checks") reports the latest recorded outcome
again; it moves nothing.
"""


from collections.abc import Iterable

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    DagsterExecutionInterruptedError,
    DagsterInstance,
    MetadataValue,
)

from transfer_platform.core.lifecycle import failure_headline, first_line
from transfer_platform.errors import TransferCancelled, TransferPlatformError, one_line
from transfer_platform.transfers.outcomes import ModelSummary

CHECK_NAME = "last_transfer"
_WARN_STATUSES = ("KILLED",)


def check_spec(key: AssetKey) -> AssetCheckSpec:
    return AssetCheckSpec(
        CHECK_NAME, asset=key, blocking=False,
        description="the outcome of the model's latest transfer: fails with the error and who is "
                    "to blame when it failed, warns when a user cancelled it",
    )


def outcome(key: AssetKey, status: str, transfer_id: str, *, error: str | None = None,
            error_type: str | None = None, blame: str | None = None, rows: int | None = None,
            windows: int | None = None) -> AssetCheckEvaluation:
    """One model's outcome as the check's evaluation."""
    passed = status == "SUCCESS"
    if blame is None and not passed and status not in _WARN_STATUSES:
        blame = "platform"  # a user's cancel (WARN) blames nobody
    if passed:
        description = f"SUCCESS: {rows or 0} row(s) in {windows or 0} window(s) (transfer {transfer_id})"
    else:
        description = f"{status}: {first_line(error) or 'no error recorded'}"
        if blame:
            description += f" [blame: {blame}]"
    metadata: dict = {"status": MetadataValue.text(status), "transfer_id": MetadataValue.text(transfer_id)}
    if rows is not None:
        metadata["rows_transferred"] = MetadataValue.int(rows)
    if windows is not None:
        metadata["windows"] = MetadataValue.int(windows)
    if not passed:
        metadata["error"] = MetadataValue.text(error or "")
        metadata["error_type"] = MetadataValue.text(error_type or "")
    if blame:
        metadata["blame"] = MetadataValue.text(blame)
    return AssetCheckEvaluation(
        asset_key=key, check_name=CHECK_NAME, passed=passed, description=description, metadata=metadata,
        severity=AssetCheckSeverity.WARN if status in _WARN_STATUSES else AssetCheckSeverity.ERROR)


def from_summary(key: AssetKey, summary: ModelSummary, transfer_id: str) -> AssetCheckEvaluation:
    return outcome(key, summary.status, transfer_id, error=summary.error, error_type=summary.error_type,
                   blame=summary.blame, rows=summary.rows_transferred, windows=summary.windows)


def as_result(evaluation: AssetCheckEvaluation) -> AssetCheckResult:
    """The same outcome as the result of a check the step runs (selected in its run)."""
    return AssetCheckResult(asset_key=evaluation.asset_key, check_name=evaluation.check_name,
                            passed=evaluation.passed, severity=evaluation.severity,
                            description=evaluation.description, metadata=evaluation.metadata)


def for_partition(evaluation: AssetCheckEvaluation, partition: str) -> AssetCheckEvaluation:
    """The same outcome for one partition: a partitioned run plans the check per partition."""
    return AssetCheckEvaluation(
        asset_key=evaluation.asset_key, check_name=evaluation.check_name, passed=evaluation.passed,
        metadata=evaluation.metadata, severity=evaluation.severity, description=evaluation.description,
        partition=partition)


def report_runless(instance: DagsterInstance, evaluations: Iterable[AssetCheckEvaluation]) -> None:
    """Outcomes known outside the run (the sweep: EXPIRED, ORPHANED)."""
    for evaluation in evaluations:
        instance.report_runless_asset_event(evaluation)


def latest(instance: DagsterInstance, key: AssetKey, transfer_id: str) -> AssetCheckEvaluation:
    """The latest recorded outcome of ``key``'s transfers, reported again (a check run by itself)."""
    records = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [AssetCheckKey(key, CHECK_NAME)])
    record = records.get(AssetCheckKey(key, CHECK_NAME))
    entry = record.event if record is not None else None
    event = entry.dagster_event if entry is not None else None
    if event is None or event.event_type_value != "ASSET_CHECK_EVALUATION":
        return AssetCheckEvaluation(asset_key=key, check_name=CHECK_NAME, passed=True,
                                    description="no transfer of this model has been recorded yet",
                                    metadata={"status": MetadataValue.text("NONE")})
    previous = event.asset_check_evaluation_data
    return AssetCheckEvaluation(
        asset_key=key, check_name=CHECK_NAME, passed=previous.passed, severity=previous.severity,
        description=previous.description,
        metadata={**previous.metadata, "reported_again_by": MetadataValue.text(transfer_id)})


def outcomes(summaries: list[ModelSummary], models: list[str], key_of_model: dict[str, AssetKey],
             transfer_id: str, stopped: tuple[str, str, str, str | None] | None = None) -> list[AssetCheckEvaluation]:
    """Each of ``models``' outcome in a transfer. ``summaries``: the models run, in order (the
    last one still in progress when the transfer was ``stopped``). ``stopped``: (status,
    error type, message, blame) of a transfer that did not end by itself: the model in progress
    and those not reached get that status."""
    finished = summaries if stopped is None else summaries[:-1]
    found = [from_summary(key_of_model[s.model], s, transfer_id) for s in finished]
    if stopped is not None:
        status, error_type, message, blame = stopped
        done = {s.model for s in finished}
        found += [outcome(key_of_model[m], status, transfer_id, error=message, error_type=error_type, blame=blame)
                  for m in models if m not in done]
    return found


def stop_reason(exc: BaseException, status: str, model: str | None) -> tuple[str, str, str, str | None]:
    """(status, error type, message, blame) of a transfer stopped by ``exc`` while it moved
    ``model``. An error the platform raises on purpose (a destination its address policy
    refuses, a secret not set) is said as it is, with its own blame; anything else is a bug."""
    where = f" while it moved model '{model}'" if model else ""
    if status == "KILLED":
        return ("KILLED", "TransferCancelled",
                f"cancelled by a user{where}; the windows committed before stay delivered and the "
                "next transfer resumes from the watermark", None)
    if isinstance(exc, KeyboardInterrupt | DagsterExecutionInterruptedError):
        return ("ERROR", "TransferCancelled",
                f"interrupted{where}: the run's process was asked to stop (not by a user's "
                "cancel); the next transfer resumes from the watermark", "platform")
    if isinstance(exc, TransferPlatformError):
        return ("ERROR", type(exc).__name__, one_line(exc), exc.blame)
    return ("ERROR", type(exc).__name__,
            f"the transfer stopped{where} on an unexpected error (a bug: report it): {first_line(str(exc))}",
            "platform")


def stopped(instance: DagsterInstance, run_id: str, exc: BaseException, summaries: list[ModelSummary],
            models: list[str], key_of_model: dict[str, AssetKey]
            ) -> tuple[BaseException, list[AssetCheckEvaluation]]:
    """A transfer stopped by ``exc`` (a cancel, an interrupt, a bug): writes the run's status
    tag; returns the exception to raise instead (a cancel reads as one, not as a bare
    ``KeyboardInterrupt``; Dagster still ends the run cancelled) and each model's outcome."""
    from transfer_platform.orchestration.runs.lifecycle import (
        record_interrupted,
        record_model_outcomes,
    )

    interrupt = isinstance(exc, KeyboardInterrupt | DagsterExecutionInterruptedError)
    if interrupt:
        status = record_interrupted(instance, run_id, rows=sum(s.rows_transferred for s in summaries))
    else:
        status = "ERROR"
        record_model_outcomes(instance, run_id, 0, 1)
    reason = stop_reason(exc, status, summaries[-1].model if summaries else None)
    evaluations = outcomes(summaries, models, key_of_model, run_id, stopped=reason)
    return (TransferCancelled(reason[2]) if interrupt else exc), evaluations


def ended(instance: DagsterInstance, run_id: str, summaries: list[ModelSummary], models: list[str],
          key_of_model: dict[str, AssetKey]) -> list[AssetCheckEvaluation]:
    """A transfer step that ended by itself: adds its models' counts and rows to the run's tags;
    returns each model's outcome (the asset body and the ``transfer`` op report them each its own way)."""
    from transfer_platform.orchestration.runs.lifecycle import record_model_outcomes

    failed = [s for s in summaries if s.status != "SUCCESS"]
    record_model_outcomes(instance, run_id, len(summaries) - len(failed), len(failed),
                          rows=sum(s.rows_transferred for s in summaries))
    return outcomes(summaries, models, key_of_model, run_id)


def failure_description(failed: list[ModelSummary], total: int) -> str:
    """The one-line error first (status, count, the first model's error, blame), then each
    failed model's whole error."""
    headline = failure_headline([(s.model, s.blame, s.error) for s in failed], total)
    details = "\n\n".join(f"model {s.model!r} ({s.error_type}, blame: {s.blame or 'platform'}): {s.error}"
                           for s in failed)
    return f"{headline}\n\n{details}"
