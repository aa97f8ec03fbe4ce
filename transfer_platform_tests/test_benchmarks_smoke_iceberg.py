"""The Iceberg benchmark runs end to end at a tiny size, so that it cannot rot; its numbers are
never asserted, only that each case ran and checked what it delivered."""

from __future__ import annotations

import json

import pytest

from benchmarks.destination_iceberg import main

pytestmark = pytest.mark.integration


def test_the_iceberg_benchmark_runs_at_a_tiny_size(tmp_path, spark):
    out = tmp_path / "results.json"
    assert main(["--rows", "2000", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["rows"] == 2000
    assert results["changed_rows"] == 20
    assert {"platform_backfill_s", "platform_incremental_s", "floor_backfill_s", "floor_incremental_table_upsert_s",
            "floor_incremental_own_merge_s", "backfill_ratio", "incremental_ratio"} <= results.keys()
