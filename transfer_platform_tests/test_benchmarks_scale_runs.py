"""``benchmarks.scale_runs`` runs and reports each step's wall time beside its CPU seconds, and the
first tick's runs: every new destination's first run at once, or the sensor's spread of them."""

from __future__ import annotations

import re

import pytest

from benchmarks.scale_runs import main
from transfer_platform.orchestration.scheduling import sensors

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
              pytest.mark.filterwarnings("ignore::dagster.PreviewWarning")]


def test_it_reports_cpu_seconds_and_the_first_ticks_runs(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sensors, "FIRST_RUNS_PER_TICK", 2)  # 3 new destinations: spread, 2 at the first tick
    monkeypatch.delenv("TRANSFER_PLATFORM_SHARD", raising=False)
    for name in ("TRANSFER_PLATFORM_CONFIG", "DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB",
                 "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD"):
        monkeypatch.setenv(name, "")  # main sets them; restored after the test
    main(["--recipients", "3", "--models", "1", "--ticks", "2"])
    out = capsys.readouterr().out
    assert re.search(r"definitions [\d.]+ / [\d.]+, snapshot [\d.]+ / [\d.]+", out), out
    tick = re.search(r"first daemon tick: [\d.]+ s, [\d.]+ CPU s .*?, (\d+) runs created .*?"
                     r"[\d.]+ runs per CPU s", out)
    assert tick, out
    assert int(tick.group(1)) == 2
    later = re.search(r"tick 2: daemon tick: [\d.]+ s, [\d.]+ CPU s .*?, (\d+) runs created", out)
    assert later, out
    assert int(later.group(1)) == 1  # the spread's last new destination, at the next tick
    main(["--recipients", "3", "--models", "1", "--all-first-runs-at-once"])
    tick = re.search(r"first daemon tick: .*?, (\d+) runs created", capsys.readouterr().out)
    assert tick
    assert int(tick.group(1)) == 3


def test_against_a_code_server_it_splits_the_ticks_cpu(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """``--code-server --shard``: the tick against a gRPC code server of the shard's location, its
    CPU seconds the daemon's and the code server's; the runs are the shard's destinations' (the
    code server's sensor spreads no first runs below 50 new destinations)."""
    import yaml

    from benchmarks.scale import raw_config
    from transfer_platform.config.loading import load_config
    from transfer_platform.config.shards import parse_shard, shard_config

    monkeypatch.delenv("TRANSFER_PLATFORM_SHARD", raising=False)
    for name in ("TRANSFER_PLATFORM_CONFIG", "DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB",
                 "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD"):
        monkeypatch.setenv(name, "")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw_config(6, 1)))
    expected = len(shard_config(load_config(config), parse_shard("1/2")).destinations)
    assert 0 < expected < 6
    main(["--recipients", "6", "--models", "1", "--code-server", "--shard", "1/2"])
    out = capsys.readouterr().out
    tick = re.search(r"first daemon tick: [\d.]+ s, [\d.]+ CPU s in the daemon, [\d.]+ in the code server; "
                     r"(\d+) runs created .*?[\d.]+ runs per CPU s of the daemon", out)
    assert tick, out
    assert int(tick.group(1)) == expected
