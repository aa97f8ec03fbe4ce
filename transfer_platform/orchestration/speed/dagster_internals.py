"""Dagster's private names, behind one door: the upgrade checklist.

Everything of Dagster the platform uses that Dagster does not export (a ``dagster._...`` module, a
private function, a private attribute of one of its classes) is reached through this module and
nowhere else. Each is one :class:`Fenced` entry of :data:`FENCED`: where it lives, what it is for,
which public alternative was checked (and why it does not do), the parameters and attributes we
rely on, and the part of the platform that needs it (:data:`PARTS`).

Upgrading Dagster: bump it in ``uv.lock``, run ``transfer_platform_tests/orchestration/
test_dagster_internals.py`` (one case per entry, naming what is missing or changed), then the
orchestration tests; when they pass, widen :data:`PROVEN_DAGSTER_VERSIONS` (a range) to hold it.
CI's Dagster-next lane (``scripts/dev``) runs those tests on the newest patch of the locked
release line, so a patch that breaks a name is known before anyone upgrades.

A speed kit never stops the service it accelerates. At start-up each part checks its own names
(:func:`fallback`); a part whose names this Dagster lacks falls back to Dagster's own behaviour
and says so in ONE warning per process (:class:`UnprovenDagsterWarning`) naming the missing name
and what is lost (:data:`LOST`), never an ``AttributeError`` in a run nor a daemon that does not
start:

- the preloaded launcher (``launcher.py``): on a Dagster outside :data:`PROVEN_DAGSTER_VERSIONS`,
  or lacking a name its run worker needs, it launches every run by Dagster's own path
  (``DefaultRunLauncher``) instead of forking (:func:`fork_refusal`);
- the run coordinator (``coordinator.py``): is Dagster's ``QueuedRunCoordinator``, its tag limits
  passed through Dagster's own ``tag_concurrency_limits`` once, when it starts;
- the compute-log manager (``compute_logs.py``): Dagster's own capture (the ``tail`` mirror);
- the fixes (``dagster_fixes.py``): not installed; the sensor's repairs: off; ``transfer
  --enqueue`` (a command, not a service): :class:`UnsupportedDagsterError`, a ``ConfigError`` the
  CLI reports as such, naming what its launch lacks.

Public exports are used wherever Dagster has them (``dagster.DefaultRunLauncher``,
``dagster.QueuedRunCoordinator``, ``dagster.SubmitRunContext``, ``dagster.serialize_value`` /
``deserialize_value``), and so are the public methods of what Dagster hands the platform (a
plugin's ``register_instance``, an origin's ``get_job_origin``, a recipe's
``get_repository_definition``): they are not listed here.

The fence has a budget (``test_dagster_internals.FENCED_CAP``, 40): a new private name replaces
another, or carries its written reason (its ``public``: the public alternative checked and why it
does not do) in the change that raises the budget.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import warnings
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from transfer_platform.errors import ConfigError

if TYPE_CHECKING:  # an annotation only (coordinator.py): Dagster does not export it
    from dagster._core.run_coordinator.queued_run_coordinator import RunQueueConfig

DAGSTER_VERSION: str = dagster.__version__
#: The Dagster versions the private mechanisms here are proven on: the contract test and the
#: orchestration tests pass on the version ``uv.lock`` pins and on the newest patch of its release
#: line (CI's Dagster-next lane). The preloaded launcher forks only on these.
PROVEN_DAGSTER_VERSIONS = SpecifierSet(">=1.13.27,<1.14")


def proven(version: str = DAGSTER_VERSION) -> bool:
    """Whether Dagster ``version`` is in :data:`PROVEN_DAGSTER_VERSIONS`."""
    try:
        return Version(version) in PROVEN_DAGSTER_VERSIONS
    except InvalidVersion:
        return False

#: the parts of the platform, each checking its names when it starts
PARTS = {
    "run_worker": "the preloaded launcher's forked run workers (launcher.py, run_worker.py)",
    "coordinator": "the run coordinator's limits (coordinator.py)",
    "queue_wake": "the run queue passed over as soon as a run is queued or ends (queue_wake.py)",
    "compute_logs": "a step's captured stdout/stderr written to its files only (compute_logs.py)",
    "epoch_fix": "the fix of Dagster's cron tick at the Unix epoch (dagster_fixes.py)",
    "dev_stop": "cancelling runs when `dagster dev` stops (dagster_fixes.py)",
    "dep_graph": "the asset graph's dependencies built in linear time (dagster_fixes.py)",
    "snapshot_once": "the code server's repository snapshot made once, ahead of the first request (dagster_fixes.py)",
    "asset_automation": "the transfer_schedule sensor shown as each transfer asset's automation in the UI (sensors.py)",
    "enqueue": "enqueueing a transfer or integrity check: `transfer-platform transfer --enqueue` and the API "
               "(orchestration/runs/workspaces.py)",
    "repair": "self-healing's reading of check evaluations (repair.py)",
    "run_columns": "the runs table's columns looked up once per process (coordinator.py)",
    "workspace_refresh": "the daemon's refresh, each minute, of code servers started beside it skipped while "
                         "every one is the same server (dagster_fixes.py)",
    "sqlite_lock": "Dagster's SQLite storage created and migrated by one process at a time (sqlite_storage.py)",
}

#: what each part loses when it falls back to Dagster's own behaviour (the warning says it)
LOST = {
    "run_worker": "every run starts as Dagster's DefaultRunLauncher starts it, a new Python from the code "
                  "server (~2.5 s more per run, and as much CPU)",
    "coordinator": "runs launched from the UI (Materialize, backfills) are not tagged, so the per-destination, "
                   "per-model and per-source limits do not hold for them (the sensor's runs and `transfer "
                   "--enqueue` carry their tags and stay limited); the configuration's limits are read once, "
                   "when the process starts (a changed limit applies at its restart)",
    "queue_wake": "the queue is passed over at each dequeue interval only, not as soon as a run is queued or ends",
    "compute_logs": "Dagster's own capture: each step's output is also mirrored into the daemon's output by a "
                    "`tail -F` process per stream (~0.05 s and two processes per step)",
    "epoch_fix": "the cron tick at 1970-01-01T00:00Z: a model starting at the epoch on a grid of several ticks "
                 "an hour gets its first partition at the next tick",
    "dev_stop": "runs of a code server go on after `dagster dev` stops, until they end",
    "dep_graph": "the definitions' asset graph is built in time quadratic in the assets that share an upstream "
                 "source table (~2 CPU-seconds of a code location of 1,000 destinations x 10 models)",
    "snapshot_once": "the code server makes its repository snapshot again for each request (the webserver's, "
                     "the daemon's, each reload's: ~1.3 CPU-seconds each at 250 destinations x 10 models), "
                     "and only once asked",
    "asset_automation": "the transfer assets' pages show no automation (the transfer_schedule sensor still "
                        "moves them on schedule; its own page lists its runs), and there is no transfer_assets job",
    "enqueue": "`transfer-platform transfer --enqueue` and the API's transfer and integrity requests (use the "
               "sensor, the UI or `dagster job launch`)",
    "repair": "self-healing: a failed integrity check is not repaired by itself (it stays failed for a "
              "person to look at)",
    "run_columns": "every run event stored and every run read asks the database for the runs table's columns "
                   "again (~1 ms each, about ten times a run)",
    "workspace_refresh": "the daemon fetches and decodes every code location's snapshot again each minute "
                         "(~0.7 CPU-seconds a minute per shard of 250 destinations x 10 models) and its sensor's "
                         "next tick rebuilds the asset graph",
    "sqlite_lock": "Dagster's own SQLite storage: processes of one DAGSTER_HOME that start together may create "
                   "it at once and leave two migration records, after which the instance does not open "
                   "until repaired (python -m transfer_platform.orchestration.instance.sqlite_storage)",
}


class UnsupportedDagsterError(ConfigError):
    """The installed Dagster lacks a private name a part of the platform needs."""

    blame = "platform"


class UnprovenDagsterWarning(UserWarning):
    """A part of the platform falls back to Dagster's own path on this Dagster."""


