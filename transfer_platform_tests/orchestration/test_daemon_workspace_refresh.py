"""The daemon's refresh of its code locations, every minute: a code server started beside it
(a ``grpc_server`` entry, deploy/workspace.servers.yaml) that is still the same server is kept as
loaded (its snapshot not fetched and decoded again); one reloaded (as the REST API has the
webserver reload it after a change) is loaded again, with the destinations added since. A real
``dagster code-server start``, Dagster's own workspace of the daemon."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from transfer_platform.orchestration.speed import dagster_fixes
from transfer_platform_tests.support.platform import REPO, write_config
from transfer_platform_tests.support.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

BIN = Path(sys.executable).parent
LOCATION = "transfer_platform"


@pytest.fixture
def code_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """One code server of the shipped definitions, started as deploy/workspace.servers.yaml says;
    its port once it answers."""
    from dagster._grpc.client import DagsterGrpcClient

    config = write_config(tmp_path, destinations={"acme": {}})
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(config))
    monkeypatch.delenv("TRANSFER_PLATFORM_SHARD", raising=False)
    port = free_port()
    log = tmp_path / "code_server.log"
    process = subprocess.Popen(
        [str(BIN / "dagster"), "code-server", "start", "-m", "transfer_platform.definitions", "-a", "defs",
         "-h", "127.0.0.1", "-p", str(port), "--location-name", LOCATION],
        cwd=tmp_path, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while True:
        try:
            DagsterGrpcClient(port=port, host="127.0.0.1").get_server_id(timeout=5)
            break
        except Exception:  # noqa: BLE001 - not serving yet
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"the code server is not serving after 300 s: {log.read_text()[-3000:]}"
            time.sleep(0.5)
    yield port
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def location(context):
    return context.get_current_workspace().code_location_entries[LOCATION].code_location


def transfer_assets(code_location) -> set[str]:
    repository = next(iter(code_location.get_repositories().values()))
    return {"/".join(node.asset_key.path) for node in repository.get_asset_node_snaps()}


def test_an_unchanged_code_server_is_kept_and_a_reloaded_ones_new_destinations_arrive(
        code_server: int, tmp_path: Path) -> None:
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import GrpcServerTarget
    from dagster._grpc.client import DagsterGrpcClient

    dagster_fixes.install_workspace_refresh()  # as the daemon's run coordinator installs it (below)
    assert dagster_fixes.workspace_refresh_installed(), "Dagster's workspace refresh changed: see dagster_fixes"
    target = GrpcServerTarget(host="127.0.0.1", port=code_server, socket=None, location_name=LOCATION)
    with dg.instance_for_test() as instance, WorkspaceProcessContext(instance, target) as context:
        loaded = location(context)
        assert any(key.startswith("acme/acme_delta/") for key in transfer_assets(loaded))

        context.refresh_workspace()  # what the daemon's controller calls every 60 s
        assert location(context) is loaded  # the same server: its snapshot is not fetched again

        # a recipient added, then the code server reloaded (the webserver's reload of a grpc_server
        # location, which the REST API asks for after a change): a new server id
        write_config(tmp_path, destinations={"acme": {}, "globex": {}})
        client = DagsterGrpcClient(port=code_server, host="127.0.0.1")
        client.reload_code(timeout=120)
        deadline = time.monotonic() + 120
        while client.get_server_id(timeout=10) == loaded.server_id:
            assert time.monotonic() < deadline, "the reloaded code server kept its server id"
            time.sleep(0.2)

        context.refresh_workspace()
        reloaded = location(context)
        assert reloaded is not loaded
        assert any(key.startswith("globex/globex_delta/") for key in transfer_assets(reloaded))
        context.refresh_workspace()
        assert location(context) is reloaded  # the new server, kept in turn


def test_a_daemon_whose_instance_has_the_platforms_coordinator_installs_it(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(write_config(tmp_path)))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert "QUEUED_RUN_COORDINATOR" in instance.get_required_daemon_types()  # opens the coordinator
        assert type(instance.run_coordinator).__name__ == "TransferRunCoordinator"
    assert dagster_fixes.workspace_refresh_installed()


def test_the_daemons_workspace_of_code_servers_it_starts_itself_is_refreshed_as_dagster_does(
        tmp_path: Path, monkeypatch) -> None:
    """``python_module`` entries: the daemon restarts those code servers at each refresh (Dagster's
    way of loading changed code there); the patch leaves that alone."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import ModuleTarget

    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(write_config(tmp_path)))
    dagster_fixes.install_workspace_refresh()
    target = ModuleTarget(module_name="transfer_platform.definitions", attribute="defs", working_directory=None,
                          location_name=LOCATION)
    with dg.instance_for_test() as instance, WorkspaceProcessContext(instance, target) as context:
        loaded = location(context)
        context.refresh_workspace()
        assert location(context) is not loaded

