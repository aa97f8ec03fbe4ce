"""The daemons the shipped instance files run: the ones the platform needs (the sensor, the run
queue, backfills) and not Dagster's freshness daemon, which the transfer assets give nothing to do
(none declares a freshness policy) and which, on, writes one event per asset on its first pass and
reads every asset's freshness state every 30 s (docs/operations.md, "Sizing"). A real Dagster
instance and the real definitions."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from transfer_platform.definitions import build_definitions
from transfer_platform_tests.support.platform import REPO, write_config

pytestmark = [pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]


@pytest.mark.parametrize("file", ["dagster.yaml", "deploy/dagster.production.yaml"])
def test_the_shipped_instance_files_run_the_platforms_daemons_and_not_the_freshness_daemon(
        tmp_path: Path, monkeypatch, file: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / file, home / "dagster.yaml")
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    settings.pop("storage", None)  # the daemons are what is checked here, not PostgreSQL
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(write_config(tmp_path)))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        daemons = set(instance.get_required_daemon_types())
    assert {"SENSOR", "QUEUED_RUN_COORDINATOR", "BACKFILL"} <= daemons
    assert "FRESHNESS_DAEMON" not in daemons


def test_no_asset_of_the_platform_declares_a_freshness_policy(tmp_path: Path) -> None:
    """What the freshness daemon would evaluate: nothing (every node NOT_APPLICABLE to it)."""
    graph = build_definitions(str(write_config(tmp_path))).resolve_asset_graph()
    nodes = list(graph.asset_nodes)
    assert any(node.key.path[-1] == "items" for node in nodes)  # the transfer assets are there
    assert [node.key for node in nodes if node.freshness_policy_or_from_metadata is not None] == []
