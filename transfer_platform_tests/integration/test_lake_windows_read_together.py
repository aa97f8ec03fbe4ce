"""A Parquet lake's windows are read together without being counted first, unless they hold more
than one joint read may bring into the transferring process.

A database counts each window's rows with one ``COUNT`` query, no Spark; a lake can only count
with a Spark job over its files, which cost as much as reading a few small windows. So up to
``run_windows`` neighbouring windows are read in one Spark job, at most ``run_rows + 1`` rows;
if they hold no more than ``run_rows``, that one job was all (empty windows included); otherwise
they are counted and moved as a database's are (small ones together, large ones alone and staged
by Spark).

From the seeds: every window still commits and reports on its own, each moving the watermark on.
Expectations come from the rows: a window holds the rows whose last-modified value is inside its
read bounds; the destination ends equal to the tenant's rows.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.sources.parquet_lake import ParquetLakeReader
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.support import lake as support_lake
from transfer_platform_tests.support.daily_windows import run
from transfer_platform_tests.support.events import day
from transfer_platform_tests.support.lake import DeltaTables, delivered, tenant_rows, write_lake
from transfer_platform_tests.support.sparse_tenant import MIN_START, NOW, OTHER, TENANT

pytestmark = pytest.mark.integration

# TENANT, OTHER, MIN_START, NOW: as for a database source's empty windows (61 daily windows)
# the tenant: 2 rows on Jan 3rd, 1 on Feb 10th, 3 on Feb 11th; the other tenant every day
ROWS = ([(1, TENANT, day(1, 3) + timedelta(hours=2), "a"), (2, TENANT, day(1, 3) + timedelta(hours=9), "b"),
         (3, TENANT, day(2, 10) + timedelta(microseconds=1), "c")]
        + [(10 + k, TENANT, day(2, 11) + timedelta(hours=k), "d") for k in range(3)]
        + [(100 + d, OTHER, day(1, 1) + timedelta(days=d, hours=3), "x") for d in range(59)])


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list:
    """The lake reader's joint reads and counts, in order, with how many windows each covered
    (the real ones run)."""
    seen = []
    for name in ("read_together", "window_rows"):
        real = getattr(ParquetLakeReader, name)

        def recording(self, spark, requests, *more, real=real, name=name):
            seen.append((name, len(requests)))
            return real(self, spark, requests, *more)

        monkeypatch.setattr(ParquetLakeReader, name, recording)
    return seen


def holding_rows(outcomes: list) -> list:
    """The windows' starts and how many of the tenant's rows their read bounds hold."""
    return [(o.planned.bounds.progress.start,
             sum(1 for r in ROWS if r[1] == TENANT and o.planned.bounds.lower <= r[2] < o.planned.bounds.upper))
            for o in outcomes]


def transferred(spark, tmp_path, tuning: Tuning = DEFAULT) -> tuple:
    write_lake(tmp_path / "lake", ROWS)
    config = support_lake.lake_config(tmp_path / "lake", {"path": str(tmp_path / "dest")}, tenant=TENANT,
                                 min_start=MIN_START)
    summary, outcomes, writes = run(spark, config, NOW, tuning)
    writes = [(how, window.start) for how, window in writes]
    assert summary.status == "SUCCESS", summary.error
    assert summary.windows == len(outcomes) == 61  # every window committed and reported, in order
    assert [o.result.state.watermark for o in outcomes] == [o.planned.bounds.progress.end for o in outcomes]
    assert [o.result.rows_transferred for o in outcomes] == [n for _, n in holding_rows(outcomes)]
    assert delivered(DeltaTables(str(tmp_path / "dest"))) == tenant_rows(ROWS, TENANT)
    return outcomes, writes


def test_sparse_windows_of_a_lake_are_one_spark_job_and_no_count(spark, tmp_path, calls) -> None:
    outcomes, writes = transferred(spark, tmp_path)

    assert calls == [("read_together", 61)]
    assert writes == [("arrow", start) for start, n in holding_rows(outcomes) if n]  # the others: empty commits


def test_windows_holding_more_than_a_joint_read_may_bring_are_counted_then_moved_by_size(
        spark, tmp_path, calls, monkeypatch: pytest.MonkeyPatch) -> None:
    # Jan 3rd: 2 rows; Feb 10th: 1; Feb 11th: 3 (> 2)
    outcomes, writes = transferred(spark, tmp_path, Tuning(run_rows=2))

    # the first joint read found more than 2 rows: the windows were counted (a lake's count may
    # be more than a window reads, never less), then moved by size: small ones into this
    # process, read together, Feb 11th (3 rows) alone and staged by Spark
    assert calls[:2] == [("read_together", 61), ("window_rows", 61)]
    assert {name for name, _ in calls[2:]} == {"read_together"}
    rows = dict(holding_rows(outcomes))
    assert ("staged", day(2, 11)) in writes
    assert all(rows[start] <= 2 for how, start in writes if how == "arrow")
    assert {start for start, n in rows.items() if n} <= {start for _, start in writes}


def test_a_folder_read_again_keeps_its_inferred_schema_until_its_files_change(spark, tmp_path) -> None:
    """Spark infers a folder's schema with a job of its own; it is inferred again only when the
    folder's files change, so a column added to the lake is seen by the next read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from transfer_platform.sources import parquet_lake
    from transfer_platform.sources.parquet_lake import FolderLake

    folder = tmp_path / "lake" / "events"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": [1], "payload": ["a"]}), folder / "part-0.parquet")
    lake = FolderLake(tmp_path / "lake")

    first = lake.frame(spark, folder, None)
    again = lake.frame(spark, folder, None)
    assert first.columns == again.columns == ["id", "payload"]
    assert sum(1 for key in parquet_lake._INFERRED if key[0] == str(folder)) == 1  # one inference for both

    (folder / "part-0.parquet").unlink()
    pq.write_table(pa.table({"id": [1], "payload": ["a"], "added": [2.5]}), folder / "part-1.parquet")
    changed = lake.frame(spark, folder, None)
    assert changed.columns == ["id", "payload", "added"]
    assert changed.collect()[0]["added"] == 2.5
