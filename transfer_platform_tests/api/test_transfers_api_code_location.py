"""The code location the API creates runs from: loaded by the first transfer request, kept for the
next ones, loaded again when the configuration file changes or its code server stops; a location
that cannot be loaded is 503 naming the workspace and the fix, and enqueues nothing."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.config.parsing import ENV_VAR
from transfer_platform.orchestration.runs.transfers import enqueue
from transfer_platform.orchestration.runs.workspaces import WORKSPACE_ENV, OpenWorkspaces
from transfer_platform.orchestration.scheduling.run_tags import (
    DESTINATION_TAG,
    KIND_TAG,
    MODELS_TAG,
)
from transfer_platform.transfers.order import TransferOrder
from transfer_platform_tests.support.api import Api
from transfer_platform_tests.support.daemon import processes_with_home, start_code_server
from transfer_platform_tests.support.platform import dagster_home, write_config

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]

BODY = {"models": ["items"], "is_debug_mode": True}


def queued(transfer_id: str) -> dg.DagsterRun:
    with dg.DagsterInstance.get() as instance:
        run = instance.get_run_by_id(transfer_id)
    assert run is not None
    assert run.status == dg.DagsterRunStatus.QUEUED
    return run


def code_servers(home: Path) -> list[int]:
    return processes_with_home(home, b"transfer_platform.definitions")


def wait_until(what: str, done, seconds: float = 60) -> None:  # done: () -> bool
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.1)


def run_count() -> int:
    with dg.DagsterInstance.get() as instance:
        return len(instance.get_run_records())


def test_requests_share_one_code_location_until_the_configuration_file_changes_or_its_server_stops(
        platform_api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    # the API's configuration is the one it was started with: not read from the environment, by
    # the code server it starts nor by the run coordinator placing the runs under its limits
    monkeypatch.delenv("TRANSFER_PLATFORM_CONFIG")
    monkeypatch.chdir(platform_api.config_path.parent.parent)  # no ./transfer_platform.yaml here
    for destination in ("acme_delta", "globex_delta", "acme_delta"):
        answer = platform_api.post(f"/destinations/{destination}/transfer", BODY)
        assert answer.status_code == 201, answer.text
        run = queued(answer.json()["data"]["transfer_id"])
        assert (run.tags[KIND_TAG], run.tags[DESTINATION_TAG], run.tags[MODELS_TAG]) == (
            "transfer", destination, "items")
    integrity = platform_api.post("/destinations/globex_delta/integrity-checks")
    assert integrity.status_code == 201, integrity.text
    workspaces = platform_api.app.state.workspaces
    assert workspaces.loads == 1

    changed = platform_api.config_path.stat().st_mtime_ns + 1_000_000_000
    os.utime(platform_api.config_path, ns=(changed, changed))  # the file changed: loaded again
    assert platform_api.post("/destinations/acme_delta/transfer", BODY).status_code == 201
    assert workspaces.loads == 2

    home = Path(os.environ["DAGSTER_HOME"])
    wait_until("the replaced code server stops", lambda: len(code_servers(home)) == 1)
    (server,) = code_servers(home)  # the one it keeps
    os.kill(server, signal.SIGKILL)
    wait_until("the killed code server goes", lambda: not code_servers(home))
    answer = platform_api.post("/destinations/acme_delta/transfer", BODY)
    assert answer.status_code == 201, answer.text  # loaded again, once, and the run made from it
    queued(answer.json()["data"]["transfer_id"])
    assert workspaces.loads == 3


def test_a_code_location_that_cannot_be_reached_is_503_with_the_fix_and_enqueues_nothing(
        platform_api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    socket = tmp_path / "code_server.sock"
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
        "socket": str(socket), "location_name": "transfer_platform"}}]}))
    monkeypatch.setenv(WORKSPACE_ENV, str(workspace))

    def refused() -> None:
        answer = platform_api.post("/destinations/acme_delta/transfer", BODY)
        assert answer.status_code == 503, answer.text
        message = answer.json()["message"]
        assert message.startswith(f"cannot reach the code location of {workspace}: "), message
        assert "Fix: start its code server again" in message
        assert run_count() == 0

    refused()  # nothing serves there
    server = start_code_server(socket, dict(os.environ), tmp_path / "code_server.log")
    try:
        answer = platform_api.post("/destinations/acme_delta/transfer", BODY)  # a failed load is not kept
        assert answer.status_code == 201, answer.text
        queued(answer.json()["data"]["transfer_id"])
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    socket.unlink(missing_ok=True)
    before = run_count()
    answer = platform_api.post("/destinations/acme_delta/transfer", BODY)  # the kept location's server is gone
    assert answer.status_code == 503, answer.text
    assert "cannot reach the code location of" in answer.json()["message"]
    assert run_count() == before


def test_enqueues_of_two_configurations_load_at_once_each_in_its_own_code_server_and_leave_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The configuration file reaches the code server started for it in that server's environment,
    never through this process's (which every thread shares)."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv(WORKSPACE_ENV, raising=False)  # the repository's workspace.yaml: a python_module entry
    home = dagster_home(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    configs = {f"{name}_delta": write_config(tmp_path / name, destinations={name: {}}) for name in ("acme", "globex")}
    before = dict(os.environ)
    seen: set[str | None] = set()
    done = threading.Event()

    def watch() -> None:  # the variable as every other thread of the process sees it meanwhile
        while not done.is_set():
            seen.add(os.environ.get(ENV_VAR))
            done.wait(0.002)

    def enqueue_one(destination: str) -> str:
        path = configs[destination]
        return enqueue(instance, load_config(path), path, TransferOrder(destination=destination, dry_run=True),
                       workspaces=workspaces)

    watcher = threading.Thread(target=watch)
    with dg.DagsterInstance.get() as instance, OpenWorkspaces(instance) as workspaces:
        watcher.start()
        try:
            with ThreadPoolExecutor(2) as pool:
                transfer_ids = dict(zip(configs, pool.map(enqueue_one, configs), strict=True))
        finally:
            done.set()
            watcher.join()
        assert workspaces.loads == 2
        servers = code_servers(home)
        environments = [dict(line.split(b"=", 1) for line in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                             if b"=" in line) for pid in servers]
        assert sorted(e.get(ENV_VAR.encode()) for e in environments) == sorted(str(p).encode() for p in configs.values())
        for destination, transfer_id in transfer_ids.items():
            assert queued(transfer_id).tags[DESTINATION_TAG] == destination
    assert seen == {None}
    assert dict(os.environ) == before
    wait_until("the code servers stop", lambda: not code_servers(home))
