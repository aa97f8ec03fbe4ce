"""What a transfer tells Dagster: one materialization per committed partition, with the
transfer's metrics, and each model's ``last_transfer`` outcome when it ends or is stopped."""

from __future__ import annotations

import signal
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    DagsterInstance,
    MetadataValue,
)

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.timeutil import isoformat
from transfer_platform.orchestration.catalog.keys import destination_asset_key
from transfer_platform.orchestration.catalog.last_transfer import (
    ended,
    outcomes,
    stop_reason,
    stopped,
)
from transfer_platform.orchestration.runs.lifecycle import heartbeat
from transfer_platform.runtime.spark_session import LazySession
from transfer_platform.transfers.entry import Transfer
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.outcomes import WindowOutcome

Event = AssetMaterialization | AssetCheckEvaluation
T = TypeVar("T")


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


def step_transfer(context: Any, pyspark: Any, config: PlatformConfig, order: TransferOrder) -> Transfer:
    """The transfer ``order`` of a Dagster step (the asset body, the ``transfer`` op: a context
    and a ``LazyPySparkResource``): the run's clock captured once, here, and passed down; the run
    id as the transfer's id; the step's log; the run's heartbeat kept while it moves; Spark opened
    only when a read needs it."""
    run_id = context.run.run_id
    return Transfer(spark=LazySession(lambda: pyspark.spark_session), config=config, order=order,
                    transfer_id=run_id, now=datetime.now(UTC), log=context.log, warn_if_tenant_empty=False,
                    keep_alive=partial(heartbeat, context.instance, run_id))


def step_events(context: Any, transfer: Transfer, key_of_model: dict[str, AssetKey],
                handle: Callable[[Event], Iterable[T]]) -> Iterator[T]:
    """:func:`step_transfer`'s transfer run in its step: each of :func:`transfer_events` handed to
    ``handle`` through :func:`relay`, what it makes yielded."""
    return relay(transfer_events(context.instance, context.run.run_id, transfer, key_of_model), handle)


def transfer_events(instance: DagsterInstance, run_id: str, transfer: Transfer, key_of_model: dict[str, AssetKey]
                    ) -> Iterator[AssetMaterialization | AssetCheckEvaluation]:
    """A transfer run in a Dagster step (the asset body, the ``transfer`` op), as Dagster's
    events: a materialization of ``key_of_model[model]`` per partition as it commits, then each
    model's ``last_transfer`` outcome (:func:`.last_transfer.ended`). A transfer stopped by an
    exception (a cancel, an interrupt, a bug) yields the outcomes of :func:`.last_transfer.stopped`
    and raises what it returns. Models that failed are ``transfer.failed`` afterwards."""
    names = [m.model_name for m in transfer.models]
    try:
        for model, done in transfer.run():
            yield materialization(key_of_model[model.model_name], done, run_id)
    except GeneratorExit:  # Dagster closed the step's generator: nothing more may be yielded
        raise
    except BaseException as exc:  # reported on the models' last_transfer check, then raised on
        with _further_interrupts_ignored():
            replacement, evaluations = stopped(instance, run_id, exc, transfer.summaries, names, key_of_model)
            yield from evaluations
        if replacement is exc:
            raise
        raise replacement from None
    yield from ended(instance, run_id, transfer.summaries, names, key_of_model)


@contextmanager
def _further_interrupts_ignored() -> Iterator[None]:
    """While a stopped transfer writes its models' outcomes, a second interrupt must not cut the
    report short: a cancelled run is interrupted by its launcher, then again by Dagster's
    cancellation thread when it sees the run CANCELING. The transfer is stopping anyway; the
    process's own handler is back once the report is written."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread, where signals are handled: nothing to hold back here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def relay(events: Generator[Event, None, None], handle: Callable[[Event], Iterable[T]]) -> Iterator[T]:
    """Hand each of :func:`transfer_events` to ``handle`` (which writes it to the run, or makes
    what a step yields) and yield what it makes. Something raised while an event is handled (a
    cancel's interrupt lands wherever the step is, often in writing an event) is thrown into
    ``events`` where it stopped, so that the transfer reports it as its own: the models'
    ``last_transfer`` outcomes of a stopped transfer are recorded whatever the step was doing."""
    advance: Callable[[], Event] = partial(next, events)
    while True:
        try:
            event = advance()
        except StopIteration:
            return
        advance = partial(next, events)
        try:
            yield from handle(event)
        except GeneratorExit:  # the step's generator was closed: nothing more may be yielded
            events.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - thrown into the transfer, which reports and re-raises it
            advance = partial(events.throw, exc)


class RunlessReporter:
    """Records partitions moved outside a Dagster run (the CLI, the demo: what
    :meth:`Transfer.run` yields) in the instance, one materialization each; and (:meth:`ended`,
    :meth:`stopped`) each model's outcome, as a transfer run in Dagster does: its
    ``last_transfer`` check, plus an observation of the asset with the error when it failed
    (outside a run there is no failed step to show it)."""

    def __init__(self, instance: DagsterInstance, config: PlatformConfig, destination: str) -> None:
        self.instance, self.config, self.destination = instance, config, destination

    def __call__(self, model: ModelConfig, outcome: WindowOutcome) -> None:
        key = destination_asset_key(self.config, self.destination, model.model_name)
        self.instance.report_runless_asset_event(materialization(key, outcome, "outside-dagster"))

    def ended(self, transfer: Transfer) -> None:
        """Each model's outcome of a transfer that ended by itself (some models may have failed)."""
        self._report(outcomes(transfer.summaries, self._names(transfer), self._keys(transfer),
                              transfer.transfer_id))

    def stopped(self, transfer: Transfer, exc: BaseException) -> None:
        """Each model's outcome of a transfer stopped by ``exc``: the model in progress and those
        not reached fail with the reason (KILLED for an interrupt: the user's Ctrl-C, else ERROR)."""
        summaries = transfer.summaries
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "ERROR"
        reason = stop_reason(exc, status, summaries[-1].model if summaries else None)
        self._report(outcomes(summaries, self._names(transfer), self._keys(transfer), transfer.transfer_id,
                              stopped=reason))

    @staticmethod
    def _names(transfer: Transfer) -> list[str]:
        return [m.model_name for m in transfer.models]

    def _keys(self, transfer: Transfer) -> dict[str, AssetKey]:
        return {name: destination_asset_key(self.config, self.destination, name) for name in self._names(transfer)}

    def _report(self, evaluations: list[AssetCheckEvaluation]) -> None:
        for evaluation in evaluations:
            self.instance.report_runless_asset_event(evaluation)
            if not evaluation.passed:
                self.instance.report_runless_asset_event(failure_observation(evaluation))


def failure_observation(evaluation: AssetCheckEvaluation) -> AssetObservation:
    """A failed ``last_transfer`` outcome as an observation of its asset (the asset's event
    history shows it): the same description and metadata, and where it was launched from."""
    return AssetObservation(asset_key=evaluation.asset_key, description=evaluation.description,
                            metadata={**evaluation.metadata,
                                      "launched_from": MetadataValue.text("command line (outside Dagster)")})
