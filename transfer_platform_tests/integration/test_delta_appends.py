"""A Delta table that was empty when the transfer began takes appends, not MERGEs, while every
key a window brings is new to it; a window that brings a key again is merged.

From the seeds: each window upserts on the primary key, and "lookback windows may cause the same
data to be written multiple times": a row whose last-modified value falls in the lookback before
a window's start is read by that window and by the one before. Upserting it twice must leave one
row. A MERGE of keys the table cannot hold inserts them all, which an append does at a fraction of
the cost (no join with the table's files); the writer knows the table's keys only while it was
empty when the transfer began, and remembers what it wrote since.

Expectations come from the rows: which windows re-read a row (its last-modified value inside the
window's read bounds, before the window's own start), and the tenant's rows, each once, at the end.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from transfer_platform.destinations.base import writer_for
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform.tuning import DEFAULT, Tuning
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.daily_windows import NOW, OTHERS, TENANT, config_for
from transfer_platform_tests.support.destinations import events_rows
from transfer_platform_tests.support.events import create_events, day, insert_rows, source_rows

pytestmark = pytest.mark.integration

# one row a day on Jan 1st..5th at noon, and one 10 s before Jan 4th: inside the PostgreSQL
# source's 30 s lookback, so the window of Jan 4th reads it again
ROWS = ([(d, TENANT, day(1, d) + timedelta(hours=12), f"row {d}") for d in range(1, 6)]
        + [(30, TENANT, day(1, 4) - timedelta(seconds=10), "late on the 3rd")])


def transfer(spark, config, transfer_id: str, now=NOW, tuning: Tuning = DEFAULT) -> tuple:
    writer = writer_for(config.destination(DESTINATION), tuning)
    outcomes = []
    try:
        (summary,) = run_transfer(
            TransferRequest(spark=spark, config=config, order=TransferOrder(destination=DESTINATION),
                            writer=writer, transfer_id=transfer_id, now=now),
            config.models_for(config.destination(DESTINATION)), on_window=lambda model, o: outcomes.append(o))
    finally:
        writer.close()
    return summary, outcomes


def commits(where) -> list[tuple[str, int]]:
    """(operation, files added) of each commit after the table's creation, oldest first."""
    from deltalake import DeltaTable

    history = reversed(DeltaTable(str(where / "events")).history())
    metrics = [(c["operation"], c.get("operationMetrics") or {}) for c in history]
    return [(op, int(m.get("num_added_files", m.get("num_target_files_added", 0)))) for op, m in metrics
            if op != "CREATE TABLE"]


def test_a_backfill_appends_new_keys_and_merges_a_key_read_again(
        spark, pg_conn, pg_schema, tmp_path) -> None:
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, ROWS + OTHERS)
    where = tmp_path / "dest"
    config = config_for("delta", pg_schema, where)

    summary, outcomes = transfer(spark, config, "backfill")

    assert summary.status == "SUCCESS", summary.error
    late = ROWS[-1][2]
    rereads = [o for o in outcomes if o.planned.bounds.lower <= late < o.planned.bounds.progress.start]
    assert [o.planned.bounds.progress.start for o in rereads] == [day(1, 4)]
    holding = [o for o in outcomes if o.result.rows_transferred]
    assert [o.result.rows_transferred for o in holding] == [1, 1, 2, 2, 1]  # Jan 3rd and 4th: the late row
    expected = ["WRITE" if o is not rereads[0] else "MERGE" for o in holding]
    assert [op for op, added in commits(where) if added] == expected
    assert events_rows("delta", pg_conn, where) == source_rows(pg_conn, pg_schema, TENANT)  # each key once


def test_a_table_holding_rows_is_merged_into(spark, pg_conn, pg_schema, tmp_path) -> None:
    """The second transfer finds rows in the table: a key it brings may be there, so it merges;
    a row changed since the first transfer replaces the delivered one instead of joining it."""
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, ROWS[:3])
    where = tmp_path / "dest"
    config = config_for("delta", pg_schema, where)
    assert transfer(spark, config, "first")[0].status == "SUCCESS"
    first = len(commits(where))
    pg_conn.execute(f"UPDATE {pg_schema}.events SET payload = 'changed', updated_at = %s WHERE id = 1",
                    (NOW + timedelta(hours=1),))

    summary, _ = transfer(spark, config, "second", now=NOW + timedelta(hours=2))

    assert summary.status == "SUCCESS", summary.error
    assert [op for op, added in commits(where)[first:] if added] == ["MERGE"]
    assert events_rows("delta", pg_conn, where) == source_rows(pg_conn, pg_schema, TENANT)


def test_past_the_remembered_keys_every_window_is_merged(
        spark, pg_conn, pg_schema, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, ROWS[:5])
    where = tmp_path / "dest"

    summary, _ = transfer(spark, config_for("delta", pg_schema, where), "backfill",
                          tuning=Tuning(append_keys_max=2))

    assert summary.status == "SUCCESS", summary.error
    # two keys remembered, a third appended (new too), then the writer no longer knows the keys
    assert [op for op, added in commits(where) if added] == ["WRITE", "WRITE", "WRITE", "MERGE", "MERGE"]
    assert events_rows("delta", pg_conn, where) == source_rows(pg_conn, pg_schema, TENANT)
