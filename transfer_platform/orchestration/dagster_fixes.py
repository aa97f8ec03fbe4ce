"""A fix for a Dagster bug that drops the cron tick at the Unix epoch (a patch of a private module).

Dagster 1.13's ``_find_hourly_schedule_time`` (``dagster/_utils/schedules.py``), which walks every
minute grid of several ticks an hour (``*/2 * * * *`` ... ``*/30 * * * *``), keeps the earliest
candidate tick with ``final_timestamp = cand if not final_timestamp else min(...)``: a candidate
at timestamp 0 is falsy and is replaced by the next one. So the tick 1970-01-01T00:00Z never
exists, and a model configured to start at epoch 0 on such a grid got a first partition beginning
at 00:02 (or 00:15...): the configured start was in no partition.

This is a last resort (STYLE: patching Dagster's private modules), kept as small as possible: the
original function runs, and only when the tick it skipped is timestamp 0 itself (the search
crossed 0 and minute 0 of the hour is on the grid) is that tick returned instead. It is installed
when ``transfer_platform.orchestration`` is imported, which the code server (definitions), the
webserver and the daemon (the run coordinator named in ``dagster.yaml``) all do, so the three
compute the same partition keys. It installs itself only if the bug is present: once Dagster
fixes it, nothing is patched (``installed()`` says which).
"""

from __future__ import annotations

import datetime
import functools
import itertools

_PATCHED = "_transfer_platform_epoch_fix"


def _epoch_tick_is_dropped() -> bool:
    from dagster._utils.schedules import cron_string_iterator

    ticks = itertools.islice(cron_string_iterator(-120, "*/2 * * * *", "UTC"), 2)
    return [t.timestamp() for t in ticks] != [-120, 0]


def install() -> None:
    from dagster._utils import schedules

    if getattr(schedules._find_hourly_schedule_time, _PATCHED, False) or not _epoch_tick_is_dropped():
        return
    original = schedules._find_hourly_schedule_time

    @functools.wraps(original)
    def find_hourly_schedule_time(minutes, date, ascending, already_on_boundary,  # noqa: ANN001, ANN202
                                  use_timezone_minute_resolution):
        found = original(minutes, date, ascending, already_on_boundary, use_timezone_minute_resolution)
        epoch = datetime.datetime.fromtimestamp(0, tz=date.tzinfo)
        crossed = (date.timestamp() < 0 < found.timestamp() if ascending
                   else found.timestamp() < 0 < date.timestamp())
        if crossed and epoch.minute in minutes:
            return epoch
        return found

    setattr(find_hourly_schedule_time, _PATCHED, True)
    schedules._find_hourly_schedule_time = find_hourly_schedule_time


def installed() -> bool:
    from dagster._utils import schedules

    return bool(getattr(schedules._find_hourly_schedule_time, _PATCHED, False))
