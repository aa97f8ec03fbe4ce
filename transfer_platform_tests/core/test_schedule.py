"""When a destination's transfers are due: ticks aligned to midnight UTC, once per tick, catch-up.

Pure: plain tables of clocks, no Dagster. ``due(frequency, last_enqueued, now)`` returns the tick
to enqueue (and how many ticks were missed since ``last_enqueued``) or None.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from transfer_platform.core.schedule import DEFAULT_FREQUENCY_MINUTES, Due, due, latest_tick

FREQUENCIES = (0, 15, 60, 360, 720, 1440)
US = timedelta(microseconds=1)


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def step(frequency: int) -> timedelta:
    return timedelta(minutes=frequency or DEFAULT_FREQUENCY_MINUTES)


# (frequency, now, the latest tick at or before now)
TICKS = [
    (15, at(2025, 5, 6, 0, 0), at(2025, 5, 6, 0, 0)),
    (15, at(2025, 5, 6, 0, 14, 59, 999_999), at(2025, 5, 6, 0, 0)),
    (15, at(2025, 5, 6, 0, 15), at(2025, 5, 6, 0, 15)),
    (15, at(2025, 5, 6, 13, 44, 10), at(2025, 5, 6, 13, 30)),
    (15, at(2025, 5, 6, 23, 59, 59), at(2025, 5, 6, 23, 45)),
    (60, at(2025, 5, 6, 0, 59, 59, 999_999), at(2025, 5, 6, 0, 0)),
    (60, at(2025, 5, 6, 17, 0), at(2025, 5, 6, 17, 0)),
    (60, at(2025, 5, 6, 17, 30), at(2025, 5, 6, 17, 0)),
    (360, at(2025, 5, 6, 5, 59, 59), at(2025, 5, 6, 0, 0)),
    (360, at(2025, 5, 6, 6, 0), at(2025, 5, 6, 6, 0)),
    (360, at(2025, 5, 6, 13, 10), at(2025, 5, 6, 12, 0)),
    (360, at(2025, 5, 6, 23, 59), at(2025, 5, 6, 18, 0)),
    (720, at(2025, 5, 6, 11, 59, 59), at(2025, 5, 6, 0, 0)),
    (720, at(2025, 5, 6, 12, 0), at(2025, 5, 6, 12, 0)),
    (720, at(2025, 5, 6, 23, 59), at(2025, 5, 6, 12, 0)),
    (1440, at(2025, 5, 6, 0, 0), at(2025, 5, 6, 0, 0)),
    (1440, at(2025, 5, 6, 23, 59, 59, 999_999), at(2025, 5, 6, 0, 0)),
    (0, at(2025, 5, 6, 0, 0), at(2025, 5, 6, 0, 0)),  # 0 = the default, daily
    (0, at(2025, 5, 6, 18, 30), at(2025, 5, 6, 0, 0)),
    # across month and year ends, leap day: ticks follow the UTC calendar
    (15, at(2025, 1, 31, 23, 59, 59), at(2025, 1, 31, 23, 45)),
    (15, at(2025, 2, 1, 0, 0, 0, 1), at(2025, 2, 1, 0, 0)),
    (360, at(2024, 2, 29, 19, 0), at(2024, 2, 29, 18, 0)),
    (1440, at(2024, 2, 29, 12, 0), at(2024, 2, 29, 0, 0)),
    (720, at(2024, 12, 31, 23, 0), at(2024, 12, 31, 12, 0)),
    (60, at(2025, 1, 1, 0, 30), at(2025, 1, 1, 0, 0)),
]


@pytest.mark.parametrize(("frequency", "now", "tick"), TICKS,
                         ids=[f"{f}min-{n:%m-%dT%H:%M:%S.%f}" for f, n, _ in TICKS])
def test_latest_tick_is_aligned_to_midnight_utc(frequency: int, now: datetime, tick: datetime) -> None:
    assert latest_tick(frequency, now) == tick
    assert due(frequency, None, now) == Due(tick, 0)  # first sight: due at once, at that tick


# (frequency, last tick enqueued, now, expected)
DUE = [
    # the tick already enqueued: nothing until the next one
    (15, at(2025, 5, 6, 10, 15), at(2025, 5, 6, 10, 15), None),
    (15, at(2025, 5, 6, 10, 15), at(2025, 5, 6, 10, 29, 59, 999_999), None),
    (15, at(2025, 5, 6, 10, 15), at(2025, 5, 6, 10, 30), Due(at(2025, 5, 6, 10, 30), 0)),
    (60, at(2025, 5, 6, 10, 0), at(2025, 5, 6, 10, 59), None),
    (60, at(2025, 5, 6, 10, 0), at(2025, 5, 6, 11, 0, 0, 1), Due(at(2025, 5, 6, 11, 0), 0)),
    (360, at(2025, 5, 6, 6, 0), at(2025, 5, 6, 11, 59), None),
    (360, at(2025, 5, 6, 6, 0), at(2025, 5, 6, 12, 0), Due(at(2025, 5, 6, 12, 0), 0)),
    (720, at(2025, 5, 6, 12, 0), at(2025, 5, 6, 23, 59), None),
    (720, at(2025, 5, 6, 12, 0), at(2025, 5, 7, 0, 1), Due(at(2025, 5, 7, 0, 0), 0)),
    (1440, at(2025, 5, 6), at(2025, 5, 6, 23, 59, 59, 999_999), None),
    (1440, at(2025, 5, 6), at(2025, 5, 7, 0, 0), Due(at(2025, 5, 7), 0)),
    (0, at(2025, 5, 6), at(2025, 5, 6, 23, 0), None),
    (0, at(2025, 5, 6), at(2025, 5, 7, 9, 0), Due(at(2025, 5, 7), 0)),
    # a clock that went backwards (or a cursor from the future): nothing
    (60, at(2025, 5, 6, 12, 0), at(2025, 5, 6, 11, 30), None),
    # catch-up after downtime: one transfer at the latest tick, the ticks in between counted
    (15, at(2025, 5, 6, 10, 0), at(2025, 5, 6, 11, 7), Due(at(2025, 5, 6, 11, 0), 3)),
    (60, at(2025, 5, 6, 0, 0), at(2025, 5, 6, 3, 20), Due(at(2025, 5, 6, 3, 0), 2)),
    (60, at(2025, 5, 6, 23, 0), at(2025, 5, 8, 0, 30), Due(at(2025, 5, 8, 0, 0), 24)),
    (360, at(2025, 5, 6, 18, 0), at(2025, 5, 8, 7, 0), Due(at(2025, 5, 8, 6, 0), 5)),
    (720, at(2025, 5, 6, 0, 0), at(2025, 5, 9, 13, 0), Due(at(2025, 5, 9, 12, 0), 6)),
    (1440, at(2025, 1, 30), at(2025, 2, 2, 8, 0), Due(at(2025, 2, 2), 2)),
    (0, at(2025, 1, 30), at(2025, 2, 2, 8, 0), Due(at(2025, 2, 2), 2)),
    # month, leap-day and year ends
    (15, at(2025, 1, 31, 23, 45), at(2025, 2, 1, 0, 0), Due(at(2025, 2, 1, 0, 0), 0)),
    (15, at(2025, 1, 31, 23, 30), at(2025, 2, 1, 0, 20), Due(at(2025, 2, 1, 0, 15), 2)),
    (1440, at(2024, 2, 28), at(2024, 3, 1, 0, 0), Due(at(2024, 3, 1), 1)),  # Feb 29 missed
    (360, at(2024, 12, 31, 18, 0), at(2025, 1, 1, 0, 0), Due(at(2025, 1, 1), 0)),
    (720, at(2025, 4, 30, 12, 0), at(2025, 5, 1, 12, 0), Due(at(2025, 5, 1, 12, 0), 1)),
]


@pytest.mark.parametrize(("frequency", "last", "now", "expected"), DUE,
                         ids=[f"{f}min-{n:%m-%dT%H:%M}-after-{last:%m-%dT%H:%M}" for f, last, n, _ in DUE])
def test_due_once_per_tick_and_catch_up(frequency: int, last: datetime, now: datetime,
                                        expected: Due | None) -> None:
    assert due(frequency, last, now) == expected


@pytest.mark.parametrize("frequency", FREQUENCIES)
def test_a_clock_stepping_through_two_days_enqueues_each_tick_exactly_once(frequency: int) -> None:
    """The sensor's loop: evaluate every 7 minutes from 22:00 over month end, remember the tick."""
    start, stop = at(2025, 1, 30, 22, 0), at(2025, 2, 1, 22, 0)
    now, last, enqueued = start, None, []
    while now < stop:
        found = due(frequency, last, now)
        if found is not None:
            assert found.tick <= now < found.tick + step(frequency)
            enqueued.append(found)
            last = found.tick
        now += timedelta(minutes=7)
    ticks = [t.tick for t in enqueued]
    # the first evaluation enqueues the tick in progress, then every tick after it, once each
    expected, tick = [], latest_tick(frequency, start)
    while tick < stop:
        expected.append(tick)
        tick += step(frequency)
    assert ticks == expected
    assert all(t.missed == 0 for t in enqueued)
    midnight = at(2025, 2, 1)
    assert all((t - midnight) % step(frequency) == timedelta(0) for t in ticks)  # aligned