@dataclass(frozen=True)
class Fenced:
    """One private Dagster name: ``module`` + ``name`` (dotted: ``Class.attribute``)."""

    module: str
    name: str
    parts: tuple[str, ...]
    use: str  # what it is for
    public: str  # the public alternative checked, and why it does not do
    params: tuple[str, ...] = ()  # parameters we pass: the callable must take them
    attributes: tuple[str, ...] = ()  # attributes we read on it
    #: an attribute assigned in ``__init__`` of the class named first in ``name`` (no instance is made
    #: to check it: its assignment ``self.<attribute>`` must be in the class's source)
    instance_attribute: bool = False
    value: Any = None  # a constant whose value we repeat

    @property
    def path(self) -> str:
        return f"{self.module}.{self.name}" if self.name else self.module

    def get(self) -> Any:  # whatever Dagster holds there
        """The object, or :class:`UnsupportedDagsterError` naming it (its shape is the contract
        test's and the start-up checks' business: not checked again at every use)."""
        try:
            return self._resolve()
        except (ImportError, AttributeError) as exc:
            raise UnsupportedDagsterError(self.problem() or f"{self.path}: {exc}") from exc

    def replace(self, function: Callable[..., Any]) -> None:
        """Put ``function`` where Dagster holds the name (a module's function, a class's method):
        what patches Dagster (``dagster_fixes``) replaces, through here."""
        *owners, attribute = self.name.split(".")
        holder: Any = importlib.import_module(self.module)
        for owner in owners:
            holder = getattr(holder, owner)
        setattr(holder, attribute, function)

    def _resolve(self) -> Any:
        found: Any = importlib.import_module(self.module)
        names = self.name.split(".") if self.name else []
        for name in names[:-1] if self.instance_attribute else names:
            found = getattr(found, name)
        return found

    def problem(self, version: str = DAGSTER_VERSION) -> str | None:
        """None when Dagster has it with the shape we rely on, else a sentence naming what lacks."""
        lacks = f"Dagster {version} lacks {self.path}"
        try:
            found = self._resolve()
        except (ImportError, AttributeError):
            return self._sentence(lacks)
        if self.instance_attribute:
            attribute = self.name.split(".")[-1]
            try:
                source = inspect.getsource(found)
            except (OSError, TypeError):
                return self._sentence(f"Dagster {version}'s {self.path} cannot be checked (no source)")
            if f"self.{attribute}" not in source:
                return self._sentence(lacks)
            return None
        if self.params:
            try:
                taken = inspect.signature(found).parameters
            except (TypeError, ValueError):
                return self._sentence(f"Dagster {version}'s {self.path} has no signature")
            if any(p.kind is p.VAR_KEYWORD for p in taken.values()):  # a record: its fields
                taken = dict.fromkeys(getattr(found, "_fields", None) or getattr(found, "model_fields", None)
                                      or taken)
            missing = [p for p in self.params if p not in taken]
            if missing:
                return self._sentence(f"Dagster {version}'s {self.path} does not take {', '.join(missing)} "
                                      f"(it takes {', '.join(taken)})")
        missing = [a for a in self.attributes if not hasattr(found, a)]
        if missing:
            return self._sentence(f"Dagster {version}'s {self.path} has no {', '.join(missing)}")
        if self.value is not None and found != self.value:
            return self._sentence(f"Dagster {version}'s {self.path} is {found!r}, not {self.value!r}")
        return None

    def _sentence(self, what: str) -> str:
        return f"{what}, used for {self.use}; transfer_platform is proven on Dagster {PROVEN_DAGSTER_VERSIONS}"


