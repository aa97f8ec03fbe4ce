"""The preloaded parent of :class:`~transfer_platform.orchestration.speed.launcher.PreloadedRunLauncher`'s
run workers: ``python -m transfer_platform.orchestration.speed.run_worker``, started by the launcher.

Dagster's code server starts every run in a new ``spawn``-ed Python (hard-coded in its
``StartRun``), which imports Dagster, the code location and the data path's libraries again: about
2.5 s of a small incremental's 5.5 s through the daemon on this 2-core machine, and as much CPU per
run, which under sustained load is what limits transfers per hour. This process pays that once
(a fork server, as the resident command process: :mod:`transfer_platform.runtime.forks`):

1. its first line on stdin is ``{"instance_ref": ..., "origin": ...}`` (serialized by Dagster's
   serdes): the Dagster instance and the code location (a ``RepositoryPythonOrigin``) it serves;
2. it imports Dagster's run machinery (``dagster_internals.WARM_MODULES``), the data path's
   libraries (:data:`WARM_IMPORTS`) and the code location's definitions, opens nothing (no thread,
   no connection: it forks), and says ``{"ready": ..., "threads": n}`` on its control stream (its
   original stdout; its own output and its runs' go to stderr);
3. for each ``{"run_id": ...}`` line it hands the run to a run worker, answers ``{"run_id", "pid",
   "started"}`` (``started``: the worker's start time in ``/proc``, which tells it from a later
   process with the same pid), and the worker executes the run exactly as ``dagster api
   execute_run`` does (Dagster's private ``_execute_run_command_body``, through
   :mod:`~transfer_platform.orchestration.speed.dagster_internals`), with Dagster's run cancellation
   thread (a run marked CANCELING from elsewhere is interrupted), then exits. The worker is forked
   ahead of its run (the *spare*, forked when the parent is ready and after each hand-over): it
   opens the instance and builds :data:`WARM_JOB` while no run waits for it, then reads its run's
   id from a pipe (a spare that ended is replaced by a fork at the run);
4. a worker that dies before its run finished (SIGKILL, the OOM killer) is reported as Dagster's
   code server reports it (the engine event "Run execution process for <id> was terminated by
   signal ..." and the run failed), which ``transfer_platform.orchestration.runs.lifecycle`` reads;
5. when its code changed since it imported it (a file of the code location's package or the
   configuration file: :func:`code_stamp`) it answers ``{"run_id", "refused": "stale"}`` without
   forking and takes no more runs; the launcher starts a fresh one for that run;
6. it exits when its stdin closes (the launcher's process is gone); running workers go on, as
   runs of a code server outlive the daemon.

A fork carries no thread into the worker: the parent refuses to fork if a thread runs
(``"refused": "threads"``), and the launcher then uses Dagster's own path for that code location.
So it does (``"refused": "unsupported"``, ``"why"``) when the code location's Dagster is not one
the worker is proven on, or lacks a private name it uses (``dagster_internals.fork_refusal``).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, TextIO

from transfer_platform import vendors
from transfer_platform.runtime.forks import ForkServer, package_stamp, ready, warm

#: modules a transfer imports, imported once by the parent after Dagster's run machinery
#: (``dagster_internals.WARM_MODULES``, private modules named only there); a missing one is skipped.
#: The last ones a worker imported itself, in opening its instance: ``upath.core`` (Dagster's
#: instance reference asks for ``upath.UPath``, imported lazily), the storage's driver, the
#: coordinator and its compute-log manager (a profile of the workers: ~10% of their samples)
WARM_IMPORTS = ("transfer_platform.transfers.runner", *vendors.warm_modules(), "pyspark.sql.connect.session",
                "pyarrow", "pyarrow.parquet", "pyarrow.csv", "pyarrow.acero", "pyarrow.dataset", "encodings.idna",
                "pandas", "upath.core", "psycopg2.extras", "transfer_platform.orchestration.scheduling.coordinator",
                "transfer_platform.orchestration.speed.compute_logs")
#: the job a spare worker builds before its run comes (the job of the platform's transfers: the
#: sensor's runs and ``transfer --enqueue``); a run of another job builds its own, as before
WARM_JOB = "transfer"
SPARE = "spare"  # Parent.children's mark of the spare worker (no run yet)
WORKER_TAG = ".dagster/transfer_platform/run_worker"  # "<host> <pid> <start time>"; hidden (run_tags.HIDDEN_PREFIX)


def process_start_time(pid: int) -> str | None:
    """The start time of ``pid`` in ``/proc`` (clock ticks since boot), None if it is gone."""
    from transfer_platform.orchestration.speed.dagster_fixes import process_stat

    fields = process_stat(pid)
    return fields[19] if fields else None


def code_stamp(module: str) -> list:
    """What, changed, makes imported code stale: the files of ``module``'s top package (names,
    sizes, modification times) and the configuration file ``transfer_platform`` reads."""
    stamp = package_stamp(module)
    with suppress(Exception):  # no configuration file: the run reports it
        from transfer_platform.config.parsing import find_config_path

        config = find_config_path(None)
        status = Path(config).stat()
        stamp.append([str(config), status.st_size, status.st_mtime_ns])
    return stamp


class Parent(ForkServer[str | None]):
    """The preloaded process: reads requests, forks run workers, reaps them; its children: pid ->
    run id (None: a crash reporter; SPARE: the spare worker, waiting for a run)."""

    def __init__(self, control: TextIO) -> None:
        super().__init__(lambda: code_stamp(self.module))
        self.control = control
        self.module = "transfer_platform"
        self.spare: tuple[int, int] | None = None  # the spare worker: (pid, the pipe its run id goes to)

    def say(self, message: dict[str, Any]) -> None:
        self.control.write(json.dumps(message) + "\n")
        self.control.flush()

    def main(self) -> None:
        from dagster import deserialize_value

        from transfer_platform.orchestration.speed.dagster_internals import fork_refusal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopped by its stdin closing; workers are not
        requests = Lines(sys.stdin.fileno())
        header = requests.next(on_wait=lambda: None)
        if header is None:
            return
        header = json.loads(header)
        self.instance_ref = deserialize_value(header["instance_ref"])  # an InstanceRef
        self.origin = deserialize_value(header["origin"])  # a RepositoryPythonOrigin
        self.unsupported = fork_refusal()  # this Python's Dagster: proven, with what the worker uses
        self.module = getattr(self.origin.code_pointer, "module", None) or "transfer_platform"
        self.remember_code()
        started = time.perf_counter()
        preload(self.origin)
        self.say({"ready": round(time.perf_counter() - started, 3), "threads": threading.active_count()})
        self.fork_spare()
        while (line := requests.next(on_wait=self.reap)) is not None:
            if line.strip() and not self.start(json.loads(line)["run_id"]):
                break
        self.drop_spare()
        self.reap_all()  # stdin closed: the workers outlive us, but are reaped while we wait

    def start(self, run_id: str) -> bool:
        """Fork the worker of ``run_id``; False when the parent must go (its code is stale, or a
        thread it would carry into the fork started)."""
        if self.unsupported:
            self.say({"run_id": run_id, "refused": "unsupported", "why": self.unsupported})
            return False
        refused = self.refusal()
        if refused:
            self.say({"run_id": run_id, "refused": refused})
            return False
        pid = self.hand_to_spare(run_id)
        if pid is None:

            def child() -> int:
                self.in_child()
                return execute(self.instance_ref, run_id)

            pid = self.fork(child)
        self.children[pid] = run_id
        self.say({"run_id": run_id, "pid": pid, "started": process_start_time(pid)})
        self.fork_spare()  # for the next run
        return True

    def in_child(self) -> None:
        """In a fork: let go of the parent's streams (the launcher sees them end with the parent)."""
        os.close(self.control.fileno())
        if self.spare is not None:
            os.close(self.spare[1])

    def fork_spare(self) -> None:
        """Fork the next run's worker ahead of its run: it opens the instance meanwhile (most of
        a worker's start) and then waits for its run's id (:func:`execute`)."""
        if self.spare is not None or self.unsupported or threading.active_count() > 1:
            return
        read, write = os.pipe()

        def child() -> int:
            os.close(write)
            self.in_child()
            return execute(self.instance_ref, None, waiting=read, origin=self.origin)

        pid = self.fork(child)
        os.close(read)
        self.spare = (pid, write)
        self.children[pid] = SPARE

    def hand_to_spare(self, run_id: str) -> int | None:
        """Give ``run_id`` to the spare worker: its pid, None when there is none (or it is gone)."""
        self.reap()
        if self.spare is None:
            return None
        pid, write = self.spare
        self.spare = None
        try:
            os.write(write, f"{run_id}\n".encode())
        except OSError:  # it ended (reaped later): fork one for this run
            return None
        finally:
            os.close(write)
        return pid

    def drop_spare(self) -> None:
        """The spare worker sees its pipe end, and exits without a run."""
        if self.spare is not None:
            os.close(self.spare[1])
            self.spare = None

    def ended(self, pid: int, mark: str | None, status: int) -> None:
        """A worker ended; one that ended badly is reported by a short-lived fork (so this
        process never opens the instance, and stays without threads or connections to fork)."""
        if mark == SPARE and self.spare is not None and self.spare[0] == pid:
            self.drop_spare()  # it ended before it had a run: the next run forks its own
            return
        code = os.waitstatus_to_exitcode(status)
        if mark and mark != SPARE and code != 0:

            def reporter() -> int:
                self.in_child()
                _report_crash(self.instance_ref, mark, code)
                return 0

            self.children[self.fork(reporter)] = None


