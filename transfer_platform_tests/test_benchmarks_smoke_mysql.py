"""The MySQL destination's benchmark runs end to end at a tiny size, so that it cannot rot: each
case ran and checked the rows it delivered. Its numbers are never asserted."""

from __future__ import annotations

import json

import pytest

from benchmarks.destination_mysql import main

pytestmark = pytest.mark.integration


def test_the_mysql_destination_benchmark_runs_at_a_tiny_size(tmp_path, spark):
    out = tmp_path / "results.json"
    assert main(["--rows", "2000", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    cases = results["cases"]
    for name in ("backfill", "backfill_staged_merge", "incremental_1pct", "floor_load_data", "staging_load_data",
                 "staging_inserts"):
        assert cases[name]["rows_checked"] is True, name
        assert cases[name]["rows"] > 0, name
    assert cases["backfill"]["rows"] == cases["backfill_staged_merge"]["rows"] == cases["floor_load_data"]["rows"] == 2000
    assert cases["incremental_1pct"]["rows"] == 20
    assert set(results["ratios"]) == {"backfill / floor", "backfill / staged-and-merged backfill",
                                      "staging LOAD DATA / INSERTs"}
