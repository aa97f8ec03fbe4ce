"""The GCS destination's benchmark runs end to end at a tiny size, so that it cannot rot: the
backfill and incremental into fake-gcs-server and into PostgreSQL, each checking the rows it
delivered. Its numbers are never asserted."""

from __future__ import annotations

import json

import pytest

from benchmarks.destination_gcs import main

pytestmark = pytest.mark.integration


def test_the_gcs_benchmark_runs_at_a_tiny_size(tmp_path, spark, capsys):
    out = tmp_path / "results.json"
    assert main(["--rows", "2000", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    for case in ("gcs_backfill", "postgres_backfill", "gcs_incremental", "postgres_incremental"):
        assert results[case]["rows_checked"] is True, case
    assert results["gcs_backfill"]["rows"] == 2000
    assert results["gcs_incremental"]["rows"] == results["postgres_incremental"]["rows"] > 0
    assert "postgres s" in capsys.readouterr().out
