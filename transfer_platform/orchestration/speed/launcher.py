"""A run launcher whose run workers start already imported: ``dagster.yaml``'s ``run_launcher``.

Dagster's ``DefaultRunLauncher`` asks the code server to start each run, and the code server
starts a new ``spawn``-ed Python that imports Dagster, the code location and the data path's
libraries before the run begins: ~2.5 s of a small incremental's 5.5 s through the daemon on this
2-core machine, and as much CPU for every run. This launcher keeps one *preloaded parent* per code
location (:mod:`transfer_platform.orchestration.speed.run_worker`, a child of the process that launches
runs: the daemon) that has imported all of that once; each run is a ``fork`` of it, executed as
``dagster api execute_run`` executes it, in a process of its own as before (a run that crashes
takes nothing else with it, and is failed as the code server fails it).

- The parent starts with the first run a process launches (that run waits for its imports, as
  it would for Dagster's spawn); later runs start in milliseconds.
- Code or configuration changed since the parent imported them (a file of the code location's
  package, the configuration file): the parent refuses, and a fresh one starts for that run.
- A run whose worker cannot start this way (the parent died, did not answer in
  :data:`START_TIMEOUT_SECONDS`, a thread ran in it, or the code location's Dagster is not one the
  worker is proven on) is launched by Dagster's own path, the code server, with an engine event
  saying why; so are runs without a Python origin, and every run on a platform without ``fork``.
- The fork relies on private Dagster names (:mod:`~transfer_platform.orchestration.speed.dagster_internals`):
  on a Dagster outside ``PROVEN_DAGSTER_VERSIONS`` (a range), or lacking one of them, the launcher
  warns once per process and is Dagster's ``DefaultRunLauncher`` for every run (never an error that
  stops the daemon).
- ``terminate`` (the UI's Terminate, ``transfer-platform cancel``) interrupts the worker (SIGINT,
  as the code server does) from any process on the same machine: the run's
  ``.dagster/transfer_platform/run_worker`` tag (hidden in the UI) names its host, pid and start time. From another machine
  the run is marked CANCELING and the worker's cancellation thread (``run_worker.watch_for_cancel``)
  interrupts it.

Runs execute on the machine of the process that launched them (the daemon), with its environment
(``DefaultRunLauncher``: the code server's machine and environment).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from typing import Any

from dagster import DagsterRun, DefaultRunLauncher, serialize_value

from transfer_platform.orchestration.speed import dagster_internals
from transfer_platform.orchestration.speed.run_worker import WORKER_TAG, process_start_time
from transfer_platform.runtime.forks import ready

_LOG = logging.getLogger("transfer_platform.launcher")
#: how long a run waits for its worker to start (a parent just started imports first)
START_TIMEOUT_SECONDS = 300
NO_FORK = "the code location's parent process runs a thread, so it cannot fork"


class PreloadedRunLauncher(dagster_internals.KeptInstance, DefaultRunLauncher):
    """Runs forked from a process that has imported the code location (see the module).

    ``dagster_version``: the Dagster whose private names the fork relies on (this one's by default;
    another says what the launcher does there: see :func:`dagster_internals.fork_refusal`).
    """

    def __init__(self, inst_data: Any = None, dagster_version: str | None = None) -> None:
        super().__init__(inst_data=inst_data)
        self._parents: dict[str, _Parent] = {}
        self._no_fork: dict[str, str] = {}  # code locations whose parent cannot fork: why
        self._lock = threading.Lock()
        self._forked: set[str] = set()  # the runs it forked, which join() waits for
        #: why this launcher never forks (None: it forks), warned once per process
        self.fork_refusal = dagster_internals.fork_refusal(dagster_version or dagster_internals.DAGSTER_VERSION)
        if self.fork_refusal:
            dagster_internals.warn_once(f"fork_refusal:{self.fork_refusal}", (
                f"transfer_platform falls back to Dagster's own behaviour for {dagster_internals.PARTS['run_worker']}: "
                f"{self.fork_refusal}. Lost: {dagster_internals.LOST['run_worker']}"))

    def launch_run(self, context: Any) -> None:  # Dagster's LaunchRunContext
        run = context.dagster_run
        origin = run.job_code_origin
        if origin is None or not hasattr(os, "fork") or self.fork_refusal:
            super().launch_run(context)
            return
        key = serialize_value(origin.repository_origin)
        why = self._no_fork.get(key)
        if why is None:
            with self._lock:
                started, why = self._start(key, origin.repository_origin, run)
            if started:
                return
        self.platform_instance.report_engine_event(
            f"The preloaded run worker did not start ({why}); the code server launches the run.", run,
            cls=self.__class__)
        super().launch_run(context)

    def _start(self, key: str, origin: Any, run: DagsterRun) -> tuple[bool, str]:
        """Fork ``run``'s worker from this code location's parent: (started, why not)."""
        why = ""
        instance = self.platform_instance
        for _attempt in range(2):  # a parent that ended, or whose code changed, is replaced once
            parent = self._parents.get(key)
            if parent is None or not parent.alive():
                try:
                    parent = self._parents[key] = _Parent(instance, origin)
                except OSError as exc:  # the code location's Python is not on this machine
                    return False, f"its parent process did not start: {exc}"
            answer = parent.request(run.run_id, START_TIMEOUT_SECONDS)
            if answer.get("pid"):
                instance.add_run_tags(run.run_id, {
                    WORKER_TAG: f"{socket.gethostname()} {answer['pid']} {answer['started']}"})
                self._forked.add(run.run_id)
                return True, ""
            parent.close()
            del self._parents[key]
            why = answer.get("refused") or answer["failed"]
            if why == "threads":
                self._no_fork[key] = NO_FORK
                return False, NO_FORK
            if why == "unsupported":  # the code location's Dagster: see dagster_internals
                self._no_fork[key] = answer["why"]
                return False, answer["why"]
            if why == "stale":
                why = "the code changed while its parent process started"
            elif not answer.get("ended"):
                return False, why
        return False, why

    def terminate(self, run_id: str) -> bool:
        if not self.has_instance:
            return super().terminate(run_id)
        instance = self.platform_instance
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished or WORKER_TAG not in run.tags:
            return super().terminate(run_id)
        host, pid, started = run.tags[WORKER_TAG].split()
        instance.report_run_canceling(run)
        if host != socket.gethostname():
            instance.report_engine_event(
                f"The run's worker runs on {host} (pid {pid}): it interrupts itself when it sees the run "
                "CANCELING (run_monitoring.cancellation_thread_poll_interval_seconds).", run, cls=self.__class__)
            return True
        if process_start_time(int(pid)) != started:
            instance.report_engine_event(
                f"The run's worker (pid {pid}) is gone: nothing to interrupt.", run, cls=self.__class__)
            return False
        os.kill(int(pid), signal.SIGINT)
        return True

    def join(self, timeout: float = 30) -> None:
        """Wait for the runs Dagster's launcher started and for the ones forked here to finish (an
        instance made by ``dagster.instance_for_test`` joins its launcher when it closes)."""
        super().join(timeout)
        if not self._forked or not self.has_instance:
            return
        instance, deadline = self.platform_instance, time.monotonic() + timeout
        while active := [run_id for run_id in self._forked
                         if (run := instance.get_run_by_id(run_id)) is not None and not run.is_finished]:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"Timed out waiting for these runs to finish: {active!r}")
            time.sleep(0.05)

    def dispose(self) -> None:
        with self._lock:
            for parent in self._parents.values():
                parent.close()
            self._parents.clear()
        super().dispose()


class _Parent:
    """One ``run_worker`` parent process and its two pipes."""

    def __init__(self, instance: Any, origin: Any) -> None:  # DagsterInstance, origin
        self.process = subprocess.Popen(
            [origin.executable_path, "-m", "transfer_platform.orchestration.speed.run_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.buffer = b""
        self._send({"instance_ref": serialize_value(instance.get_ref()), "origin": serialize_value(origin)})

    def alive(self) -> bool:
        return self.process.poll() is None

    def _send(self, message: dict) -> None:
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def request(self, run_id: str, timeout: float) -> dict:
        """Ask for ``run_id``'s worker: the parent's answer (``pid``, or ``refused``), or
        ``failed`` (why; ``ended``: the parent is gone)."""
        ended = {"failed": f"its parent process (pid {self.process.pid}) ended", "ended": True}
        try:
            self._send({"run_id": run_id})
        except OSError:
            return ended
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                answer = json.loads(line)
                if answer.get("run_id") == run_id:
                    return answer
                _LOG.debug("run worker parent %s: %s", self.process.pid, answer)
            left = deadline - time.monotonic()
            if left <= 0 or not ready([fd], left):
                return {"failed": f"its parent process (pid {self.process.pid}) did not answer in {timeout} s"}
            chunk = os.read(fd, 65536)
            if not chunk:
                return ended
            self.buffer += chunk

    def close(self) -> None:
        """Let the parent go (it exits once its running workers are reaped; they run on)."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        threading.Thread(target=self.process.wait, daemon=True).start()
