"""The real ``dagster-daemon run`` against the repository's ``workspace.yaml`` and ``dagster.yaml``.

Transfers are enqueued as ``transfer-platform transfer --enqueue`` does (``transfers.enqueue``),
the daemon's queue starts them in real run-worker processes (each with its own Spark JVM), and the
run records' start/end times show that the limits held. The ``transfer_schedule`` sensor is left
running: it enqueues the scheduled transfer of the one *enabled* destination (``globex_delta``), and
that run is part of the analysis; ``acme_delta`` is disabled, so only the test's runs go there.

:class:`RunningPlatform` (also used by ``test_lifecycle_processes``) starts the daemon and one code
server for submissions (``TRANSFER_PLATFORM_WORKSPACE`` points ``enqueue`` at it instead of starting
a code server per submission) in their own sessions, and kills both process groups and every
process left with its ``DAGSTER_HOME`` (run workers, Spark JVMs) at the end.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from dagster._grpc.client import DagsterGrpcClient  # pinned Dagster
from deltalake import DeltaTable

from transfer_platform.config import load_config
from transfer_platform.orchestration.transfers import (
    TransferFilter,
    TransferOrder,
    enqueue,
    list_transfers,
)
from transfer_platform_tests.orchestration.platform_fixtures import (
    REPO,
    TENANTS,
    dagster_home,
    write_config,
)

#: deadlines here bound a failure, they are not what a test waits for: on a loaded 2-core machine a
#: daemon, its code server and a run's JVM start several times slower than on a quiet one (a CI
#: run once failed after 690 s waiting 120 s for the sensor's first transfer), so each deadline is
#: multiplied by this (TP_TEST_PATIENCE, default 4); a passing run waits no longer for it
PATIENCE = float(os.environ.get("TP_TEST_PATIENCE", "4"))

pytestmark = pytest.mark.integration

VENV_BIN = REPO / ".venv" / "bin"
# each run starts its own JVM: C1-only JIT and the serial GC halve a short run's start-up here
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


def _processes_with_home(home: Path) -> list[int]:
    """Processes of ours still using this Dagster home (run workers, code servers, Spark JVMs)."""
    marker = f"DAGSTER_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


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
                     window: int | None) -> Iterator[RunningPlatform]:
    """A configuration, a Dagster home with the shipped ``dagster.yaml``, a running daemon."""
    config_path = write_config(root, destinations=destinations, window=window)
    config = yaml.safe_load(config_path.read_text())
    config["spark"]["conf"] = FAST_SPARK
    config_path.write_text(yaml.safe_dump(config))
    home = dagster_home(root)
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
        for process in processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in _processes_with_home(home):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        instance.dispose()


def lake_rows(root: Path, table: str, recipient: str) -> list[dict]:
    rows = pq.read_table(root / "lake" / table)
    rows = rows.filter(pc.equal(rows["organization_id"], TENANTS[recipient]))
    return sorted(rows.to_pylist(), key=lambda r: r["id"])


def delta_rows(root: Path, recipient: str, table: str) -> list[dict]:
    rows = DeltaTable(str(root / f"dest_{recipient}" / table)).to_pyarrow_table()
    return sorted(rows.select(["id", "organization_id", "updated_at", "v"]).to_pylist(), key=lambda r: r["id"])


def test_daemon_runs_queued_transfers_within_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = {"acme": {"max_concurrent_transfers": 1, "is_enabled": False},
                    "globex": {"max_concurrent_transfers": 2, "is_enabled": True}}
    with running_platform(tmp_path, monkeypatch, destinations=destinations, window=None) as platform:
        instance = platform.instance
        acme = [platform.enqueue("acme_delta"), platform.enqueue("acme_delta", ["items"]),
                platform.enqueue("acme_delta", ["notes"])]

        def scheduled() -> list[dg.DagsterRun]:
            return instance.get_runs(dg.RunsFilter(tags={".dagster/transfer_platform/trigger": "sensor"}))

        platform.wait_for("the sensor's scheduled transfer of globex_delta", lambda: bool(scheduled()), 120)
        (sensor_run,) = scheduled()
        assert sensor_run.tags["transfer_platform/destination"] == "globex_delta"
        run_ids = [*acme, sensor_run.run_id]

        snapshots: list[dict[str, dg.DagsterRunStatus]] = []

        def all_finished() -> bool:
            snapshots.append({i: instance.get_run_by_id(i).status for i in run_ids})
            return all(status in FINISHED for status in snapshots[-1].values())

        platform.wait_for("every transfer to finish", all_finished, 420)

        records = {i: platform.record(i) for i in run_ids}
        for run_id, record in records.items():
            assert record.dagster_run.status == dg.DagsterRunStatus.SUCCESS, (
                f"{run_id} ended {record.dagster_run.status}\n{platform.daemon_log_tail()}")

        def interval(run_id: str) -> tuple[float, float]:
            return records[run_id].start_time, records[run_id].end_time

        def overlap(a: str, b: str) -> bool:
            (a_start, a_end), (b_start, b_end) = interval(a), interval(b)
            return a_start < b_end and b_start < a_end

        for a, b in itertools.combinations(acme, 2):
            assert not overlap(a, b), "two transfers ran at once on acme_delta (max_concurrent_transfers 1)"
        # the limit was exercised, not met by chance: an acme transfer waited while another ran
        assert any(sum(snap[i] == dg.DagsterRunStatus.STARTED for i in acme) == 1
                   and any(snap[i] == dg.DagsterRunStatus.QUEUED for i in acme) for snap in snapshots)
        # and different destinations did run at the same time (the limits are not one global lock)
        assert any(overlap(a, sensor_run.run_id) for a in acme)

        listed = {t["id"]: t for t in list_transfers(instance, TransferFilter())}
        for run_id in run_ids:
            assert listed[run_id]["status"] == "SUCCESS"
            assert listed[run_id]["started_at"]
            assert listed[run_id]["ended_at"]

    for recipient in ("acme", "globex"):
        for table in ("items", "notes"):
            expected = lake_rows(tmp_path, table, recipient)
            assert expected, (recipient, table)
            assert delta_rows(tmp_path, recipient, table) == expected, (recipient, table)
