"""Grids, windows, chunks and read bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transfer_platform.core import windows
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.core.windows import Resume, Window, chunk, grid_for_window, read_bounds

MINUTE, HOUR, DAY, WEEK = 60, 3_600, 86_400, 7 * 86_400


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# -- grid_for_window ---------------------------------------------------------------------------

GRID_CASES = [
    ("1s->1min", 1, MINUTE),
    ("59s->1min", 59, MINUTE),
    ("60s->1min", 60, MINUTE),
    ("61s->1min", 61, MINUTE),
    ("119s->1min", 119, MINUTE),
    ("120s->2min", 120, 2 * MINUTE),
    ("300s->5min", 300, 5 * MINUTE),
    ("3599s->30min", 3_599, 30 * MINUTE),
    ("3600s->1h", 3_600, HOUR),
    ("5400s->1h", 5_400, HOUR),
    ("7h->6h", 25_200, 6 * HOUR),
    ("86399s->12h", 86_399, 12 * HOUR),
    ("1d->1d", 86_400, DAY),
    ("6d->1d", 6 * DAY, DAY),
    ("7d->week", 7 * DAY, WEEK),
    ("30d->week", 30 * DAY, WEEK),
]


@pytest.mark.parametrize(
    ("window_seconds", "grid_seconds"),
    [(w, g) for _, w, g in GRID_CASES],
    ids=[case_id for case_id, _, _ in GRID_CASES],
)
def test_grid_for_window(window_seconds, grid_seconds):
    grid = grid_for_window(window_seconds)
    assert grid.seconds == grid_seconds
    # never larger than the window, except the one-minute floor for sub-minute windows
    assert grid.seconds <= max(window_seconds, MINUTE)


@pytest.mark.parametrize("bad", [0, -1, -86_400], ids=["zero", "minus-one", "minus-day"])
def test_grid_for_window_refuses_non_positive(bad):
    with pytest.raises(ValueError, match="at least 1 second"):
        grid_for_window(bad)


@pytest.mark.parametrize(
    ("window_seconds", "cron"),
    [(60, "* * * * *"), (900, "*/15 * * * *"), (3_600, "0 * * * *"), (21_600, "0 */6 * * *"),
     (86_400, "0 0 * * *"), (WEEK, "0 0 * * 1")],
    ids=["minute", "15min", "hour", "6h", "day", "week-monday"],
)
def test_grid_cron(window_seconds, cron):
    assert grid_for_window(window_seconds).cron == cron


def test_every_grid_divides_the_next_calendar_unit():
    # minute grids must divide an hour, hour grids a day: otherwise the epoch-anchored grid
    # drifts away from what the cron expression fires on
    for grid in windows.GRIDS:
        if grid.seconds < HOUR:
            assert HOUR % grid.seconds == 0, grid
        elif grid.seconds < DAY:
            assert DAY % grid.seconds == 0, grid


# -- Grid.floor and Grid.windows ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (at(2024, 1, 1), at(2024, 1, 1)),  # a Monday is its own floor
        (at(2024, 1, 3, 15, 30, 12), at(2024, 1, 1)),  # Wednesday
        (at(2024, 1, 7, 23, 59, 59), at(2024, 1, 1)),  # Sunday, last second of the week
        (at(2024, 1, 8), at(2024, 1, 8)),  # next Monday
        (EPOCH, at(1969, 12, 29)),  # the epoch is a Thursday
        (at(1970, 1, 5), at(1970, 1, 5)),  # first Monday after the epoch
    ],
    ids=["monday", "wednesday", "sunday-late", "next-monday", "epoch-thursday", "first-monday"],
)
def test_weekly_floor_is_monday_midnight_utc(moment, expected):
    floor = grid_for_window(WEEK).floor(moment)
    assert floor == expected
    assert floor.weekday() == 0
    assert (floor.hour, floor.minute, floor.second, floor.microsecond) == (0, 0, 0, 0)


def test_floor_converts_other_time_zones_to_utc():
    tz = timezone(timedelta(hours=5))
    # 2024-01-02 03:00 at +05:00 is 2024-01-01 22:00 UTC
    assert grid_for_window(DAY).floor(datetime(2024, 1, 2, 3, tzinfo=tz)) == at(2024, 1, 1)


@pytest.mark.parametrize(
    ("window_seconds", "moment", "expected"),
    [
        (60, at(2024, 5, 6, 7, 8, 9), at(2024, 5, 6, 7, 8)),
        (900, at(2024, 5, 6, 7, 29, 59), at(2024, 5, 6, 7, 15)),
        (21_600, at(2024, 5, 6, 17, 0), at(2024, 5, 6, 12)),
        (DAY, at(2024, 5, 6, 23, 59, 59), at(2024, 5, 6)),
        (DAY, at(2024, 5, 6), at(2024, 5, 6)),
    ],
    ids=["minute", "15min", "6h", "day-late", "day-exact"],
)
def test_floor(window_seconds, moment, expected):
    assert grid_for_window(window_seconds).floor(moment) == expected


def test_floor_just_before_a_tick_is_the_previous_tick():
    grid = grid_for_window(HOUR)
    assert grid.floor(at(2029, 12, 31, 23) - timedelta(microseconds=1)) == at(2029, 12, 31, 22)


def test_windows_tile_the_range():
    grid = grid_for_window(HOUR)
    start, end = at(2024, 1, 1, 0, 30), at(2024, 1, 1, 3, 10)
    tiles = grid.windows(start, end)
    assert tiles == [
        Window(at(2024, 1, 1, h), at(2024, 1, 1, h + 1)) for h in range(4)
    ]
    assert tiles[0].contains(start)
    assert tiles[-1].contains(end - timedelta(microseconds=1))


def test_windows_end_exactly_on_a_tick_has_no_extra_window():
    grid = grid_for_window(DAY)
    assert grid.windows(at(2024, 1, 1), at(2024, 1, 3)) == [
        Window(at(2024, 1, 1), at(2024, 1, 2)), Window(at(2024, 1, 2), at(2024, 1, 3)),
    ]


def test_windows_of_an_empty_range():
    assert grid_for_window(DAY).windows(at(2024, 1, 2), at(2024, 1, 2)) == []


def test_window_refuses_empty_and_is_half_open():
    with pytest.raises(ValueError, match="empty window"):
        Window(at(2024, 1, 1), at(2024, 1, 1))
    window = Window(at(2024, 1, 1), at(2024, 1, 2))
    assert window.contains(at(2024, 1, 1))
    assert not window.contains(at(2024, 1, 2))
    assert window.seconds == DAY


# -- chunk -------------------------------------------------------------------------------------


def test_chunk_splits_a_minute_into_ten_second_pieces():
    pieces = chunk(Window(at(2024, 1, 1, 12), at(2024, 1, 1, 12, 1)), 10)
    assert len(pieces) == 6
    assert [p.start.second for p in pieces] == [0, 10, 20, 30, 40, 50]
    assert all(p.seconds == 10 for p in pieces)
    assert pieces[-1].end == at(2024, 1, 1, 12, 1)


def test_chunk_last_piece_is_shorter_when_size_does_not_divide():
    pieces = chunk(Window(at(2024, 1, 1), at(2024, 1, 1, 0, 1)), 7)
    assert len(pieces) == 9
    assert pieces[-1] == Window(at(2024, 1, 1, 0, 0, 56), at(2024, 1, 1, 0, 1))
    assert all(a.end == b.start for a, b in pairwise(pieces))


def test_chunk_larger_than_window_is_the_window():
    window = Window(at(2024, 1, 1), at(2024, 1, 1, 0, 1))
    assert chunk(window, 3_600) == [window]


# -- read_bounds -------------------------------------------------------------------------------

HOUR_WINDOW = Window(at(2024, 3, 1, 10), at(2024, 3, 1, 11))
LONG_AGO = at(2020, 1, 1)
LATER = at(2030, 1, 1)


def test_read_bounds_reaches_back_by_the_lookback():
    bounds = read_bounds(HOUR_WINDOW, configured_start=LONG_AGO, lookback_seconds=30, now=LATER)
    assert bounds is not None
    assert bounds.lower == at(2024, 3, 1, 9, 59, 30)
    assert bounds.upper == at(2024, 3, 1, 11)
    assert bounds.progress == HOUR_WINDOW


def test_read_bounds_never_before_configured_start():
    start = at(2024, 3, 1, 10, 20)
    bounds = read_bounds(HOUR_WINDOW, configured_start=start, lookback_seconds=3_600, now=LATER)
    assert bounds is not None
    assert bounds.lower == start
    assert bounds.progress == Window(start, HOUR_WINDOW.end)


def test_read_bounds_lookback_clamped_at_configured_start_on_the_grid():
    bounds = read_bounds(HOUR_WINDOW, configured_start=HOUR_WINDOW.start, lookback_seconds=30, now=LATER)
    assert bounds is not None
    assert bounds.lower == HOUR_WINDOW.start


def test_read_bounds_upper_capped_at_now():
    now = at(2024, 3, 1, 10, 42, 7, 123_456)
    bounds = read_bounds(HOUR_WINDOW, configured_start=LONG_AGO, lookback_seconds=30, now=now)
    assert bounds is not None
    assert bounds.upper == now
    assert bounds.progress == Window(HOUR_WINDOW.start, now)


def test_read_bounds_resumes_inside_the_window_from_the_last_delivered_row():
    # the watermark (10:40) is inside the window; the last delivered row minus the lookback is 10:10
    resume = Resume(watermark=at(2024, 3, 1, 10, 40), read_from=at(2024, 3, 1, 10, 10))
    bounds = read_bounds(HOUR_WINDOW, configured_start=LONG_AGO, lookback_seconds=30, now=LATER,
                         resume=resume)
    assert bounds is not None
    assert bounds.lower == at(2024, 3, 1, 10, 10)
    assert bounds.upper == HOUR_WINDOW.end
    assert bounds.progress == HOUR_WINDOW  # progress is still the whole window


def test_read_bounds_reaches_before_the_window_to_the_last_delivered_row():
    resume = Resume(watermark=at(2024, 3, 1, 10, 40), read_from=at(2024, 2, 20, 7))
    bounds = read_bounds(HOUR_WINDOW, configured_start=LONG_AGO, lookback_seconds=30, now=LATER,
                         resume=resume)
    assert bounds is not None
    assert bounds.lower == at(2024, 2, 20, 7)
    assert bounds.progress == HOUR_WINDOW


def test_read_bounds_of_an_explicit_window_reads_it_whole_and_down_to_the_last_row():
    late = Resume(watermark=at(2024, 3, 1, 10, 40), read_from=at(2024, 3, 1, 10, 10))
    early = Resume(watermark=at(2024, 3, 1, 10, 40), read_from=at(2024, 3, 1, 9))
    for resume, lower in ((late, at(2024, 3, 1, 9, 59, 30)), (early, at(2024, 3, 1, 9))):
        bounds = read_bounds(HOUR_WINDOW, configured_start=LONG_AGO, lookback_seconds=30, now=LATER,
                             resume=resume, skip_delivered=False)
        assert bounds is not None
        assert bounds.lower == lower


@pytest.mark.parametrize(
    "watermark",
    [at(2024, 3, 1, 9), at(2024, 3, 1, 11), at(2024, 3, 1, 12)],
    ids=["before", "at-end", "after"],
)
def test_read_bounds_resume_outside_the_window_is_ignored(watermark):
    bounds = read_bounds(HOUR_WINDOW, configured_start=LONG_AGO, lookback_seconds=30, now=LATER,
                         resume=Resume(watermark, at(2024, 3, 1, 8)))
    assert bounds is not None
    assert bounds.lower == at(2024, 3, 1, 9, 59, 30)


def test_read_bounds_window_starting_at_the_watermark_reads_from_the_last_row():
    bounds = read_bounds(HOUR_WINDOW, configured_start=LONG_AGO, lookback_seconds=30, now=LATER,
                         resume=Resume(HOUR_WINDOW.start, at(2024, 3, 1, 8)))
    assert bounds is not None
    assert bounds.lower == at(2024, 3, 1, 8)


def test_read_bounds_resume_clamped_at_configured_start():
    start = at(2024, 3, 1, 10, 20)
    bounds = read_bounds(HOUR_WINDOW, configured_start=start, lookback_seconds=600, now=LATER,
                         resume=Resume(at(2024, 3, 1, 10, 25), at(2024, 3, 1, 10, 15)))
    assert bounds is not None
    assert bounds.lower == start


@pytest.mark.parametrize(
    ("configured_start", "now"),
    [
        (LONG_AGO, at(2024, 3, 1, 9)),  # window fully in the future
        (LONG_AGO, HOUR_WINDOW.start),  # "now" is exactly the window start
        (at(2024, 3, 1, 11), LATER),  # window before the configured start
        (at(2024, 3, 2), LATER),
    ],
    ids=["future", "now-at-start", "configured-start-at-end", "configured-start-after"],
)
def test_read_bounds_nothing_to_read(configured_start, now):
    assert read_bounds(HOUR_WINDOW, configured_start=configured_start, lookback_seconds=30,
                       now=now) is None


# -- properties, for window sizes from 1 s to weeks -------------------------------------------

_Y2000 = int((at(2000, 1, 1) - EPOCH).total_seconds())
_Y2030 = int((at(2030, 1, 1) - EPOCH).total_seconds())
FIRST_MONDAY = at(1970, 1, 5)
# the documented grids: the largest one not above the window is the model's partition grid
DOCUMENTED_GRIDS = [MINUTE * n for n in (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)] + [
    HOUR * n for n in (1, 2, 3, 4, 6, 8, 12)] + [DAY, WEEK]
SPECIAL_WINDOWS = [1, 7, 59, 60, 61, 90, 119, 5_400, 25_200, 86_399, DAY, 10 * DAY, WEEK, 6 * WEEK]
window_sizes = st.one_of(st.sampled_from(SPECIAL_WINDOWS), st.integers(1, 120), st.integers(1, 6 * WEEK))
moments = st.builds(
    lambda seconds, micros: EPOCH + timedelta(seconds=seconds, microseconds=micros),
    st.one_of(st.integers(_Y2000, _Y2030), st.integers(0, 60 * DAY)), st.integers(0, 999_999))


@settings(max_examples=300, deadline=None)
@given(window_sizes)
def test_the_grid_is_the_largest_documented_one_not_above_the_window(window_seconds):
    grid = grid_for_window(window_seconds)
    fitting = [g for g in DOCUMENTED_GRIDS if g <= window_seconds]
    assert grid.seconds == (max(fitting) if fitting else MINUTE)
    assert grid.cron.count(" ") == 4  # a 5-field cron: what Dagster partitions need


@settings(max_examples=300, deadline=None)
@given(window_sizes, moments)
def test_floor_is_the_tick_at_or_before_a_moment(window_seconds, moment):
    grid = grid_for_window(window_seconds)
    floor = grid.floor(moment)
    assert floor <= moment < floor + timedelta(seconds=grid.seconds)
    anchor = FIRST_MONDAY if grid.seconds == WEEK else EPOCH
    assert (floor - anchor) % timedelta(seconds=grid.seconds) == timedelta(0)


@settings(max_examples=300, deadline=None)
@given(window_sizes, moments, st.integers(1, 40), st.integers(0, 10**6))
def test_grid_windows_tile_a_range(window_seconds, start, ticks, extra_micros):
    grid = grid_for_window(window_seconds)
    end = start + timedelta(seconds=grid.seconds * ticks) * extra_micros / 10**6 + timedelta(microseconds=1)
    tiles = grid.windows(start, end)
    assert tiles[0].contains(start)
    assert tiles[-1].contains(end - timedelta(microseconds=1))
    assert all(a.end == b.start for a, b in pairwise(tiles))  # no gap, no overlap
    assert all(t.seconds == grid.seconds for t in tiles)


@settings(max_examples=300, deadline=None)
@given(window_sizes, moments)
def test_chunks_tile_their_partition_in_pieces_of_the_window_size(window_seconds, moment):
    grid = grid_for_window(window_seconds)
    partition = Window(grid.floor(moment), grid.floor(moment) + timedelta(seconds=grid.seconds))
    pieces = chunk(partition, window_seconds)
    assert pieces[0].start == partition.start
    assert pieces[-1].end == partition.end
    assert all(a.end == b.start for a, b in pairwise(pieces))
    assert all(p.seconds == window_seconds for p in pieces[:-1])
    assert 0 < pieces[-1].seconds <= window_seconds


@settings(max_examples=300, deadline=None)
@given(window_sizes, moments, moments, st.sampled_from([0, 1, 30, 300, 3_600, 7 * DAY]), moments)
def test_read_bounds_never_read_before_the_start_nor_at_or_after_now(
        window_seconds, moment, configured_start, lookback, now):
    grid = grid_for_window(window_seconds)
    window = Window(grid.floor(moment), grid.floor(moment) + timedelta(seconds=grid.seconds))
    bounds = read_bounds(window, configured_start=configured_start, lookback_seconds=lookback, now=now)
    if bounds is None:
        assert min(window.end, now) <= max(window.start, configured_start)
        return
    assert bounds.lower >= configured_start
    assert bounds.upper <= now
    assert bounds.progress == Window(max(window.start, configured_start), min(window.end, now))
    assert bounds.lower == max(bounds.progress.start - timedelta(seconds=lookback), configured_start)
