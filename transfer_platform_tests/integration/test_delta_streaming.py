"""The Delta destination streams a window: Spark's executors stage it as Parquet files in the
destination, the process that transfers only reads small summaries and then feeds delta-rs's MERGE
from the staged files ``Tuning.batch_rows`` rows at a time. Windows larger than the batch size move
exactly (a folder and an S3 bucket), the Arrow memory of the transferring process is bounded by
the batch size rather than the window, a bad row anywhere in a big window is refused with the usual
messages and nothing committed, and a transfer that dies between staging and commit leaves the
table as it was and its staging for the model's next transfer to remove."""

from __future__ import annotations

import threading
from datetime import timedelta
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations import delta
from transfer_platform.destinations.delta import DeltaWriter, read_state
from transfer_platform.destinations.staged_files import STAGING_DIR, Staged, stage_partition
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support import lake as support_lake
from transfer_platform_tests.support import transfers as support_transfers
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.events import MODEL, day, make_rows
from transfer_platform_tests.support.lake import DeltaTables, delivered, tenant_rows, write_lake

pytestmark = pytest.mark.integration

TENANT = "acme"
MIN_START = day(3, 1)
NOW = day(3, 2) + timedelta(hours=1)  # windows [3/1, 3/2) (every row) and [3/2, NOW) (empty)
LATER = day(3, 3) + timedelta(hours=1)
BATCH = 1_000  # Tuning.batch_rows and Tuning.run_rows in these tests
#: every transfer here: batches of ``BATCH`` rows, and a window with more rows than a batch read
#: alone and staged by the executors
transfer = partial(support_transfers.transfer, tuning=Tuning(batch_rows=BATCH, run_rows=BATCH))
WINDOW = 25_000  # rows in the big window: 25 batches
LOOKBACK = timedelta(seconds=300)  # the Parquet source's: each read starts this long before the high watermark


def big_window(count: int, *, seed: int = 1, start_id: int = 1) -> list:
    """``count`` rows of the tenant, all in the window of March 1st, and a few of another tenant."""
    return (make_rows([TENANT], count, [day(3, 1)], seed=seed, start_id=start_id)
            + make_rows(["globex"], 50, [day(3, 1)], seed=seed + 1, start_id=start_id + count))


