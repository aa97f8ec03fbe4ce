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


@pytest.mark.integration  # starts the webserver, the daemon and code servers
@pytest.mark.parametrize("beside", [False, True], ids=["python_module", "code_servers"])
def test_it_loads_every_shard_in_the_webserver_and_the_daemon(beside: bool, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRANSFER_PLATFORM_SHARD", raising=False)
    main(["--recipients", "6", "--models", "2", "--shards", "2", "--every-shard", "--webserver", "--no-in-process",
          "--daemon", *(["--code-servers", "--idle-seconds", "30"] if beside else [])])
    out = capsys.readouterr().out
    assert len(re.findall(r"code location transfer_platform_shard_\d LOADED", out)) == 2
    loaded = re.search(r"every code location LOADED [\d.]+ s .*CPU s by then: the webserver ([\d.]+), "
                       r"its 2 code server\(s\) ([\d.]+)", out)
    assert loaded, out
    assert float(loaded.group(1)) > 0
    assert float(loaded.group(2)) > 0
    memory = re.search(r"every location's sensor ticked .*resident GB: the webserver and its children ([\d.]+), "
                       r"the daemon and its children ([\d.]+)(?:, the code servers beside them ([\d.]+))?", out)
    assert memory, out
    assert all(float(gb) > 0.05 for gb in memory.groups() if gb is not None)  # each a Python with Dagster loaded
    assert (memory.group(3) is not None) == beside
    ticked = re.search(r"every location's sensor ticked .*the webserver's ([\d.]+), the daemon's ([\d.]+), "
                       r"beside them ([\d.]+)", out)
    assert ticked, out
    owners = [float(x) for x in ticked.groups()]
    # with code servers beside them, the webserver and the daemon start none of their own
    assert (owners[2] > 0 and owners[:2] == [0.0, 0.0]) if beside else (owners[0] > 0 and owners[1] > 0)
    assert re.search(r"asset catalog \(assetNodes\) +13 assets", out)  # 6 x 2 and the source table
    if beside:  # the daemon's CPU seconds in the 30 s after the first ticks
        assert re.search(r"daemon: [\d.]+ CPU s in the 1\. 30 s after the first ticks", out), out
