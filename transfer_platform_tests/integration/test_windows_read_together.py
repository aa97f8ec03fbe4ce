"""Small neighbouring windows are read in one Spark job, and each still commits on its own.

From the seeds: ``max_transfer_time_window_seconds`` is the largest increment a commit may cover,
so a backfill is many windows, each committing its rows and moving the watermark on by itself.
Reading each in a Spark job of its own made a window's fixed cost that of a job; the source now
says how many rows each window holds (a bounded ``COUNT`` per window, one query), neighbours of at
most ``run_rows`` rows in all are read by one Spark job into the transferring process, and each is
then checked and committed alone. A window larger than that is read alone and staged by Spark.

Expectations come from the rows: a window holds the rows whose last-modified value is inside its
read bounds; every window commits in order with its own watermark; the destination ends equal to
the tenant's rows. A bad row in a later window leaves the earlier ones committed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.transfers.window_mover import WindowMover
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.daily_windows import (
    MIN_START,
    NOW,
    OTHER,
    OTHERS,
    ROWS,
    TENANT,
    config_for,
    holding,
    run,
)
from transfer_platform_tests.support.destinations import WITHOUT_S3, events_rows
from transfer_platform_tests.support.events import create_events, day, insert_rows, source_rows

pytestmark = pytest.mark.integration

# Jan 1st..5th hold 1..5 rows of the tenant (neighbours), Jan 6th none, Jan 7th 12 rows


@pytest.fixture
def spark_jobs(monkeypatch: pytest.MonkeyPatch) -> list:
    """The windows of each joint read (one Spark job each; the real read runs)."""
    jobs = []
    together = WindowMover.together

    def recording(self, windows, reads):
        jobs.append([w.bounds.progress for w in windows])
        return together(self, windows, reads)

    monkeypatch.setattr(WindowMover, "together", recording)
    return jobs


@pytest.mark.parametrize("vendor", WITHOUT_S3)
def test_neighbouring_small_windows_share_a_spark_job_and_commit_one_by_one(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, monkeypatch, spark_jobs, vendor) -> None:
    from transfer_platform.destinations.manifests import new_signing_key

    monkeypatch.setenv("TP_TEST_SIGNING_KEY", new_signing_key()[0])
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, ROWS + OTHERS)
    where = dst_schema if vendor == "postgres" else tmp_path / "dest"
    config = config_for(vendor, pg_schema, where)

    # Jan 1st..4th: 10 rows; Jan 5th starts another run
    summary, outcomes, writes = run(spark, config, tuning=Tuning(run_rows=10))

    assert summary.status == "SUCCESS", summary.error
    assert [o.planned.bounds.progress.end for o in outcomes] == [day(1, d) for d in range(2, 9)] + [NOW]
    assert [o.result.state.watermark for o in outcomes] == [o.planned.bounds.progress.end for o in outcomes]
    full = holding(outcomes)
    assert [o.result.rows_transferred for o in full] == [1, 2, 3, 4, 5, 12]
    progress = [o.planned.bounds.progress for o in full]
    # one job for Jan 1st..4th (10 rows), one for Jan 5th (the 6th is empty, the 7th too big)
    assert spark_jobs == [progress[:4], progress[4:5]]
    # Jan 5th alone in its read: streamed from the source into a PostgreSQL destination
    alone = "streamed" if vendor == "postgres" else "arrow"
    assert writes == [("arrow", p) for p in progress[:4]] + [(alone, progress[4]), ("staged", progress[5])]
    assert events_rows(vendor, pg_conn, where) == source_rows(pg_conn, pg_schema, TENANT)
    assert summary.state.high_watermark == max(r[2] for r in ROWS)


def test_a_duplicate_key_in_a_later_window_leaves_the_earlier_windows_committed(
        spark, pg_conn, pg_schema, tmp_path, spark_jobs) -> None:
    from deltalake import DeltaTable

    from transfer_platform.destinations.delta import read_state

    create_events(pg_conn, pg_schema, primary_key=False)
    original = next(r for r in ROWS if r[0] == 300)
    copy = (300, TENANT, original[2], "the same key again")  # the same last-modified value: a conflict
    insert_rows(pg_conn, pg_schema, ROWS + OTHERS + [copy])
    config = config_for("delta", pg_schema, tmp_path / "dest")

    summary, outcomes, _ = run(spark, config)

    assert summary.status == "ERROR"
    assert "two different versions of key id=300 have the same, latest last-modified value" in summary.error
    assert len(spark_jobs) == 1  # Jan 1st..5th in one job; the model stops at its bad window
    assert [o.planned.bounds.progress.end for o in outcomes] == [day(1, 2), day(1, 3)]  # Jan 1st, 2nd
    table = DeltaTable(str(tmp_path / "dest" / "events"))
    assert read_state(table).watermark == day(1, 3)
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == sorted(
        r[0] for r in ROWS if r[2] < day(1, 3))


def test_a_window_that_fails_in_spark_is_named_after_the_earlier_ones_commit(
        spark, pg_conn, pg_schema, tmp_path, spark_jobs) -> None:
    """A value Spark cannot cast fails the joint job; each window is then read alone, so the
    windows before the bad one commit and the error names the bad window's bounds."""
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, ROWS + [(399, TENANT, day(1, 3) + timedelta(hours=21), "not a number")])
    config = config_for("delta", pg_schema, tmp_path / "dest", payload_type="integer")

    summary, outcomes, _ = run(spark, config)

    assert summary.status == "ERROR", summary
    assert summary.error_type == "DataError"
    assert "<= last_modified < 2024-01-04T00:00:00.000000+00:00 failed" in summary.error  # Jan 3rd's read
    assert "'not a number'" in summary.error
    assert [o.planned.bounds.progress.end for o in outcomes] == [day(1, 2), day(1, 3)]
    assert len(spark_jobs[0]) > 1  # the joint read was tried first