# -- the upgrade checklist ------------------------------------------------------------------------

EXECUTE_RUN = Fenced(
    "dagster._cli.api", "_execute_run_command_body", ("run_worker",),
    use="executing a queued run in the forked run worker exactly as `dagster api execute_run` does",
    public="`dagster api execute_run` (the CLI: a new Python process, the ~2.5 s the fork saves); "
           "dagster.execute_job creates a new run, while the queued run exists already",
    params=("run_id", "instance", "write_stream_fn", "set_exit_code_on_failure"))
INSTANCE_FOR_CLI = Fenced(
    "dagster._cli.utils", "get_instance_for_cli", ("run_worker",),
    use="opening the instance in the run worker as `dagster api execute_run` opens it (.env loaded)",
    public="DagsterInstance.from_ref (does not load the code location's .env as the CLI does)",
    params=("instance_ref",))
CAPTURE_INTERRUPTS = Fenced(
    "dagster._utils.interrupts", "capture_interrupts", ("run_worker",),
    use="the run worker's SIGINT handling while a run executes, as Dagster's CLI sets it",
    public="none (signal.signal by hand would differ from what Dagster's executor expects)")
CRASH_EXPLANATION = Fenced(
    "dagster._utils", "get_run_crash_explanation", ("run_worker",),
    use="failing a crashed worker's run with the code server's words, which lifecycle.py reads",
    public="none (the sentence is the code server's)",
    params=("prefix", "exit_code"))
RECONSTRUCT_JOB = Fenced(
    "dagster._utils.hosted_user_process", "recon_job_from_origin", ("run_worker",),
    use="building a job's definition in a spare run worker before its run arrives (Dagster keeps the "
        "last one built, which the run's own reconstruction then finds)",
    public="none (the run worker reconstructs its job from the run's origin by this function)",
    params=("origin",))
QUEUE_CONFIG = Fenced(
    "dagster._core.run_coordinator.queued_run_coordinator", "RunQueueConfig", ("coordinator",),
    use="adding the configuration's tag limits to the queue's rules (a NamedTuple: _replace)",
    public="none (dagster does not export RunQueueConfig; dagster.yaml's rules are static)",
    attributes=("_replace", "tag_concurrency_limits"))
QUEUE_PASS = Fenced(
    "dagster._daemon.run_coordinator.queued_run_coordinator_daemon", "QueuedRunCoordinatorDaemon.run_iteration",
    ("queue_wake",),
    use="one pass of the daemon over the run queue, wrapped to start as soon as a run is queued or "
        "ends (queue_wake.prompt_pass) instead of at the next dequeue interval",
    public="none (the daemon's loop waits the whole interval, in half-second steps, whatever happened)",
    params=("workspace_process_context",))
LOCAL_COMPUTE_LOGS = Fenced(
    "dagster._core.storage.local_compute_log_manager", "LocalComputeLogManager", ("compute_logs",),
    use="the base of FileComputeLogManager: Dagster's captured step output in files, read by the UI",
    public="none (dagster exports no compute log manager; compute_logs: in dagster.yaml names its module)",
    attributes=("capture_logs", "get_captured_local_path", "complete_artifact_path"))
REDIRECT_TO_FILE = Fenced(
    "dagster._core.execution.compute_logs", "redirect_to_file", ("compute_logs",),
    use="a step's stdout/stderr redirected to its log file (the file descriptors, as Dagster does), without the "
        "`tail -F` process Dagster's capture adds to mirror it back",
    public="none (a step's output is the process's file descriptors 1 and 2, which Dagster's capture redirects "
           "itself; Python's contextlib.redirect_stdout would miss the JVM's and the C libraries' output)",
    params=("stream", "filepath"))
