"""The benchmark harness runs end to end at a tiny size, so that it cannot rot. Its numbers are
never asserted: speed is shown by the benchmark's printout, not by tests."""

from __future__ import annotations

import json

import pytest

from benchmarks.run import main

pytestmark = pytest.mark.integration


def test_the_benchmark_runs_at_a_tiny_size(tmp_path, spark):
    out = tmp_path / "results.json"
    assert main(["--rows", "2000", "--tenants", "2", "--runs", "1", "--windows", "5",
                 "--recipients", "5", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    for key in ("floor_one_tenant", "platform_one_tenant", "platform_all_tenants",
                "incremental_1pct_one_tenant", "per_window_overhead_s", "peak_memory_gb",
                "definitions_load_s"):
        assert key in results
    assert results["definitions_assets"] == 50
