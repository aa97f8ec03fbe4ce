"""The seeds' lower bound holds on the Dagster paths too: the ``transfer`` job (what the sensor
launches, and ``--enqueue``) and a Materialize of the partition that holds the watermark.

The lake's source has no lookback (``lookback_window: 0``), so the change-detection seed's rule
is bare: the next transfer starts *at* the most recent value transferred. Rows that commit late
with exactly that value, or a fraction of a second after it, arrive; with the read anchored at
the previous run's clock (the old rule) they did not.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.definitions import build_definitions
from transfer_platform_tests.support.dagster import ITEMS, execute, lake_rows
from transfer_platform_tests.support.platform import TENANTS, delivered, write_config

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]


def commit_late(config_path: Path, rows: list[tuple[int, datetime, str]]) -> None:
    """Rows of acme that commit now with the given last-modified values (a new Parquet file)."""
    folder = config_path.parent / "lake" / "items"
    schema = pq.read_schema(folder / "part-0.parquet")
    table = pa.Table.from_pylist([{"id": key, "organization_id": TENANTS["acme"], "updated_at": when,
                                   "v": text} for key, when, text in rows], schema=schema)
    pq.write_table(table, folder / f"late-{rows[0][0]}.parquet")


def test_late_rows_arrive_through_the_transfer_job_and_a_materialized_partition(tmp_path: Path, spark):
    config_path = write_config(tmp_path)
    with dg.instance_for_test() as instance:
        assert execute(config_path, instance, models=["items"]).success
        last = max(r["updated_at"] for r in lake_rows(config_path, "items"))
        assert last < datetime.now(UTC) - timedelta(hours=1)  # sparse: long before the run's "now"

        # a Materialize of today's partition (the one holding the watermark), as in the UI
        commit_late(config_path, [(9001, last, "late, at the last value"),
                                  (9002, last + timedelta(milliseconds=600), "late, 0.6 s after it")])
        today = datetime.now(UTC).strftime("%Y-%m-%d")
        job = build_definitions(str(config_path)).resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(instance=instance, asset_selection=[ITEMS], partition_key=today,
                                        raise_on_error=False)
        assert result.success
        assert delivered(config_path.parent, "acme", "items") == lake_rows(config_path, "items")

        # the transfer job again, as the sensor launches it
        last = last + timedelta(milliseconds=600)
        commit_late(config_path, [(9003, last, "late, at the new last value"),
                                  (9004, last + timedelta(milliseconds=800), "late, 0.8 s after it")])
        assert execute(config_path, instance, models=["items"]).success
        assert delivered(config_path.parent, "acme", "items") == lake_rows(config_path, "items")
