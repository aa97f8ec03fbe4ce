"""The code locations runs are created from, each loaded once and kept while what it is built from
stays the same.

Creating a run of the ``transfer`` or ``integrity`` job takes the job's snapshot and execution plan
from the code location that holds it, as ``dagster job launch`` does. Loading a workspace starts
the code server of a ``python_module`` entry (a new Python building the definitions) or connects
to a ``grpc_server`` entry's, and fetches the location's whole snapshot: seconds on a small
configuration, tens of seconds at a thousand recipients. :class:`OpenWorkspaces` loads a location
on its first run and keeps it for the next ones (the API, a long-lived process, keeps one for the
life of the application; ``transfer --enqueue`` opens one for its one run and closes it).

A kept location is loaded again when what its jobs are built from changed: the workspace file or
the configuration file (its modification times; the configuration's resources, Spark settings among
them, are part of the jobs' snapshots). The store's entries are not part of the two jobs a run is
created from (one op each, told its destination by run config), so a destination created through
the API needs no new load; the run's worker builds the definitions afresh anyway. A code server
beside the webserver that restarts is followed by Dagster's own watch of its server id; a kept code
server that stopped is loaded again once, and a location that cannot be loaded is
:class:`~transfer_platform.errors.ConnectionFailure` naming the workspace and the fix.

A location whose code server Dagster would start (a ``python_module``, ``python_file`` or
``python_package`` entry) gets it started here as Dagster starts it (``dagster api grpc``, the same
arguments, kept alive by this process's heartbeat), the configuration file named in that server's
own environment (``$TRANSFER_PLATFORM_CONFIG``), never in this process's: locations of different
configurations load at once, each one once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster
import yaml

from transfer_platform.config.parsing import ENV_VAR
from transfer_platform.errors import ConnectionFailure
from transfer_platform.orchestration.scheduling.coordinator import placed_under
from transfer_platform.orchestration.speed import dagster_internals

WORKSPACE_ENV = "TRANSFER_PLATFORM_WORKSPACE"


@dataclass
class _Loaded:
    """One workspace loaded: the Dagster workspace context and what it was loaded from."""

    version: tuple[int, int]  # the workspace file's and the configuration file's modification times
    context: Any  # a WorkspaceProcessContext
    folder: tempfile.TemporaryDirectory | None = None  # the one-location workspace file written aside
    server: _CodeServer | None = None  # the code server started for it

    def close(self) -> None:
        try:
            self.context.__exit__(None, None, None)
        finally:
            if self.server is not None:
                self.server.stop()
            if self.folder is not None:
                self.folder.cleanup()


class OpenWorkspaces:
    """The workspaces of one Dagster instance that runs are created from, one per code location
    asked for (a workspace file, the one ``load_from`` entry of it that holds the recipient, a
    configuration file). Thread-safe; :meth:`close` stops every code server it started."""

    def __init__(self, instance: dagster.DagsterInstance) -> None:
        self.instance = instance
        self._kept: dict[tuple[str, str, str], _Loaded] = {}
        self._lock = threading.Lock()  # guards _kept and _loading
        self._loading: dict[tuple[str, str, str], threading.Lock] = {}  # one load of a slot at a time
        #: loads made (a first one, or again after a change or a stopped code server)
        self.loads = 0

    def create_run(self, workspace: Path, entry: dict | None, config_path: Path, job_name: str,
                   run_config: dict, tags: dict[str, str], run_id: str) -> None:
        """Create run ``run_id`` of ``job_name`` in the code location of ``workspace`` (``entry``:
        its one location that holds the run's recipient, None: its only one) and submit it to the
        instance's run coordinator."""
        slot = (str(workspace.resolve()), json.dumps(entry, sort_keys=True), str(config_path.resolve()))
        loaded, fresh = self._workspace(slot, workspace, entry)
        try:
            request = self._create(loaded, job_name, run_config, tags, run_id)
        except (_LoadError, dagster.DagsterError) as exc:  # a kept one refreshed since it was loaded, and failed
            if fresh and isinstance(exc, _LoadError):
                raise _unreachable(workspace, str(exc)) from None
            if fresh:
                raise
            request = self._again(slot, loaded, workspace, entry, job_name, run_config, tags, run_id)
        with placed_under(config_path):  # the coordinator's limits: of this configuration file
            self.instance.submit_run(run_id, request)

    def _again(self, slot: tuple[str, str, str], stale: _Loaded, workspace: Path, entry: dict | None,
               job_name: str, run_config: dict, tags: dict[str, str], run_id: str) -> Any:
        """A kept location whose code server stopped (or was replaced), loaded again once; the run
        is created from it (none was created from the stale one: it failed before)."""
        self._forget(slot, stale)
        loaded, _ = self._workspace(slot, workspace, entry)
        try:
            return self._create(loaded, job_name, run_config, tags, run_id)
        except _LoadError as exc:
            raise _unreachable(workspace, str(exc)) from None

    def close(self) -> None:
        """Stop every code server started here and forget every location."""
        with self._lock:
            kept, self._kept = list(self._kept.values()), {}
        for loaded in kept:
            loaded.close()

    def __enter__(self) -> OpenWorkspaces:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- loading -----------------------------------------------------------------------------------

    def _workspace(self, slot: tuple[str, str, str], workspace: Path, entry: dict | None) -> tuple[_Loaded, bool]:
        """The slot's loaded workspace, loaded now when missing or built from files since changed;
        and whether it was loaded by this call."""
        version = (_modified(Path(slot[0])), _modified(Path(slot[2])))
        with self._lock:
            kept = self._kept.get(slot)
        if kept is not None and kept.version == version:
            return kept, False
        with self._lock:
            loading = self._loading.setdefault(slot, threading.Lock())
        with loading:
            with self._lock:
                kept = self._kept.get(slot)
            if kept is not None and kept.version == version:
                return kept, False  # loaded by another request meanwhile
            loaded = self._load(version, workspace, entry, Path(slot[2]))
            with self._lock:
                stale, self._kept[slot] = self._kept.get(slot), loaded
            if stale is not None:
                stale.close()
            return loaded, True

    def _load(self, version: tuple[int, int], workspace: Path, entry: dict | None, config_path: Path) -> _Loaded:
        folder = tempfile.TemporaryDirectory(prefix="tp_workspace_")
        loaded = _Loaded(version=version, context=None, folder=folder)
        try:
            path = workspace
            if entry is not None:  # the one location, its paths made absolute, in a file of its own
                raw = yaml.safe_load(workspace.read_text()) or {}
                path = Path(folder.name) / "workspace.yaml"
                path.write_text(yaml.safe_dump({**raw, "load_from": [entry]}))
            origin = _started_by_dagster(path)
            if origin is not None:  # started here, then loaded as a code server of its own
                socket = str(Path(folder.name) / "code_server.sock")
                loaded.server = _CodeServer(self.instance, origin, config_path, socket)
                path = Path(folder.name) / "served.yaml"
                path.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
                    "socket": socket, "location_name": origin.location_name}}]}))
            loaded.context = dagster_internals.workspace_context(self.instance, str(path))
        except BaseException as exc:
            if loaded.server is not None:
                loaded.server.stop()
            folder.cleanup()
            if isinstance(exc, _LoadError):
                raise _unreachable(workspace, str(exc)) from None
            raise
        self.loads += 1
        try:
            _location(loaded.context.create_request_context())
        except _LoadError as exc:
            loaded.close()
            raise _unreachable(workspace, str(exc)) from None
        return loaded

    def _forget(self, slot: tuple[str, str, str], loaded: _Loaded) -> None:
        with self._lock:
            if self._kept.get(slot) is loaded:
                del self._kept[slot]
        loaded.close()

    # -- creating the run --------------------------------------------------------------------------

    def _create(self, loaded: _Loaded, job_name: str, run_config: dict, tags: dict[str, str], run_id: str) -> Any:
        """Create the run (not yet submitted) from the loaded location; returns the request
        context it was created in (a WorkspaceRequestContext)."""
        request = loaded.context.create_request_context()
        location = _location(request)
        (repository,) = location.get_repositories().values()
        job = repository.get_full_job(job_name)
        dagster_internals.create_run(self.instance, location, repository, job, run_config, tags, run_id)
        return request


