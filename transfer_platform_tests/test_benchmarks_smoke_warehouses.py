"""The warehouses benchmark runs end to end at a tiny size, so that it cannot rot: the platform's
backfill and 1 % incremental into PostgreSQL and into every warehouse destination it knows (each
on the emulator the tests use), each checking the rows it delivered. Its numbers are never
asserted."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.warehouses import TARGETS, main

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the SFTP target's sshd chroots: it needs root")]


def test_the_warehouses_benchmark_runs_at_a_tiny_size(tmp_path, spark, clickhouse_server, capsys):
    out = tmp_path / "results.json"  # the session's chDB folder: chDB opens one folder per process
    vendors = [v for v in TARGETS if v != "postgres"]
    assert main(["--rows", "2000", "--vendors", ",".join(vendors), "--json", str(out),
                 "--chdb-folder", str(clickhouse_server.path)]) == 0
    results = json.loads(out.read_text())["vendors"]
    assert list(results) == ["postgres", *vendors]
    for vendor, cases in results.items():
        assert cases["backfill"]["rows"] == 2000, vendor
        assert cases["backfill"]["rows_checked"], vendor
        assert cases["incremental_1pct"]["rows_checked"], vendor
        assert cases["incremental_1pct"]["rows"] == results["postgres"]["incremental_1pct"]["rows"] > 0, vendor
        assert set(cases["ratio_to_postgres"]) == {"backfill", "incremental_1pct"}, vendor
    assert all(results[vendor][case]["rows_checked"] for vendor in ("snowflake", "clickhouse")
               for case in ("backfill_again", "backfill_staged_merge"))
    printed = capsys.readouterr().out
    assert all(vendor in printed for vendor in results)
