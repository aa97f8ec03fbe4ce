"""plan_windows: explicit partitions and incremental transfers, with Hypothesis properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transfer_platform.core.planning import ModelWindowing, PlannedWindow, plan_windows, resume_for
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Resume, Window, grid_for_window


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


HOURLY = ModelWindowing(configured_start=at(2024, 1, 1), lookback_seconds=30, max_window_seconds=3_600)


def progress(planned: list[PlannedWindow]) -> list[Window]:
    return [p.bounds.progress for p in planned]


def delivered(watermark: datetime, high_watermark: datetime | None) -> ModelState:
    """A destination whose finished windows end at ``watermark`` and whose greatest delivered
    last-modified value is ``high_watermark`` (None: no row was ever delivered)."""
    return ModelState(watermark=watermark, high_watermark=high_watermark)


# -- where the next read starts: the seeds' rule -------------------------------------------------
# change detection: "query the source for slightly earlier data than the most recently transferred
# row"; the cursor spec: the next sync "will fetch records whose cursor value begins on" the last
# record's value. So: min(greatest value delivered, end of finished windows) - lookback, clipped to
# the configured start; the configured start when nothing was ever delivered.


@pytest.mark.parametrize(
    ("state", "expected_read_from"),
    [
        pytest.param(ModelState(), None, id="nothing-finished"),
        pytest.param(delivered(at(2024, 1, 1, 5, 20), at(2024, 1, 1, 2, 10)), at(2024, 1, 1, 2, 9, 30),
                     id="sparse-tenant-last-row-long-before-the-watermark"),
        pytest.param(delivered(at(2024, 1, 1, 5, 20), at(2024, 1, 1, 5, 19, 59, 500_000)),
                     at(2024, 1, 1, 5, 19, 29, 500_000), id="busy-tenant-fractional-last-row"),
        pytest.param(delivered(at(2024, 1, 1, 5, 20), at(2024, 1, 1, 7)), at(2024, 1, 1, 5, 19, 30),
                     id="rows-delivered-beyond-the-watermark-out-of-order-anchor-is-the-watermark"),
        pytest.param(delivered(at(2024, 1, 1, 5, 20), None), at(2024, 1, 1),
                     id="never-delivered-a-row-reads-from-the-configured-start"),
        pytest.param(delivered(at(2024, 1, 1, 5, 20), at(2024, 1, 1, 0, 0, 10)), at(2024, 1, 1),
                     id="clipped-to-the-configured-start"),
        pytest.param(delivered(EPOCH, EPOCH), at(2024, 1, 1), id="epoch-0-is-a-value"),
    ],
)
def test_the_next_read_starts_at_the_last_delivered_row_minus_the_lookback(state, expected_read_from):
    resume = resume_for(HOURLY, state)
    if expected_read_from is None:
        assert resume is None
    else:
        assert resume == Resume(state.watermark, expected_read_from)


def test_a_sparse_tenant_rereads_from_its_last_row_in_one_read_then_windows_go_on():
    """The tenant's last row is at 02:10; the previous transfer ran at 05:20. One read covers
    [02:09:30, 06:00) (the part before 05:20 can only hold late commits), then 06:00, 07:00, 08:00."""
    state = delivered(at(2024, 1, 1, 5, 20), at(2024, 1, 1, 2, 10))
    now = at(2024, 1, 1, 8, 10)
    planned = plan_windows(HOURLY, now=now, state=state)
    assert [p.partition.start.hour for p in planned] == [5, 6, 7, 8]
    assert planned[0].bounds.lower == at(2024, 1, 1, 2, 9, 30)
    assert planned[0].bounds.upper == at(2024, 1, 1, 6)
    assert planned[0].bounds.progress == Window(at(2024, 1, 1, 5), at(2024, 1, 1, 6))  # bookkeeping kept
    assert [p.bounds.lower for p in planned[1:]] == [
        at(2024, 1, 1, h - 1, 59, 30) for h in (6, 7, 8)]


def test_a_tenant_without_rows_does_not_rerun_its_empty_windows():
    state = delivered(at(2024, 1, 1, 5, 20), None)
    planned = plan_windows(HOURLY, now=at(2024, 1, 1, 6, 30), state=state)
    assert [p.partition.start.hour for p in planned] == [5, 6]
    assert planned[0].bounds.lower == at(2024, 1, 1)  # one read back to the configured start


# -- incremental -------------------------------------------------------------------------------


def test_first_transfer_starts_at_the_configured_start():
    now = at(2024, 1, 1, 3, 15)
    planned = plan_windows(HOURLY, now=now)
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
    planned = plan_windows(HOURLY, now=now, state=delivered(watermark, at(2024, 1, 1, 5, 19, 58)))
    assert planned[0].partition == Window(at(2024, 1, 1, 5), at(2024, 1, 1, 6))
    assert planned[0].partition.contains(watermark)
    assert planned[0].bounds.lower == at(2024, 1, 1, 5, 19, 28)  # the last row minus 30 s
    assert planned[0].bounds.upper == at(2024, 1, 1, 6)
    assert [p.partition.start.hour for p in planned] == [5, 6, 7, 8]
    assert planned[1].bounds.lower == at(2024, 1, 1, 5, 59, 30)
    assert planned[-1].bounds.upper == now


def test_incremental_watermark_on_a_tick():
    watermark = at(2024, 1, 1, 5)
    planned = plan_windows(HOURLY, now=at(2024, 1, 1, 6, 30), state=delivered(watermark, watermark))
    assert planned[0].partition == Window(at(2024, 1, 1, 5), at(2024, 1, 1, 6))
    assert planned[0].bounds.lower == watermark - timedelta(seconds=30)


def test_incremental_watermark_at_now_plans_nothing():
    now = at(2024, 1, 1, 5, 20)
    assert plan_windows(HOURLY, now=now, state=delivered(now, at(2024, 1, 1, 1))) == []


def test_full_refresh_ignores_the_watermark():
    now = at(2024, 1, 1, 8, 10)
    planned = plan_windows(HOURLY, now=now, state=delivered(at(2024, 1, 1, 5, 20), at(2024, 1, 1, 5)),
                           full_refresh=True)
    assert planned == plan_windows(HOURLY, now=now)
    assert planned[0].partition.start == at(2024, 1, 1)
    assert planned[0].bounds.lower == at(2024, 1, 1)
    assert len(planned) == 9


def test_nothing_before_the_configured_start():
    assert plan_windows(HOURLY, now=at(2023, 12, 31)) == []
    assert plan_windows(HOURLY, now=at(2024, 1, 1)) == []


# -- explicit partitions -----------------------------------------------------------------------


def test_explicit_partitions_are_moved_as_given():
    partitions = [Window(at(2024, 1, 2, 7), at(2024, 1, 2, 8)), Window(at(2024, 1, 2, 3), at(2024, 1, 2, 4))]
    planned = plan_windows(HOURLY, now=at(2024, 6, 1), partitions=partitions)
    assert [p.partition for p in planned] == partitions
    assert planned[0].bounds.lower == at(2024, 1, 2, 6, 59, 30)
    assert planned[1].bounds.upper == at(2024, 1, 2, 4)


def test_an_explicit_partition_holding_the_watermark_is_read_whole_and_down_to_the_last_row():
    state = delivered(at(2024, 1, 2, 7, 20), at(2024, 1, 2, 3, 10))
    partitions = [Window(at(2024, 1, 2, 7), at(2024, 1, 2, 8)), Window(at(2024, 1, 2, 9), at(2024, 1, 2, 10))]
    planned = plan_windows(HOURLY, now=at(2024, 6, 1), state=state, partitions=partitions)
    assert planned[0].bounds.lower == at(2024, 1, 2, 3, 9, 30)
    assert planned[1].bounds.lower == at(2024, 1, 2, 8, 59, 30)  # not the watermark's: as before


def test_explicit_partition_in_the_future_plans_nothing():
    future = [Window(at(2024, 1, 2, 7), at(2024, 1, 2, 8))]
    assert plan_windows(HOURLY, now=at(2024, 1, 2, 6), partitions=future) == []


# -- no window size ----------------------------------------------------------------------------

WHOLE = ModelWindowing(configured_start=at(2024, 1, 1), lookback_seconds=300, max_window_seconds=None)


def test_no_window_size_is_one_window():
    now = at(2024, 7, 1, 12, 0, 0, 500)
    planned = plan_windows(WHOLE, now=now)
    assert len(planned) == 1
    assert planned[0].partition is None
    assert planned[0].last_of_partition
    assert planned[0].bounds.lower == at(2024, 1, 1)
    assert planned[0].bounds.upper == now
    assert planned[0].bounds.progress == Window(at(2024, 1, 1), now)
    assert WHOLE.grid is None
    assert WHOLE.partition_key(Window(at(2024, 1, 1), now)) is None


def test_no_window_size_resumes_from_the_last_delivered_row():
    watermark = at(2024, 3, 1)
    planned = plan_windows(WHOLE, now=at(2024, 7, 1), state=delivered(watermark, at(2024, 2, 1)))
    assert len(planned) == 1
    assert planned[0].bounds.lower == at(2024, 2, 1) - timedelta(seconds=300)
    assert planned[0].bounds.progress == Window(at(2024, 1, 1), at(2024, 7, 1))
    assert planned[0].bounds.upper == at(2024, 7, 1)


def test_no_window_size_full_refresh_reads_everything():
    planned = plan_windows(WHOLE, now=at(2024, 7, 1), state=delivered(at(2024, 3, 1), at(2024, 3, 1)),
                           full_refresh=True)
    assert planned[0].bounds.lower == at(2024, 1, 1)


def test_no_window_size_before_the_configured_start():
    assert plan_windows(WHOLE, now=at(2024, 1, 1)) == []


# -- sub-minute windows ------------------------------------------------------------------------

TEN_SECONDS = ModelWindowing(configured_start=at(2024, 1, 1), lookback_seconds=5, max_window_seconds=10)


def test_sub_minute_window_is_chunked_inside_its_minute_partition():
    partition = Window(at(2024, 1, 1, 12), at(2024, 1, 1, 12, 1))
    planned = plan_windows(TEN_SECONDS, now=at(2024, 6, 1), partitions=[partition])
    assert len(planned) == 6
    assert all(p.partition == partition for p in planned)
    assert [p.last_of_partition for p in planned] == [False] * 5 + [True]
    assert [p.bounds.progress.start.second for p in planned] == [0, 10, 20, 30, 40, 50]
    assert all(p.bounds.progress.seconds == 10 for p in planned)
    assert planned[1].bounds.lower == at(2024, 1, 1, 12, 0, 5)


def test_sub_minute_incremental_skips_pieces_before_the_watermark():
    watermark = at(2024, 1, 1, 12, 0, 25)
    planned = plan_windows(TEN_SECONDS, now=at(2024, 1, 1, 12, 2),
                           state=delivered(watermark, at(2024, 1, 1, 12, 0, 24)))
    first_partition = [p for p in planned if p.partition.start == at(2024, 1, 1, 12)]
    assert [p.bounds.progress.start.second for p in first_partition] == [20, 30, 40, 50]
    assert first_partition[0].bounds.lower == at(2024, 1, 1, 12, 0, 19)  # the last row - 5 s
    assert [p.last_of_partition for p in first_partition] == [False, False, False, True]
    assert len(planned) == 4 + 6


def test_sub_minute_watermark_on_a_piece_boundary_does_not_reread_the_previous_piece():
    watermark = at(2024, 1, 1, 12, 0, 20)
    planned = plan_windows(TEN_SECONDS, now=at(2024, 1, 1, 12, 1), state=delivered(watermark, watermark))
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
                          state: ModelState | None = None) -> None:
    lookback = timedelta(seconds=windowing.lookback_seconds)
    resume = None if state is None else resume_for(windowing, state)
    for p in planned:
        b = p.bounds
        assert b.lower >= windowing.configured_start
        assert b.upper <= now
        assert b.upper == b.progress.end
        # a read starts one lookback before its window; the one holding the watermark starts
        # where the seeds' rule says (the last delivered row minus the lookback)
        if resume is not None and b.progress.start <= resume.watermark < b.progress.end:
            assert b.lower == max(resume.read_from, windowing.configured_start)
        else:
            assert b.lower == max(b.progress.start - lookback, windowing.configured_start)
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
    planned = plan_windows(windowing, now=now)
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
    planned = plan_windows(windowing, now=now, partitions=partitions)
    done = progress(planned)
    assert done[0].start == windowing.configured_start
    assert done[-1].end == now
    assert_contiguous(done)
    assert_reads_are_sane(windowing, planned, now)
    # every complete partition is closed by exactly one read, its last one
    for partition in (p for p in partitions if p.end <= now):
        flags = [p.last_of_partition for p in planned if p.partition == partition]
        assert flags == [False] * (len(flags) - 1) + [True]


def at_fraction(start: datetime, end: datetime, fraction: float) -> datetime:
    return start + timedelta(microseconds=int((end - start) / timedelta(microseconds=1) * fraction))


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.floats(0, 1, exclude_max=True), st.booleans(),
       st.one_of(st.none(), st.floats(0, 1.5)))
def test_incremental_from_a_watermark_covers_the_rest(scenario, fraction, on_boundary, last_row):
    windowing, now = scenario
    watermark = at_fraction(windowing.configured_start, now, fraction)
    if on_boundary:  # snap to the start of the piece holding it (a chunk or partition edge)
        grid = windowing.grid
        base = grid.floor(watermark)
        step = timedelta(seconds=min(windowing.max_window_seconds, grid.seconds))
        watermark = max(base + (watermark - base) // step * step, windowing.configured_start)
    # the last delivered row: none, anywhere before the watermark, or beyond it (out of order)
    high = None if last_row is None else at_fraction(windowing.configured_start, watermark, last_row)
    state = delivered(watermark, high)
    planned = plan_windows(windowing, now=now, state=state)
    done = progress(planned)
    assert done, "a watermark before now always leaves something to read"
    assert done[0].start <= watermark < done[0].end  # the first read contains the watermark
    assert done[-1].end == now
    assert_contiguous(done)
    assert_reads_are_sane(windowing, planned, now, state)
    lookback = timedelta(seconds=windowing.lookback_seconds)
    anchor = windowing.configured_start if high is None else min(high, watermark)
    assert planned[0].bounds.lower == max(anchor - lookback, windowing.configured_start)
    assert planned[0].bounds.lower <= max(watermark - lookback, windowing.configured_start)


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.lists(st.tuples(st.floats(0, 1), st.one_of(st.none(), st.integers(0, 30))),
                             max_size=5),
       st.lists(st.one_of(st.none(), st.floats(0, 1, exclude_max=True)), min_size=1))
def test_transfers_that_fail_part_way_resume_where_they_stopped_and_leave_no_gap(scenario, steps, rows):
    """Incremental transfers at increasing "now"s, some failing at an arbitrary window k (the
    windows before k commit, as the runner commits them one by one), then one that succeeds.
    Each window delivers no row or one row somewhere in its read. Each transfer resumes at the
    last delivered row (or the watermark if earlier) minus the lookback, never re-reads a committed
    window beyond the one holding the watermark; together their reads cover [start, now) with no
    gap and never before the start."""
    windowing, end = scenario
    start = windowing.configured_start
    lookback = timedelta(seconds=windowing.lookback_seconds)
    nows = sorted(start + (end - start) * fraction for fraction, _ in steps)
    runs = [*zip(nows, [fail for _, fail in steps], strict=True), (end, None)]
    state = ModelState()
    reads: list[tuple[datetime, datetime]] = []
    n = 0
    for now, failing_window in runs:
        before = state
        planned = plan_windows(windowing, now=now, state=state)
        if state.watermark is not None and planned:
            anchor = start if state.high_watermark is None else min(state.high_watermark, state.watermark)
            assert planned[0].bounds.lower == max(anchor - lookback, start)
            assert all(p.bounds.upper > state.watermark for p in planned)  # committed windows: not again
        assert_contiguous(progress(planned))
        committed = planned if failing_window is None else planned[:failing_window]
        for p in committed:
            row = rows[n % len(rows)]
            n += 1
            value = None if row is None else at_fraction(p.bounds.lower, p.bounds.upper, row)
            state = state.after_window(p.bounds.progress, batch_max_last_modified=value,
                                       configured_start=start)
            reads.append((p.bounds.lower, p.bounds.upper))
        if committed:
            assert state.watermark == committed[-1].bounds.progress.end
        else:
            assert state.watermark == before.watermark
    assert state.watermark == end
    assert state.completed == (Window(start, end),)
    reached = start
    for lower, upper in sorted(reads):
        assert start <= lower <= reached, "a gap between reads"
        reached = max(reached, upper)
    assert reached == end


# -- repair windows ------------------------------------------------------------------------------


def test_a_repair_moves_the_grid_windows_holding_the_broken_rows_merged_where_they_touch():
    from transfer_platform.core.repair import repair_windows
    from transfer_platform.core.windows import Window

    daily = ModelWindowing(configured_start=datetime(2024, 1, 1, tzinfo=UTC), lookback_seconds=30,
                           max_window_seconds=86_400)
    at = lambda d, h=0: datetime(2024, 3, d, h, tzinfo=UTC)  # noqa: E731
    assert repair_windows(daily, []) == []
    assert repair_windows(daily, [at(2, 5), at(2, 23), at(3, 1), at(7, 12)]) == [
        Window(at(2), at(4)), Window(at(7), at(8))]
    whole = ModelWindowing(configured_start=at(1), lookback_seconds=30, max_window_seconds=None)
    assert repair_windows(whole, [at(5, 3), at(2, 1)]) == [
        Window(at(2, 1), at(5, 3) + timedelta(microseconds=1))]