IO_EXTENSIONS = Fenced(
    "dagster._core.storage.local_compute_log_manager", "IO_TYPE_EXTENSION", ("compute_logs",),
    use="the file extensions of captured stdout and stderr (the names the UI reads)",
    public="none (the UI reads the files by these extensions; writing them here would be a copy that an upgrade may"
           " silently leave behind)")
CAPTURED_CONTEXT = Fenced(
    "dagster._core.storage.compute_log_manager", "CapturedLogContext", ("compute_logs",),
    use="what a compute log manager's capture_logs yields",
    public="none (capture_logs must yield this record: Dagster's step reads its fields)",
    params=("log_key",))
CHECK_STATUS = Fenced(
    "dagster._core.storage.asset_check_execution_record", "AssetCheckExecutionRecordStatus", ("repair",),
    use="telling a finished check evaluation (SUCCEEDED, FAILED) from a planned or skipped one",
    public="none (the records of get_latest_asset_check_execution_by_key carry this enum)",
    attributes=("SUCCEEDED", "FAILED"))
HOURLY_SCHEDULE_TIME = Fenced(
    "dagster._utils.schedules", "_find_hourly_schedule_time", ("epoch_fix",),
    use="the epoch tick fix: wrapped so that the tick at timestamp 0 is not skipped",
    public="none (the bug is inside Dagster's cron arithmetic)",
    params=("minutes", "date", "ascending", "already_on_boundary", "use_timezone_minute_resolution"))
DEP_GRAPH = Fenced(
    "dagster._core.selector.subset_selector", "generate_asset_dep_graph", ("dep_graph",),
    use="the dep_graph fix: replaced by a function returning the same graph in linear time",
    public="none (AssetGraph.from_assets calls it when it builds the definitions' asset graph)",
    params=("assets_defs",))
GRAPH_DEP_GRAPH = Fenced(
    "dagster._core.definitions.assets.graph.asset_graph", "generate_asset_dep_graph", ("dep_graph",),
    use="the same function, as the asset graph's module imported it (replaced there too)",
    public="none (the module imported the function by name: replacing it only where it is defined leaves this copy "
           "unfixed)",
    params=("assets_defs",))
ORPHAN_CHECK = Fenced(
    "dagster._grpc.server", "DagsterApiServer._check_for_orphaned_runs", ("dev_stop", "snapshot_once"),
    use="the code server's cleanup tick, wrapped to cancel its runs once `dagster dev` is gone",
    public="none (the code server never tells its run workers it stops)")
REPOSITORY_SNAPSHOT = Fenced(
    "dagster._grpc.server", "DagsterApiServer._get_serialized_external_repository_data", ("snapshot_once",),
    use="the code server's answer to ExternalRepository (the webserver's and the daemon's load of the "
        "location), wrapped to make the snapshot once per repository and keep it",
    public="none (the code server serializes RepositorySnap.from_def again for each request)",
    params=("self", "request"))
SERVER_LOADED = Fenced(
    "dagster._grpc.server", "DagsterApiServer._loaded_repositories", ("snapshot_once",),
    use="the code server's loaded repositories, whose snapshots are made ahead of the first request",
    public="none (the code server exposes its definitions only through its gRPC answers, which are the snapshots "
           "being made)",
    instance_attribute=True)
LOADED_DEFINITIONS = Fenced(
    "dagster._grpc.server", "LoadedRepositories.definitions_by_name", ("snapshot_once",),
    use="each loaded repository's definition by name",
    public="none (the attribute of SERVER_LOADED's record that holds the definitions)")
REPOSITORY_SNAP = Fenced(
    "dagster._core.remote_representation.external_data", "RepositorySnap.from_def", ("snapshot_once",),
    use="the repository snapshot, made as the code server's answer makes it",
    public="RepositoryDefinition (public) has no snapshot method; a snapshot made otherwise would differ from the "
           "code server's answer",
    params=("repository_def", "defer_snapshots"))
SERVER_LOCK = Fenced(
    "dagster._grpc.server", "DagsterApiServer._execution_lock", ("dev_stop",),
    use="reading the code server's running runs as its own cancel does",
    public="none (the code server's CancelExecution is a gRPC answer, reachable only from a client: the server "
           "cannot call it on itself once `dagster dev` is gone)",
    instance_attribute=True)
SERVER_EXECUTIONS = Fenced(
    "dagster._grpc.server", "DagsterApiServer._executions", ("dev_stop",),
    use="each running run's instance ref (run id -> (process, instance ref))",
    public="none (as _execution_lock: only the code server knows which runs it executes)",
    instance_attribute=True)
SERVER_TERMINATION_EVENTS = Fenced(
    "dagster._grpc.server", "DagsterApiServer._termination_events", ("dev_stop",),
    use="interrupting a run of the code server as its CancelExecution does",
    public="none (as _execution_lock: the event is what the run's process watches)",
    instance_attribute=True)
