"""Dagster time-window partitions from a model's windowing (thin: the grid is the core's)."""

from __future__ import annotations

from dagster import TimeWindowPartitionsDefinition

from transfer_platform.core.planning import ModelWindowing
from transfer_platform.core.timeutil import utc
from transfer_platform.core.windows import Window
from transfer_platform.orchestration.speed.dagster_fixes import install_epoch_fix


def partitions_for(windowing: ModelWindowing) -> TimeWindowPartitionsDefinition | None:
    """Partitions on the model's grid from the tick at or before its configured start (so that no
    row after the start is missed; reads are clipped to the start), the window in progress included.
    ``None`` for a model without a window size: its asset is unpartitioned and each
    materialization moves everything since the watermark."""
    grid = windowing.grid
    if grid is None:
        return None
    install_epoch_fix()  # Dagster's keys of a minute grid from the epoch (dagster_fixes), once
    return TimeWindowPartitionsDefinition(
        start=grid.floor(windowing.configured_start),
        cron_schedule=grid.cron,
        fmt=grid.fmt,
        timezone="UTC",
        end_offset=1,
    )


def windows_for_keys(partitions_def: TimeWindowPartitionsDefinition, keys: list[str]) -> list[Window]:
    windows = []
    for key in keys:
        time_window = partitions_def.time_window_for_partition_key(key)
        windows.append(Window(utc(time_window.start), utc(time_window.end)))
    return windows