class Lines:
    """Lines of a file descriptor, read unbuffered (a forked worker must not inherit read-ahead),
    calling ``on_wait()`` every 0.5 s while none comes."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def next(self, on_wait: Callable[[], None]) -> str | None:
        while b"\n" not in self.buffer:
            readable = ready([self.fd], 0.5)
            on_wait()
            if readable:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return None
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


def preload(origin: Any) -> None:  # a RepositoryPythonOrigin
    """Import what a run imports; nothing here may start a thread or open a connection."""
    from transfer_platform.orchestration.speed import dagster_internals

    warm((*dagster_internals.WARM_MODULES, *WARM_IMPORTS), skipped=Exception)
    with suppress(Exception):  # a code location that does not load fails its run, with Dagster's error
        dagster_internals.load_repository(origin, WARM_JOB)


def execute(instance_ref: Any, run_id: str | None, waiting: int | None = None,  # an InstanceRef
            origin: Any = None) -> int:  # a RepositoryPythonOrigin
    """In the forked worker: the run, as ``dagster api execute_run`` executes it; the exit code.
    A spare worker (``waiting``: its pipe from the parent) opens the instance and builds the
    :data:`WARM_JOB` of ``origin`` first, then reads its run's id there (the pipe's end without
    one: the parent went, it exits)."""
    try:
        # `kill -USR1 <worker>`: every thread's stack to the run's stderr (its compute log), for a
        # run that seems stuck; the worker goes on
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # the launcher's requests are the parent's
        os.close(devnull)
        from transfer_platform.orchestration.speed import dagster_internals as internals
        from transfer_platform.orchestration.speed import queue_wake

        with internals.instance_for_cli(instance_ref) as instance:
            # the run coordinator, once made, keeps this process's storage connections open when
            # dagster.yaml says so (pooled_storage_connections): a run's ~20 storage queries then
            # share a connection per storage instead of opening one each
            instance.run_coordinator  # noqa: B018
            if waiting is not None:
                with suppress(Exception):  # a code location without it: its runs build their own
                    internals.build_job(origin, WARM_JOB)
                run_id = (Lines(waiting).next(lambda: None) or "").strip()  # "": the pipe ended without one
                if not run_id:
                    return 0
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a spare ignored it, as the parent
            with internals.capture_interrupts():
                _watch_dagster_dev(instance, run_id)
                stop = watch_for_cancel(instance, run_id)
                try:
                    internals.execute_run(run_id, instance)
                finally:
                    stop.set()
                    queue_wake.notify(instance)  # its slot is free: the queue passes now
        return 0
    except BaseException:  # noqa: BLE001 - a worker never returns into the parent's loop
        import traceback

        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def watch_for_cancel(instance: Any, run_id: str) -> threading.Event:  # a DagsterInstance
    """A run marked CANCELING (or CANCELED, or FAILURE) from elsewhere, another machine's
    ``terminate`` among them, is interrupted at the next look of a thread, every
    ``run_monitoring.cancellation_thread_poll_interval_seconds`` (10 s by default), as Dagster's
    cancellation thread does in ``dagster api execute_run``. Its first look is one interval after
    the start, and so is the instance it looks with opened: Dagster's opens a second instance as
    it starts (a storage connection, ~10% of a worker's CPU on a small incremental), which a run
    shorter than the interval never uses. Set the returned event to stop it."""
    from dagster import DagsterInstance, DagsterRunStatus

    stop = threading.Event()
    ref, interval = instance.get_ref(), instance.cancellation_thread_poll_interval_seconds
    ended = (DagsterRunStatus.CANCELING, DagsterRunStatus.CANCELED, DagsterRunStatus.FAILURE)

    def watch() -> None:
        if stop.wait(interval):
            return
        with DagsterInstance.from_ref(ref) as watching:
            while not stop.is_set():
                run = watching.get_run_by_id(run_id)
                if run is not None and run.status in ended:
                    sys.stderr.write(f"Detected run status {run.status}, sending interrupt to main thread\n")
                    os.kill(os.getpid(), signal.SIGINT)
                    return
                stop.wait(interval)

    threading.Thread(target=watch, name="kill-on-cancel", daemon=True).start()
    return stop


def _watch_dagster_dev(instance: Any, run_id: str) -> None:  # a DagsterInstance
    """Under ``dagster dev``: cancel the run when ``dagster dev`` is gone, as its code servers'
    runs are (``dagster_fixes.install_dev_stop``)."""
    if os.environ.get("DAGSTER_IS_DEV_CLI") != "1":
        return
    from transfer_platform.orchestration.speed import dagster_fixes

    def watch() -> None:
        while not dagster_fixes.dev_has_exited():
            time.sleep(0.5)
        with suppress(Exception):
            run = instance.get_run_by_id(run_id)
            if run is not None and not run.is_finished:
                instance.report_run_canceling(run, message=dagster_fixes.DEV_STOPPED)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="dagster-dev-watch", daemon=True).start()


def _report_crash(instance_ref: Any, run_id: str, exit_code: int) -> None:
    """A worker that died with its run unfinished: failed, as Dagster's code server says it."""
    from dagster import DagsterInstance

    from transfer_platform.orchestration.speed.dagster_internals import run_crash_explanation

    with suppress(Exception), DagsterInstance.from_ref(instance_ref) as instance:
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return
        message = run_crash_explanation(prefix=f"Run execution process for {run_id}", exit_code=exit_code)
        instance.report_engine_event(message, run)
        instance.report_run_failed(run)


def main() -> None:
    control = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # print() of the code and of the runs goes to stderr; stdout is the launcher's
    Parent(control).main()


if __name__ == "__main__":
    main()
