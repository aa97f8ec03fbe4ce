"""Which windows a repair re-transfers (pure).

An integrity check names the rows that are missing, stale, or as new as the source's but with
other values; their *source* last-modified values say which windows hold them. A repair moves
exactly those windows of the model's grid (touching ones merged into one range, so that one
transfer run moves each range), nothing else; a model without a window size gets one range from
the earliest to the latest of those values.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from transfer_platform.core.planning import ModelWindowing
from transfer_platform.core.timeutil import utc
from transfer_platform.core.windows import Window

_US = timedelta(microseconds=1)


def repair_windows(windowing: ModelWindowing, moments: Iterable[datetime]) -> list[Window]:
    """The ranges a repair re-transfers: the grid windows holding ``moments``, touching ones
    merged, in order (``[min, max + 1 µs)`` without a grid)."""
    values = sorted({utc(m) for m in moments})
    if not values:
        return []
    grid = windowing.grid
    if grid is None:
        return [Window(values[0], values[-1] + _US)]
    step = timedelta(seconds=grid.seconds)
    ranges: list[Window] = []
    for start in sorted({grid.floor(m) for m in values}):
        if ranges and ranges[-1].end >= start:
            ranges[-1] = Window(ranges[-1].start, start + step)
        else:
            ranges.append(Window(start, start + step))
    return ranges
