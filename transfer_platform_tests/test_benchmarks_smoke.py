"""The benchmark harness runs end to end at a tiny size, so that it cannot rot: every case
(floor, data path, Dagster end to end, dlt, incremental at N and 2N, per-window overhead,
definitions load). Its numbers are never asserted: speed is shown by the benchmark's printout,
not by tests; only that each case ran and checked the rows it delivered."""

from __future__ import annotations

import json

import pytest

from benchmarks.run import main

pytestmark = pytest.mark.integration

TIMED_CASES = (
    "floor_one_tenant", "floor_all_tenants",
    "platform_data_one_tenant", "platform_data_all_tenants",
    "dagster_one_tenant", "dagster_all_tenants",
    "dlt_one_tenant", "dlt_all_tenants",
    "incremental_n", "per_window",
    "platform_data_one_tenant_10n", "incremental_10n", "incremental_10n_1pct",
)


def test_the_benchmark_runs_every_case_at_a_tiny_size(tmp_path, spark):
    out = tmp_path / "results.json"
    assert main(["--rows", "2000", "--tenants", "2", "--runs", "1", "--scale", "2", "--windows", "5",
                 "--recipients", "5", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    cases = results["cases"]
    for name in TIMED_CASES:
        case = cases[name]
        assert case["rows_checked"] is True, name
        assert case["rows"] > 0, name
        assert {"median_s", "min_s", "max_s", "runs", "peak_memory_gb"} <= case.keys(), name
    assert cases["floor_all_tenants"]["rows"] == 2000
    assert cases["dlt_all_tenants"]["rows"] == 2000
    assert cases["dagster_all_tenants"]["spark_session_reused"] is True
    assert cases["platform_data_one_tenant_10n"]["rows"] == 2 * cases["platform_data_one_tenant"]["rows"]
    assert cases["incremental_10n"]["rows"] == cases["incremental_n"]["rows"]
    assert cases["incremental_10n_1pct"]["rows"] == 2 * cases["incremental_n"]["rows"]
    assert "per_window_s" in cases["per_window"]
    assert cases["definitions_load"]["assets"] == cases["definitions_snapshot"]["assets"] == 50
    assert {t["name"] for t in results["targets"]} >= {
        "platform all-tenant backfill (Dagster) / floor all", "dlt all / platform all-tenant backfill (Dagster)",
        "incremental 10N / N (same changed rows)", "per-window overhead, s (total / windows)",
        "peak memory of the process tree, GB (max over cases)", "definitions load, s"}
    assert set(results["machine"]["versions"]) >= {"pyspark", "dagster", "dlt", "postgresql"}
    assert len(results["machine"]["load_average_after"]) == 3
