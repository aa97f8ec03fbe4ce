"""A dry run (the reference's "debug mode"): the windows a transfer would move, without moving
anything.

Per model: whether the transfer would be incremental or (carry on) a full refresh, the committed
watermark, and each window it would read, with its read bounds (lookback included) and the number
of rows the source holds in them (a ``COUNT`` pushed to the source). Planned exactly as
:func:`transfer_platform.transfers.runner.transfer_model` plans, from the same committed state,
but the state is read with :meth:`DestinationWriter.committed_state`, which creates nothing:
no schema, table, staging object, Delta folder or commit, and no watermark moves.

Knows nothing of Dagster: the command line, the ``transfer`` job and the transfer assets print,
log or attach :meth:`ModelPlan.as_dict`. Nothing in a plan holds connection settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.core.planning import plan_transfer_windows, windowing_for
from transfer_platform.core.timeutil import isoformat
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import writer_for
from transfer_platform.errors import TransferPlatformError
from transfer_platform.sources.base import ReadRequest, reader_for
from transfer_platform.transfers.runner import proof_bounds

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class WindowPlan:
    """One read the transfer would make."""

    partition: str | None  # the Dagster partition key (None: an unpartitioned model)
    read_from: datetime  # lookback included
    read_until: datetime
    progress_start: datetime  # the part of the configured range the read would complete
    progress_end: datetime
    rows: int  # rows the source holds in the read's bounds (for the tenant)

    def as_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "read_from": isoformat(self.read_from),
                "read_until": isoformat(self.read_until), "progress_start": isoformat(self.progress_start),
                "progress_end": isoformat(self.progress_end), "rows": self.rows}


@dataclass
class ModelPlan:
    """What a transfer of one model would do."""

    model: str
    kind: str = "incremental"  # or "full_refresh" (asked for, or an unfinished one carried on)
    watermark: datetime | None = None  # of the live table
    most_recent_last_updated_at: datetime | None = None
    refresh_watermark: datetime | None = None  # an unfinished refresh's progress (carried on)
    windows: list[WindowPlan] = field(default_factory=list)
    status: str = "PLANNED"  # or "ERROR" (the source or destination could not be read)
    error: str | None = None

    @property
    def rows(self) -> int:
        return sum(w.rows for w in self.windows)

    @property
    def read_from(self) -> datetime | None:
        """Where the next read starts (None: nothing to read yet)."""
        return self.windows[0].read_from if self.windows else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "status": self.status,
            "kind": self.kind,
            "watermark": isoformat(self.watermark),
            "most_recent_last_updated_at": isoformat(self.most_recent_last_updated_at),
            "refresh_watermark": isoformat(self.refresh_watermark),
            "read_from": isoformat(self.read_from),
            "windows": [w.as_dict() for w in self.windows],
            "window_count": len(self.windows),
            "rows": self.rows,
            "error": self.error,
        }

    def summary_line(self) -> str:
        """One line for a log."""
        if self.error is not None:
            return f"dry run: model {self.model}: ERROR {self.error}"
        span = (f" from {isoformat(self.read_from)} until {isoformat(self.windows[-1].read_until)}"
                if self.windows else "")
        return (f"dry run: model {self.model}: {self.kind}, {len(self.windows)} window(s){span}, "
                f"{self.rows} row(s) to read; watermark {isoformat(self.watermark)}")


def plan_transfer(
    spark: SparkSession,
    config: PlatformConfig,
    destination: str,
    models: list[ModelConfig],
    now: datetime,
    *,
    full_refresh: bool = False,
    start: datetime | None = None,
    end: datetime | None = None,
    partitions: list[Window] | None = None,
    on_plan: Callable[[str, int], None] | None = None,
    on_count: Callable[[str, int], None] | None = None,
) -> list[ModelPlan]:
    """The plan of a transfer of ``models`` to ``destination`` at ``now``, changing nothing.

    The arguments mean what they mean for a transfer (``TransferOrder`` and
    ``transfer_model(partitions=)``). A model whose source or destination cannot be read gets
    ``status: ERROR`` and its reason; the others are still planned. ``on_plan(model, windows)``
    and ``on_count(model, rows)`` (after each window is counted) follow the work (progress)."""
    writer = writer_for(config.destination(destination))
    try:
        return [_plan_model(spark, config, destination, writer, model, now, full_refresh=full_refresh,
                            start=start, end=end, partitions=partitions, on_plan=on_plan,
                            on_count=on_count) for model in models]
    finally:
        writer.close()


def _plan_model(spark: SparkSession, config: PlatformConfig, destination_name: str, writer, model: ModelConfig,
                now: datetime, *, full_refresh: bool, start: datetime | None, end: datetime | None,
                partitions: list[Window] | None, on_plan: Callable[[str, int], None] | None = None,
                on_count: Callable[[str, int], None] | None = None) -> ModelPlan:
    plan = ModelPlan(model.model_name)
    destination = config.destination(destination_name)
    tenant = config.recipient(destination.recipient).id_in_provider_system
    try:
        windowing = windowing_for(config, destination_name, model)
        reader = reader_for(config.source(model.source_name))
        reader.check(destination_name)
        # as transfer_model: a model that does not fit its source is named before anything else
        reader.check_read(spark, ReadRequest(model, tenant, proof_bounds(windowing, now), destination_name))
        committed = writer.committed_state(model)
        plan.watermark = committed.state.watermark
        plan.most_recent_last_updated_at = committed.state.high_watermark
        # as transfer_model: a full refresh asked for starts over (its state keeps only the live
        # high watermark), an unfinished one is carried on; either rebuilds the whole range
        if full_refresh:
            state = ModelState(high_watermark=committed.state.high_watermark)
        else:
            state = committed.refresh if committed.refresh is not None else committed.state
        refreshing = full_refresh or committed.refresh is not None
        if refreshing:
            plan.kind = "full_refresh"
            plan.refresh_watermark = state.watermark
        planned = plan_transfer_windows(windowing, now=now, state=state, refreshing=refreshing,
                                        partitions=partitions, start=start, end=end)
        if on_plan is not None:
            on_plan(model.model_name, len(planned))
        for window in planned:
            bounds = window.bounds
            rows = reader.count(spark, ReadRequest(model, tenant, bounds, destination_name))
            if on_count is not None:
                on_count(model.model_name, rows)
            key = None if window.partition is None else windowing.partition_key(window.partition)
            plan.windows.append(WindowPlan(key, bounds.lower, bounds.upper, bounds.progress.start,
                                           bounds.progress.end, rows))
    except TransferPlatformError as exc:
        plan.status, plan.error, plan.windows = "ERROR", str(exc), []
    return plan


def plan_as_dict(destination: str, now: datetime, plans: list[ModelPlan]) -> dict[str, Any]:
    """The whole plan as the command line prints it: per model, and the totals."""
    return {
        "dry_run": True,
        "destination": destination,
        "now": isoformat(now),
        "status": "PLANNED" if all(p.status == "PLANNED" for p in plans) else "ERROR",
        "models": [p.as_dict() for p in plans],
        "windows": sum(len(p.windows) for p in plans),
        "rows": sum(p.rows for p in plans),
    }