class _LoadError(Exception):
    """The workspace's location did not load (its message: Dagster's words, as `dagster job launch` says them)."""


def _started_by_dagster(workspace: Path) -> Any:  # -> a ManagedGrpcPythonEnvCodeLocationOrigin | None
    """The one location of ``workspace`` if it is one whose code server Dagster starts itself (None:
    a code server started beside the webserver, or a workspace Dagster reports as it loads it)."""
    try:
        origins = dagster_internals.workspace_origins(str(workspace))
    except Exception:  # noqa: BLE001 -- a bad workspace file: Dagster's own load names the problem
        return None
    if len(origins) != 1 or isinstance(origins[0], dagster_internals.USER_CODE_SERVER.get()):
        return None
    return origins[0]


class _CodeServer:
    """The code server of a location started as Dagster starts one (``dagster api grpc``, the same
    arguments: its code loaded lazily, it stops after 45 s without a heartbeat), the configuration
    file in its own environment; this process sends its heartbeat until :meth:`stop`."""

    HEARTBEAT_SECONDS = 5  # the server stops after 45 s without one (Dagster's webserver's setting)

    def __init__(self, instance: dagster.DagsterInstance, origin: Any, config_path: Path, socket: str) -> None:
        target = origin.loadable_target_origin
        command = [target.executable_path or sys.executable, "-m", "dagster", "api", "grpc", "--lazy-load-user-code",
                   "--socket", socket, "--heartbeat", "--heartbeat-timeout", "45", "--log-level", "INFO",
                   *(["--use-python-environment-entry-point"] if target.executable_path else []),
                   "--inject-env-vars-from-instance", "--instance-ref", dagster.serialize_value(instance.get_ref()),
                   "--location-name", origin.location_name, *target.get_cli_args()]
        env = {**os.environ, ENV_VAR: str(config_path)}
        env.pop("DAGSTER_GRPC_PORT", None)
        if target.executable_path:  # a virtualenv's Python finds its own executables first, as Dagster does
            env["PATH"] = os.pathsep.join(filter(None, [os.path.dirname(target.executable_path), env.get("PATH")]))
        self.process = subprocess.Popen(command, env=env)
        self._stopped = threading.Event()
        client = dagster_internals.grpc_client(socket)
        failure = f'Error loading location "{origin.location_name}": Exception: '
        timeout = instance.code_server_process_startup_timeout
        deadline = time.monotonic() + timeout
        while True:
            with suppress(Exception):  # not listening yet (whatever the gRPC client raises)
                client.ping("")
                break
            if self.process.poll() is not None:
                raise _LoadError(f"{failure}gRPC server exited with return code {self.process.returncode} while "
                                 f'starting up with the command: "{" ".join(command)}"')
            if time.monotonic() > deadline:
                self.stop()
                raise _LoadError(f"{failure}Timed out waiting for gRPC server to start after {timeout}s. To increase "
                                 "the timeout, add the following to a dagster.yaml file, located in your $DAGSTER_HOME "
                                 "folder or the folder where you are running `dagster dev`:")
            self._stopped.wait(0.1)
        threading.Thread(target=self._beat, args=(client,), name="code-server-heartbeat", daemon=True).start()

    def _beat(self, client: Any) -> None:  # a DagsterGrpcClient
        while not self._stopped.wait(self.HEARTBEAT_SECONDS):
            with suppress(Exception):  # a stopped server is seen by the next run's creation
                client.heartbeat("ping")

    def stop(self) -> None:
        self._stopped.set()
        if self.process.poll() is None:
            self.process.terminate()
            threading.Thread(target=self.process.wait, name="code-server-reap", daemon=True).start()


def _location(request: Any) -> Any:  # a WorkspaceRequestContext -> its one CodeLocation
    names = list(request.code_location_names)
    failed = next((name for name in names if request.has_code_location_error(name)), None)
    if failed is not None:
        raise _LoadError(f'Error loading location "{failed}": {request.get_code_location_error(failed)}')
    if len(names) != 1:
        raise _LoadError(f"the workspace holds {len(names)} code locations, not one")
    return request.get_code_location(names[0])


def _unreachable(workspace: Path, reason: str) -> ConnectionFailure:
    from transfer_platform.orchestration.instance.sqlite_storage import record_problem

    home = os.environ.get("DAGSTER_HOME")  # the code server failed on the instance's storage, not on its code
    storage = record_problem(home, reason) if home else None
    if storage is not None:
        return storage
    return ConnectionFailure(f"the code location of {workspace}", reason=reason.strip().splitlines()[0][:300], fix=(
        "start its code server again (the process the workspace names) or correct the workspace "
        f"({WORKSPACE_ENV}), then ask again"))


def _modified(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1  # Dagster names a missing workspace file as it loads it
