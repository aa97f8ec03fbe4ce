"""The ``GET /transfers`` and enqueue benchmark at a tiny size, so that it cannot rot (no number is asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.api_transfers import main

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]


def test_the_transfers_benchmark_runs_at_a_tiny_size(tmp_path):
    out = tmp_path / "api_transfers.json"
    assert main(["--transfers", "120", "--repeat", "1", "--page-size", "20", "--enqueues", "2", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    cases = results["cases"]
    assert set(cases) == {"first page", "deep page (cursor 90% down)", "status=ERROR", "status=SUCCESS",
                          "include_tags=team.t3"}
    assert cases["first page"]["transfers"] == 20
    assert cases["first page"]["has_next"] is True
    assert cases["status=ERROR"]["transfers"] == 6  # one transfer in 20 is an ERROR
    assert cases["include_tags=team.t3"]["transfers"] == 12
    assert results["floor_ms"] > 0
    enqueue = results["enqueue"]
    assert enqueue["calls"] == 2
    assert 0 < enqueue["median_ms"] <= enqueue["max_ms"]
    assert enqueue["floor_ms"] > 0
    assert enqueue["code_location_loads"] == 1  # loaded by the first request, kept for the others
    assert results["machine"]["uptime_before"]
