"""Three fixes of Dagster behaviour and two savings (patches of private modules), installed by
:func:`install` and, the daemon's, by the run coordinator.

Nothing is patched when this module is imported: each fix is installed, idempotently, by what
needs it (below). The private names they patch are reached through
:mod:`~transfer_platform.orchestration.speed.dagster_internals`; a Dagster without them gets a warning
naming what it lacks, and the fix is not installed.

1. The cron tick at the Unix epoch (below); 2. runs left going when ``dagster dev`` stops
(:func:`install_dev_stop`, see its docstring); 3. the asset graph's dependencies built in
quadratic time (:func:`install_dep_graph_fix`, see its docstring); 4. the code server's repository
snapshot, made again for every request and only once asked (:func:`install_snapshot_once`); 5. the
daemon's refresh of unchanged code servers every minute (:func:`install_workspace_refresh`).

Dagster 1.13's ``_find_hourly_schedule_time`` (``dagster/_utils/schedules.py``), which walks every
minute grid of several ticks an hour (``*/2 * * * *`` ... ``*/30 * * * *``), keeps the earliest
candidate tick with ``final_timestamp = cand if not final_timestamp else min(...)``: a candidate
at timestamp 0 is falsy and is replaced by the next one. So the tick 1970-01-01T00:00Z never
exists, and a model configured to start at epoch 0 on such a grid got a first partition beginning
at 00:02 (or 00:15...): the configured start was in no partition.

This is a last resort (STYLE: patching Dagster's private modules), kept as small as possible: the
original function runs, and only when the tick it skipped is timestamp 0 itself (the search
crossed 0 and minute 0 of the hour is on the grid) is that tick returned instead. It is installed
(:func:`install_epoch_fix`) by what computes partition keys: the partitions of the definitions
(``orchestration/catalog/partitions.py``: the code server, and any process building them) and the run
coordinator named in ``dagster.yaml`` when the webserver or the daemon starts it, so the three
compute the same partition keys. It installs itself only if the bug is present: once Dagster
fixes it, nothing is patched (``installed()`` says which).
"""

from __future__ import annotations

import datetime
import functools
import itertools
import os
import threading
import time
from contextlib import suppress
from pathlib import Path

from dagster import TimeWindowPartitionsDefinition, deserialize_value

from transfer_platform.orchestration.speed import dagster_internals

_PATCHED = "_transfer_platform_epoch_fix"
_DEP_PATCHED = "_transfer_platform_dep_graph_fix"
_looked: set[str] = set()  # the fixes this process has looked at (each is installed once)


def _epoch_tick_is_dropped() -> bool:
    """Whether Dagster's partitions of a two-minute grid from 23:58 the day before the epoch lack
    the epoch's own tick (asked through the public partitions, which Dagster computes by the
    function the fix wraps)."""
    start = datetime.datetime.fromtimestamp(-120, tz=datetime.UTC)
    partitions = TimeWindowPartitionsDefinition(start=start, end=start + datetime.timedelta(minutes=4),
                                                cron_schedule="*/2 * * * *", fmt="%Y-%m-%d-%H:%M")
    return partitions.get_partition_keys() != ["1969-12-31-23:58", "1970-01-01-00:00"]


_REFRESH_PATCHED = "_transfer_platform_workspace_refresh"


def install_workspace_refresh() -> None:
    """Keep the daemon's code locations while their code servers are the same ones.

    Dagster's daemon refreshes its workspace every 60 s (its controller's
    ``RELOAD_WORKSPACE_INTERVAL``): for each location it fetches the repository snapshot again
    from its code server and decodes it (8-9 MB for a shard of 250 destinations x 10 models), and
    its sensor's next tick builds the remote asset graph again (~1.2 CPU-seconds of the first tick
    at 1,000 destinations in one location). With code servers started beside the daemon
    (``grpc_server`` entries: ``deploy/workspace.servers.yaml``) nothing changed unless a server
    restarted or reloaded its code, and each of those is a new server id, which Dagster's watch
    thread of each location already notices and refreshes that location for.

    Patched: the refresh is skipped while the workspace holds exactly what workspace.yaml names,
    every location from a code server started beside the daemon, loaded, and answering with the
    server id its location recorded (one small gRPC call each); otherwise (a server restarted or
    reloaded, one unreachable, a location in error, an entry added to workspace.yaml, locations the
    daemon starts itself: ``python_module``) Dagster's own refresh runs, as before. Installed by the
    run coordinator (every process whose instance names it; only the daemon refreshes its
    workspace), on the proven Dagster versions, once per process."""
    if not _first_look("workspace_refresh") or not dagster_internals.proven():
        return
    refresh = dagster_internals.WORKSPACE_REFRESH.get()
    if getattr(refresh, _REFRESH_PATCHED, False):
        return

    @functools.wraps(refresh)
    def refresh_workspace(self) -> None:
        with suppress(Exception):  # a server that does not answer: Dagster's refresh reports it
            if dagster_internals.same_code_servers(self):
                return
        refresh(self)

    setattr(refresh_workspace, _REFRESH_PATCHED, True)
    dagster_internals.WORKSPACE_REFRESH.replace(refresh_workspace)


