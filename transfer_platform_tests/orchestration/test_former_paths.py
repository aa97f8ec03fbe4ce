"""A ``dagster.yaml`` written before ``orchestration/`` had its parts names its classes by their
former module paths: the instance still opens with the platform's classes."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from transfer_platform.orchestration import FORMER_PATHS
from transfer_platform.orchestration.instance.sqlite_storage import TransferPlatformInstance
from transfer_platform.orchestration.scheduling.coordinator import TransferRunCoordinator
from transfer_platform.orchestration.speed.compute_logs import FileComputeLogManager
from transfer_platform.orchestration.speed.launcher import PreloadedRunLauncher

ROOT = Path(__file__).resolve().parents[2]
FORMER = {now: former for former, now in FORMER_PATHS.items()}


@pytest.mark.parametrize("shipped", ["dagster.yaml", "deploy/dagster.production.yaml"])
def test_a_dagster_yaml_naming_the_former_paths_opens_the_same_instance(tmp_path: Path, shipped: str) -> None:
    settings = yaml.safe_load((ROOT / shipped).read_text())
    if "postgres" in settings.get("storage", {}):  # the production file's: Dagster's SQLite in the home
        del settings["storage"]
    named = [block for block in settings.values() if isinstance(block, dict) and "module" in block]
    for block in named:
        block["module"] = FORMER[block["module"]]
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(settings))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert isinstance(instance.run_coordinator, TransferRunCoordinator)
        assert isinstance(instance.run_launcher, PreloadedRunLauncher)
        if "compute_logs" in settings:
            assert isinstance(instance.compute_log_manager, FileComputeLogManager)
        if "instance_class" in settings:
            assert isinstance(instance, TransferPlatformInstance)
    assert len(named) == 3  # the coordinator, the launcher, and the instance class or the compute logs
