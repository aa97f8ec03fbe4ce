"""Each part of the speed kit on a Dagster lacking one of its fenced names: it loads, falls back to
Dagster's own behaviour with ONE warning naming the missing name and what is lost, and a run still
completes, through Dagster's own path, on a real instance.

The missing name is simulated at the fence itself (``support/fence.py``: ``Fenced._resolve``, where
every check and every use looks a private name up, finds nothing for the names given), as a Dagster
without them would: that tests our fallbacks, not Dagster. The compute-log manager's fallback is in
``test_compute_logs.py``.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import ModuleTarget
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.scheduling.run_tags import model_key
from transfer_platform.orchestration.speed import compute_logs, dagster_fixes, dagster_internals
from transfer_platform.orchestration.speed.dagster_internals import (
    FENCED,
    LOST,
    PARTS,
    QUEUE_CONFIG,
    QUEUE_PASS,
    UnprovenDagsterWarning,
)
from transfer_platform.orchestration.speed.run_worker import WORKER_TAG
from transfer_platform_tests.support.dagster import CONFIG_ENV, launch
from transfer_platform_tests.support.fence import fallbacks, hide
from transfer_platform_tests.support.platform import dagster_home, write_config

PATIENCE = float(os.environ.get("TP_TEST_PATIENCE", "4"))


@pytest.mark.parametrize("part", sorted(PARTS))
def test_each_part_warns_once_naming_the_missing_name_and_what_is_lost(part: str, monkeypatch) -> None:
    gone = next(f for f in FENCED if part in f.parts)
    hide(monkeypatch, gone)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        first = dagster_internals.fallback(part)
        assert dagster_internals.fallback(part) == first  # asked again: no second warning
    (message,) = fallbacks(record)
    assert message == first
    assert f"lacks {gone.path}, used for {gone.use}" in message
    assert message.endswith(f"Lost: {LOST[part]}")


def test_every_part_says_what_it_loses() -> None:
    assert set(LOST) == set(PARTS)


# -- the fixes --------------------------------------------------------------------------------------

def test_a_fix_whose_target_is_gone_is_not_installed_and_says_so(monkeypatch) -> None:
    hide(monkeypatch, dagster_internals.ORPHAN_CHECK)
    monkeypatch.setattr(dagster_fixes, "_looked", set())
    with pytest.warns(UnprovenDagsterWarning, match=re.escape(LOST['dev_stop'])):
        dagster_fixes.install_dev_stop()
    assert not dagster_fixes.dev_stop_installed()


def test_without_a_code_servers_id_the_daemon_refreshes_its_workspace_as_dagster_does(monkeypatch) -> None:
    installed = WorkspaceProcessContext.refresh_workspace  # Dagster's, wrapped if a test installed the skip
    monkeypatch.setattr(WorkspaceProcessContext, "refresh_workspace", getattr(installed, "__wrapped__", installed))
    hide(monkeypatch, dagster_internals.GRPC_CLIENT)
    monkeypatch.setattr(dagster_fixes, "_looked", set())
    with pytest.warns(UnprovenDagsterWarning, match=re.escape(LOST["workspace_refresh"])):
        dagster_fixes.install_workspace_refresh()
    assert not dagster_fixes.workspace_refresh_installed()


def test_the_sensors_repairs_are_off_without_the_check_statuses(monkeypatch) -> None:
    hide(monkeypatch, dagster_internals.CHECK_STATUS)

    class Record:  # a finished evaluation, as the event log storage returns it
        status = "SUCCEEDED"

    with pytest.warns(UnprovenDagsterWarning, match=re.escape(LOST['repair'])):
        assert dagster_internals.check_ended(Record()) is False


def test_without_the_asset_listing_the_definitions_load_without_the_transfer_assets_job(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    hide(monkeypatch, dagster_internals.ASSETS_LISTED_BY)
    with pytest.warns(UnprovenDagsterWarning, match=re.escape(LOST["asset_automation"])):
        defs = build_definitions(str(write_config(tmp_path)))
    repository = defs.get_repository_def()
    assert not repository.has_job("transfer_assets")
    sensor = repository.get_sensor_def("transfer_schedule")
    assert sorted(job.name for job in sensor.jobs) == ["delete_sweep", "integrity", "transfer"]


# -- the daemon's side: coordinator, dequeue interval, queue pass, launcher, run worker ---------------

RECORDING = '''
import dagster as dg

@dg.op
def hello(context):
    print("hello from", context.run_id)

@dg.job(executor_def=dg.in_process_executor)
def recording():
    hello()

defs = dg.Definitions(jobs=[recording])
'''


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The shipped ``dagster.yaml`` (coordinator, launcher) with the production compute logs, a
    rule of its own, and a code location of its own (a package under ``tmp_path``)."""
    monkeypatch.setenv(CONFIG_ENV, str(write_config(tmp_path)))
    package = tmp_path / "tp_fallback_location"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "defs.py").write_text(textwrap.dedent(RECORDING))
    home = dagster_home(tmp_path)
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    settings["run_coordinator"]["config"]["tag_concurrency_limits"] = [{"key": "mine", "limit": 1}]
    settings["compute_logs"] = {"module": compute_logs.__name__, "class": "FileComputeLogManager",
                                "config": {"base_dir": str(tmp_path / "logs")}}
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    return home


