"""parse_duration_seconds: whole seconds from ints, numeric strings and ISO-8601 durations."""

from __future__ import annotations

import pytest

from transfer_platform.core.durations import parse_duration_seconds


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (45, 45),
        (86_400, 86_400),
        ("86400", 86_400),
        (" 300 ", 300),
        (60.0, 60),
        ("PT30S", 30),
        ("PT5M", 300),
        ("PT1H", 3_600),
        ("P1D", 86_400),
        ("P1W", 604_800),
        ("P1DT2H", 93_600),
        ("P1W2D", 777_600),
        ("PT1H30M15S", 5_415),
        ("PT1.0S", 1),
        ("pt30s", 30),
    ],
    ids=[
        "int-0", "int-45", "int-day", "numeric-string", "numeric-string-padded", "whole-float",
        "PT30S", "PT5M", "PT1H", "P1D", "P1W", "P1DT2H", "P1W2D", "PT1H30M15S", "PT1.0S",
        "lowercase",
    ],
)
def test_accepts(value, expected):
    result = parse_duration_seconds(value)
    assert result == expected
    assert type(result) is int


@pytest.mark.parametrize(
    "value",
    ["P1Y", "P1M", "P2M", "P", "PT", "P1DT", "abc", "", "1.5", "PT0.5S", "P1D2W", 1.5, True, False],
    ids=[
        "years", "months-P1M", "months-P2M", "bare-P", "bare-PT", "dangling-T", "garbage", "empty",
        "fractional-string", "fractional-seconds", "wrong-order", "float-1.5", "bool-True",
        "bool-False",
    ],
)
def test_refuses(value):
    with pytest.raises(ValueError, match=r"seconds|ISO-8601|duration"):
        parse_duration_seconds(value)


def test_refusal_message_names_the_value_and_the_allowed_forms():
    with pytest.raises(ValueError, match="years and months are not allowed") as info:
        parse_duration_seconds("P1M")
    assert "'P1M'" in str(info.value)
