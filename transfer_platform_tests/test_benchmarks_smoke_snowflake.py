"""The Snowflake destination's benchmark runs end to end at a tiny size, so that it cannot rot:
the backfill and incremental into the emulator and into PostgreSQL, each checking the rows it
delivered. Its numbers are never asserted."""

from __future__ import annotations

import json

import pytest

from benchmarks.destination_snowflake import main

pytestmark = pytest.mark.integration


def test_the_snowflake_benchmark_runs_at_a_tiny_size(tmp_path, spark, capsys):
    out = tmp_path / "results.json"
    assert main(["--rows", "2000", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    for case in ("postgres_backfill", "snowflake_backfill", "postgres_incremental", "snowflake_incremental"):
        assert results[case]["rows_checked"] is True, case
    assert results["snowflake_backfill"]["rows"] == 2000
    assert results["snowflake_incremental"]["rows"] == results["postgres_incremental"]["rows"] > 0
    assert "snowflake s" in capsys.readouterr().out
