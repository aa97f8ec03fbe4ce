"""Time windows: the partition grid of a model, the windows of a transfer, and read bounds.

A model's ``max_transfer_time_window_seconds`` is the *largest* window a transfer may move. Dagster
partitions need a cron grid, so a model is partitioned on the largest cron grid not above its
window size (daily for 86400 s, hourly for 5400 s, one minute for anything under a minute); a
window below one minute is moved in chunks inside its partition. Windows are half-open
``[start, end)`` in UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from transfer_platform.core.timeutil import EPOCH, utc

_MINUTE = 60
_HOUR = 3_600
_DAY = 86_400
_WEEK = 7 * _DAY
# The epoch is a Thursday; weekly windows start on Mondays (as Dagster's weekly grid does).
_MONDAY_OFFSET = 4 * _DAY
_MINUTE_FMT = "%Y-%m-%dT%H:%M"
_DAY_FMT = "%Y-%m-%d"


@dataclass(frozen=True, order=True)
class Window:
    """A half-open interval ``[start, end)`` of last-modified time, in UTC."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"empty window: end {self.end} is not after start {self.start}")

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


@dataclass(frozen=True)
class Grid:
    """A cron-expressible partition grid: windows of ``seconds`` from ``anchor`` on."""

    seconds: int
    cron: str
    fmt: str
    anchor_offset: int = 0  # seconds after the epoch at which the grid's ticks start

    def floor(self, moment: datetime) -> datetime:
        """The last tick at or before ``moment``."""
        offset = (utc(moment) - EPOCH).total_seconds() - self.anchor_offset
        ticks = int(offset // self.seconds)
        return EPOCH + timedelta(seconds=self.anchor_offset + ticks * self.seconds)

    def windows(self, start: datetime, end: datetime) -> list[Window]:
        """Grid windows that cover ``[start, end)``; the first and last may stick out of it."""
        return list(self.iter_windows(start, end))

    def iter_windows(self, start: datetime, end: datetime) -> Iterator[Window]:
        step = timedelta(seconds=self.seconds)
        tick = self.floor(start)
        while tick < end:
            yield Window(tick, tick + step)
            tick += step


def _grids() -> list[Grid]:
    grids = [
        Grid(n * _MINUTE, "* * * * *" if n == 1 else f"*/{n} * * * *", _MINUTE_FMT)
        for n in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)
    ]
    grids += [
        Grid(n * _HOUR, "0 * * * *" if n == 1 else f"0 */{n} * * *", _MINUTE_FMT)
        for n in (1, 2, 3, 4, 6, 8, 12)
    ]
    grids.append(Grid(_DAY, "0 0 * * *", _DAY_FMT))
    grids.append(Grid(_WEEK, "0 0 * * 1", _DAY_FMT, anchor_offset=_MONDAY_OFFSET))
    return grids


GRIDS: tuple[Grid, ...] = tuple(_grids())


def grid_for_window(max_window_seconds: int) -> Grid:
    """The largest cron grid whose windows are not longer than ``max_window_seconds``.

    Below one minute the one-minute grid is returned: such windows are chunked inside a partition
    (see :func:`chunk`).
    """
    if max_window_seconds <= 0:
        raise ValueError(f"a window must be at least 1 second, got {max_window_seconds}")
    fitting = [g for g in GRIDS if g.seconds <= max_window_seconds]
    return fitting[-1] if fitting else GRIDS[0]


def chunk(window: Window, max_window_seconds: int) -> list[Window]:
    """Split ``window`` into consecutive pieces of at most ``max_window_seconds``."""
    step = timedelta(seconds=max_window_seconds)
    pieces, start = [], window.start
    while start < window.end:
        end = min(start + step, window.end)
        pieces.append(Window(start, end))
        start = end
    return pieces


@dataclass(frozen=True)
class ReadBounds:
    """What one window reads from the source: ``lower <= last_modified < upper``.

    ``progress`` is the part of the configured range this read completes (recorded in the
    watermark's intervals): the window clipped to the configured start and to "now".
    """

    lower: datetime
    upper: datetime
    progress: Window


@dataclass(frozen=True)
class Resume:
    """Where an incremental transfer picks up (see :func:`transfer_platform.core.planning.resume_for`).

    ``watermark``: the end of the finished windows; windows go on from there. ``read_from``: where
    the read of the window holding the watermark starts, the reference's rule (the greatest value
    delivered, or the watermark if earlier, minus the lookback; the configured start if nothing
    was ever delivered). It is at most ``watermark - lookback``: the range it re-reads below the
    watermark holds only late commits, and is read once, by that one read.
    """

    watermark: datetime
    read_from: datetime


def read_bounds(
    window: Window,
    *,
    configured_start: datetime,
    lookback_seconds: int,
    now: datetime,
    resume: Resume | None = None,
    skip_delivered: bool = True,
) -> ReadBounds | None:
    """Bounds of the source read for ``window``; ``None`` if nothing of it is readable yet.

    - rows before ``configured_start`` are never read, rows at or after ``now`` not yet;
    - every read reaches ``lookback_seconds`` before its start (late commits), never before the
      configured start;
    - the window that holds the watermark of ``resume`` (or starts at it) is read from
      ``resume.read_from`` instead: down to the last delivered row minus the lookback, and (with
      ``skip_delivered``, as an incremental transfer does) not the part delivered before that.
      A window asked for explicitly is read whole, and reaches down to ``read_from`` too.
    """
    start = max(window.start, configured_start)
    end = min(window.end, now)
    if end <= start:
        return None
    lower = max(start - timedelta(seconds=lookback_seconds), configured_start)
    if resume is not None and start <= resume.watermark < end:
        reread = max(resume.read_from, configured_start)
        lower = reread if skip_delivered else min(lower, reread)
    return ReadBounds(lower=lower, upper=end, progress=Window(start, end))