def workspace_refresh_installed() -> bool:
    return getattr(dagster_internals.WORKSPACE_REFRESH.get(), _REFRESH_PATCHED, False)


def install() -> None:
    """Every fix this process needs: the definitions' (the code server's) entry point."""
    install_epoch_fix()
    install_dep_graph_fix()
    install_snapshot_once()
    if os.environ.get("DAGSTER_IS_DEV_CLI") == "1":  # set by `dagster dev` for everything it starts
        install_dev_stop()


def install_dep_graph_fix() -> None:
    """Dagster 1.13's ``generate_asset_dep_graph`` (``dagster/_core/selector/subset_selector.py``),
    which ``AssetGraph.from_assets`` calls when the definitions' asset graph is built, adds each
    asset to its upstream asset's downstream set with ``downstream.get(key, set()) | {asset}``:
    a new set, a copy of all the others, for each. Every recipient's asset of a model depends on
    the model's one source table, so at 1,000 destinations x 10 models that is 10 sources whose
    sets are copied 1,000 times each, ~2 of the code location's CPU-seconds (one location;
    a tenth of it in shards of 250). Replaced, once per process, by the same loop adding to the set
    in place: the same graph, the same keys in the same order (a test compares the two). Only on
    the Dagster versions the platform is proven on (``PROVEN_DAGSTER_VERSIONS``): another keeps its
    own function, slower but its own."""
    if not _first_look("dep_graph") or not dagster_internals.proven():
        return
    original = dagster_internals.DEP_GRAPH.get()
    if getattr(original, _DEP_PATCHED, False):
        return

    @functools.wraps(original)
    def generate_asset_dep_graph(assets_defs):
        upstream: dict = {}
        downstream: dict = {}
        for assets_def in assets_defs:
            for asset_key in assets_def.keys:
                upstream[asset_key] = set()
                downstream.setdefault(asset_key, set())
                for dep in assets_def.specs_by_key[asset_key].deps:
                    upstream[asset_key].add(dep.asset_key)
                    downstream.setdefault(dep.asset_key, set()).add(asset_key)
        return {"upstream": upstream, "downstream": downstream}

    setattr(generate_asset_dep_graph, _DEP_PATCHED, True)
    generate_asset_dep_graph.original = original  # type: ignore[attr-defined]
    for fenced in (dagster_internals.DEP_GRAPH, dagster_internals.GRAPH_DEP_GRAPH):  # its definition and its import
        fenced.replace(generate_asset_dep_graph)


def dep_graph_fix_installed() -> bool:
    return getattr(dagster_internals.DEP_GRAPH.get(), _DEP_PATCHED, False)


def _first_look(fix: str) -> bool:
    """True the first time ``fix`` is looked at in this process; a Dagster lacking what it patches
    is warned about then."""
    if fix in _looked:
        return False
    _looked.add(fix)
    return not dagster_internals.fallback(fix)  # one warning naming what the fix lacks and what is lost


def install_epoch_fix() -> None:
    """Restore the cron tick at the Unix epoch (the module's docstring), once per process."""
    if not _first_look("epoch_fix") or not _epoch_tick_is_dropped():
        return
    original = dagster_internals.HOURLY_SCHEDULE_TIME.get()
    if getattr(original, _PATCHED, False):
        return

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
    dagster_internals.HOURLY_SCHEDULE_TIME.replace(find_hourly_schedule_time)


