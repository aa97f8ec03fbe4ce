"""The ClickHouse destination's benchmark runs end to end at a tiny size, so that it cannot rot:
the platform's backfill and incremental into ClickHouse (chDB) and into PostgreSQL, each checking
the rows it delivered. Its numbers are never asserted."""

from __future__ import annotations

import json

import pytest

from benchmarks.destination_clickhouse import main

pytestmark = pytest.mark.integration


def test_the_clickhouse_benchmark_runs_at_a_tiny_size(tmp_path, spark, clickhouse_server, capsys):
    out = tmp_path / "results.json"  # the session's chDB folder: chDB opens one folder per process
    assert main(["--rows", "2000", "--json", str(out), "--chdb-folder", str(clickhouse_server.path)]) == 0
    results = json.loads(out.read_text())
    for case in ("clickhouse_backfill", "postgres_backfill", "clickhouse_incremental", "postgres_incremental"):
        assert results[case]["rows_checked"] is True, case
    assert results["clickhouse_backfill"]["rows"] == 2000
    assert results["clickhouse_incremental"]["rows"] == results["postgres_incremental"]["rows"] > 0
    assert "clickhouse/postgres" in capsys.readouterr().out
