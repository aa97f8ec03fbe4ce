"""Processes of the platform killed with SIGKILL, as a machine or a container dies:

- the API (``transfer-platform api``) killed while a client writes through it: every answered
  write is in the store once, the one in flight is there once or not at all, and the API started
  again answers at once (no lock left behind);
- the Dagster daemon killed while a transfer runs (a backfill, then an incremental): the run is
  not left RUNNING (it ends, or the daemon started again sweeps it ORPHANED once its heartbeat
  stopped), the destination holds exactly the rows up to its watermark, and the next transfer
  delivers every row;
- the code server killed while a transfer runs: the run is not affected; a transfer asked for
  while it is down is refused with one line, and once it is back the next transfer delivers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import httpx
import pytest

from transfer_platform.config.loading import load_config
from transfer_platform.core.lifecycle import HEARTBEAT_TAG, ORPHANED_AFTER
from transfer_platform.destinations.base import writer_for
from transfer_platform.orchestration.runs.lifecycle import sweep
from transfer_platform_tests.support.api import write_api_config
from transfer_platform_tests.support.daemon import (
    FINISHED,
    VENV_BIN,
    RunningPlatform,
    running_platform,
)
from transfer_platform_tests.support.faults import record
from transfer_platform_tests.support.platform import REPO, delivered, lake_rows
from transfer_platform_tests.support.processes import alive, free_port

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "transfer_platform.cli"]
TABLES = ("items", "notes")


# -- the API --------------------------------------------------------------------------------------


def serve_api(config: Path, env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    server = subprocess.Popen([*CLI, "--config", str(config), "api", "--port", str(port)], env=env,
                              stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True)
    return server


def first_answer(port: int, key: str, server: subprocess.Popen, log: Path) -> float:
    started = time.monotonic()
    while True:
        assert server.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() - started < 120, "the API did not answer in 120 s"
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://127.0.0.1:{port}/recipients", headers={"X-API-KEY": key}, timeout=5).status_code == 200:
                return time.monotonic() - started
        time.sleep(0.1)


def test_the_api_killed_mid_write_keeps_each_write_once(tmp_path, store_schema, secret_key):
    env = {**os.environ, "TRANSFER_PLATFORM_SECRET_KEY": secret_key}
    config = write_api_config(tmp_path, store_schema)
    assert subprocess.run([*CLI, "--config", str(config), "store", "migrate"], env=env, capture_output=True,
                          timeout=120).returncode == 0
    created = subprocess.run([*CLI, "--config", str(config), "api-key", "create", "faults"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    port, log = free_port(), tmp_path / "api.log"
    server = serve_api(config, env, port, log)
    answered: dict[str, int] = {}
    stop = threading.Event()

    def writer() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-KEY": key}, timeout=10) as client:
            for i in range(10_000):
                if stop.is_set():
                    return
                name = f"r{i:05d}"
                try:
                    answered[name] = client.post("/recipients", json={"recipient": {
                        "name": name, "id_in_provider_system": f"org-{i}"}}).status_code
                except httpx.TransportError:
                    answered[name] = 0  # in flight when the API died
                    return

    try:
        first_answer(port, key, server, log)
        thread = threading.Thread(target=writer)
        thread.start()
        deadline = time.monotonic() + 60
        while len(answered) < 20:
            assert time.monotonic() < deadline, f"only {len(answered)} writes answered"
            time.sleep(0.01)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)
        thread.join(30)
        stop.set()
        assert set(answered.values()) <= {201, 0}, answered
        server = serve_api(config, env, port, log)
        recovered_in = first_answer(port, key, server, log)
        listed = httpx.get(f"http://127.0.0.1:{port}/recipients", headers={"X-API-KEY": key},
                           params={"limit": 1000}, timeout=10).json()["data"]["recipients"]
        names = [r["name"] for r in listed]
        assert len(names) == len(set(names))
        done = {n for n, status in answered.items() if status == 201}
        in_flight = {n for n, status in answered.items() if status == 0}
        assert done <= set(names) <= done | in_flight, (sorted(set(names) - done), sorted(in_flight))
        again = httpx.post(f"http://127.0.0.1:{port}/recipients", headers={"X-API-KEY": key}, timeout=10,
                           json={"recipient": {"name": "after", "id_in_provider_system": "org-after"}})
        assert again.status_code == 201, again.text
    finally:
        stop.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)
    record("kill -9", "API process (writes in flight)",
           f"{len(done)} answered writes kept once, the one in flight {'kept' if in_flight & set(names) else 'absent'}",
           recovered_in)


# -- the daemon and the code server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory):
    # hourly windows over three days: a transfer long enough to be caught running
    with pytest.MonkeyPatch.context() as patch, running_platform(
            tmp_path_factory.mktemp("kills"), patch, destinations={"acme": {"is_enabled": False}},
            window=3600) as running:
        yield running


def daemon_pids(platform: RunningPlatform) -> list[int]:
    from transfer_platform_tests.support.daemon import processes_with_home

    found = processes_with_home(platform.home, b"dagster-daemon")
    return [pid for pid in found if parent(pid) not in found]  # not a fork of the daemon


def parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def start_daemon(platform: RunningPlatform, name: str) -> subprocess.Popen:
    log = platform.root / name
    return subprocess.Popen([str(VENV_BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                            env=platform.env, cwd=platform.root, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def watermarks(platform: RunningPlatform) -> dict:
    config = load_config(platform.config_path)
    writer = writer_for(config.destination("acme_delta"))
    try:
        return {t: writer.committed_state(config.model(t)).state.watermark for t in TABLES}
    finally:
        writer.close()


def exactly_up_to_watermarks(platform: RunningPlatform) -> None:
    marks = watermarks(platform)
    for table in TABLES:
        held = delivered(platform.root, "acme", table)
        upto = [r for r in lake_rows(platform.root, table) if marks[table] and r["updated_at"] < marks[table]]
        assert held == upto, (table, len(held), len(upto), marks[table])


def ends(platform: RunningPlatform, run_id: str) -> dg.DagsterRun:
    platform.wait_for(f"run {run_id} to end", lambda: platform.record(run_id).dagster_run.status in FINISHED, 180)
    return platform.instance.get_run_by_id(run_id)


def kill_the_daemon_mid_run(platform: RunningPlatform, phase: str) -> tuple[str, float]:
    """Enqueue a transfer, SIGKILL the daemon once it runs (with a heartbeat), start the daemon
    again; the run must end, or be swept ORPHANED once its heartbeat stopped. (outcome, when killed)"""
    run_id = platform.enqueue("acme_delta")
    # (a transfer with little left, after a run that outlived the daemon, may end before it is caught)
    platform.wait_for("the run to start with a heartbeat",
                      lambda: (run := platform.instance.get_run_by_id(run_id)).status in FINISHED
                      or run.status == dg.DagsterRunStatus.STARTED and HEARTBEAT_TAG in run.tags, 120)
    ended_first = platform.instance.get_run_by_id(run_id).status in FINISHED
    (daemon,) = daemon_pids(platform)
    os.kill(daemon, signal.SIGKILL)
    killed_at = time.monotonic()
    platform.wait_for("the daemon to go", lambda: not alive(daemon), 30)
    start_daemon(platform, f"daemon-{phase}.log")  # stopped with the platform (its DAGSTER_HOME)
    # the run's worker is a child of the daemon's launcher: it ends, or dies with it
    deadline = time.monotonic() + 30
    while platform.instance.get_run_by_id(run_id).status not in FINISHED and time.monotonic() < deadline:
        time.sleep(0.5)
    run = platform.instance.get_run_by_id(run_id)
    if run.status in FINISHED:
        outcome = f"run {run.status.value}" + (" (before the kill)" if ended_first else "")
    else:
        beat = datetime.fromisoformat(run.tags[HEARTBEAT_TAG])
        swept = sweep(platform.instance, beat + ORPHANED_AFTER + timedelta(minutes=1),
                      load_config(platform.config_path))
        assert run_id in swept["orphaned"], (run.status, swept)
        assert platform.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
        outcome = "run ORPHANED (heartbeat stopped; the sweep failed it)"
    exactly_up_to_watermarks(platform)
    return outcome, killed_at


def test_the_daemon_killed_mid_run_leaves_no_run_running(platform: RunningPlatform):
    # the backfill killed; the transfer after it (an incremental from the watermark the backfill
    # reached) killed too; the third delivers every row
    first, _ = kill_the_daemon_mid_run(platform, "backfill")
    second, killed_at = kill_the_daemon_mid_run(platform, "incremental")
    again = platform.enqueue("acme_delta")
    assert ends(platform, again).status == dg.DagsterRunStatus.SUCCESS
    recovered_in = time.monotonic() - killed_at
    for table in TABLES:
        assert delivered(platform.root, "acme", table) == lake_rows(platform.root, table)
    record("kill -9", "Dagster daemon, backfill", first, None)
    record("kill -9", "Dagster daemon, incremental (from the killed backfill's watermark)",
           second, recovered_in)


def test_the_code_server_killed_refuses_transfers_in_one_line_until_it_is_back(platform: RunningPlatform):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from transfer_platform_tests.support.daemon import processes_with_home, start_code_server
    from transfer_platform_tests.support.platform import TENANTS, TS

    (server,) = processes_with_home(platform.home, str(platform.root / "code_server.sock").encode())
    now = datetime.now(UTC)
    schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS), ("v", pa.string())])
    for table in TABLES:  # new rows for the next transfer
        rows = [{"id": 900_000 + i, "organization_id": TENANTS["acme"], "updated_at": now - timedelta(seconds=i),
                 "v": f"{table}-late-{i}"} for i in range(20)]
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), platform.root / "lake" / table / "part-9.parquet")
    os.kill(server, signal.SIGKILL)
    killed_at = time.monotonic()
    platform.wait_for("the code server to go", lambda: not alive(server), 30)
    refused = platform.cli("transfer", "--enqueue", "acme_delta")
    assert refused.returncode != 0, refused.stdout
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("error: cannot reach the code location of "), refused.stderr
    assert "; fix: start its code server again" in lines[0], refused.stderr
    socket = platform.root / "code_server.sock"
    socket.unlink(missing_ok=True)
    start_code_server(socket, platform.env, platform.root / "code_server_again.log")
    again = platform.enqueue("acme_delta")
    assert ends(platform, again).status == dg.DagsterRunStatus.SUCCESS
    recovered_in = time.monotonic() - killed_at
    for table in TABLES:
        assert delivered(platform.root, "acme", table) == lake_rows(platform.root, table)
    record("kill -9", "code server (then a transfer asked for)", f"refused in one line: {lines[0][:70]}",
           recovered_in)
