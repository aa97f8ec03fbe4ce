"""Dagster partitions of a model, for every window size: the first partition contains the
configured start, partitions lie on the documented cron grid (weeks on Mondays), keys are unique at
that grain and name their window, and the windows Dagster hands to a range run plan reads that
tile ``[start, now)`` exactly. Pure Dagster objects: no instance, no Spark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import dagster as dg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transfer_platform.config.parsing import parse_config
from transfer_platform.core.planning import ModelWindowing, plan_windows
from transfer_platform.core.timeutil import EPOCH
from transfer_platform.core.windows import Window
from transfer_platform.errors import ConfigError
from transfer_platform.orchestration.catalog.partitions import partitions_for, windows_for_keys

MINUTE, HOUR, DAY, WEEK = 60, 3_600, 86_400, 7 * 86_400
FIRST_MONDAY = datetime(1970, 1, 5, tzinfo=UTC)
MINUTE_FMT, DAY_FMT = "%Y-%m-%dT%H:%M", "%Y-%m-%d"

# window size -> (grid seconds, cron, key format): docs/design.md's "largest cron grid not above it"
GRID_TABLE = {
    1: (MINUTE, "* * * * *", MINUTE_FMT),
    7: (MINUTE, "* * * * *", MINUTE_FMT),
    59: (MINUTE, "* * * * *", MINUTE_FMT),
    60: (MINUTE, "* * * * *", MINUTE_FMT),
    90: (MINUTE, "* * * * *", MINUTE_FMT),
    120: (2 * MINUTE, "*/2 * * * *", MINUTE_FMT),
    420: (6 * MINUTE, "*/6 * * * *", MINUTE_FMT),
    900: (15 * MINUTE, "*/15 * * * *", MINUTE_FMT),
    3_599: (30 * MINUTE, "*/30 * * * *", MINUTE_FMT),
    3_600: (HOUR, "0 * * * *", MINUTE_FMT),
    5_400: (HOUR, "0 * * * *", MINUTE_FMT),
    25_200: (6 * HOUR, "0 */6 * * *", MINUTE_FMT),  # 7 h
    28_800: (8 * HOUR, "0 */8 * * *", MINUTE_FMT),
    86_399: (12 * HOUR, "0 */12 * * *", MINUTE_FMT),
    86_400: (DAY, "0 0 * * *", DAY_FMT),
    6 * DAY: (DAY, "0 0 * * *", DAY_FMT),
    WEEK: (WEEK, "0 0 * * 1", DAY_FMT),
    10 * DAY: (WEEK, "0 0 * * 1", DAY_FMT),
    6 * WEEK: (WEEK, "0 0 * * 1", DAY_FMT),
}

STARTS = {
    "odd-second-wednesday": datetime(2024, 3, 6, 10, 20, 17, tzinfo=UTC),
    "monday-midnight": datetime(2024, 3, 4, tzinfo=UTC),
    "one-second-before-new-year": datetime(2024, 12, 31, 23, 59, 59, tzinfo=UTC),
    "leap-day-noon-and-a-bit": datetime(2024, 2, 29, 12, 0, 1, tzinfo=UTC),
    "a-day-after-the-epoch": EPOCH + timedelta(days=1, seconds=17),
}


def windowing(start: datetime, window: int) -> ModelWindowing:
    return ModelWindowing(configured_start=start, lookback_seconds=30, max_window_seconds=window)


def on_grid(moment: datetime, grid: int) -> bool:
    anchor = FIRST_MONDAY if grid == WEEK else EPOCH
    return (moment - anchor) % timedelta(seconds=grid) == timedelta(0)


def partition_windows(partitions: dg.TimeWindowPartitionsDefinition, now: datetime) -> tuple[list[str], list[Window]]:
    keys = partitions.get_partition_keys(current_time=now)
    return keys, windows_for_keys(partitions, keys)


@pytest.mark.parametrize("start", list(STARTS.values()), ids=list(STARTS))
@pytest.mark.parametrize("window", list(GRID_TABLE), ids=[f"{w}s" for w in GRID_TABLE])
def test_partitions_start_at_the_configured_start_on_the_documented_grid(window, start):
    grid, cron, fmt = GRID_TABLE[window]
    partitions = partitions_for(windowing(start, window))

    assert partitions.cron_schedule == cron
    assert partitions.fmt == fmt
    assert str(partitions.timezone) == "UTC"
    first_key = partitions.get_first_partition_key()
    (first,) = windows_for_keys(partitions, [first_key])
    assert first.start <= start < first.end  # no row after the start is missed...
    assert first.seconds == grid  # ...and the first partition is the tick at or before it
    assert on_grid(first.start, grid)

    now = start + timedelta(seconds=grid) * 5 + timedelta(seconds=1, microseconds=3)
    keys, windows = partition_windows(partitions, now)
    assert keys[0] == first_key
    assert len(set(keys)) == len(keys)  # unique at this grain
    assert keys == [w.start.strftime(fmt) for w in windows]  # a key names its window's start
    assert all(w.seconds == grid and on_grid(w.start, grid) for w in windows)
    assert all(a.end == b.start for a, b in pairwise(windows))  # contiguous
    assert windows[-1].contains(now)  # the window in progress is included (end_offset=1)


def test_keys_are_unique_over_a_long_range_of_minutes():
    partitions = partitions_for(windowing(datetime(2024, 3, 10, 22, 0, 17, tzinfo=UTC), 1))
    keys = partitions.get_partition_keys(current_time=datetime(2024, 3, 12, 2, tzinfo=UTC))
    assert len(keys) == len(set(keys)) == 28 * 60 + 1


def test_a_model_without_a_window_size_has_no_partitions():
    assert partitions_for(ModelWindowing(configured_start=EPOCH, lookback_seconds=30,
                                         max_window_seconds=None)) is None


# -- properties: Dagster's windows plan reads that tile [start, now) ---------------------------

SPECIAL_WINDOWS = [1, 7, 59, 60, 61, 90, 119, 120, 900, 3_599, 3_600, 5_400, 25_200, 86_399,
                   86_400, WEEK - 1, WEEK, 10 * DAY, 6 * WEEK]
_Y2000 = int((datetime(2000, 1, 1, tzinfo=UTC) - EPOCH).total_seconds())
_Y2030 = int((datetime(2030, 1, 1, tzinfo=UTC) - EPOCH).total_seconds())


@st.composite
def dagster_scenarios(draw):
    window = draw(st.one_of(st.sampled_from(SPECIAL_WINDOWS), st.integers(1, 6 * WEEK)))
    start = EPOCH + timedelta(seconds=draw(st.one_of(st.integers(_Y2000, _Y2030),
                                                     st.integers(DAY, 60 * DAY))))
    longest_grid = min(max(window, MINUTE), WEEK)  # about 12 partitions, whatever the grid
    now = start + timedelta(seconds=draw(st.integers(1, 12 * longest_grid)),
                            microseconds=draw(st.integers(0, 999_999)))
    return windowing(start, window), now


@settings(max_examples=60, deadline=None)
@given(dagster_scenarios())
def test_a_range_over_every_partition_plans_reads_that_tile_start_to_now(scenario):
    model, now = scenario
    partitions = partitions_for(model)
    keys, windows = partition_windows(partitions, now)
    assert len(set(keys)) == len(keys)
    assert windows[0].contains(model.configured_start)
    assert windows[-1].contains(now)

    planned = plan_windows(model, now=now, partitions=windows)

    progress = [p.bounds.progress for p in planned]
    assert progress[0].start == model.configured_start
    assert progress[-1].end == now
    assert all(a.end == b.start for a, b in pairwise(progress))  # no gap, no overlap
    assert all(p.bounds.lower >= model.configured_start for p in planned)  # never before the start
    assert all(p.bounds.progress.seconds <= model.max_window_seconds for p in planned)
    # each partition that has started is reported (materialized) exactly once, by its last read
    # (at a ``now`` on a partition boundary Dagster also lists the partition beginning then:
    # nothing of it has elapsed, so nothing of it is read yet)
    closing = [p.partition for p in planned if p.last_of_partition]
    assert closing == [w for w in windows if w.start < now]


# -- a start at epoch 0 -------------------------------------------------------------------------


@pytest.mark.parametrize("window", [60, 3_600, 7_200, 86_400, WEEK], ids=["1min", "1h", "2h", "1d", "1w"])
def test_a_start_at_epoch_zero_is_in_the_first_partition(window):
    partitions = partitions_for(windowing(EPOCH, window))
    (first,) = windows_for_keys(partitions, [partitions.get_first_partition_key()])
    assert first.start <= EPOCH < first.end


@pytest.mark.parametrize("window", [120, 900, 1_800], ids=["2min", "15min", "30min"])
def test_a_start_at_epoch_zero_is_in_the_first_partition_of_a_minute_grid(window):
    """Dagster's own iterator drops the tick at timestamp 0 on these grids (a falsy check);
    ``orchestration/speed/dagster_fixes.py`` restores it."""
    partitions = partitions_for(windowing(EPOCH, window))
    (first,) = windows_for_keys(partitions, [partitions.get_first_partition_key()])
    assert first == Window(EPOCH, EPOCH + timedelta(seconds=window))
    assert partitions.get_first_partition_key() == "1970-01-01T00:00"
    now = EPOCH + timedelta(minutes=47, microseconds=3)
    keys, windows = partition_windows(partitions, now)
    assert windows[0] == first
    assert windows[-1].contains(now)
    assert all(a.end == b.start for a, b in pairwise(windows))


@pytest.mark.parametrize("start", [EPOCH - timedelta(minutes=2), EPOCH + timedelta(minutes=2)],
                         ids=["before-epoch", "after-epoch"])
def test_the_epoch_fix_leaves_other_ticks_alone(start):
    partitions = partitions_for(windowing(start, 120))
    keys = partitions.get_partition_keys(current_time=start + timedelta(minutes=7))
    expected = [(start + timedelta(minutes=2 * i)).strftime("%Y-%m-%dT%H:%M") for i in range(4)]
    assert keys[:4] == expected


def test_the_epoch_fix_is_installed_wherever_the_coordinator_starts():
    """The webserver and the daemon start the run coordinator (``dagster.yaml``), not the
    definitions: they must compute the same partition keys as the code server. Importing the
    package patches nothing."""
    import subprocess
    import sys

    code = ("import transfer_platform.orchestration.scheduling.coordinator as c\n"
            "from transfer_platform.orchestration.speed.dagster_fixes import installed\n"
            "print(installed())\n"
            "c.TransferRunCoordinator()\n"
            "print(installed())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_a_minute_grid_from_epoch_zero_is_refused_for_a_real_clock():
    """Why the failure above is latent: the configuration check stops such a model first."""
    model = {"model_name": "m", "source_name": "s", "source_table": "t", "organization_column": "o",
             "max_transfer_time_window_seconds": 900, "min_start_time_epoch": 0,
             "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                         {"name_in_source": "u", "data_type": "timestamp", "is_last_modified": True}]}
    raw = {"sources": [{"name": "s", "vendor": "parquet", "connection": {"path": "lake"}}],
           "models": [model], "recipients": [{"name": "r", "id_in_provider_system": "x"}],
           "destinations": [{"name": "d", "vendor": "delta", "recipient": "r",
                             "connection": {"path": "out"}}]}
    with pytest.raises(ConfigError, match="100,000"):
        parse_config(raw, now=datetime(2025, 1, 1, tzinfo=UTC))
