"""Which windows a transfer of one model moves, and what each reads.

Two ways in:

- explicit partitions (a Dagster partition or range chosen in the UI, a backfill): each partition
  window is moved, in chunks when the model's window is below the one-minute grid;
- incremental (the CLI, sensors): from the stored watermark (or the configured start on the first
  transfer and on a full refresh) up to "now", on the model's grid, the window in progress included.

Where the next read starts is the reference's rule, not the clock's: from the greatest
last-modified value delivered minus the lookback (the change-detection seed: "query the source for
slightly earlier data than the most recently transferred row"; the cursor seed: the next sync
"will fetch records whose cursor value begins on" the last record's value). The watermark (the end
of the finished windows, at most the previous run's "now") only says where *windows* go on; when a
tenant's rows are sparse it lies far after its last row, and a row committed late with a value
between the two would never be read again. See :func:`resume_for`.

A model without ``max_transfer_time_window_seconds`` moves everything in one window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from transfer_platform.core.timeutil import from_epoch_seconds
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import (
    Grid,
    ReadBounds,
    Resume,
    Window,
    chunk,
    grid_for_window,
    read_bounds,
)

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig, PlatformConfig

_NOTHING_YET = ModelState()


@dataclass(frozen=True)
class ModelWindowing:
    """The time settings of one recipient/model pair."""

    configured_start: datetime
    lookback_seconds: int
    max_window_seconds: int | None

    @property
    def grid(self) -> Grid | None:
        return None if self.max_window_seconds is None else grid_for_window(self.max_window_seconds)

    def partition_key(self, partition: Window) -> str | None:
        grid = self.grid
        return None if grid is None else partition.start.strftime(grid.fmt)


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
        # at least one grain of the last-modified column: a date re-reads the whole last day
        lookback_seconds=model.change_column.lookback_seconds(config.source(model.source_name).lookback_seconds),
        max_window_seconds=model.max_transfer_time_window_seconds,
    )


@dataclass(frozen=True)
class PlannedWindow:
    partition: Window | None  # the Dagster partition this read belongs to (None: unpartitioned)
    bounds: ReadBounds
    last_of_partition: bool  # the partition is complete once this read commits


def resume_for(windowing: ModelWindowing, state: ModelState) -> Resume | None:
    """Where an incremental transfer of a model picks up; ``None`` before any window finished.

    Windows go on from the watermark. The read of the window holding it starts at
    ``min(greatest value delivered, watermark) - lookback``, clipped to the configured start; at
    the configured start when no row was ever delivered (a late commit may then hold any value).
    The earlier of the two anchors: the high watermark can lie beyond the watermark when windows
    finished out of order (a UI backfill), and the part before the watermark must still be read.
    """
    if state.watermark is None:
        return None
    start = windowing.configured_start
    if state.high_watermark is None:
        return Resume(state.watermark, start)
    anchor = min(state.high_watermark, state.watermark)
    return Resume(state.watermark, max(anchor - timedelta(seconds=windowing.lookback_seconds), start))


def plan_windows(
    windowing: ModelWindowing,
    *,
    now: datetime,
    state: ModelState = _NOTHING_YET,
    full_refresh: bool = False,
    partitions: list[Window] | None = None,
) -> list[PlannedWindow]:
    """The reads of one transfer of a model whose destination holds ``state``."""
    resume = None if full_refresh else resume_for(windowing, state)
    grid = windowing.grid
    if grid is None:
        if partitions is not None:  # an explicit range (start/end of a transfer request)
            return _reads(windowing, None, partitions, now=now, resume=resume, skip_done=False)
        if now <= windowing.configured_start or (resume is not None and resume.watermark >= now):
            return []
        whole = Window(windowing.configured_start, now)
        return _reads(windowing, None, [whole], now=now, resume=resume, skip_done=True)
    incremental = partitions is None
    if incremental:
        start = (windowing.configured_start if resume is None
                 else max(resume.watermark, windowing.configured_start))
        partitions = grid.windows(start, now) if start < now else []
    planned: list[PlannedWindow] = []
    for partition in partitions:
        pieces = [partition]
        longest = windowing.max_window_seconds  # set, since there is a grid
        if longest is not None and longest < grid.seconds:
            pieces = chunk(partition, longest)
        planned += _reads(windowing, partition, pieces, now=now, resume=resume, skip_done=incremental)
    return planned


def plan_transfer_windows(
    windowing: ModelWindowing,
    *,
    now: datetime,
    state: ModelState,
    refreshing: bool,
    partitions: list[Window] | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[PlannedWindow]:
    """The reads of one transfer of a model (a real one or a dry run): a full refresh (new or
    unfinished) rebuilds the whole configured range, whatever was selected; otherwise the
    partitions given, the windows overlapping ``[start, end)`` (a transfer request's
    ``start_transfer_window_at``/``end_transfer_window_at``), or the incremental ones."""
    if refreshing:
        return plan_windows(windowing, now=now, state=state)
    if partitions is None and (start is not None or end is not None):
        partitions = explicit_windows(windowing, start, end, now=now)
    return plan_windows(windowing, now=now, state=state, partitions=partitions)


def explicit_windows(windowing: ModelWindowing, start: datetime | None, end: datetime | None,
                     *, now: datetime) -> list[Window]:
    """The windows of a transfer asked for ``[start, end)`` (either side open): the grid's
    windows that overlap it, or the range itself for a model without a window size."""
    lower = windowing.configured_start if start is None else max(start, windowing.configured_start)
    upper = now if end is None else min(end, now)
    if lower >= upper:
        return []
    grid = windowing.grid
    if grid is None:
        return [Window(lower, upper)]
    return grid.windows(lower, upper)


def _reads(windowing: ModelWindowing, partition: Window | None, pieces: list[Window], *,
           now: datetime, resume: Resume | None, skip_done: bool) -> list[PlannedWindow]:
    bounds = [
        b for b in (
            read_bounds(piece, configured_start=windowing.configured_start,
                        lookback_seconds=windowing.lookback_seconds, now=now, resume=resume,
                        skip_delivered=skip_done)
            for piece in pieces
        ) if b is not None
    ]
    if skip_done and resume is not None:
        # an incremental transfer skips the pieces of its first partition that end before the
        # watermark (the partition itself is re-materialized when its last piece commits)
        bounds = [b for b in bounds if b.progress.end > resume.watermark] or bounds[-1:]
    return [PlannedWindow(partition, b, i == len(bounds) - 1) for i, b in enumerate(bounds)]
