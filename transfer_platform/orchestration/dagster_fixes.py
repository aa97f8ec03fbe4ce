"""Two fixes of Dagster behaviour (patches of private modules), installed by :func:`install`.

1. The cron tick at the Unix epoch (below); 2. runs left going when ``dagster dev`` stops
(:func:`install_dev_stop`, see its docstring).

Dagster 1.13's ``_find_hourly_schedule_time`` (``dagster/_utils/schedules.py``), which walks every
minute grid of several ticks an hour (``*/2 * * * *`` ... ``*/30 * * * *``), keeps the earliest
candidate tick with ``final_timestamp = cand if not final_timestamp else min(...)``: a candidate
at timestamp 0 is falsy and is replaced by the next one. So the tick 1970-01-01T00:00Z never
exists, and a model configured to start at epoch 0 on such a grid got a first partition beginning
at 00:02 (or 00:15...): the configured start was in no partition.

This is a last resort (STYLE: patching Dagster's private modules), kept as small as possible: the
original function runs, and only when the tick it skipped is timestamp 0 itself (the search
crossed 0 and minute 0 of the hour is on the grid) is that tick returned instead. It is installed
when ``transfer_platform.orchestration`` is imported, which the code server (definitions), the
webserver and the daemon (the run coordinator named in ``dagster.yaml``) all do, so the three
compute the same partition keys. It installs itself only if the bug is present: once Dagster
fixes it, nothing is patched (``installed()`` says which).
"""

from __future__ import annotations

import datetime
import functools
import itertools
import os
import time
from contextlib import suppress
from pathlib import Path

_PATCHED = "_transfer_platform_epoch_fix"


def _epoch_tick_is_dropped() -> bool:
    from dagster._utils.schedules import cron_string_iterator

    ticks = itertools.islice(cron_string_iterator(-120, "*/2 * * * *", "UTC"), 2)
    return [t.timestamp() for t in ticks] != [-120, 0]


def install() -> None:
    _install_epoch_fix()
    if os.environ.get("DAGSTER_IS_DEV_CLI") == "1":  # set by `dagster dev` for everything it starts
        install_dev_stop()


def _install_epoch_fix() -> None:
    from dagster._utils import schedules

    if getattr(schedules._find_hourly_schedule_time, _PATCHED, False) or not _epoch_tick_is_dropped():
        return
    original = schedules._find_hourly_schedule_time

    @functools.wraps(original)
    def find_hourly_schedule_time(minutes, date, ascending, already_on_boundary,
                                  use_timezone_minute_resolution):
        found = original(minutes, date, ascending, already_on_boundary, use_timezone_minute_resolution)
        epoch = datetime.datetime.fromtimestamp(0, tz=date.tzinfo)
        crossed = (date.timestamp() < 0 < found.timestamp() if ascending
                   else found.timestamp() < 0 < date.timestamp())
        if crossed and epoch.minute in minutes:
            return epoch
        return found

    setattr(find_hourly_schedule_time, _PATCHED, True)
    schedules._find_hourly_schedule_time = find_hourly_schedule_time


def installed() -> bool:
    from dagster._utils import schedules

    return bool(getattr(schedules._find_hourly_schedule_time, _PATCHED, False))


# -- 2. runs left going when `dagster dev` stops ---------------------------------------------------

_DEV_PATCHED = "_transfer_platform_dev_stop"
DEV_STOPPED = ("dagster dev stopped: the run is cancelled (the window in progress is not committed; "
               "the next transfer resumes from the last committed watermark)")
_dev_process: list[tuple[int, str] | None] = []  # this process's `dagster dev` (pid, start time), once found


def install_dev_stop() -> None:
    """Cancel the runs of a code server whose ``dagster dev`` is gone.

    ``dagster dev`` stops (SIGTERM, SIGINT) by telling its code servers to shut down and exiting
    without waiting for them. Dagster's code server (``DagsterApiServer``) shuts down "once
    executions finish": it never tells its run workers, so the code server, the run worker and its
    Spark JVM went on, orphaned, until the transfer ended (hours for a backfill), the run finishing
    with no ``dagster dev`` left to show it, or STARTED until the ORPHANED sweep if someone killed
    them (dagster-io/dagster#3839 for the daemon).

    Patched: the code server's cleanup tick (``_check_for_orphaned_runs``, every 0.5 s) first looks
    whether the ``dagster dev`` process it descends from has exited; if so, it cancels each of its
    runs as ``transfer-platform cancel`` does (the run is marked CANCELING, with :data:`DEV_STOPPED`
    as its message, and its termination event set): the run worker is interrupted, the window in
    progress is not committed, the run ends CANCELED (KILLED in our lifecycle), and the code server
    exits with its last run, so the whole tree is gone within seconds. A code location reloaded in
    the UI (its old code server is shut down while ``dagster dev`` lives) still lets its runs finish.

    Only under ``dagster dev`` (``DAGSTER_IS_DEV_CLI``, which it sets for all its children, and a
    ``dagster dev`` ancestor in ``/proc``); elsewhere nothing changes (production code servers drain
    as Dagster intends). Installed only while the private names it relies on exist
    (``dev_stop_installed()`` says so; ``test_dagster_dev_shutdown`` fails if not). A ``dagster dev``
    that ignores SIGTERM altogether is another Dagster bug: see ``transfer_platform/dagster_dev.py``.
    """
    from dagster._grpc.server import DagsterApiServer

    original = getattr(DagsterApiServer, "_check_for_orphaned_runs", None)
    if original is None or getattr(original, _DEV_PATCHED, False):
        return

    @functools.wraps(original)
    def check_for_orphaned_runs(self) -> None:
        if _dev_has_exited():
            with suppress(Exception):  # never break the code server's cleanup tick
                _cancel_runs(self)
        original(self)

    setattr(check_for_orphaned_runs, _DEV_PATCHED, True)
    DagsterApiServer._check_for_orphaned_runs = check_for_orphaned_runs


def dev_stop_installed() -> bool:
    from dagster._grpc.server import DagsterApiServer

    return bool(getattr(getattr(DagsterApiServer, "_check_for_orphaned_runs", None), _DEV_PATCHED, False))


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name: [state, ppid, ...], None if gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields


def _find_dev_process() -> tuple[int, str] | None:
    if os.environ.get("DAGSTER_IS_DEV_CLI") != "1":
        return None
    pid = os.getppid()
    while pid > 1:
        fields = _stat(pid)
        if fields is None:
            return None
        try:
            args = [os.path.basename(a) for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        except OSError:
            return None
        if any(a == b"dagster" and b == b"dev" for a, b in itertools.pairwise(args)):
            return pid, fields[19]  # its start time tells it from a later process with its pid
        pid = int(fields[1])
    return None


def _dev_has_exited() -> bool:
    if not _dev_process:
        _dev_process.append(_find_dev_process())
    if _dev_process[0] is None:
        return False
    pid, started = _dev_process[0]
    fields = _stat(pid)
    return fields is None or fields[19] != started


def _cancel_runs(server) -> None:  # a DagsterApiServer
    from dagster import DagsterInstance

    with server._execution_lock:
        running = [(run_id, server._executions[run_id][1], event)
                   for run_id, event in server._termination_events.items() if not event.is_set()]
    for run_id, instance_ref, event in running:
        with suppress(Exception), DagsterInstance.from_ref(instance_ref) as instance:
            run = instance.get_run_by_id(run_id)
            if run is not None and not run.is_finished:
                instance.report_run_canceling(run, message=DEV_STOPPED)
        with server._execution_lock:
            event.set()
            server._termination_times[run_id] = time.time()