@pytest.mark.integration
def test_the_daemons_parts_fall_back_and_a_run_completes_by_dagsters_path(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, QUEUE_CONFIG, QUEUE_PASS, dagster_internals.EXECUTE_RUN)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        instance = dg.DagsterInstance.from_config(str(home))
        coordinator, launcher = instance.run_coordinator, instance.run_launcher
        instance.compute_log_manager  # noqa: B018 - loads (its own names are all there)
        interval = coordinator.dequeue_interval_seconds  # what the daemon reads, making its queue daemon
    said = fallbacks(record)
    for part, gone in (("coordinator", QUEUE_CONFIG), ("run_worker", dagster_internals.EXECUTE_RUN),
                       ("queue_wake", QUEUE_PASS)):
        (message,) = [m for m in said if PARTS[part] in m]
        assert gone.path in message
        assert LOST[part] in message
    assert len(said) == 3, said
    # Dagster's QueuedRunCoordinator: dagster.yaml's rule and the configuration's, through its own config
    assert coordinator.dagsters_own
    assert launcher.fork_refusal
    keys = [rule["key"] for rule in coordinator.get_run_queue_config().tag_concurrency_limits]
    assert keys[0] == "mine"
    assert model_key("items") in keys
    assert interval == 0.5  # the coordinator's own fraction; the queue pass is Dagster's (no wake-up)

    target = ModuleTarget(module_name="tp_fallback_location.defs", attribute=None,
                          working_directory=str(tmp_path), location_name="fallback")
    with instance, WorkspaceProcessContext(instance, target) as context:
        run = launch(instance, context, "recording")
        assert run.status == dg.DagsterRunStatus.QUEUED
        list(QueuedRunCoordinatorDaemon(interval_seconds=1).run_iteration(context))
        deadline = time.monotonic() + 60 * PATIENCE
        while not (run := instance.get_run_by_id(run.run_id)).is_finished:
            assert time.monotonic() < deadline, f"run {run.run_id} still {run.status}"
            time.sleep(0.1)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        assert WORKER_TAG not in run.tags  # not forked: Dagster's code server started it
        assert len(fallbacks(record)) == 3  # nothing more was said while the run went through


def test_a_configuration_that_does_not_load_holds_the_queue(tmp_path: Path, home: Path, monkeypatch) -> None:
    hide(monkeypatch, QUEUE_CONFIG)
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "missing.yaml"))
    with pytest.warns(UnprovenDagsterWarning) as record, dg.DagsterInstance.from_config(str(home)) as instance:
        config = instance.run_coordinator.get_run_queue_config()
    assert config.max_concurrent_runs == 0
    assert any("no queued run starts" in str(w.message) for w in record)
    assert sys.modules["transfer_platform.orchestration.scheduling.coordinator"]  # loaded, not refused
