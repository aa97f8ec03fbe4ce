"""The SFTP destination's benchmark runs end to end at a tiny size, so that it cannot rot: the
platform's backfill and incremental into a local sshd and into PostgreSQL, each checking the rows
it delivered. Its numbers are never asserted."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.destination_sftp import main

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="sshd with ChrootDirectory needs root")]


def test_the_sftp_benchmark_runs_at_a_tiny_size(tmp_path, spark, capsys):
    out = tmp_path / "results.json"
    assert main(["--rows", "2000", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    for case in ("sftp_backfill", "postgres_backfill", "sftp_incremental", "postgres_incremental"):
        assert results[case]["rows_checked"] is True, case
    assert results["sftp_backfill"]["rows"] == 2000
    assert results["sftp_incremental"]["rows"] == results["postgres_incremental"]["rows"] > 0
    assert "sftp/postgres" in capsys.readouterr().out