SERVER_TERMINATION_TIMES = Fenced(
    "dagster._grpc.server", "DagsterApiServer._termination_times", ("dev_stop",),
    use="recording when a run was interrupted, as its CancelExecution does",
    public="none (as _execution_lock: its cleanup tick reads it to kill a run that ignores the interrupt)",
    instance_attribute=True)
GRPC_CLIENT = Fenced(
    "dagster._grpc.client", "DagsterGrpcClient", ("enqueue", "workspace_refresh"),
    use="`transfer --enqueue` with code servers started beside the webserver (grpc_server entries): "
        "asking each which definitions it serves, to make the run in the one holding the recipient; "
        "the daemon's refresh: a code server's id (get_server_id, a new one when it restarts or reloads "
        "its code), compared with the one its loaded location recorded; a code server started for an "
        "enqueue: waiting until it answers (ping), keeping it alive (heartbeat)",
    public="`dagster api grpc-health-check` (says only whether it serves); the workspace's own loading "
           "(fetches every location's whole snapshot to learn the same)",
    params=("port", "socket", "host"), attributes=("list_repositories", "get_server_id", "ping", "heartbeat"))
WORKSPACE_CONTEXT = Fenced(
    "dagster._core.workspace.context", "WorkspaceProcessContext", ("enqueue",),
    use="creating runs (`transfer --enqueue`, the API's transfer and integrity requests) from a code "
        "location loaded from workspace.yaml, as `dagster job launch` loads it, and kept by a long-lived "
        "process (workspaces.py) instead of loaded again for every run",
    public="dagster_graphql.DagsterGraphQLClient.submit_job_execution (needs a running webserver, which "
           "neither the CLI nor the API can assume); `dagster job launch` (loads the workspace, starting "
           "its code server, for every run: seconds each)",
    params=("instance", "workspace_load_target", "version", "read_only", "code_server_log_level"),
    attributes=("create_request_context", "__exit__"))
WORKSPACE_FILE = Fenced(
    "dagster._core.workspace.load_target", "WorkspaceFileTarget", ("enqueue",),
    use="naming workspace.yaml to WorkspaceProcessContext, and reading its location's origin (a code server to "
        "start: its target, its location name)", public="none (its own argument type)",
    params=("paths",), attributes=("create_origins",))
CREATE_RUN = Fenced(
    "dagster._cli.job", "_create_run", ("enqueue",),
    use="creating a run of a job of a loaded code location exactly as `dagster job launch` does (the "
        "job's snapshot, its execution plan from the code server, the job's own tags), before "
        "DagsterInstance.submit_run (public) queues it",
    public="DagsterInstance.create_run (public, but takes the snapshots and origins this function "
           "gathers from the code location: the same steps written again)",
    params=("instance", "code_location", "remote_repo", "remote_job", "run_config", "tags", "op_selection",
            "run_id"))
RUN_STATS_COLUMNS = Fenced(
    "dagster._core.storage.runs.sql_run_storage", "SqlRunStorage.has_run_stats_index_cols", ("run_columns",),
    use="the run storage's look-up of its runs table's start_time and end_time columns, which it makes "
        "anew, by reflection, for every run event it stores and every run it reads: remembered once true",
    public="none (dagster-postgres remembers its index checks, has_built_index, but not this one)")
BACKFILL_ID_COLUMN = Fenced(
    "dagster._core.storage.runs.sql_run_storage", "SqlRunStorage.has_backfill_id_column", ("run_columns",),
    use="the run storage's look-up of its runs table's backfill_id column, made anew for every run it "
        "adds: remembered once true",
    public="none (as has_run_stats_index_cols)")
ASSETS_LISTED_BY = Fenced(
    "dagster._core.definitions.assets.job.asset_layer", "AssetLayer.for_external_job", ("asset_automation",),
    use="the transfer_assets job's asset layer: the transfer assets listed as the job's (its name in "
        "each asset's job_names), so the UI shows the sensor that targets the job as their automation",
    public="define_asset_job over the transfer assets (a second asset job of every asset, built and "
           "snapshotted by each code location: ~0.5 CPU-s of a shard of 250 destinations x 10 models); "
           "JobDefinition.for_external_job (not exported either; its op does nothing when launched); "
           "a sensor's asset_selection (makes every run it requests an asset run of Dagster's asset job, "
           "where the sensor launches op jobs)",
    params=("asset_keys",))
WORKSPACE_REFRESH = Fenced(
    "dagster._core.workspace.context", "WorkspaceProcessContext.refresh_workspace", ("workspace_refresh",),
    use="the daemon's refresh of its code locations every minute (its controller's "
        "RELOAD_WORKSPACE_INTERVAL), wrapped to keep the locations as they are while each is a code server "
        "started beside it that is still the same server",
    public="none (the daemon refreshes every location every 60 s, whatever changed; a code server that "
           "restarts or reloads is seen by Dagster's own watch thread of each location)",
    params=("self",))