def test_the_lake_reads_windows_together_as_it_reads_each(spark, tmp_path) -> None:
    """The lake scans the windows' whole range once, and each row is tagged with its windows (in
    this process, from the last-modified value as the source holds it): the same
    rows per window as each window's own read, a row in a lookback in both windows, a NULL
    last-modified value in the first window (which refuses it), another tenant's rows in none."""
    from transfer_platform.core.windows import ReadBounds, Window
    from transfer_platform.sources.base import WINDOW_COLUMN, ReadRequest, reader_for
    from transfer_platform_tests.support.lake import lake_config, write_lake

    lookback = timedelta(seconds=300)
    rows = [(1, TENANT, day(1, 1) + timedelta(hours=5), "a"),
            (2, TENANT, day(1, 2) - timedelta(seconds=10), "in Jan 2nd's lookback"),
            (3, TENANT, day(1, 2) + timedelta(hours=1), "b"), (4, TENANT, day(1, 3) + timedelta(hours=2), "c"),
            (5, TENANT, None, "no last-modified value"), (6, OTHER, day(1, 2) + timedelta(hours=1), "x"),
            (7, TENANT, day(1, 4) + timedelta(hours=1), "after the last window")]
    write_lake(tmp_path / "lake", rows)
    config = lake_config(tmp_path / "lake", tmp_path / "delta", tenant=TENANT, min_start=MIN_START)
    model = config.models[0]
    requests = [ReadRequest(model, TENANT, ReadBounds(day(1, d) - (lookback if d > 1 else timedelta()),
                                                      day(1, d + 1), Window(day(1, d), day(1, d + 1))))
                for d in (1, 2, 3)]
    reader = reader_for(config.source("src"))

    together = reader.tagged(reader.read_together(spark, requests).toArrow(), requests)

    def ids(table) -> list:
        return sorted(table.column("id").to_pylist())

    tags = together.column(WINDOW_COLUMN).to_pylist()
    for i, request in enumerate(requests):
        mine = together.filter([t == i for t in tags]).drop_columns([WINDOW_COLUMN])
        alone = reader.read(spark, request, with_origin=True).toArrow()  # each row with its file, as together
        if i == 0:
            assert ids(mine) == ids(alone) == [1, 2, 5]
        else:  # the NULL row is read by every window alone, by the first one only together
            assert ids(mine) == [i for i in ids(alone) if i != 5]
        assert mine.sort_by("id").equals(alone.filter([r != 5 for r in alone.column("id").to_pylist()]).sort_by("id")
                                         if i else alone.sort_by("id"))
    assert ids(together.filter([t == 1 for t in tags])) == [2, 3]  # row 2 in Jan 2nd's lookback too