@pytest.mark.parametrize("frequency", FREQUENCIES)
def test_nothing_until_the_next_tick_then_exactly_it(frequency: int) -> None:
    tick = latest_tick(frequency, at(2025, 3, 31, 21, 7))
    following = tick + step(frequency)
    assert due(frequency, tick, following - US) is None
    assert due(frequency, tick, following) == Due(following, 0)


@pytest.mark.parametrize("frequency", FREQUENCIES)
@pytest.mark.parametrize("down_ticks", [1, 2, 5, 40])
def test_downtime_is_caught_up_by_one_transfer_counting_missed_ticks(frequency: int,
                                                                    down_ticks: int) -> None:
    last = at(2025, 10, 25, 0, 0)
    now = last + (down_ticks + 1) * step(frequency) + timedelta(seconds=1)
    assert due(frequency, last, now) == Due(last + (down_ticks + 1) * step(frequency), down_ticks)


def test_zero_is_the_daily_default() -> None:
    for now in (at(2025, 6, 1, 0, 0), at(2025, 6, 1, 11, 11), at(2025, 6, 30, 23, 59)):
        assert due(0, None, now) == due(1440, None, now)
        assert due(0, at(2025, 5, 28), now) == due(1440, at(2025, 5, 28), now)


# clocks given in other zones: the ticks are still those of UTC (no DST, no local midnight)
ZONED = [
    (60, datetime(2025, 1, 1, 5, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))), at(2024, 12, 31, 23, 0)),
    (1440, datetime(2025, 3, 1, 1, 0, tzinfo=timezone(timedelta(hours=9))), at(2025, 2, 28)),
    (720, datetime(2025, 3, 30, 3, 30, tzinfo=ZoneInfo("Europe/Berlin")), at(2025, 3, 30, 0, 0)),
    (360, datetime(2025, 11, 2, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
     at(2025, 11, 2, 6, 0)),
    (15, datetime(2025, 11, 2, 1, 30, fold=0, tzinfo=ZoneInfo("America/New_York")),
     at(2025, 11, 2, 5, 30)),
]


