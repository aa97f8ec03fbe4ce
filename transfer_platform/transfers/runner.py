"""Running one model's transfer to one destination: plan windows, read, write, report.

Knows nothing of Dagster: the asset, the transfer job and the tests drive the generator
:func:`transfer_model` and turn each committed window into whatever they report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.connections import spark_error_reason
from transfer_platform.core.planning import (
    ModelWindowing,
    PlannedWindow,
    explicit_windows,
    plan_windows,
)
from transfer_platform.core.timeutil import from_epoch_seconds, isoformat
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import DestinationWriter, WindowLoad, WindowResult
from transfer_platform.errors import DataError, TransferPlatformError
from transfer_platform.sources.base import ReadRequest, reader_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG = logging.getLogger("transfer_platform.transfer")


def windowing_for(config: PlatformConfig, destination_name: str, model: ModelConfig) -> ModelWindowing:
    """The time settings of a model for a destination's recipient (the recipient's
    ``default_full_refresh_min_start_time_epoch`` overrides the model's start)."""
    destination = config.destination(destination_name)
    recipient = config.recipient(destination.recipient)
    start_epoch = recipient.default_full_refresh_min_start_time_epoch
    if start_epoch is None:
        start_epoch = model.min_start_time_epoch
    return ModelWindowing(
        configured_start=from_epoch_seconds(start_epoch),
        lookback_seconds=config.source(model.source_name).lookback_seconds,
        max_window_seconds=model.max_transfer_time_window_seconds,
    )


@dataclass(frozen=True)
class WindowOutcome:
    planned: PlannedWindow
    result: WindowResult
    partition_key: str | None
    into_refresh: bool = False  # committed to a table built aside, live once the refresh publishes


@dataclass
class TransferRequest:
    spark: SparkSession
    config: PlatformConfig
    destination: str
    writer: DestinationWriter
    transfer_id: str
    now: datetime
    full_refresh: bool = False
    log: Any = field(default=_LOG)
    start: datetime | None = None  # start_transfer_window_at (inclusive): only windows from here
    end: datetime | None = None  # end_transfer_window_at (exclusive)


def transfer_model(
    request: TransferRequest, model: ModelConfig, *, partitions: list[Window] | None = None
) -> Iterator[ModelState | WindowOutcome]:
    """Move one model window by window.

    Yields the model's committed state first, then one outcome per window, each already
    committed. A failure in window k raises after windows before k have been yielded.

    A full refresh (asked for, or left unfinished by an earlier transfer) loads a table built
    aside and yields the published live state last, once that table has replaced the live one.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    config = request.config
    destination = config.destination(request.destination)
    recipient = config.recipient(destination.recipient)
    source = config.source(model.source_name)
    windowing = windowing_for(config, request.destination, model)
    tags = f"transfer={request.transfer_id} destination={destination.name} model={model.model_name}"

    reader = reader_for(source)
    reader.check(destination.name)
    prepared = request.writer.prepare(model, request.transfer_id, full_refresh=request.full_refresh)
    for change in prepared.schema_changes:
        request.log.warning(f"schema {tags}: {change}")
    refreshing = prepared.refresh is not None
    state = prepared.refresh if refreshing else prepared.state
    yield state
    if partitions is None and (request.start is not None or request.end is not None):
        partitions = explicit_windows(windowing, request.start, request.end, now=request.now)
    # a full refresh (new or unfinished) rebuilds the whole configured range, whatever was selected
    planned = plan_windows(windowing, now=request.now, watermark=state.watermark,
                           partitions=None if refreshing else partitions)
    what = "full refresh into a table built aside" if refreshing else "incremental"
    request.log.info(f"plan {tags}: {len(planned)} read(s), {what}, "
                     f"watermark={isoformat(state.watermark)}")
    for window in planned:
        bounds = window.bounds
        request.log.info(f"read {tags}: {isoformat(bounds.lower)} <= last_modified < {isoformat(bounds.upper)}")
        frame = reader.read(request.spark, ReadRequest(model, recipient.id_in_provider_system, bounds,
                                                              destination.name))
        load = WindowLoad(model=model, transfer_id=request.transfer_id, progress=bounds.progress,
                          configured_start=windowing.configured_start, into_refresh=refreshing)
        try:
            result = request.writer.write_window(frame, load)
        except (Py4JJavaError, PySparkException) as exc:
            # Spark reads lazily: a bad value (a failed cast, a NULL key) surfaces while staging.
            # As a DataError it names the model and does not stop the transfer's other models.
            raise DataError(
                f"reading or staging the window {isoformat(bounds.lower)} <= last_modified < "
                f"{isoformat(bounds.upper)} failed: {spark_error_reason(exc)}",
                model=model.model_name, destination=destination.name,
                fix="check that each column's data_type matches the source values, that the "
                    "primary key columns hold no NULLs and that source_query runs",
            ) from None
        request.log.info(f"load {tags}: {result.rows_transferred} row(s), watermark -> "
                         f"{isoformat(result.state.watermark)}")
        key = None if window.partition is None else windowing.partition_key(window.partition)
        yield WindowOutcome(window, result, key, refreshing)
    if refreshing:
        published = request.writer.publish_refresh(model, request.transfer_id)
        request.log.info(f"publish {tags}: the refreshed table replaced the live one, watermark "
                         f"{isoformat(published.watermark)}")
        yield published


@dataclass
class ModelSummary:
    """Per-model metrics of one transfer, as the CLI prints them."""

    model: str
    status: str = "SUCCESS"
    windows: int = 0
    rows_transferred: int = 0
    delta_rows_transferred: int = 0
    volume_bytes: int = 0
    state: ModelState | None = None
    error: str | None = None
    error_type: str | None = None

    def add(self, outcome: WindowOutcome) -> None:
        self.windows += 1
        self.rows_transferred += outcome.result.rows_transferred
        self.delta_rows_transferred += outcome.result.delta_rows_transferred
        self.volume_bytes += outcome.result.volume_bytes
        self.state = outcome.result.state

    def fail(self, exc: BaseException) -> None:
        self.status = "ERROR"
        self.error = str(exc)
        self.error_type = type(exc).__name__

    def as_dict(self) -> dict[str, Any]:
        state = self.state
        return {
            "model": self.model,
            "status": self.status,
            "windows": self.windows,
            "rows_transferred": self.rows_transferred,
            "delta_rows_transferred": self.delta_rows_transferred,
            "volume_transferred_in_mb": round(self.volume_bytes / 1_048_576, 3),
            "watermark": isoformat(state.watermark) if state else None,
            "most_recent_last_updated_at": isoformat(state.high_watermark) if state else None,
            "error": self.error,
        }


def run_transfer(
    request: TransferRequest,
    models: list[ModelConfig],
    *,
    on_window: Callable[[ModelConfig, WindowOutcome], None] | None = None,
) -> list[ModelSummary]:
    """Transfer several models to one destination; a failing model does not stop the others."""
    summaries = []
    for model in models:
        summary = ModelSummary(model.model_name)
        try:
            for item in transfer_model(request, model):
                if isinstance(item, ModelState):
                    summary.state = item  # the state before, or the state published by a refresh
                    continue
                summary.add(item)
                if on_window is not None:
                    on_window(model, item)
        except TransferPlatformError as exc:
            summary.fail(exc)
            request.log.error(f"transfer={request.transfer_id} destination={request.destination} "
                              f"model={model.model_name} failed: {exc}")
        summaries.append(summary)
    return summaries