USER_CODE_SERVER = Fenced(
    "dagster._core.remote_origin", "GrpcServerCodeLocationOrigin", ("workspace_refresh", "enqueue"),
    use="telling a code server started beside the daemon (a grpc_server entry) from one the daemon starts itself "
        "(python_module: those are restarted by each refresh, as Dagster does), and from one an enqueue starts",
    public="none (the workspace's entries carry no public kind; the origin's class is the only difference between a"
           " grpc_server and a python_module entry)",
    attributes=("create_client",))
LOCATION_SERVER_ID = Fenced(
    "dagster._core.remote_representation.code_location", "GrpcServerCodeLocation", ("workspace_refresh",),
    use="the server id a loaded code location recorded when it fetched its snapshot",
    public="none (a loaded location's server id is recorded only on this class)",
    attributes=("server_id",))
SQLITE_RUN_STORAGE = Fenced(
    "dagster._core.storage.runs.sqlite.sqlite_run_storage", "SqliteRunStorage", ("sqlite_lock",),
    use="the base of LockedSqliteRunStorage: runs.db created and migrated under a lock (sqlite_storage.py)",
    public="none (dagster exports no storage class; dagster.yaml names a storage by module and class)",
    attributes=("from_local", "from_config_value", "migrate"))
SQLITE_EVENT_LOG_STORAGE = Fenced(
    "dagster._core.storage.event_log.sqlite.sqlite_event_log", "SqliteEventLogStorage", ("sqlite_lock",),
    use="the base of LockedSqliteEventLogStorage: each event-log database (index.db, a run's) created under a lock",
    public="none (as SqliteRunStorage: dagster.yaml names a storage by module and class)",
    attributes=("_initdb", "from_config_value"))
SQLITE_SCHEDULE_STORAGE = Fenced(
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage", "SqliteScheduleStorage", ("sqlite_lock",),
    use="the base of LockedSqliteScheduleStorage: schedules.db created and migrated under a lock",
    public="none (as SqliteRunStorage)",
    attributes=("from_local", "from_config_value", "migrate"))
SQLITE_STORAGE = Fenced(
    "dagster._core.storage.sqlite_storage", "DagsterSqliteStorage", ("sqlite_lock",),
    use="the base of LockedSqliteStorage: the instance's storage of the three SQLite storages above",
    public="none (as SqliteRunStorage: the instance's storage block names this class)",
    attributes=("from_config_value", "run_storage", "event_log_storage", "schedule_storage"))
INSTANCE_DEFAULTS = Fenced(
    "dagster._core.instance.ref", "InstanceRef.config_defaults", ("sqlite_lock",),
    use="the storage an instance of the shipped dagster.yaml gets when it names none (its classes "
        "replaced by the locked ones, in the instance's own home)",
    public="a storage block in dagster.yaml (needs the home's path written in it; the file is copied "
           "into any $DAGSTER_HOME)", params=("base_dir",))
ALEMBIC_SCRIPTS = Fenced(
    "dagster._core.storage.sql", "ALEMBIC_SCRIPTS_LOCATION", ("sqlite_lock",),
    use="Dagster's storage migrations (alembic): the head revision and its ancestors, to tell a stale migration "
        "record from the current one",
    public="none (`dagster instance migrate` migrates but does not say which record is current)",
    value="dagster:_core/storage/alembic")
#: the run storage's column look-ups remembered once true (:func:`remember_run_columns`)
RUN_COLUMN_LOOK_UPS = (RUN_STATS_COLUMNS, BACKFILL_ID_COLUMN)

FENCED: tuple[Fenced, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Fenced))

#: Dagster's private module the run worker's parent imports before forking (``run_worker.preload``,
#: ahead of its ``WARM_IMPORTS``): the one ``dagster api execute_run`` executes a run from, that of
#: :data:`EXECUTE_RUN` (the execution API it calls, ``dagster._core.execution.api``, comes with
#: ``import dagster``); a Dagster lacking it is skipped (the worker is refused anyway:
#: :func:`fork_refusal`).
WARM_MODULES: tuple[str, ...] = (EXECUTE_RUN.module,)


