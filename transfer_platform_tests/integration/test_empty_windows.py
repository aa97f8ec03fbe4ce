"""An empty window costs no Spark job and no staging, and still commits and reports on its own.

From the seeds: a model's ``max_transfer_time_window_seconds`` is the largest increment a commit
may cover, so a backfill of a sparse tenant is many windows, most of them empty; each still moves
the watermark on by itself (a failure later resumes after the last one). The source is asked once
per batch of windows how many of the tenant's rows each holds (PostgreSQL: a bounded ``COUNT``
per window in one query, no Spark); only those holding rows are read by Spark.

The expectation of which windows hold rows comes from the rows themselves: a window holds a row
when one of the tenant's rows has its last-modified value inside the window's read bounds (or is
NULL: then every window reads it and the transfer refuses it).
"""

from __future__ import annotations

import pytest

from transfer_platform.sources.direct import DirectReads
from transfer_platform.sources.jdbc import JdbcReader
from transfer_platform_tests.support.config import DESTINATION
from transfer_platform_tests.support.destinations import WITHOUT_S3, events_rows
from transfer_platform_tests.support.events import (
    create_events,
    insert_rows,
    source_rows,
)
from transfer_platform_tests.support.postgres import status_row
from transfer_platform_tests.support.sparse_tenant import NOW, OTHERS, ROWS, TENANT, config_for
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

# the other tenant's rows fill other days: they must not make the recipient's windows read


@pytest.fixture
def read_windows(monkeypatch: pytest.MonkeyPatch) -> list:
    """The bounds of every read Spark or the database's driver was given, alone or with other
    windows (the real reads run)."""
    reads = []
    real, together, direct = JdbcReader.read, JdbcReader.read_together, DirectReads.read_together
    stream = DirectReads.copy_out

    def recording(self, spark, request):
        reads.append((request.bounds.lower, request.bounds.upper))
        return real(self, spark, request)

    def recording_together(self, spark, requests):
        reads.extend((request.bounds.lower, request.bounds.upper) for request in requests)
        return together(self, spark, requests)

    def recording_direct(self, requests, schema, up_to=None):
        reads.extend((request.bounds.lower, request.bounds.upper) for request in requests)
        return direct(self, requests, schema, up_to)

    def recording_stream(self, request, types):
        reads.append((request.bounds.lower, request.bounds.upper))
        return stream(self, request, types)

    monkeypatch.setattr(JdbcReader, "read", recording)
    monkeypatch.setattr(JdbcReader, "read_together", recording_together)
    monkeypatch.setattr(DirectReads, "read_together", recording_direct)
    monkeypatch.setattr(DirectReads, "copy_out", recording_stream)
    return reads


@pytest.mark.parametrize("vendor", WITHOUT_S3)
def test_only_windows_holding_the_tenants_rows_are_read_and_every_window_commits(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, monkeypatch, read_windows, vendor) -> None:
    from transfer_platform.destinations.manifests import new_signing_key

    monkeypatch.setenv("TP_TEST_SIGNING_KEY", new_signing_key()[0])
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, ROWS + OTHERS)
    where = dst_schema if vendor == "postgres" else tmp_path / "dest"
    config = config_for(vendor, pg_schema, where)
    outcomes = []
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.transfers.order import TransferOrder
    from transfer_platform.transfers.runner import TransferRequest, run_transfer

    writer = writer_for(config.destination(DESTINATION))
    staged = []  # the windows Spark read, staged or into this process (the real writes run)
    write_window, write_arrow = writer.write_window, writer.write_arrow

    def recording(write):
        def write_read_window(batch, load):
            staged.append(load.progress)
            return write(batch, load)
        return write_read_window

    writer.write_window, writer.write_arrow = recording(write_window), recording(write_arrow)
    if hasattr(writer, "write_streamed"):  # a window read alone, streamed by this process
        writer.write_streamed = recording(writer.write_streamed)
    try:
        (summary,) = run_transfer(
            TransferRequest(spark=spark, config=config, order=TransferOrder(destination=DESTINATION),
                            writer=writer, transfer_id="t1", now=NOW), config.models_for(config.destination(DESTINATION)),
            on_window=lambda model, outcome: outcomes.append(outcome))
    finally:
        writer.close()

    assert summary.status == "SUCCESS", summary.error
    assert summary.windows == len(outcomes) == 61  # every window committed and reported
    ends = [o.planned.bounds.progress.end for o in outcomes]
    assert ends == sorted(ends)
    assert [o.result.state.watermark for o in outcomes] == ends  # each moved the watermark on itself
    holding = [o for o in outcomes if any(o.planned.bounds.lower <= r[2] < o.planned.bounds.upper for r in ROWS)]
    assert len(holding) == 3  # Jan 3, Feb 10, Mar 1
    assert staged == [o.planned.bounds.progress for o in holding]  # Spark read and staged those, nothing else
    # the read was proven before anything was written (check_read: columns and types, no row);
    # then only the three windows' frames were made
    assert read_windows == [(o.planned.bounds.lower, o.planned.bounds.upper) for o in holding]
    assert sum(o.result.rows_transferred for o in outcomes) == len(ROWS)
    expected = source_rows(pg_conn, pg_schema, TENANT)
    assert events_rows(vendor, pg_conn, where) == expected
    assert summary.state.watermark == NOW
    assert summary.state.high_watermark == max(r[2] for r in ROWS)
    if vendor == "postgres":
        assert status_row(pg_conn, dst_schema)["watermark"] == NOW


def test_a_null_last_modified_value_makes_every_window_read_and_is_refused(
        spark, pg_conn, pg_schema, dst_schema, read_windows) -> None:
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, [*ROWS, (9, TENANT, None, "no last-modified value")])
    summary = transfer(spark, config_for("postgres", pg_schema, dst_schema), NOW)
    assert summary.status == "ERROR"
    assert "NULL" in summary.error
    assert read_windows  # the first window read it (it holds the NULL row) and refused it
    assert status_row(pg_conn, dst_schema) is None or status_row(pg_conn, dst_schema)["watermark"] is None
