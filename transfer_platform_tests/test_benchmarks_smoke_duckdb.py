"""The DuckDB destination's benchmark runs end to end at a tiny size, so that it cannot rot: the
platform's backfill and incremental and the floor's, each checking the rows it delivered. Its
numbers are never asserted."""

from __future__ import annotations

import json

import pytest

from benchmarks.destination_duckdb import main

pytestmark = pytest.mark.integration


def test_the_duckdb_benchmark_runs_at_a_tiny_size(tmp_path, spark, capsys):
    out = tmp_path / "results.json"
    assert main(["--rows", "2000", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    for case in ("floor_backfill", "platform_backfill", "floor_incremental", "platform_incremental"):
        assert results[case]["rows_checked"] is True, case
    assert results["platform_backfill"]["rows"] == 2000
    assert results["platform_incremental"]["rows"] == results["floor_incremental"]["rows"] > 0
    assert {"ratio_backfill", "ratio_incremental"} <= results.keys()
    assert "platform/floor" in capsys.readouterr().out