def problems(part: str, version: str = DAGSTER_VERSION) -> list[str]:
    """What this Dagster lacks of the names ``part`` (a key of :data:`PARTS`) needs: [] when none."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; the parts are {sorted(PARTS)}")
    return [p for f in FENCED if part in f.parts and (p := f.problem(version))]


#: each part looked at in this process: None (it has its names) or the warning it gave
_CHECKED: dict[str, str | None] = {}


def fallback(part: str) -> str | None:
    """None when this Dagster has every name ``part`` needs; else why it falls back to Dagster's own
    behaviour and what is lost, warned once per process (:class:`UnprovenDagsterWarning`)."""
    if part not in _CHECKED:
        missing = problems(part)
        _CHECKED[part] = None
        if missing:
            _CHECKED[part] = warn_once(part, f"transfer_platform falls back to Dagster's own behaviour for "
                                             f"{PARTS[part]}: {'; '.join(missing)}. Lost: {LOST[part]}")
    return _CHECKED[part]


def fork_refusal(version: str = DAGSTER_VERSION) -> str | None:
    """Why the preloaded launcher must not fork on Dagster ``version`` (None: it may)."""
    if not proven(version):
        return (f"Dagster {version} is not among the versions the preloaded run worker is proven on "
                f"({PROVEN_DAGSTER_VERSIONS}): runs are launched by Dagster's own path "
                "(DefaultRunLauncher: a new process per run from the code server)")
    missing = problems("run_worker", version)
    if missing:
        return "; ".join(missing) + ": runs are launched by Dagster's own path (DefaultRunLauncher)"
    return None


_WARNED: set[str] = set()


def warn_once(key: str, message: str) -> str:
    """Warn ``message`` unless this process warned under ``key`` already; the message."""
    if key not in _WARNED:
        _WARNED.add(key)
        warn(message)
    return message


def warn(message: str) -> None:
    warnings.warn(message, UnprovenDagsterWarning, stacklevel=3)


# -- the accessors the other modules use ----------------------------------------------------------

class KeptInstance:
    """The instance of a run launcher or coordinator (a base before Dagster's class), kept from
    Dagster's public ``register_instance``, which Dagster calls once on each of an instance's
    plugins: Dagster's own plugins read their private ``_instance`` instead."""

    _kept_instance: Callable[[], Any] | None = None

    def register_instance(self, instance: dagster.DagsterInstance) -> None:
        super().register_instance(instance)  # type: ignore[misc]
        self._kept_instance = weakref.ref(instance)

    @property
    def platform_instance(self) -> dagster.DagsterInstance:
        instance = self._kept_instance() if self._kept_instance is not None else None
        if instance is None:
            raise dagster.DagsterInvariantViolationError(f"{type(self).__name__} has no instance (closed or never "
                                                         "registered)")
        return instance


def execute_run(run_id: str, instance: Any) -> None:  # a DagsterInstance
    EXECUTE_RUN.get()(run_id, instance, lambda _event: None, set_exit_code_on_failure=False)


def instance_for_cli(instance_ref: Any) -> AbstractContextManager[Any]:  # an InstanceRef
    return INSTANCE_FOR_CLI.get()(instance_ref=instance_ref)


def capture_interrupts() -> AbstractContextManager[None]:
    return CAPTURE_INTERRUPTS.get()()


def run_crash_explanation(prefix: str, exit_code: int) -> str:
    return CRASH_EXPLANATION.get()(prefix=prefix, exit_code=exit_code)


def build_job(origin: Any, job_name: str) -> None:  # a RepositoryPythonOrigin
    """Build ``job_name``'s definition of the code location of ``origin`` as a run of it does."""
    RECONSTRUCT_JOB.get()(origin.get_job_origin(job_name)).get_definition()


def load_repository(origin: Any, job_name: str) -> None:  # a RepositoryPythonOrigin
    """Import the code location of ``origin`` and build its definitions (the repository a run of
    ``job_name`` reconstructs, kept by Dagster; the job itself is not built)."""
    RECONSTRUCT_JOB.get()(origin.get_job_origin(job_name)).get_repository_definition()


def assets_listed_by(asset_keys: list[Any]) -> Any:  # AssetKeys -> an AssetLayer
    """The asset layer of a job that lists ``asset_keys`` without executing them (each asset's
    snapshot names the job among its jobs)."""
    return ASSETS_LISTED_BY.get()(asset_keys)


def remember_run_columns(storage: Any) -> bool:  # a run storage
    """``storage`` asks the database whether its runs table has a column (:data:`RUN_COLUMN_LOOK_UPS`)
    until it has, then no more: Dagster adds them once (``dagster instance migrate``) and never drops
    them. False where the storage has no such look-ups (not SQL), or this Dagster lacks them
    (warned once)."""
    names = [fenced.name.split(".")[-1] for fenced in RUN_COLUMN_LOOK_UPS]
    if not all(hasattr(type(storage), name) for name in names) or fallback("run_columns"):
        return False
    if getattr(storage, _COLUMNS_REMEMBERED, False):
        return True
    for name in names:
        setattr(storage, name, _remembered_once_true(getattr(type(storage), name), storage))
    setattr(storage, _COLUMNS_REMEMBERED, True)
    return True


def _remembered_once_true(look_up: Callable[[Any], bool], storage: Any) -> Callable[[], bool]:
    known: list[bool] = []

    @functools.wraps(look_up)
    def remembered() -> bool:
        if known:
            return True
        found = look_up(storage)
        if found:
            known.append(True)
        return found

    return remembered


_COLUMNS_REMEMBERED = "_transfer_platform_run_columns"


def install_prompt_queue_pass() -> bool:
    """Wrap the daemon's queue pass with :func:`queue_wake.prompt_pass` (once per process);
    False (and one warning) when this Dagster lacks it."""
    from transfer_platform.orchestration.speed.queue_wake import prompt_pass

    if fallback("queue_wake"):
        return False
    daemon = importlib.import_module(QUEUE_PASS.module).QueuedRunCoordinatorDaemon
    if not getattr(daemon.run_iteration, "transfer_platform_prompt_pass", False):
        daemon.run_iteration = prompt_pass(daemon.run_iteration)
    return True


def same_code_servers(context: Any, timeout: int = 10) -> bool:  # a WorkspaceProcessContext
    """Whether the workspace holds what its load target names (workspace.yaml, read again), each
    location loaded from a code server started beside it (a ``grpc_server`` entry) that answers
    with the server id its location recorded: then a refresh would fetch the same snapshots."""
    entries = context.get_current_workspace().code_location_entries
    target = context.workspace_load_target
    origins = list(target.create_origins()) if target is not None else []
    if not origins or [entry.origin for entry in entries.values()] != origins:
        return False
    user_server = USER_CODE_SERVER.get()
    for entry in entries.values():
        location = entry.code_location
        if not isinstance(entry.origin, user_server) or location is None or entry.load_error is not None:
            return False
        if entry.origin.create_client().get_server_id(timeout=timeout) != location.server_id:
            return False
    return True


def with_tag_limits(queue_config: RunQueueConfig, limits: list) -> RunQueueConfig:
    """``queue_config`` with ``limits`` after its own tag concurrency limits."""
    return queue_config._replace(tag_concurrency_limits=[*queue_config.tag_concurrency_limits, *limits])


def check_ended(record: Any) -> bool:  # an AssetCheckExecutionRecord
    """Whether a check execution record is a finished evaluation (passed or failed); on a Dagster
    lacking the statuses none is (the sensor's repairs are off: :func:`fallback`)."""
    if fallback("repair"):
        return False
    status = CHECK_STATUS.get()
    return record.status in (status.SUCCEEDED, status.FAILED)


def api_server_class() -> type:
    return importlib.import_module(ORPHAN_CHECK.module).DagsterApiServer


def orphan_check() -> Callable[..., Any] | None:
    """The code server's cleanup tick, None if this Dagster has none."""
    return None if ORPHAN_CHECK.problem() else ORPHAN_CHECK.get()


def loaded_repositories(server: Any) -> dict[str, Any]:  # a DagsterApiServer -> RepositoryDefinition
    """The repositories a code server has loaded, by name ({} when its code failed to load)."""
    loaded = server._loaded_repositories
    return {} if loaded is None else dict(loaded.definitions_by_name)


def serialized_repository_snapshot(repository: Any, defer_snapshots: bool) -> str:
    """The repository's snapshot, serialized as the code server's answer serializes it."""
    from dagster import serialize_value

    return serialize_value(REPOSITORY_SNAP.get()(repository, defer_snapshots=defer_snapshots))


def running_executions(server: Any) -> list[tuple[str, Any, Any]]:  # a DagsterApiServer
    """(run id, instance ref, termination event) of each run the code server has not interrupted."""
    with server._execution_lock:
        return [(run_id, server._executions[run_id][1], event)
                for run_id, event in server._termination_events.items() if not event.is_set()]


def interrupt_execution(server: Any, run_id: str, event: Any, now: float) -> None:
    """Interrupt one of the code server's runs as its CancelExecution does."""
    with server._execution_lock:
        event.set()
        server._termination_times[run_id] = now


def served_code_pointers(host: str, port: int | None, socket: str | None) -> list[Any]:
    """The code pointers (``module``, ``fn_name``) of what a running code server serves; raises
    when it does not answer (refused at once when nothing listens there)."""
    from dagster import deserialize_value

    answer = deserialize_value(GRPC_CLIENT.get()(host=host, port=port, socket=socket).list_repositories())
    pointers = getattr(answer, "repository_code_pointer_dict", None)
    if pointers is None:  # an error answer: the server's code failed to load
        raise RuntimeError(getattr(answer, "message", None) or str(answer)[:300])
    return list(pointers.values())


def grpc_client(socket: str) -> Any:  # -> a DagsterGrpcClient
    """A client of the code server listening on ``socket``."""
    return GRPC_CLIENT.get()(socket=socket)


def workspace_origins(workspace: str) -> list[Any]:  # -> CodeLocationOrigins
    """The origins of a workspace file's locations, as Dagster reads them (raises on a bad file)."""
    return list(WORKSPACE_FILE.get()(paths=[workspace]).create_origins())


def workspace_context(instance: Any, workspace: str) -> Any:  # -> a WorkspaceProcessContext
    """The workspace of ``workspace`` (a workspace.yaml) loaded as `dagster job launch` loads it
    (a ``python_module`` entry's code server started, its log at INFO); the caller closes it."""
    return WORKSPACE_CONTEXT.get()(instance=instance, workspace_load_target=WORKSPACE_FILE.get()(paths=[workspace]),
                                   version=dagster.__version__, read_only=False, code_server_log_level="INFO")


def create_run(instance: Any, location: Any, repository: Any, job: Any, run_config: dict, tags: dict[str, str],
               run_id: str) -> Any:  # a CodeLocation, RemoteRepository, RemoteJob -> a DagsterRun
    """Create (not submit) run ``run_id`` of ``job`` as `dagster job launch` does."""
    return CREATE_RUN.get()(instance=instance, code_location=location, remote_repo=repository, remote_job=job,
                            run_config=run_config, tags=tags, op_selection=None, run_id=run_id)
