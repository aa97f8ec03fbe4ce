"""Transfers launched by the real ``dagster-daemon`` (the end-to-end benchmark's cases b and c), as production
runs them: a code server (``dagster api grpc``) and the daemon with the repository's run
coordinator, the instance on PostgreSQL storage (a database of its own, dropped afterwards; SQLite
reports "database is locked" under concurrent runs), every run its own process, enqueued as
``transfer-platform transfer --enqueue`` does, queued as ``deploy/dagster.production.yaml``
queues them (its run coordinator's settings, and its compute log manager), launched by the shipped ``dagster.yaml``'s run
launcher (runs forked from a preloaded parent) or, with ``default_launcher``, Dagster's (a process
spawned by the code server per run). Spark: the configuration file's (``spark.remote`` for a warm
server).

- :meth:`Daemon.one_run`: queued -> success of one enqueued transfer, from the run's own
  timestamps (created, launched by the daemon, started by its run worker, ended), enqueued when
  no other run is queued or in progress (the sensor's first tick enqueues every destination
  once: a run waiting behind it would measure that run);
- :meth:`Daemon.sustained`: for ``minutes``, every destination whose previous transfer ended is
  given a few changed rows and enqueued again; transfers per hour = successes / elapsed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from benchmarks.common import PG, pg_connect

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")


@dataclass
class Daemon:
    """A Dagster home on a PostgreSQL database of its own, a code server and a daemon."""

    folder: Path
    config_path: Path
    max_concurrent_runs: int = 4
    default_launcher: bool = False  # Dagster's DefaultRunLauncher instead of the shipped one
    database: str = field(default_factory=lambda: f"tp_bench_dagster_{uuid.uuid4().hex[:6]}")
    processes: list = field(default_factory=list)
    show_timeline: bool = False  # print each timed run's events (:meth:`timeline`)

    def __enter__(self) -> Daemon:
        import dagster as dg

        with pg_connect(autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.database}")
        home = self.folder / "dagster_home"
        home.mkdir(parents=True)
        instance = yaml.safe_load((REPO / "dagster.yaml").read_text())
        # the run queue and the captured step output as production sets them
        # (deploy/dagster.production.yaml: its dequeue interval, pooled storage connections, step
        # output in files without a mirror), with this benchmark's limit
        production = yaml.safe_load((REPO / "deploy" / "dagster.production.yaml").read_text())
        instance["run_coordinator"] = production["run_coordinator"]
        instance["compute_logs"] = production["compute_logs"]
        instance["run_coordinator"]["config"]["max_concurrent_runs"] = self.max_concurrent_runs
        if self.default_launcher:
            del instance["run_launcher"]
        instance["storage"] = {"postgres": {"postgres_db": {
            "hostname": PG["host"], "port": PG["port"], "db_name": self.database, "username": PG["user"],
            "scheme": "postgresql+psycopg2"}}}  # as deploy/dagster.production.yaml says why
        (home / "dagster.yaml").write_text(yaml.safe_dump(instance))
        socket = self.folder / "code_server.sock"
        workspace = self.folder / "workspace.yaml"
        workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
            "socket": str(socket), "location_name": "transfer_platform"}}]}))
        self.env = {**{k: v for k, v in os.environ.items() if k != "TRANSFER_PLATFORM_SPARK_REMOTE"},
                    "DAGSTER_HOME": str(home), "TRANSFER_PLATFORM_CONFIG": str(self.config_path),
                    "TRANSFER_PLATFORM_WORKSPACE": str(workspace)}
        os.environ.update({k: self.env[k] for k in ("DAGSTER_HOME", "TRANSFER_PLATFORM_CONFIG",
                                                    "TRANSFER_PLATFORM_WORKSPACE")})
        self.instance = dg.DagsterInstance.get()  # creates the storage before two processes race to
        self._start([str(BIN / "dagster"), "api", "grpc", "--socket", str(socket), "--module-name",
                     "transfer_platform.definitions", "--attribute", "defs", "--location-name",
                     "transfer_platform"], "code_server.log")
        self._wait(lambda: _serving(socket), "the code server")
        self._start([str(BIN / "dagster-daemon"), "run", "-w", str(workspace)], "daemon.log")
        return self

    def _start(self, argv: list[str], log: str) -> None:
        self.processes.append(subprocess.Popen(argv, env=self.env, cwd=self.folder, start_new_session=True,
                                               stdout=(self.folder / log).open("w"), stderr=subprocess.STDOUT))

    def _wait(self, condition, what: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not done in {timeout} s (logs in {self.folder})")
            time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.instance.dispose()
        time.sleep(1)  # run workers' connections close with their processes
        with pg_connect(autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")
        shutil.rmtree(self.folder / "dagster_home", ignore_errors=True)

    # -- runs ---------------------------------------------------------------------------------

    def enqueue(self, destination: str, full_refresh: bool = False) -> str:
        from transfer_platform.config.loading import load_config
        from transfer_platform.orchestration.runs.transfers import enqueue
        from transfer_platform.transfers.order import TransferOrder

        return enqueue(self.instance, load_config(self.config_path), self.config_path,
                       TransferOrder(destination=destination, models=[], full_refresh=full_refresh))

    def status(self, run_id: str) -> str:
        return self.instance.get_run_by_id(run_id).status.value

    def wait(self, run_id: str, timeout: float = 900) -> dict:
        """Wait for the run to finish; its timestamps (created, launched, started, ended) and status."""
        from dagster import DagsterEventType

        self._wait(lambda: self.status(run_id) in FINISHED, f"run {run_id}", timeout)
        record = self.instance.get_run_record_by_id(run_id)
        launched = [e.timestamp for e in self.instance.all_logs(run_id, of_type=DagsterEventType.PIPELINE_STARTING)]
        return {"status": record.dagster_run.status.value, "created": record.create_timestamp.timestamp(),
                "launched": launched[0] if launched else None, "started": record.start_time,
                "ended": record.end_time}

    def timeline(self, run_id: str) -> list[tuple[float, str]]:
        """The run's events in order: (seconds since the run was created, what), from its own
        records (the event log's timestamps, written by the process that reported each)."""
        created = self.instance.get_run_record_by_id(run_id).create_timestamp.timestamp()
        events = []
        for entry in self.instance.all_logs(run_id):
            what = entry.dagster_event.event_type_value if entry.dagster_event else "log"
            event = entry.dagster_event
            detail = (event.step_key or event.message if event else None) or entry.user_message or ""
            events.append((entry.timestamp - created, f"{what} {_short(detail)}"))
        return events

    def idle(self) -> bool:
        """No run queued or in progress."""
        from dagster import DagsterRunStatus, RunsFilter

        busy = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
                DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
        return self.instance.get_runs_count(RunsFilter(statuses=busy)) == 0

    def one_run(self, destination: str, before=lambda: None, full_refresh: bool = False) -> dict:
        """Enqueue one transfer of ``destination`` once the queue is idle (after ``before()``,
        untimed); its queued -> launched -> started -> ended seconds from the run's own records."""
        self._wait(self.idle, "an idle run queue")
        before()
        run_id = self.enqueue(destination, full_refresh)
        run = self.wait(run_id)
        if self.show_timeline:
            print(f"timeline of {destination}'s run {run_id}:", flush=True)
            for seconds, what in self.timeline(run_id):
                print(f"  {seconds:7.3f}  {what}", flush=True)
        if run["status"] != "SUCCESS":
            raise RuntimeError(f"the daemon's run of {destination} ended {run['status']} (logs in {self.folder})")
        return {"queued_to_success_s": run["ended"] - run["created"], "queued_to_start_s": run["started"] - run["created"],
                "queued_to_launch_s": run["launched"] - run["created"],
                "launch_to_start_s": run["started"] - run["launched"], "run_s": run["ended"] - run["started"]}

    def sustained(self, destinations: list[str], minutes: float, change) -> dict:
        """Keep every destination busy for ``minutes``: whenever its previous transfer ended,
        ``change(destination)`` (untimed) and enqueue it again. Transfers per hour from the
        successes that ended inside the period."""
        start = time.time()
        end = start + minutes * 60
        active: dict[str, str] = {}
        runs: list[str] = []
        while time.time() < end:
            for destination in destinations:
                run_id = active.get(destination)
                if run_id is None or self.status(run_id) in FINISHED:
                    change(destination)
                    active[destination] = self.enqueue(destination)
                    runs.append(active[destination])
            time.sleep(0.5)
        records = [self.instance.get_run_record_by_id(r) for r in runs]
        done = [r for r in records if r.dagster_run.status.value == "SUCCESS" and r.end_time and r.end_time <= end]
        failed = [r for r in records if r.dagster_run.status.value == "FAILURE"]
        if failed:
            raise RuntimeError(f"{len(failed)} of the daemon's runs failed (logs in {self.folder})")
        elapsed = end - start
        latency = sorted(r.end_time - r.create_timestamp.timestamp() for r in done)
        return {"minutes": minutes, "destinations": len(destinations), "transfers": len(done),
                "transfers_per_hour": round(len(done) * 3600 / elapsed),
                "median_queued_to_success_s": round(latency[len(latency) // 2], 2) if latency else None,
                "max_concurrent_runs": self.max_concurrent_runs}


def _serving(socket: Path) -> bool:
    from dagster._grpc.client import DagsterGrpcClient  # pinned Dagster

    if not socket.exists():
        return False
    try:
        DagsterGrpcClient(socket=str(socket)).ping("up")
        return True
    except Exception:  # noqa: BLE001 - not serving yet
        return False


def _short(detail: str) -> str:
    """An event's first line; a phase line without the ids every line of the run repeats."""
    line = detail.splitlines()[0] if detail else ""
    try:
        fields = json.loads(line)
    except ValueError:
        return line[:70]
    if not isinstance(fields, dict):
        return line[:70]
    return json.dumps({k: v for k, v in fields.items() if k not in ("transfer_id", "destination", "model")})[:240]
