"""Last-modified columns of every kind: bounds in the column's own type, grains, formats (pure)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transfer_platform.core.last_modified import LastModified, format_problem
from transfer_platform.core.sql import change_predicate
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.vendors.mysql import SQL_TEXT as MYSQL


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


MOMENT = at(2024, 3, 1, 10, 0, 0, 400_000)  # 1709287200.4
TEXT_SECONDS = LastModified("text", "%Y-%m-%d %H:%M:%S")


@pytest.mark.parametrize(
    ("kind", "moment", "bound"),
    [
        pytest.param(LastModified("timestamp"), MOMENT, MOMENT, id="timestamp-as-is"),
        pytest.param(LastModified("epoch_s"), MOMENT, 1_709_287_201, id="epoch-s-rounds-up"),
        pytest.param(LastModified("epoch_s"), at(2024, 3, 1, 10), 1_709_287_200, id="epoch-s-on-the-grain"),
        pytest.param(LastModified("epoch_ms"), MOMENT, 1_709_287_200_400, id="epoch-ms"),
        pytest.param(LastModified("epoch_ms"), MOMENT + timedelta(microseconds=1), 1_709_287_200_401,
                     id="epoch-ms-rounds-up-a-microsecond"),
        pytest.param(LastModified("epoch_us"), MOMENT, 1_709_287_200_400_000, id="epoch-us"),
        pytest.param(LastModified("date"), MOMENT, date(2024, 3, 2), id="date-rounds-up-to-the-next-day"),
        pytest.param(LastModified("date"), at(2024, 3, 1), date(2024, 3, 1), id="date-at-midnight"),
        pytest.param(LastModified("text"), MOMENT, "2024-03-01T10:00:00.400000+0000", id="text-iso-default"),
        pytest.param(TEXT_SECONDS, MOMENT, "2024-03-01 10:00:01", id="text-seconds-rounds-up"),
        pytest.param(LastModified("epoch_s"), EPOCH, 0, id="epoch-0"),
        pytest.param(LastModified("epoch_ms"), at(1969, 12, 31, 23, 59, 59), -1000, id="before-1970"),
    ],
)
def test_bounds_are_values_of_the_columns_own_kind(kind, moment, bound):
    assert kind.bound(moment) == bound
    assert type(kind.bound(moment)) is type(bound)


@pytest.mark.parametrize(
    ("kind", "value", "moment"),
    [
        pytest.param(LastModified("epoch_s"), 1_709_287_200, at(2024, 3, 1, 10), id="epoch-s"),
        pytest.param(LastModified("epoch_ms"), 1_709_287_200_401, MOMENT + timedelta(milliseconds=1),
                     id="epoch-ms"),
        pytest.param(LastModified("epoch_us"), 1, EPOCH + timedelta(microseconds=1), id="epoch-us"),
        pytest.param(LastModified("date"), date(2024, 3, 1), at(2024, 3, 1), id="date"),
        pytest.param(LastModified("text"), "2024-03-01T10:00:00.400000+0000", MOMENT, id="text-iso"),
        pytest.param(TEXT_SECONDS, "2024-03-01 10:00:00", at(2024, 3, 1, 10), id="text-zone-less-is-utc"),
    ],
)
def test_a_value_stands_for_an_instant(kind, value, moment):
    assert kind.moment(value) == moment
    assert kind.value(moment) == value


@pytest.mark.parametrize(
    ("kind", "grain", "lookback"),
    [
        pytest.param(LastModified("timestamp"), timedelta(microseconds=1), 30, id="timestamp"),
        pytest.param(LastModified("epoch_ms"), timedelta(milliseconds=1), 30, id="epoch-ms"),
        pytest.param(LastModified("epoch_s"), timedelta(seconds=1), 30, id="epoch-s"),
        pytest.param(LastModified("date"), timedelta(days=1), 86_400, id="date-rereads-a-whole-day"),
        pytest.param(LastModified("text", "%Y-%m-%d %H:%M"), timedelta(minutes=1), 60, id="text-minutes"),
        pytest.param(LastModified("text", "%Y%m%d"), timedelta(days=1), 86_400, id="text-days"),
    ],
)
def test_the_lookback_is_at_least_one_grain(kind, grain, lookback):
    assert kind.grain == grain
    assert kind.lookback_seconds(30) == lookback
    assert kind.lookback_seconds(100_000) == 100_000


@pytest.mark.parametrize(
    ("fmt", "problem"),
    [
        pytest.param("%Y-%m-%dT%H:%M:%S.%f%z", None, id="iso"),
        pytest.param("%Y-%m-%d %H:%M:%S", None, id="space"),
        pytest.param("%Y%m%d%H%M%S", None, id="compact"),
        pytest.param("%Y-%m-%dT%H:%M:%S.%fZ", None, id="literal-z"),
        pytest.param("%Y-%m-%d", None, id="days"),
        pytest.param("%d/%m/%Y", "year down", id="day-first"),
        pytest.param("%Y-%m", "year down", id="months-have-no-fixed-length"),
        pytest.param("%Y-%d-%m", "year down", id="swapped"),
        pytest.param("%Y-%m-%d %I:%M %p", "it uses %I, %p", id="12-hour-clock"),
        pytest.param("%z %Y-%m-%d", "%z must be the last", id="zone-first"),
        pytest.param("%Y-%m-%d 0%H", "literal digits", id="literal-digit"),
    ],
)
def test_only_formats_that_sort_in_time_order_are_accepted(fmt, problem):
    found = format_problem(fmt)
    if problem is None:
        assert found is None
    else:
        assert problem in found


def test_java_pattern_of_a_format():
    assert LastModified("text").java_pattern() == "yyyy'-'MM'-'dd'T'HH':'mm':'ss'.'SSSSSSZ"
    assert LastModified("text", "%Y%m%d it's").java_pattern() == "yyyyMMdd' it''s'"


@pytest.mark.parametrize(
    ("kind", "lower", "upper", "postgres", "mysql"),
    [
        pytest.param(LastModified("epoch_ms"), MOMENT, MOMENT + timedelta(days=1),
                     '(("lm" >= 1709287200400 AND "lm" < 1709373600400) OR "lm" IS NULL)',
                     "((`lm` >= 1709287200400 AND `lm` < 1709373600400) OR `lm` IS NULL)",
                     id="epoch-ms-an-integer-never-to_timestamp"),
        pytest.param(LastModified("date"), at(2024, 3, 1), at(2024, 3, 2, 12),
                     "((\"lm\" >= '2024-03-01' AND \"lm\" < '2024-03-03') OR \"lm\" IS NULL)",
                     "((`lm` >= DATE'2024-03-01' AND `lm` < DATE'2024-03-03') OR `lm` IS NULL)",
                     id="date"),
        pytest.param(TEXT_SECONDS, at(2024, 3, 1), at(2024, 3, 2),
                     "((\"lm\" >= E'2024-03-01 00:00:00' AND \"lm\" < E'2024-03-02 00:00:00') OR \"lm\" IS NULL)",
                     "((`lm` >= _utf8mb4 X'323032342D30332D30312030303A30303A3030' AND "
                     "`lm` < _utf8mb4 X'323032342D30332D30322030303A30303A3030') OR `lm` IS NULL)",
                     id="text"),
    ],
)
def test_the_change_predicate_compares_in_the_columns_own_type(kind, lower, upper, postgres, mysql):
    assert change_predicate("lm", kind.bound(lower), kind.bound(upper)) == postgres
    assert change_predicate("lm", kind.bound(lower), kind.bound(upper), dialect=MYSQL) == mysql


KINDS = [LastModified("epoch_s"), LastModified("epoch_ms"), LastModified("epoch_us"),
         LastModified("date"), LastModified("text"), TEXT_SECONDS, LastModified("text", "%Y-%m-%d %H:%M")]
instants = st.builds(lambda us: EPOCH + timedelta(microseconds=us),
                     st.integers(-10**15, 2 * 10**15))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(KINDS), instants, instants)
def test_a_value_is_inside_a_window_exactly_when_its_instant_is(kind, value_at, bound_at):
    """``bound(m) <= v`` exactly when ``moment(v) >= m``: windows tile the column's values as
    they tile time (every value in exactly one window), whatever its kind."""
    if kind.kind == "text" and not (at(1, 1, 1) <= bound_at and at(1, 1, 1) <= value_at < at(9999, 1, 1)):
        return  # strftime writes years 1..9999 only
    if kind.kind == "date" and not (at(1, 1, 1) <= min(value_at, bound_at) and max(value_at, bound_at) < at(9999, 1, 1)):
        return
    value = kind.value(kind.ceil(value_at))  # a value the column can hold
    assert (value >= kind.bound(bound_at)) == (kind.moment(value) >= bound_at)
