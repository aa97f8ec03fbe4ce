"""The BigQuery destination's benchmark runs end to end at a tiny size, so that it cannot rot: the
same tenant's backfill and incremental into PostgreSQL and into the BigQuery emulator, each
checking the rows it delivered. Its numbers are never asserted."""

from __future__ import annotations

import json

import pytest

from benchmarks.destination_bigquery import main

pytestmark = pytest.mark.integration


def test_the_bigquery_benchmark_runs_at_a_tiny_size(tmp_path, spark, capsys):
    out = tmp_path / "results.json"
    assert main(["--rows", "1000", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["bigquery_backfill"]["rows"] == results["postgres_backfill"]["rows"] == 1000
    assert results["bigquery_incremental"]["rows"] == results["postgres_incremental"]["rows"] > 0
    assert "bigquery s" in capsys.readouterr().out
