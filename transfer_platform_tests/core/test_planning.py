"""plan_windows: explicit partitions and incremental transfers, with Hypothesis properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from transfer_platform.core.planning import ModelWindowing, PlannedWindow, plan_windows
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Window, grid_for_window


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


HOURLY = ModelWindowing(configured_start=at(2024, 1, 1), lookback_seconds=30, max_window_seconds=3_600)


def progress(planned: list[PlannedWindow]) -> list[Window]:
    return [p.bounds.progress for p in planned]


# -- incremental -------------------------------------------------------------------------------


def test_first_transfer_starts_at_the_configured_start():
    now = at(2024, 1, 1, 3, 15)
    planned = plan_windows(HOURLY, now=now, watermark=None)
    assert [p.partition for p in planned] == [
        Window(at(2024, 1, 1, h), at(2024, 1, 1, h + 1)) for h in range(4)
    ]
    assert planned[0].bounds.lower == at(2024, 1, 1)  # lookback clamped at the configured start
    assert planned[1].bounds.lower == at(2024, 1, 1, 0, 59, 30)
    assert planned[-1].bounds.upper == now
    assert all(p.last_of_partition for p in planned[:-1])  # one read per complete partition


def test_incremental_from_a_watermark():
    watermark = at(2024, 1, 1, 5, 20)
    now = at(2024, 1, 1, 8, 10)
    planned = plan_windows(HOURLY, now=now, watermark=watermark)
    assert planned[0].partition == Window(at(2024, 1, 1, 5), at(2024, 1, 1, 6))
    assert planned[0].partition.contains(watermark)
    assert planned[0].bounds.lower == watermark - timedelta(seconds=30)
    assert planned[0].bounds.upper == at(2024, 1, 1, 6)
    assert [p.partition.start.hour for p in planned] == [5, 6, 7, 8]
    assert planned[1].bounds.lower == at(2024, 1, 1, 5, 59, 30)
    assert planned[-1].bounds.upper == now


def test_incremental_watermark_on_a_tick():
    watermark = at(2024, 1, 1, 5)
    planned = plan_windows(HOURLY, now=at(2024, 1, 1, 6, 30), watermark=watermark)
    assert planned[0].partition == Window(at(2024, 1, 1, 5), at(2024, 1, 1, 6))
    assert planned[0].bounds.lower == watermark - timedelta(seconds=30)


def test_incremental_watermark_at_now_plans_nothing():
    now = at(2024, 1, 1, 5, 20)
    assert plan_windows(HOURLY, now=now, watermark=now) == []


def test_full_refresh_ignores_the_watermark():
    now = at(2024, 1, 1, 8, 10)
    planned = plan_windows(HOURLY, now=now, watermark=at(2024, 1, 1, 5, 20), full_refresh=True)
    assert planned == plan_windows(HOURLY, now=now, watermark=None)
    assert planned[0].partition.start == at(2024, 1, 1)
    assert planned[0].bounds.lower == at(2024, 1, 1)
    assert len(planned) == 9


def test_nothing_before_the_configured_start():
    assert plan_windows(HOURLY, now=at(2023, 12, 31), watermark=None) == []
    assert plan_windows(HOURLY, now=at(2024, 1, 1), watermark=None) == []


# -- explicit partitions -----------------------------------------------------------------------


def test_explicit_partitions_are_moved_as_given():
    partitions = [Window(at(2024, 1, 2, 7), at(2024, 1, 2, 8)), Window(at(2024, 1, 2, 3), at(2024, 1, 2, 4))]
    planned = plan_windows(HOURLY, now=at(2024, 6, 1), watermark=None, partitions=partitions)
    assert [p.partition for p in planned] == partitions
    assert planned[0].bounds.lower == at(2024, 1, 2, 6, 59, 30)
    assert planned[1].bounds.upper == at(2024, 1, 2, 4)


def test_explicit_partition_in_the_future_plans_nothing():
    future = [Window(at(2024, 1, 2, 7), at(2024, 1, 2, 8))]
    assert plan_windows(HOURLY, now=at(2024, 1, 2, 6), watermark=None, partitions=future) == []


# -- no window size ----------------------------------------------------------------------------

WHOLE = ModelWindowing(configured_start=at(2024, 1, 1), lookback_seconds=300, max_window_seconds=None)


def test_no_window_size_is_one_window():
    now = at(2024, 7, 1, 12, 0, 0, 500)
    planned = plan_windows(WHOLE, now=now, watermark=None)
    assert len(planned) == 1
    assert planned[0].partition is None
    assert planned[0].last_of_partition
    assert planned[0].bounds.lower == at(2024, 1, 1)
    assert planned[0].bounds.upper == now
    assert planned[0].bounds.progress == Window(at(2024, 1, 1), now)
    assert WHOLE.grid is None
    assert WHOLE.partition_key(Window(at(2024, 1, 1), now)) is None


def test_no_window_size_resumes_from_the_watermark():
    watermark = at(2024, 3, 1)
    planned = plan_windows(WHOLE, now=at(2024, 7, 1), watermark=watermark)
    assert len(planned) == 1
    assert planned[0].bounds.lower == watermark - timedelta(seconds=300)
    assert planned[0].bounds.upper == at(2024, 7, 1)


def test_no_window_size_full_refresh_reads_everything():
    planned = plan_windows(WHOLE, now=at(2024, 7, 1), watermark=at(2024, 3, 1), full_refresh=True)
    assert planned[0].bounds.lower == at(2024, 1, 1)


def test_no_window_size_before_the_configured_start():
    assert plan_windows(WHOLE, now=at(2024, 1, 1), watermark=None) == []


# -- sub-minute windows ------------------------------------------------------------------------

TEN_SECONDS = ModelWindowing(configured_start=at(2024, 1, 1), lookback_seconds=5, max_window_seconds=10)


def test_sub_minute_window_is_chunked_inside_its_minute_partition():
    partition = Window(at(2024, 1, 1, 12), at(2024, 1, 1, 12, 1))
    planned = plan_windows(TEN_SECONDS, now=at(2024, 6, 1), watermark=None, partitions=[partition])
    assert len(planned) == 6
    assert all(p.partition == partition for p in planned)
    assert [p.last_of_partition for p in planned] == [False] * 5 + [True]
    assert [p.bounds.progress.start.second for p in planned] == [0, 10, 20, 30, 40, 50]
    assert all(p.bounds.progress.seconds == 10 for p in planned)
    assert planned[1].bounds.lower == at(2024, 1, 1, 12, 0, 5)


def test_sub_minute_incremental_skips_pieces_before_the_watermark():
    watermark = at(2024, 1, 1, 12, 0, 25)
    planned = plan_windows(TEN_SECONDS, now=at(2024, 1, 1, 12, 2), watermark=watermark)
    first_partition = [p for p in planned if p.partition.start == at(2024, 1, 1, 12)]
    assert [p.bounds.progress.start.second for p in first_partition] == [20, 30, 40, 50]
    assert first_partition[0].bounds.lower == at(2024, 1, 1, 12, 0, 20)  # watermark - 5 s
    assert [p.last_of_partition for p in first_partition] == [False, False, False, True]
    assert len(planned) == 4 + 6


def test_sub_minute_watermark_on_a_piece_boundary_does_not_reread_the_previous_piece():
    watermark = at(2024, 1, 1, 12, 0, 20)
    planned = plan_windows(TEN_SECONDS, now=at(2024, 1, 1, 12, 1), watermark=watermark)
    assert [p.bounds.progress.start.second for p in planned] == [20, 30, 40, 50]
    assert planned[0].bounds.lower == at(2024, 1, 1, 12, 0, 15)


def test_partition_key_uses_the_grid_format():
    assert HOURLY.partition_key(Window(at(2024, 1, 2, 3), at(2024, 1, 2, 4))) == "2024-01-02T03:00"
    daily = ModelWindowing(configured_start=at(2024, 1, 1), lookback_seconds=0, max_window_seconds=86_400)
    assert daily.partition_key(Window(at(2024, 1, 2), at(2024, 1, 3))) == "2024-01-02"


# -- properties --------------------------------------------------------------------------------

_Y2000 = int((at(2000, 1, 1) - EPOCH).total_seconds())
_Y2030 = int((at(2030, 1, 1) - EPOCH).total_seconds())
_DAY = 86_400
_SIX_WEEKS = 42 * _DAY
# sizes that divide no minute, hour or day (7 s, 90 s, 5400 s, 7 h, 10 days) and the edges of
# the grids (59/60/61 s, a day minus 1 s, a week and around it)
SPECIAL_WINDOWS = [1, 7, 59, 60, 61, 90, 119, 120, 5_400, 25_200, 86_399, _DAY, 6 * _DAY,
                   7 * _DAY - 1, 7 * _DAY, 10 * _DAY, _SIX_WEEKS]


@st.composite
def scenarios(draw):
    window = draw(st.one_of(st.sampled_from(SPECIAL_WINDOWS), st.integers(1, 120),
                            st.integers(1, _SIX_WEEKS)))
    lookback = draw(st.sampled_from([0, 5, 30, 300, 3_600]))
    # any second: mostly 2000..2030, sometimes the first weeks after the epoch (epoch 0 included)
    configured_start = EPOCH + timedelta(seconds=draw(st.one_of(
        st.integers(_Y2000, _Y2030), st.integers(0, 60 * _DAY), st.just(0))))
    # at most ~40 reads, whatever the window size
    piece = window if window < 60 else grid_for_window(window).seconds
    length = timedelta(seconds=draw(st.integers(1, 40 * piece)),
                       microseconds=draw(st.integers(0, 999_999)))
    now = configured_start + length
    windowing = ModelWindowing(configured_start=configured_start, lookback_seconds=lookback,
                               max_window_seconds=window)
    return windowing, now


def assert_reads_are_sane(windowing: ModelWindowing, planned: list[PlannedWindow], now: datetime,
                          watermark: datetime | None = None) -> None:
    lookback = timedelta(seconds=windowing.lookback_seconds)
    for p in planned:
        b = p.bounds
        assert b.lower >= windowing.configured_start
        assert b.upper <= now
        assert b.upper == b.progress.end
        # a read starts one lookback before its window, or before the watermark inside it
        resumed = watermark is not None and b.progress.start < watermark < b.progress.end
        begin = watermark if resumed else b.progress.start
        assert b.lower == max(begin - lookback, windowing.configured_start)
        assert b.progress.seconds <= windowing.max_window_seconds
        if p.partition is not None:
            assert p.partition.start <= b.progress.start
            assert b.progress.end <= p.partition.end


def assert_contiguous(windows: list[Window]) -> None:
    for a, b in pairwise(windows):
        assert a.end == b.start, (a, b)  # no gap, no overlap


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_incremental_reads_tile_the_configured_range(scenario):
    windowing, now = scenario
    planned = plan_windows(windowing, now=now, watermark=None)
    done = progress(planned)
    assert done[0].start == windowing.configured_start
    assert done[-1].end == now
    assert_contiguous(done)
    assert_reads_are_sane(windowing, planned, now)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_explicit_partitions_tile_the_configured_range(scenario):
    windowing, now = scenario
    partitions = windowing.grid.windows(windowing.configured_start, now)
    planned = plan_windows(windowing, now=now, watermark=None, partitions=partitions)
    done = progress(planned)
    assert done[0].start == windowing.configured_start
    assert done[-1].end == now
    assert_contiguous(done)
    assert_reads_are_sane(windowing, planned, now)
    # every complete partition is closed by exactly one read, its last one
    for partition in (p for p in partitions if p.end <= now):
        flags = [p.last_of_partition for p in planned if p.partition == partition]
        assert flags == [False] * (len(flags) - 1) + [True]


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.floats(0, 1, exclude_max=True), st.booleans())
def test_incremental_from_a_watermark_covers_the_rest(scenario, fraction, on_boundary):
    windowing, now = scenario
    span = now - windowing.configured_start
    watermark = windowing.configured_start + timedelta(
        microseconds=int(span / timedelta(microseconds=1) * fraction))
    if on_boundary:  # snap to the start of the piece holding it (a chunk or partition edge)
        grid = windowing.grid
        base = grid.floor(watermark)
        step = timedelta(seconds=min(windowing.max_window_seconds, grid.seconds))
        watermark = max(base + (watermark - base) // step * step, windowing.configured_start)
    planned = plan_windows(windowing, now=now, watermark=watermark)
    done = progress(planned)
    assert done, "a watermark before now always leaves something to read"
    assert done[0].start <= watermark < done[0].end  # the first read contains the watermark
    assert done[-1].end == now
    assert_contiguous(done)
    assert_reads_are_sane(windowing, planned, now, watermark)
    lookback = timedelta(seconds=windowing.lookback_seconds)
    assert planned[0].bounds.lower == max(watermark - lookback, windowing.configured_start)


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.lists(st.tuples(st.floats(0, 1), st.one_of(st.none(), st.integers(0, 30))),
                             max_size=5))
def test_transfers_that_fail_part_way_resume_where_they_stopped_and_leave_no_gap(scenario, steps):
    """Incremental transfers at increasing "now"s, some failing at an arbitrary window k (the
    windows before k commit, as the runner commits them one by one), then one that succeeds.
    Each resumes at its watermark minus the lookback and never re-reads a committed window
    beyond that; together their reads cover [start, now) with no gap and never before the start."""
    windowing, end = scenario
    start = windowing.configured_start
    lookback = timedelta(seconds=windowing.lookback_seconds)
    nows = sorted(start + (end - start) * fraction for fraction, _ in steps)
    runs = [*zip(nows, [fail for _, fail in steps], strict=True), (end, None)]
    state = ModelState()
    reads: list[tuple[datetime, datetime]] = []
    for now, failing_window in runs:
        watermark = state.watermark
        planned = plan_windows(windowing, now=now, watermark=watermark)
        if watermark is not None and planned:
            assert planned[0].bounds.lower == max(watermark - lookback, start)
            assert all(p.bounds.upper > watermark for p in planned)  # committed windows: not again
        assert_contiguous(progress(planned))
        committed = planned if failing_window is None else planned[:failing_window]
        for p in committed:
            state = state.after_window(p.bounds.progress, batch_max_last_modified=None,
                                       configured_start=start)
            reads.append((p.bounds.lower, p.bounds.upper))
        if committed:
            assert state.watermark == committed[-1].bounds.progress.end
        else:
            assert state.watermark == watermark
    assert state.watermark == end
    assert state.completed == (Window(start, end),)
    reached = start
    for lower, upper in sorted(reads):
        assert start <= lower <= reached, "a gap between reads"
        reached = max(reached, upper)
    assert reached == end
