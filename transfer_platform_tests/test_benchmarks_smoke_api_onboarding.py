"""``benchmarks.api_onboarding`` runs at a tiny size (a real API server, a real webserver), so that
it cannot rot. No number is asserted; what it counted is."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.api_onboarding import main

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]


def test_it_onboards_three_recipients_and_sees_their_assets(tmp_path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRANSFER_PLATFORM_SHARD", raising=False)
    out = tmp_path / "api_onboarding.json"
    assert main(["--recipients", "3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    results = json.loads(out.read_text())
    assert results["creates"] == 6  # a recipient and a destination each
    assert 1 <= results["reloads"] <= 6  # coalesced: never more than the changes
    assert results["floor_definitions_assets"] == 3
    assert results["uptime_before"]
    assert results["uptime_after"]
    assert re.search(r"API: 6 creates in [\d.]+ s .* median \d+ ms, p95 \d+ ms", printed)
    assert re.search(r"Dagster: 3 assets visible [\d.]+ s after the last answer", printed)
    assert re.search(r"floor: the same 6 rows inserted into the store's table in one transaction", printed)