def staged_files(tables: DeltaTables) -> list[str]:
    """Every file left under the destination's staging folder."""
    if tables.client is None:
        return [str(p) for p in Path(tables.root, STAGING_DIR).rglob("*") if p.is_file()]
    prefix = tables.root.removeprefix(f"s3://{tables.bucket}/") + f"/{STAGING_DIR}/"
    pages = tables.client.get_paginator("list_objects_v2").paginate(Bucket=tables.bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of ``BATCH`` rows, and every window with more rows than that read alone and
    staged by the executors (not read with its neighbours into this process)."""


@pytest.fixture
def lake_setup(tmp_path: Path, delta_tables, small_batches):
    connection, tables = delta_tables
    config = support_lake.lake_config(tmp_path / "lake", connection, tenant=TENANT, min_start=MIN_START)
    return config, tmp_path / "lake", tables


def rows_after(moment, count: int, *, start_id: int, step=timedelta(seconds=2)) -> list:
    """``count`` new rows of the tenant, ``step`` apart from ``moment`` on."""
    return [(start_id + k, TENANT, moment + k * step + timedelta(microseconds=k + 1), f"new {k}")
            for k in range(count)]


def test_a_window_larger_than_the_batch_size_moves_exactly(spark, lake_setup):
    config, lake, tables = lake_setup
    rows = big_window(WINDOW)
    write_lake(lake, rows)

    first = transfer(spark, config, NOW)

    assert first.status == "SUCCESS", first.error
    assert first.windows == 2  # March 1st (every row), then an empty one
    assert (first.rows_transferred, first.delta_rows_transferred) == (WINDOW, WINDOW)
    assert delivered(tables) == tenant_rows(rows, TENANT)
    state = read_state(tables.table())
    assert (state.watermark, state.high_watermark) == (NOW, max(r[2] for r in rows if r[1] == TENANT))
    assert staged_files(tables) == []

    # the next window, also larger than a batch: half the rows changed later, some new ones
    changed_at = NOW + timedelta(hours=1)
    mine = [r for r in rows if r[1] == TENANT]
    later = {r[0]: (r[0], r[1], changed_at + timedelta(microseconds=r[0]), f"v2 {r[0]}") for r in mine[::2]}
    added = rows_after(NOW + timedelta(minutes=10), 3_000, start_id=10 * WINDOW)
    write_lake(lake, [later.get(r[0], r) for r in rows] + added)

    second = transfer(spark, config, LATER, transfer_id="t2")

    assert second.status == "SUCCESS", second.error
    # re-read too, unchanged: the rows of the parquet source's 300 s lookback before the high watermark
    reread = [r for r in mine if r[0] not in later and r[2] >= state.high_watermark - LOOKBACK]
    assert reread
    assert second.rows_transferred == len(later) + len(added) + len(reread)
    assert second.delta_rows_transferred == len(later) + len(added)
    assert delivered(tables) == tenant_rows([later.get(r[0], r) for r in rows] + added, TENANT)
    assert read_state(tables.table()).high_watermark == max(r[2] for r in [*later.values(), *added])
    assert staged_files(tables) == []


def peak_arrow_bytes(run, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list]:
    """The most Arrow memory (pyarrow's pools, in this process) held above what was held before,
    sampled every millisecond while ``run()`` runs, outside delta-rs's MERGE (which builds its
    hash join from the source in memory of its own: delta-rs's part, not ours); and the type of
    what each MERGE was handed as its source."""
    base = pa.total_allocated_bytes()
    peak, done, merging, sources = base, threading.Event(), threading.Event(), []
    merge = DeltaWriter._merge

    def watched(self, path, target, source, staged, load, **how):
        sources.append(type(source))  # not the reader itself: holding it would hold its buffers
        merging.set()
        try:
            return merge(self, path, target, source, staged, load, **how)
        finally:
            merging.clear()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            if not merging.is_set():
                peak = max(peak, pa.total_allocated_bytes())
            done.wait(0.001)

    monkeypatch.setattr(DeltaWriter, "_merge", watched)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run()
    finally:
        done.set()
        sampler.join()
        monkeypatch.setattr(DeltaWriter, "_merge", merge)
    return peak - base, sources


def test_the_transferring_process_holds_batches_not_the_window(spark, tmp_path, small_batches, monkeypatch):
    """A window of 8N rows costs this process no more Arrow memory than one of N while it is read,
    staged and checked: a few batches, not the window (which the old path held whole, as
    ``DataFrame.toArrow``); the MERGE is handed a stream of batches, not a table."""
    peaks, sizes = {}, {}
    for count in (20_000, 160_000):
        lake, root = tmp_path / f"lake{count}", tmp_path / f"delta{count}"
        config = support_lake.lake_config(lake, root, tenant=TENANT, min_start=MIN_START)
        rows = big_window(count, seed=count)
        write_lake(lake, rows)
        summary = None

        def run(config=config) -> None:
            nonlocal summary
            summary = transfer(spark, config, NOW)

        peaks[count], sources = peak_arrow_bytes(run, monkeypatch)
        assert summary.status == "SUCCESS", summary.error
        assert summary.rows_transferred == count
        assert any(issubclass(source, pa.RecordBatchReader) for source in sources), sources
        assert not any(issubclass(source, pa.Table) for source in sources), sources
        sizes[count] = DeltaTables(str(root)).table().to_pyarrow_table().nbytes  # the window, in Arrow
    batch_bytes = sizes[160_000] / 160_000 * BATCH
    bound = 32 * batch_bytes + 2**20  # pyarrow rounds allocations
    assert peaks[160_000] < bound, (peaks, sizes, bound)
    assert peaks[20_000] < bound, (peaks, sizes, bound)
    assert peaks[160_000] < sizes[160_000] / 3, (peaks, sizes)


@pytest.mark.parametrize("bad", ["duplicate", "null key"])
def test_a_bad_row_in_a_big_window_is_refused_and_nothing_is_committed(spark, lake_setup, bad):
    config, lake, tables = lake_setup
    rows = big_window(WINDOW, seed=3)
    write_lake(lake, rows[:100])
    assert transfer(spark, config, NOW).status == "SUCCESS"
    version, before = tables.table().version(), delivered(tables)
    key = rows[WINDOW // 2][0]
    moment = day(3, 1) + timedelta(hours=23, minutes=30)
    # two versions of one key with the same last-modified value and different values: which one
    # is current cannot be told (two versions at different moments are resolved, not refused)
    extra = ([(key, TENANT, moment, "copy a"), (key, TENANT, moment, "copy b")]
             if bad == "duplicate" else [(None, TENANT, moment, "no key")])
    write_lake(lake, rows[:WINDOW // 3] + extra[:1] + rows[WINDOW // 3:] + extra[1:])

    failed = transfer(spark, config, NOW + timedelta(days=1), transfer_id="t2")

    assert failed.status == "ERROR"
    assert failed.error_type == "DataError"
    assert f"model '{MODEL}'" in failed.error
    if bad == "duplicate":  # its two copies (the row itself is before the read's start)
        assert read_state(tables.table()).high_watermark - LOOKBACK > next(r[2] for r in rows if r[0] == key)
        assert f"two different versions of key id={key!r} have the same, latest last-modified value" in failed.error
    else:
        assert "a row has a NULL primary key value (id) at key id=None" in failed.error
    assert tables.table().version() == version
    assert delivered(tables) == before
    assert read_state(tables.table()).watermark == NOW
    assert staged_files(tables) == []


def test_the_executors_summary_matches_refuse_bad_rows(tmp_path):
    """``_stage_partition`` on its own (as an executor runs it), batches of 4 rows: a duplicate
    key whose copies span three batches is counted whole; NULL key and last-modified found."""
    config = support_lake.lake_config(tmp_path / "lake", tmp_path / "delta", tenant=TENANT, min_start=MIN_START)
    model = config.models[0]
    schema = delta.arrow_schema(model)
    at = day(3, 1)
    ids = [None, 1, 2, 2, 2, 2, 2, 2, 3, 4, 4, 5]
    table = pa.table({"id": pa.array(ids, pa.int64()), "organization_id": [TENANT] * len(ids),
                      "updated_at": pa.array([at + timedelta(seconds=i) for i in range(len(ids))],
                                             pa.timestamp("us", tz="UTC")),
                      "payload": [f"p{i}" for i in range(len(ids))]}, schema=schema)
    table = table.set_column(2, "updated_at", pa.array(
        [at + timedelta(seconds=i) if i != 9 else None for i in range(len(ids))], pa.timestamp("us", tz="UTC")))
    state = ModelState(high_watermark=at + timedelta(seconds=5, microseconds=1))
    (summary,) = stage_partition(table.to_batches(max_chunksize=4), folder=str(tmp_path / "stage"),
                                        options=None, schema=schema, model=model, state=state, batch_rows=4)
    row = summary.to_pylist()[0]
    staged = Staged.of([row], model)
    assert staged.rows == len(ids)
    assert staged.files == [row["file"]]
    assert pq.read_table(row["file"]).equals(table)
    assert staged.delta_rows == 5  # seconds 6..11 but the NULL one
    assert staged.first("null_key:id")["id"] is None
    assert staged.first("null_last_modified")["id"] == 4
    assert (staged.first("duplicate")["id"], staged.first("duplicate")["__tp_count"]) == (2, 6)
    assert staged.marked == 0  # no deletion marker
    assert staged.max_last_modified == at + timedelta(seconds=11)


def failing_merge(message: str):
    def merge(*args, **kwargs):
        raise RuntimeError(message)
    return merge


def test_a_crash_between_staging_and_commit_changes_nothing_and_the_next_transfer_cleans_up(
        spark, lake_setup, monkeypatch):
    config, lake, tables = lake_setup
    rows = big_window(2_000, seed=4)
    write_lake(lake, rows)
    assert transfer(spark, config, NOW).status == "SUCCESS"
    version, before = tables.table().version(), delivered(tables)
    added = rows_after(NOW + timedelta(minutes=10), 5_000, start_id=100_000)
    write_lake(lake, rows + added)

    # the commit fails (the writer sees it): nothing committed, its staging removed at once
    with monkeypatch.context() as failing:
        failing.setattr(DeltaWriter, "_merge", failing_merge("commit failed"))
        with pytest.raises(RuntimeError, match="commit failed"):
            transfer(spark, config, LATER, transfer_id="failing")
    assert (tables.table().version(), delivered(tables)) == (version, before)
    assert staged_files(tables) == []

    # killed after the executors staged the window, before the commit: no cleanup runs either
    with monkeypatch.context() as killed:
        killed.setattr(DeltaWriter, "_merge", failing_merge("killed between staging and commit"))
        killed.setattr(DeltaWriter, "_remove_staging", lambda self, folder, load: None)
        with pytest.raises(RuntimeError, match="killed between staging and commit"):
            transfer(spark, config, LATER, transfer_id="killed")
    assert (tables.table().version(), delivered(tables)) == (version, before)
    assert read_state(tables.table()).watermark == NOW
    left = staged_files(tables)
    assert left, "the killed transfer's staged files are still there"
    assert all(f"{STAGING_DIR}/{MODEL}/" in f for f in left)

    # the model's next transfer removes them (under its lock, before it stages) and moves the window
    writer = DeltaWriter(config.destination(DESTINATION))
    try:
        writer.prepare(config.models[0], "next")
        assert staged_files(tables) == []
    finally:
        writer.close()
    after = transfer(spark, config, LATER, transfer_id="next")

    assert after.status == "SUCCESS", after.error
    high = max(r[2] for r in rows if r[1] == TENANT)
    reread = [r for r in rows if r[1] == TENANT and r[2] >= high - LOOKBACK]  # the lookback, read again
    assert (after.rows_transferred, after.delta_rows_transferred) == (len(added) + len(reread), len(added))
    assert delivered(tables) == tenant_rows(rows + added, TENANT)
    assert staged_files(tables) == []