def installed() -> bool:
    return not dagster_internals.problems("epoch_fix") and bool(
        getattr(dagster_internals.HOURLY_SCHEDULE_TIME.get(), _PATCHED, False))


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
    as Dagster intends). Installed by the definitions (the code server loads them) under ``dagster
    dev``, and only while the private names it relies on exist (a warning names a missing one;
    ``dev_stop_installed()`` says so; ``test_dagster_dev_shutdown`` fails if not). A ``dagster dev``
    that ignores SIGTERM altogether is another Dagster bug: see ``transfer_platform/dagster_dev.py``.
    """
    if not _first_look("dev_stop"):
        return
    original = dagster_internals.orphan_check()
    if original is None or getattr(original, _DEV_PATCHED, False):
        return

    @functools.wraps(original)
    def check_for_orphaned_runs(self) -> None:
        if dev_has_exited():
            with suppress(Exception):  # never break the code server's cleanup tick
                _cancel_runs(self)
        original(self)

    setattr(check_for_orphaned_runs, _DEV_PATCHED, True)
    dagster_internals.ORPHAN_CHECK.replace(check_for_orphaned_runs)


def dev_stop_installed() -> bool:
    return bool(getattr(dagster_internals.orphan_check(), _DEV_PATCHED, False))


def process_stat(pid: int) -> list[str] | None:
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
        fields = process_stat(pid)
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


def dev_has_exited() -> bool:
    """Whether the ``dagster dev`` this process descends from has exited (False if there is none)."""
    if not _dev_process:
        _dev_process.append(_find_dev_process())
    if _dev_process[0] is None:
        return False
    pid, started = _dev_process[0]
    fields = process_stat(pid)
    return fields is None or fields[19] != started


def _cancel_runs(server) -> None:  # a DagsterApiServer
    from dagster import DagsterInstance

    for run_id, instance_ref, event in dagster_internals.running_executions(server):
        with suppress(Exception), DagsterInstance.from_ref(instance_ref) as instance:
            run = instance.get_run_by_id(run_id)
            if run is not None and not run.is_finished:
                instance.report_run_canceling(run, message=DEV_STOPPED)
        dagster_internals.interrupt_execution(server, run_id, event, time.time())


# -- 4. the code server's repository snapshot, once -------------------------------------------------

_SNAPSHOT_PATCHED = "_transfer_platform_snapshot_once"
_AHEAD = "_transfer_platform_snapshots_ahead"  # set on a code server once its snapshots are under way
#: (id of the repository, deferred job snapshots) -> (the repository, its serialized snapshot)
_snapshots: dict[tuple[int, bool], tuple[object, str]] = {}
_snapshot_locks: dict[tuple[int, bool], threading.Lock] = {}
_snapshots_lock = threading.Lock()


def install_snapshot_once() -> None:
    """Make each repository's snapshot once per code server, ahead of the first request.

    Dagster's code server answers every ExternalRepository request (the webserver loading the
    location, the daemon loading it, each reload of either) by making ``RepositorySnap.from_def``
    of the repository again and serializing it: ~1.3 CPU-seconds at 250 destinations x 10 models,
    ~5 at 1,000, for a definition that does not change while the process lives (a reload is a new
    code server process). And it makes it only when asked: the webserver loads its locations one
    after another, so at four shards their snapshots were made one after another too, on a machine
    whose code servers had started side by side.

    Patched: the answer is made once per repository and kept (the same text Dagster's answer
    makes: a test compares them; an answer that fails is not kept, Dagster's own error answer is
    given), and the code server's cleanup tick (``_check_for_orphaned_runs``, 0.5 s after it
    starts serving) starts a thread that makes each loaded repository's snapshot with deferred job
    snapshots (what the webserver and the daemon ask for) before anyone asks; a request arriving
    meanwhile waits for it rather than making another. Only in a code server (nothing else has its
    cleanup tick), only on the proven Dagster versions, once per process."""
    if not _first_look("snapshot_once") or not dagster_internals.proven():
        return
    answer = dagster_internals.REPOSITORY_SNAPSHOT.get()
    tick = dagster_internals.orphan_check()
    if tick is None or getattr(answer, _SNAPSHOT_PATCHED, False):
        return

    @functools.wraps(answer)
    def serialized_repository(self, request) -> str:
        try:
            name = deserialize_value(request.serialized_repository_python_origin).repository_name
            repository = dagster_internals.loaded_repositories(self)[name]
            return repository_snapshot(repository, bool(request.defer_snapshots))
        except Exception:  # noqa: BLE001 -- Dagster's own answer: its error snapshot, logged as it logs it
            return answer(self, request)

    @functools.wraps(tick)
    def check_for_orphaned_runs(self) -> None:
        if not getattr(self, _AHEAD, False):
            setattr(self, _AHEAD, True)
            threading.Thread(target=_snapshots_ahead, args=(list(dagster_internals.loaded_repositories(self).values()),),
                             name="transfer-platform-snapshot", daemon=True).start()
        tick(self)

    for function in (serialized_repository, check_for_orphaned_runs):
        setattr(function, _SNAPSHOT_PATCHED, True)
    dagster_internals.REPOSITORY_SNAPSHOT.replace(serialized_repository)
    dagster_internals.ORPHAN_CHECK.replace(check_for_orphaned_runs)


def snapshot_once_installed() -> bool:
    return bool(getattr(dagster_internals.REPOSITORY_SNAPSHOT.get(), _SNAPSHOT_PATCHED, False))


def repository_snapshot(repository: object, defer_snapshots: bool) -> str:
    """``repository``'s serialized snapshot, made once per process (concurrent callers wait for it)."""
    key = (id(repository), defer_snapshots)
    with _snapshots_lock:
        lock = _snapshot_locks.setdefault(key, threading.Lock())
    with lock:
        kept = _snapshots.get(key)
        if kept is None or kept[0] is not repository:  # another object now has the id: made again
            kept = (repository, dagster_internals.serialized_repository_snapshot(repository, defer_snapshots))
            _snapshots[key] = kept
        return kept[1]


def _snapshots_ahead(repositories: list) -> None:
    for repository in repositories:
        with suppress(Exception):  # a failure is the request's to report, with Dagster's own answer
            repository_snapshot(repository, True)
