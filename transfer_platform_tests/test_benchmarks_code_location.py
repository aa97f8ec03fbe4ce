"""``benchmarks.code_location`` runs and reports what it measured, whole and by shard."""

from __future__ import annotations

import re

import pytest

from benchmarks.code_location import main

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")


def test_it_times_the_whole_and_each_shard(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRANSFER_PLATFORM_SHARD", raising=False)
    main(["--recipients", "6", "--models", "2"])
    main(["--recipients", "6", "--models", "2", "--shards", "2"])
    lines = [line for line in capsys.readouterr().out.splitlines() if "transfer assets" in line]
    assets = [int(re.search(r"(\d+) transfer assets", line).group(1)) for line in lines]
    assert [line.split()[0] for line in lines] == ["whole", "shard", "shard"]
    assert assets[0] == 12  # 6 destinations x 2 models
    assert assets[1] + assets[2] == 12  # the shards hold every one once
    for line in lines:
        assert re.search(r"snapshot +[\d.]+ / +[\d.]+ \( *[\d.]+ MB\)", line)
        assert "load average" in line
