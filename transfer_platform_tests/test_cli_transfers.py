"""``transfer-platform transfer --enqueue``, ``transfers`` and ``cancel`` end to end.

A Dagster home with the shipped ``dagster.yaml`` ($DAGSTER_HOME), the small platform's
configuration ($TRANSFER_PLATFORM_CONFIG); ``transfer --enqueue`` launches through a code server
started from ``workspace.yaml`` (about 10 s) into the instance's queue. Nothing dequeues, so the
transfer stays PENDING until cancelled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance

from transfer_platform.cli import main
from transfer_platform.config.shards import shard_of
from transfer_platform.orchestration.runs.transfers import WORKSPACE_ENV
from transfer_platform_tests.support.platform import dagster_home, write_config
from transfer_platform_tests.support.processes import free_port

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")
BIN = Path(sys.executable).parent


@pytest.fixture
def platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = write_config(tmp_path, destinations={"acme": {}, "globex": {}})
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(path))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home(tmp_path)))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def listed(capsys: pytest.CaptureFixture[str], *filters: str) -> list[dict]:
    code, out, err = run_cli(capsys, "transfers", "--json", *filters)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.integration  # starts a Dagster code server to launch the run
def test_enqueue_list_filter_and_cancel(platform: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "transfer", "acme_delta", "--enqueue", "--tag", "team=data",
                             "--model", "items", "--start", "2025-01-01", "--end", "2025-01-02T00:00:00Z")
    assert code == 0, err
    transfer_id = out.strip()
    assert str(uuid.UUID(transfer_id)) == transfer_id  # only the id on stdout

    (transfer,) = listed(capsys)
    assert transfer["id"] == transfer_id
    assert transfer["status"] == "PENDING"
    assert transfer["destination"] == "acme_delta"
    assert transfer["tags"] == {"team": "data"}
    assert transfer["started_at"] is None
    assert transfer["submitted_at"] is not None
    assert (transfer["start_transfer_window_at"], transfer["end_transfer_window_at"]) == (
        "2025-01-01T00:00:00+00:00", "2025-01-02T00:00:00+00:00")

    ids = lambda *filters: [t["id"] for t in listed(capsys, *filters)]  # noqa: E731
    assert ids("--destination", "acme_delta") == [transfer_id]
    assert ids("--destination", "globex_delta") == []
    assert ids("--status", "PENDING") == [transfer_id]
    assert ids("--status", "SUCCESS") == []
    assert ids("--tag", "team.data") == [transfer_id]
    assert ids("--tag", "team.other") == []
    assert ids("--tag", "owner.data") == []
    assert ids("--ended-after", "2000-01-01") == []  # not ended yet

    code, out, err = run_cli(capsys, "cancel", transfer_id)
    assert (code, out.strip()) == (0, f"{transfer_id}: CANCELLED"), err
    (cancelled,) = listed(capsys)
    assert cancelled["status"] == "CANCELLED"
    assert cancelled["ended_at"] is not None
    assert ids("--status", "CANCELLED") == [transfer_id]
    assert ids("--status", "PENDING") == []
    assert ids("--ended-after", "2000-01-01") == [transfer_id]
    assert ids("--ended-before", "2000-01-01") == []

    code, out, _ = run_cli(capsys, "transfers")  # the table
    assert code == 0
    assert transfer_id in out
    assert "CANCELLED" in out
    assert "team=data" in out


def test_cancel_of_an_unknown_transfer_says_so(platform: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "cancel", "not-a-transfer")
    assert code == 1
    assert "no transfer with id 'not-a-transfer'" in err


def test_enqueue_refuses_a_model_the_destination_does_not_receive(
        platform: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "transfer", "acme_delta", "--enqueue", "--model", "nope")
    assert (code, out) == (2, "")
    assert "does not receive model(s) ['nope']" in err
    assert listed(capsys) == []


@pytest.mark.parametrize(("argv", "message"), [
    (["transfer", "acme_delta", "--enqueue", "--tag", "bad tag=x"], "'bad tag=x' must be key=value"),
    (["transfer", "acme_delta", "--enqueue", "--tag", "team="], "^[A-Za-z0-9_-]+$"),
    (["transfers", "--tag", "team"], "'team': filter tags as key.value"),
    (["transfers", "--tag", "te am.data"], "must be key=value"),
    (["transfers", "--status", "DONE"], "invalid choice: 'DONE'"),
    (["transfers", "--ended-after", "yesterday"], "is not an ISO-8601 time"),
], ids=["space-in-key", "empty-value", "filter-without-dot", "bad-filter", "unknown-status", "bad-time"])
def test_bad_arguments_exit_2_with_a_message(platform: Path, capsys: pytest.CaptureFixture[str],
                                             argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["transfers"], ["cancel", "x"], ["transfer", "acme_delta", "--enqueue"]],
                         ids=["transfers", "cancel", "enqueue"])
def test_queue_commands_without_dagster_home_say_how_to_set_it(
        platform: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        argv: list[str]) -> None:
    monkeypatch.delenv("DAGSTER_HOME")
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert "DAGSTER_HOME is not set" in err
    assert "export DAGSTER_HOME=" in err


def sharded_workspace(path: Path, count: int, *, attribute: str = "defs_shard_{i}_of_{n}") -> Path:
    """A workspace of ``count`` code locations ``tp_<i>``, as deploy/workspace.sharded.yaml."""
    path.write_text(yaml.safe_dump({"load_from": [
        {"python_module": {"module_name": "transfer_platform.definitions", "location_name": f"tp_{i}",
                           "attribute": attribute.format(i=i, n=count)}} for i in range(count)]}))
    return path


@pytest.mark.integration  # starts a Dagster code server to launch each run
def test_enqueue_with_a_sharded_workspace_makes_the_run_in_the_location_of_its_recipient(
        platform: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    count = next(n for n in range(2, 9) if shard_of("acme", n) != shard_of("globex", n))
    monkeypatch.setenv(WORKSPACE_ENV, str(sharded_workspace(tmp_path / "workspace.yaml", count)))
    with DagsterInstance.get() as instance:
        for recipient in ("acme", "globex"):
            code, out, err = run_cli(capsys, "transfer", f"{recipient}_delta", "--enqueue")
            assert code == 0, err
            run = instance.get_run_by_id(out.strip())
            assert run.remote_job_origin.location_name == f"tp_{shard_of(recipient, count)}"
            assert run.tags["transfer_platform/destination"] == f"{recipient}_delta"


def test_enqueue_with_locations_it_cannot_tell_apart_says_how_to_choose(
        platform: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(WORKSPACE_ENV, str(sharded_workspace(tmp_path / "workspace.yaml", 2, attribute="defs")))
    code, out, err = run_cli(capsys, "transfer", "acme_delta", "--enqueue")
    assert code == 2
    assert out == ""
    assert "recipient 'acme' is held by 2 of its code locations" in err
    assert f"set ${WORKSPACE_ENV} to a workspace of the location that holds recipient 'acme'" in err


@pytest.fixture
def code_servers(platform: Path, tmp_path: Path):
    """Code servers started as deploy/workspace.servers.yaml says (``dagster code-server start``
    with a shard attribute, then ``dagster api grpc-health-check`` until each answers): a function
    of the shard count returning the workspace of their ``grpc_server`` entries."""
    started: list[subprocess.Popen] = []
    DagsterInstance.get().dispose()  # its storage made before the servers that open it start

    def start(count: int) -> Path:
        ports = [free_port() for _ in range(count)]
        for i, port in enumerate(ports):
            started.append(subprocess.Popen(
                [str(BIN / "dagster"), "code-server", "start", "-m", "transfer_platform.definitions",
                 "-a", f"defs_shard_{i}_of_{count}", "-h", "127.0.0.1", "-p", str(port), "--location-name", f"tp_{i}"],
                cwd=tmp_path, stdout=(tmp_path / f"code_server_{i}.log").open("w"), stderr=subprocess.STDOUT,
                start_new_session=True))
        deadline = time.monotonic() + 300
        for i, port in enumerate(ports):
            while subprocess.run([str(BIN / "dagster"), "api", "grpc-health-check", "-h", "127.0.0.1", "-p", str(port)],
                                 capture_output=True).returncode != 0:
                assert started[i].poll() is None, (tmp_path / f"code_server_{i}.log").read_text()[-3000:]
                assert time.monotonic() < deadline, f"code server {i} not serving after 300 s"
                time.sleep(0.5)
        workspace = tmp_path / "workspace.servers.yaml"
        workspace.write_text(yaml.safe_dump({"load_from": [
            {"grpc_server": {"host": "127.0.0.1", "port": port, "location_name": f"tp_{i}"}}
            for i, port in enumerate(ports)]}))
        return workspace

    yield start
    for process in started:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.mark.integration  # starts Dagster code servers
def test_enqueue_with_code_servers_beside_the_webserver_makes_the_run_in_its_recipients_shard(
        platform: Path, code_servers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    count = next(n for n in range(2, 9) if shard_of("acme", n) != shard_of("globex", n))
    workspace = code_servers(count)
    monkeypatch.setenv(WORKSPACE_ENV, str(workspace))
    with DagsterInstance.get() as instance:
        for recipient in ("acme", "globex"):
            code, out, err = run_cli(capsys, "transfer", f"{recipient}_delta", "--enqueue")
            assert code == 0, err
            run = instance.get_run_by_id(out.strip())
            shard = shard_of(recipient, count)
            assert run.remote_job_origin.location_name == f"tp_{shard}"
            # the shard travels with the run: its worker builds that shard's definitions only
            assert run.job_code_origin.repository_origin.code_pointer.fn_name == f"defs_shard_{shard}_of_{count}"

    # a code server that stopped is named, with its address and the fix; nothing is enqueued
    entries = yaml.safe_load(workspace.read_text())
    entries["load_from"][1]["grpc_server"]["port"] = free_port()  # nothing listens there
    workspace.write_text(yaml.safe_dump(entries))
    code, out, err = run_cli(capsys, "transfer", "acme_delta", "--enqueue")
    assert (code, out) == (1, ""), err  # 1: a failure worth retrying once it is started
    assert "cannot reach the code server of location 'tp_1'" in err
    assert f"127.0.0.1:{entries['load_from'][1]['grpc_server']['port']}" in err
    assert "start that code server" in err
    with DagsterInstance.get() as instance:
        assert len(instance.get_run_records()) == 2
