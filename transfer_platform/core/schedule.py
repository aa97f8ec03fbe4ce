"""When a destination's incremental transfers are due (pure).

A destination runs every ``frequency_minutes`` (0 = the default, daily), on ticks aligned to
midnight UTC: 15 -> 00:00, 00:15, ...; 360 -> 00:00, 06:00, 12:00, 18:00. A tick is due once; after
downtime the ticks missed since the last one enqueued are counted and caught up by *one* transfer
(an incremental transfer moves everything since the watermark, so one run covers them all and
the queue is not flooded).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from transfer_platform.core.timeutil import utc

DEFAULT_FREQUENCY_MINUTES = 1440


@dataclass(frozen=True)
class Due:
    tick: datetime  # the latest tick at or before now: the transfer's scheduled time (its run key)
    missed: int  # ticks after the last enqueued one and before ``tick`` that never ran


def latest_tick(frequency_minutes: int, now: datetime) -> datetime:
    step = timedelta(minutes=frequency_minutes or DEFAULT_FREQUENCY_MINUTES)
    now = utc(now)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight + ((now - midnight) // step) * step


def due(frequency_minutes: int, last_enqueued: datetime | None, now: datetime) -> Due | None:
    """The transfer to enqueue now, or None when the latest tick was already enqueued.

    A destination seen for the first time is due at once (its backfill should not wait a day).
    """
    tick = latest_tick(frequency_minutes, now)
    if last_enqueued is not None and utc(last_enqueued) >= tick:
        return None
    if last_enqueued is None:
        return Due(tick, 0)
    step = timedelta(minutes=frequency_minutes or DEFAULT_FREQUENCY_MINUTES)
    missed = max(0, int((tick - utc(last_enqueued)) // step) - 1)
    return Due(tick, missed)
