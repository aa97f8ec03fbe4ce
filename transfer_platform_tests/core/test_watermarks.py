"""Merged finished windows, the unbroken watermark and its JSON form."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transfer_platform.core import watermarks
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.core.watermarks import ModelState, merge_windows
from transfer_platform.core.windows import Window


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def hours(a: int, b: int) -> Window:
    """Window from hour ``a`` to hour ``b`` of 2024-01-01."""
    base = at(2024, 1, 1)
    return Window(base + timedelta(hours=a), base + timedelta(hours=b))


# -- merge_windows -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("windows", "expected"),
    [
        ([], ()),
        ([hours(0, 1)], (hours(0, 1),)),
        ([hours(0, 1), hours(2, 3)], (hours(0, 1), hours(2, 3))),
        ([hours(0, 1), hours(1, 2)], (hours(0, 2),)),
        ([hours(0, 2), hours(1, 3)], (hours(0, 3),)),
        ([hours(0, 5), hours(1, 2)], (hours(0, 5),)),
        ([hours(4, 5), hours(0, 1), hours(1, 2)], (hours(0, 2), hours(4, 5))),
        ([hours(2, 3), hours(0, 1), hours(1, 2)], (hours(0, 3),)),
        ([hours(0, 1), hours(0, 1)], (hours(0, 1),)),
    ],
    ids=["empty", "single", "disjoint", "touching", "overlapping", "contained", "unsorted",
         "unsorted-joined", "duplicate"],
)
def test_merge_windows(windows, expected):
    assert merge_windows(windows) == expected


_HOUR_PAIRS = st.tuples(st.integers(0, 48), st.integers(1, 12)).map(lambda p: hours(p[0], p[0] + p[1]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_HOUR_PAIRS, max_size=12))
def test_merge_windows_keeps_the_union_and_separates_runs(windows):
    merged = merge_windows(windows)
    # sorted, and separated by real gaps (touching runs must have been joined)
    assert all(a.end < b.start for a, b in pairwise(merged))
    # same union, probed at every hour and half hour
    base = at(2024, 1, 1)
    for half_hours in range(2 * 62):
        moment = base + timedelta(minutes=30 * half_hours)
        assert any(w.contains(moment) for w in windows) == any(w.contains(moment) for w in merged)
    # idempotent
    assert merge_windows(merged) == merged


# -- first_unbroken_end ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completed", "configured_start", "expected"),
    [
        ((), at(2024, 1, 1), None),
        ((hours(0, 3),), at(2024, 1, 1), hours(0, 3).end),
        ((hours(0, 3), hours(4, 6)), at(2024, 1, 1), hours(0, 3).end),
        ((hours(1, 3),), at(2024, 1, 1), None),  # a gap right at the start
        ((hours(0, 3),), at(2024, 1, 1, 2), hours(0, 3).end),  # start inside the run
        ((hours(0, 3),), at(2024, 1, 1, 3), None),  # half-open: the end is not covered
    ],
    ids=["nothing", "one-run", "first-run-only", "gap-at-start", "start-inside", "start-at-end"],
)
def test_first_unbroken_end(completed, configured_start, expected):
    assert watermarks.first_unbroken_end(completed, configured_start) == expected


# -- ModelState.after_window -------------------------------------------------------------------

START = at(2024, 1, 1)


def test_after_window_in_order():
    state = ModelState().after_window(hours(0, 1), batch_max_last_modified=at(2024, 1, 1, 0, 59),
                                      configured_start=START)
    assert state.watermark == hours(0, 1).end
    assert state.high_watermark == at(2024, 1, 1, 0, 59)
    assert state.completed == (hours(0, 1),)


def test_out_of_order_windows_wait_for_the_gap():
    state = ModelState()
    state = state.after_window(hours(0, 1), batch_max_last_modified=None, configured_start=START)
    assert state.watermark == hours(0, 1).end
    # window 3 finishes before window 2: the watermark stays at the end of window 1
    state = state.after_window(hours(2, 3), batch_max_last_modified=None, configured_start=START)
    assert state.watermark == hours(0, 1).end
    assert state.completed == (hours(0, 1), hours(2, 3))
    # window 2 closes the gap: the watermark jumps to the end of window 3
    state = state.after_window(hours(1, 2), batch_max_last_modified=None, configured_start=START)
    assert state.watermark == hours(2, 3).end
    assert state.completed == (hours(0, 3),)


def test_watermark_unset_while_the_configured_start_is_not_covered():
    state = ModelState().after_window(hours(1, 2), batch_max_last_modified=None, configured_start=START)
    assert state.watermark is None
    assert state.completed == (hours(1, 2),)


def test_high_watermark_only_grows():
    state = ModelState()
    state = state.after_window(hours(1, 2), batch_max_last_modified=at(2024, 1, 1, 1, 30),
                               configured_start=START)
    state = state.after_window(hours(0, 1), batch_max_last_modified=at(2024, 1, 1, 0, 30),
                               configured_start=START)
    assert state.high_watermark == at(2024, 1, 1, 1, 30)
    state = state.after_window(hours(2, 3), batch_max_last_modified=None, configured_start=START)
    assert state.high_watermark == at(2024, 1, 1, 1, 30)
    state = state.after_window(hours(3, 4), batch_max_last_modified=at(2024, 1, 1, 3, 1),
                               configured_start=START)
    assert state.high_watermark == at(2024, 1, 1, 3, 1)


def test_after_window_does_not_mutate():
    state = ModelState()
    state.after_window(hours(0, 1), batch_max_last_modified=None, configured_start=START)
    assert state == ModelState()


# -- epoch 0, JSON, reset ------------------------------------------------------------------------


def test_epoch_zero_watermark_is_a_real_value():
    state = ModelState(watermark=EPOCH, high_watermark=EPOCH, completed=())
    data = json.loads(state.to_json())
    assert data["watermark_us"] == 0
    assert data["high_watermark_us"] == 0
    back = ModelState.from_json(state.to_json())
    assert back.watermark is not None
    assert back.watermark == EPOCH
    assert back.high_watermark == EPOCH
    assert back == state


def test_configured_start_at_epoch():
    first = Window(EPOCH, EPOCH + timedelta(minutes=1))
    state = ModelState().after_window(first, batch_max_last_modified=EPOCH, configured_start=EPOCH)
    assert state.watermark == EPOCH + timedelta(minutes=1)
    assert state.high_watermark == EPOCH  # a row at epoch 0 is a real high watermark
    back = ModelState.from_json(state.to_json())
    assert back == state


def test_unset_stays_unset():
    data = json.loads(ModelState().to_json())
    assert data["watermark_us"] is None
    assert data["high_watermark_us"] is None
    assert ModelState.from_json(ModelState().to_json()) == ModelState()


@pytest.mark.parametrize("text", [None, ""], ids=["none", "empty"])
def test_from_json_of_nothing_is_the_empty_state(text):
    assert ModelState.from_json(text) == ModelState()


def test_json_round_trip_keeps_microseconds():
    state = ModelState(
        watermark=at(2024, 2, 29, 23, 59, 59) + timedelta(microseconds=999_999),
        high_watermark=at(2024, 2, 29, 12) + timedelta(microseconds=1),
        completed=(Window(at(2024, 2, 1) + timedelta(microseconds=7),
                          at(2024, 2, 29, 23, 59, 59) + timedelta(microseconds=999_999)),),
    )
    back = ModelState.from_json(state.to_json())
    assert back == state
    assert back.watermark.microsecond == 999_999
    assert back.high_watermark.microsecond == 1
    assert back.completed[0].start.microsecond == 7


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 4_102_444_800 * 1_000_000),  # up to 2100, in microseconds
    st.integers(1, 10**12),
)
def test_json_round_trip_is_exact(start_us, length_us):
    start = EPOCH + timedelta(microseconds=start_us)
    end = start + timedelta(microseconds=length_us)
    state = ModelState(watermark=end, high_watermark=start, completed=(Window(start, end),))
    assert ModelState.from_json(state.to_json()) == state


def test_reset_forgets_progress():
    state = ModelState(watermark=at(2024, 1, 2), high_watermark=at(2024, 1, 1, 23),
                       completed=(Window(at(2024, 1, 1), at(2024, 1, 2)),))
    reset = state.reset()
    assert reset.watermark is None
    assert reset.high_watermark is None
    assert reset.completed == ()
    assert reset == ModelState()
    assert state.watermark == at(2024, 1, 2)  # the original is unchanged
