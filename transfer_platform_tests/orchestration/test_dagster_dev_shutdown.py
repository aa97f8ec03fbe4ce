"""``dagster dev`` started as docs/dagster-ui.md says stops cleanly and promptly on SIGTERM (issue 12).

The documented command (``python -m transfer_platform.dagster_dev -w workspace.yaml``, which becomes
``dagster dev``) runs from the repository with a Dagster home holding the repository's
``dagster.yaml`` and ``$TRANSFER_PLATFORM_CONFIG`` set (a free ``--port``: the machine is shared).
One destination is enabled, so the ``transfer_schedule`` sensor enqueues its transfer on its first
tick. SIGTERM goes to the ``dagster dev`` process alone (``kill``, a supervisor, ``docker stop``),
and everything it started must be gone within ``STOP_BOUND`` seconds: the webserver, the daemon,
the code servers, the run worker, its compute-log tails and Spark JVM (found as the processes whose
environment holds this test's ``DAGSTER_HOME``).

- after the sensor's first run has finished, started with SIGINT ignored, as a script's background
  job (``... &``) is: plain ``dagster dev`` then ignores SIGTERM (Dagster maps it onto SIGINT's
  handler) and SIGINT, and never stops (``transfer_platform/dagster_dev.py``);
- while the sensor's transfer runs: the code server waited for the run to end before exiting,
  with ``dagster dev`` gone, so the tree lived on until the transfer was done (minutes here, hours
  for a real backfill). Now the run is cancelled (``dagster_fixes.install_dev_stop``, and the
  runner stops at an interrupt instead of failing the model): it ends CANCELED (KILLED in
  ``transfers``) with the reason, the destination holds exactly the windows it committed (no
  half-written window), and the next transfer resumes from that watermark, ending with exactly the
  source's rows.

Measured on the development machine (2 cores, loaded by other test runs): the tree is gone 3-6 s
after SIGTERM in both cases; the bound is 60 s, for a machine loaded by a whole test suite (once,
on such a machine, a worker outlived 30 s: a failure's message now holds the run workers' Python
stacks, which they write on SIGUSR1). Without the fixes: with SIGINT ignored, nothing stops
(SIGINT 8 s later neither; killed after 40 s); with a transfer running, the tree lived until the
transfer ended (86 s after SIGTERM for a 145-window transfer; this test's has 864 windows a model).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import dagster as dg
import pytest
import yaml
from deltalake import DeltaTable

from transfer_platform.destinations.delta import read_state
from transfer_platform.orchestration.runs.transfers import TransferFilter, list_transfers
from transfer_platform.orchestration.scheduling.sensors import TRIGGER_TAG
from transfer_platform.orchestration.speed.dagster_fixes import (
    DEV_STOPPED,
    dev_stop_installed,
    install_dev_stop,
)
from transfer_platform.orchestration.speed.run_worker import WORKER_TAG
from transfer_platform_tests.support.daemon import FAST_SPARK, VENV_BIN, processes_with_home
from transfer_platform_tests.support.platform import (
    REPO,
    dagster_home,
    delivered,
    lake_rows,
    write_config,
)

pytestmark = pytest.mark.integration

STOP_BOUND = 60.0  # seconds from SIGTERM until the whole tree is gone (a loaded machine included)
MODELS = ("items", "notes")


@dataclass
class Dev:
    root: Path
    config_path: Path
    home: Path
    process: subprocess.Popen
    instance: dg.DagsterInstance
    log: Path

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"dagster dev exited ({self.process.returncode}) while waiting for "
                                     f"{what}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}:\n{self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self) -> str:
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if '"phase"' not in line]
        return "\n".join(lines[-40:])

    def sensor_transfers(self) -> list[dg.DagsterRun]:
        return self.instance.get_runs(dg.RunsFilter(job_name="transfer", tags={TRIGGER_TAG: "sensor"}))

    def tree(self) -> list[int]:
        """Every live process started for this Dagster home (``dagster dev`` itself included)."""
        found = [pid for pid in processes_with_home(self.home) if _alive(pid)]
        if self.process.poll() is None and self.process.pid not in found:
            found.append(self.process.pid)
        return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _describe(pids: list[int]) -> str:
    lines = []
    for pid in pids:
        with contextlib.suppress(OSError):
            args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"{pid}: {args[:160]}")
    return "\n".join(lines) + _worker_stacks(pids)


def _worker_stacks(pids: list[int]) -> str:
    """The Python stacks of the run workers still alive among ``pids`` (SIGUSR1 makes a worker
    write them to its run's stderr compute log), for a failure's message."""
    workers = [pid for pid in pids if b"run_worker" in _cmdline(pid)]
    logs = {}
    for pid in workers:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGUSR1)
            logs.update({log: log.stat().st_size for log in _compute_logs(pid)})
    deadline, sizes = time.monotonic() + 10, dict(logs)
    while time.monotonic() < deadline:  # until every worker has written its stacks, whole
        time.sleep(0.2)
        now = {log: log.stat().st_size for log in logs}
        if all(now[log] > logs[log] for log in logs) and now == sizes:
            break
        sizes = now
    return "".join(f"\n--- {log} ---\n{log.read_text(errors='replace')[-6000:]}" for log in logs)


def _cmdline(pid: int) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def _compute_logs(pid: int) -> list[Path]:
    """The ``.err`` compute logs a process has open (its run's captured stderr)."""
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = Path(os.readlink(fd))
            if target.suffix == ".err" and "compute_logs" in target.parts:
                found.append(target)
    return found


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def dagster_dev(root: Path, *, window: int | None, sigint_ignored: bool = False) -> Iterator[Dev]:
    """``dagster dev`` as docs/dagster-ui.md starts it, for one enabled destination (``globex_delta``);
    ``sigint_ignored``: as a background job of a script starts it."""
    config_path = write_config(root, destinations={"globex": {"frequency_minutes": 15}}, window=window)
    config = yaml.safe_load(config_path.read_text())
    config["spark"]["conf"] = FAST_SPARK
    config_path.write_text(yaml.safe_dump(config))
    home = dagster_home(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANSFER_PLATFORM_", "DAGSTER_"))}
    # runs with a Spark of their own, part of the tree that must stop (the shared Spark server is
    # detached by design: it outlives dagster dev until idle, test_shared_spark.py)
    env.update(DAGSTER_HOME=str(home), TRANSFER_PLATFORM_CONFIG=str(config_path), TRANSFER_PLATFORM_SHARED_SPARK="0")
    instance = dg.DagsterInstance.from_config(str(home))  # the storage exists before dagster dev starts
    log = root / "dagster_dev.log"
    process = subprocess.Popen(
        [str(VENV_BIN / "python"), "-m", "transfer_platform.dagster_dev", "-w", "workspace.yaml",
         "--port", str(_free_port())],
        cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=_ignore_sigint if sigint_ignored else None)
    dev = Dev(root, config_path, home, process, instance, log)
    try:
        yield dev
    finally:
        leftovers = dev.tree()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()
        instance.dispose()


def stop(dev: Dev) -> tuple[float, list[int]]:
    """SIGTERM to ``dagster dev``; seconds until its whole tree is gone (or STOP_BOUND), and what
    is left then."""
    assert len(dev.tree()) > 3, f"not a running dagster dev tree: {_describe(dev.tree())}"
    started = time.monotonic()
    os.kill(dev.process.pid, signal.SIGTERM)
    while (left := dev.tree()) and time.monotonic() - started < STOP_BOUND:
        time.sleep(0.2)
    return time.monotonic() - started, left


def committed_watermark(root: Path, table: str) -> datetime | None:
    path = root / "dest_globex" / table
    return read_state(DeltaTable(str(path))).watermark if (path / "_delta_log").exists() else None


def test_sigterm_after_the_sensors_first_run_stops_the_whole_tree(tmp_path: Path) -> None:
    with dagster_dev(tmp_path, window=None, sigint_ignored=True) as dev:
        dev.wait_for("the sensor's first transfer to finish",
                     lambda: bool(runs := dev.sensor_transfers()) and all(r.is_finished for r in runs), 420)
        (run,) = dev.sensor_transfers()
        assert run.status == dg.DagsterRunStatus.SUCCESS, dev.log_tail()
        seconds, left = stop(dev)
        assert not left, (f"{len(left)} process(es) still alive {seconds:.0f} s after SIGTERM:\n"
                          f"{_describe(left)}\n{dev.log_tail()}")
        assert dev.process.wait(5) == 0


def test_sigterm_during_a_transfer_cancels_it_and_the_next_one_resumes(tmp_path: Path) -> None:
    # 5-minute windows over three days (864 a model): the transfer takes minutes, so it is still
    # running at the stop, and without the fix the tree would outlive STOP_BOUND by far
    with dagster_dev(tmp_path, window=300) as dev:
        dev.wait_for("the sensor's transfer to commit its first windows",
                     lambda: bool(dev.sensor_transfers()) and committed_watermark(tmp_path, "items") is not None,
                     420)
        (run,) = dev.sensor_transfers()
        assert run.status == dg.DagsterRunStatus.STARTED, run.status
        # started by dagster.yaml's launcher: its worker watches for dagster dev (run_worker)
        assert WORKER_TAG in dev.instance.get_run_by_id(run.run_id).tags
        install_dev_stop()  # (here, only to see that this Dagster still has what it patches)
        assert dev_stop_installed(), "Dagster's code server changed: see dagster_fixes.install_dev_stop"

        seconds, left = stop(dev)
        assert not left, (f"{len(left)} process(es) still alive {seconds:.0f} s after SIGTERM:\n"
                          f"{_describe(left)}\n{dev.log_tail()}")
        assert dev.process.wait(5) == 0

        # the run ended, truthfully: cancelled because dagster dev stopped
        run = dev.instance.get_run_by_id(run.run_id)
        assert run.status == dg.DagsterRunStatus.CANCELED, (run.status, dev.log_tail())
        canceling = dev.instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_CANCELING)
        assert [e.message for e in canceling] == [DEV_STOPPED]
        (listed,) = [t for t in list_transfers(dev.instance, TransferFilter()) if t["id"] == run.run_id]
        assert (listed["status"], bool(listed["started_at"]), bool(listed["ended_at"])) == ("KILLED", True, True)

    # no half-written window: each model holds exactly the source's rows below its committed watermark
    before = {}
    for table in MODELS:
        watermark = committed_watermark(tmp_path, table)
        expected = [r for r in lake_rows(tmp_path, table, "globex") if watermark is not None and r["updated_at"] < watermark]
        before[table] = delivered(tmp_path, "globex", table)
        assert before[table] == expected, table
    assert len(before["items"]) < len(lake_rows(tmp_path, "items", "globex")), "the transfer was not stopped midway"

    # the next transfer resumes from there (daily windows, so that it is short): every row, once
    config = yaml.safe_load(dev.config_path.read_text())
    for model in config["models"]:
        model["max_transfer_time_window_seconds"] = 86_400
    dev.config_path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANSFER_PLATFORM_", "DAGSTER_"))}
    env["TRANSFER_PLATFORM_SHARED_SPARK"] = "0"  # a Spark of its own, gone when the command ends
    result = subprocess.run([str(VENV_BIN / "transfer-platform"), "--config", str(dev.config_path),
                             "transfer", "globex_delta"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["status"] == "SUCCESS", summary
    for model in summary["models"]:
        table = model["model"]
        assert delivered(tmp_path, "globex", table) == lake_rows(tmp_path, table, "globex"), table
        # what the stopped run had delivered is not delivered again as new, nothing is missing
        assert model["delta_rows_transferred"] == len(lake_rows(tmp_path, table, "globex")) - len(before[table]), model
