"""A real platform of processes for the orchestration tests: a code server, ``dagster-daemon``
(and its runs), stopped afterwards, whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._grpc.client import DagsterGrpcClient  # pinned Dagster

from transfer_platform.config.loading import load_config
from transfer_platform.orchestration.runs.transfers import enqueue
from transfer_platform.transfers.order import TransferOrder
from transfer_platform_tests.support.platform import REPO, dagster_home, write_config

#: deadlines here bound a failure, they are not what a test waits for: on a loaded 2-core machine a
#: daemon, its code server and a run's JVM start several times slower than on a quiet one (a CI
#: run once failed after 690 s waiting 120 s for the sensor's first transfer), so each deadline is
#: multiplied by this (TP_TEST_PATIENCE, default 4); a passing run waits no longer for it
PATIENCE = float(os.environ.get("TP_TEST_PATIENCE", "4"))


#: the virtualenv of the Python running the tests (.venv; the Dagster-next lane's .venv-dagster-next)
VENV_BIN = Path(sys.executable).parent


FAST_SPARK = {"spark.driver.extraJavaOptions": "-Duser.timezone=UTC -Dfile.encoding=UTF-8 "
                                               "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
              "spark.sql.shuffle.partitions": "1"}


FINISHED = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


@dataclass
class RunningPlatform:
    root: Path
    config_path: Path
    home: Path
    env: dict[str, str]
    instance: dg.DagsterInstance
    daemon_log: Path

    def enqueue(self, destination: str, models: list[str] | None = None) -> str:
        return enqueue(self.instance, load_config(self.config_path), self.config_path,
                       TransferOrder(destination=destination, models=models or []))

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(VENV_BIN / "transfer-platform"), *args], env=self.env, cwd=self.root,
                              capture_output=True, text=True, timeout=120 * PATIENCE)

    def record(self, run_id: str) -> dg.RunRecord:
        return self.instance.get_run_record_by_id(run_id)

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float) -> None:
        """Wait until ``condition()``; ``timeout`` (times ``PATIENCE``) only bounds a failure."""
        timeout *= PATIENCE
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}\n"
                                     f"daemon log tail:\n{self.daemon_log_tail()}")
            time.sleep(0.5)

    def daemon_log_tail(self) -> str:
        lines = [line for line in self.daemon_log.read_text(errors="replace").splitlines()
                 if "Warning" not in line and "return fn(" not in line]
        return "\n".join(lines[-40:])


def processes_with_home(home: Path, command: bytes = b"") -> list[int]:
    """Processes of ours still using this Dagster home (run workers, code servers, Spark JVMs),
    only those whose command line holds ``command`` if it is given. A process that ends while it
    is looked at is not among them."""
    marker = f"DAGSTER_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0") and (
                    command in (entry / "cmdline").read_bytes()):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def stop_processes(processes: list[subprocess.Popen], home: Path, instance) -> None:
    """Kill the processes started (each with its session) and any other of this Dagster home
    (the run workers they started), then close the instance."""
    for process in processes:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for pid in processes_with_home(home):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    instance.dispose()


def start_code_server(socket: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """``dagster api grpc`` for the repository's definitions, serving on ``socket`` (own session)."""
    process = subprocess.Popen(
        [str(VENV_BIN / "dagster"), "api", "grpc", "--socket", str(socket),
         "--module-name", "transfer_platform.definitions", "--attribute", "defs",
         "--location-name", "transfer_platform"],
        env=env, cwd=log.parent, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180 * PATIENCE
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the code server exited: {log.read_text()[-3000:]}")
        if socket.exists():
            try:
                DagsterGrpcClient(socket=str(socket)).ping("up")
                return process
            except Exception:  # noqa: BLE001 - not serving yet
                pass
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError(f"the code server did not start in {180 * PATIENCE:.0f} s: {log.read_text()[-3000:]}")


@contextmanager
def running_platform(root: Path, monkeypatch: pytest.MonkeyPatch, *, destinations: dict[str, dict],
                     window: int | None, instance_settings: dict | None = None) -> Iterator[RunningPlatform]:
    """A configuration, a Dagster home with the shipped ``dagster.yaml`` (``instance_settings``:
    its top-level entries replaced), a running daemon."""
    config_path = write_config(root, destinations=destinations, window=window)
    config = yaml.safe_load(config_path.read_text())
    config["spark"]["conf"] = FAST_SPARK
    config_path.write_text(yaml.safe_dump(config))
    home = dagster_home(root)
    if instance_settings:
        shipped = yaml.safe_load((home / "dagster.yaml").read_text())
        (home / "dagster.yaml").write_text(yaml.safe_dump({**shipped, **instance_settings}))
    workspace = root / "enqueue_workspace.yaml"
    socket = root / "code_server.sock"
    workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
        "socket": str(socket), "location_name": "transfer_platform"}}]}))
    settings = {"DAGSTER_HOME": str(home), "TRANSFER_PLATFORM_CONFIG": str(config_path),
                "TRANSFER_PLATFORM_HEARTBEAT_SECONDS": "2", "TRANSFER_PLATFORM_WORKSPACE": str(workspace)}
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    env = dict(os.environ)
    # create the SQLite storage here, before two processes race to create it
    instance = dg.DagsterInstance.from_config(str(home))
    processes: list[subprocess.Popen] = []
    try:
        daemon_log = root / "daemon.log"
        processes.append(subprocess.Popen(
            [str(VENV_BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
            env=env, cwd=root, stdout=daemon_log.open("w"), stderr=subprocess.STDOUT,
            start_new_session=True))
        processes.append(start_code_server(socket, env, root / "code_server.log"))
        yield RunningPlatform(root, config_path, home, env, instance, daemon_log)
    finally:
        stop_processes(processes, home, instance)