@pytest.mark.parametrize(("frequency", "now", "tick"), ZONED,
                         ids=["ist", "jst-month-end", "berlin-dst-start", "ny-dst-end-second",
                              "ny-dst-end-first"])
def test_ticks_are_utc_whatever_the_zone_of_the_clock(frequency: int, now: datetime, tick: datetime) -> None:
    found = due(frequency, None, now)
    assert found == Due(tick, 0)
    assert found.tick.utcoffset() == timedelta(0)
    # the cursor may hold the same instant in another zone: still "already enqueued"
    assert due(frequency, now.astimezone(ZoneInfo("Asia/Tokyo")), now) is None


def test_hourly_ticks_over_a_dst_night_are_evenly_spaced() -> None:
    """Europe/Berlin skips 02:00-03:00 on 2025-03-30; UTC ticks do not notice."""
    berlin = ZoneInfo("Europe/Berlin")
    now, last, ticks = datetime(2025, 3, 29, 23, 30, tzinfo=berlin), None, []
    while now < datetime(2025, 3, 30, 6, 0, tzinfo=berlin):
        found = due(60, last, now)
        if found:
            ticks.append(found.tick)
            last = found.tick
        now = (now.astimezone(UTC) + timedelta(minutes=10)).astimezone(berlin)
    assert all(b - a == timedelta(hours=1) for a, b in zip(ticks, ticks[1:], strict=False))
    assert ticks[0] == at(2025, 3, 29, 22, 0)
    assert ticks[-1] == at(2025, 3, 30, 3, 0)
