"""The code location at scale: N PostgreSQL destinations x M daily models (``benchmarks.scale``'s
configuration), timed as Dagster's code server serves it and as the real webserver loads it.

    .venv/bin/python -m benchmarks.code_location --recipients 1000 --models 10 [--webserver] [--profile]
    .venv/bin/python -m benchmarks.code_location --recipients 10000 --models 10 --shards 10
    .venv/bin/python -m benchmarks.code_location --recipients 1000 --models 10 --dagster-floor 1

In process, one line per shard (``TRANSFER_PLATFORM_SHARD=i/n``; the whole configuration without
``--shards``):

- definitions: ``transfer_platform.definitions.build_definitions`` and the repository they make;
- snapshot: what the code server's gRPC API answers the webserver and the daemon when they load
  the location: ``RepositorySnap.from_def(defer_snapshots=True)`` serialized (ExternalRepository),
  then every job's ``JobDataSnap`` serialized (ExternalJob, one call per job); seconds and bytes.

With ``--webserver`` (the whole configuration, or the first shard): the real ``dagster-webserver``
on a free port with a workspace of this code location (a code server process started by the
webserver, as ``dagster dev`` and production run it) and a SQLite instance in a temporary
``DAGSTER_HOME`` (with ``--daemon``, production's instance on a PostgreSQL database of its own);
seconds until GraphQL reports the location ``LOADED``, then the queries the UI's asset catalog sends
(every asset with its definition's fields) and one destination's asset group (the group's lineage
page), each timed three times. The machine's load average is printed with each line.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path

import yaml

from benchmarks.common import storage_env
from benchmarks.cost import processes, rss_bytes
from benchmarks.scale import FORMATS, raw_config, storage_database, write_config

BIN = Path(sys.executable).parent


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Clock:
    """Wall and CPU seconds (this process's: on a busy machine its CPU seconds are what a quiet
    one would take, as the work is single-threaded)."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        lap = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return lap


def snapshot(repository) -> tuple[tuple[float, float], int, tuple[float, float], int]:
    """As the code server answers a loading webserver or daemon: the repository's snapshot with
    deferred job snapshots (it resolves the asset jobs), then each job's. (wall, CPU) seconds and
    serialized bytes of each part."""
    from dagster import serialize_value
    from dagster._core.remote_representation.external_data import JobDataSnap, RepositorySnap

    clock = Clock()
    repository_bytes = len(serialize_value(RepositorySnap.from_def(repository, defer_snapshots=True)))
    repository_seconds = clock.lap()
    job_bytes = 0
    for job in repository.get_all_jobs():
        job_bytes += len(serialize_value(JobDataSnap.from_job_def(job, include_parent_snapshot=True)))
    return repository_seconds, repository_bytes, clock.lap(), job_bytes


def in_process(config_path: Path, shard: str | None, profile: bool) -> list[float]:
    """Prints the line of ``shard`` (None: the whole); its total [wall, CPU] seconds."""
    from transfer_platform.definitions import build_definitions

    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    clock = Clock()
    # the shard as an argument: the process's environment (and a caller's) keeps its own
    repository = build_definitions(str(config_path), shard=shard or "").get_repository_def()
    built = clock.lap()
    assets = sum(1 for node in repository.asset_graph.asset_nodes if node.key.path[0] != "source")
    repo_s, repo_b, jobs_s, jobs_b = snapshot(repository)
    if profiler:
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(25)
    total = [built[k] + repo_s[k] + jobs_s[k] for k in (0, 1)]
    print(f"{'shard ' + shard if shard else 'whole':<11} {assets:6d} transfer assets (wall s / CPU s): "
          f"definitions {built[0]:5.1f} / {built[1]:5.1f}, snapshot {repo_s[0]:5.1f} / {repo_s[1]:5.1f} "
          f"({repo_b / 1e6:5.1f} MB), jobs {jobs_s[0]:4.1f} / {jobs_s[1]:4.1f} ({jobs_b / 1e6:4.1f} MB); "
          f"total {total[0]:5.1f} / {total[1]:5.1f}  (load average {load()})", flush=True)
    return total


def dagster_floor(recipients: int, models: int, checks: int) -> None:
    """Dagster's own cost of as many assets, timed the same way: one bare subsettable
    ``@multi_asset`` per destination with ``models`` specs, each depending on one of ``models``
    source specs and carrying ``checks`` asset checks; no description, metadata, tag, resource,
    partitioning or job of the platform's."""
    import dagster as dg

    clock = Clock()
    sources = [dg.AssetSpec(["source", f"table_{m}"]) for m in range(models)]
    assets = []
    for d in range(recipients):
        specs = [dg.AssetSpec([f"r{d}", f"d{d}", f"m{m}"], group_name=f"d{d}", deps=[sources[m].key],
                              skippable=True) for m in range(models)]

        @dg.multi_asset(name=f"transfer__d{d}", specs=specs, can_subset=True,
                        check_specs=[dg.AssetCheckSpec(f"check_{c}", asset=spec.key)
                                     for spec in specs for c in range(checks)])
        def _transfer(context):  # unannotated: this module's annotations are strings Dagster cannot resolve
            return None

        assets.append(_transfer)
    repository = dg.Definitions(assets=[*sources, *assets]).get_repository_def()
    built = clock.lap()
    repo_s, repo_b, jobs_s, jobs_b = snapshot(repository)
    total = [built[k] + repo_s[k] + jobs_s[k] for k in (0, 1)]
    print(f"Dagster's floor: {recipients * models} bare assets, {checks} check(s) each (wall s / CPU s): "
          f"definitions {built[0]:5.1f} / {built[1]:5.1f}, snapshot {repo_s[0]:5.1f} / {repo_s[1]:5.1f} "
          f"({repo_b / 1e6:5.1f} MB), jobs {jobs_s[0]:4.1f} / {jobs_s[1]:4.1f} ({jobs_b / 1e6:4.1f} MB); "
          f"total {total[0]:5.1f} / {total[1]:5.1f}  (load average {load()})", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(url: str, query: str, variables: dict | None = None, timeout: float = 120) -> dict:
    request = urllib.request.Request(url, data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
    if answer.get("errors"):
        raise RuntimeError(f"GraphQL errors: {answer['errors'][:2]}")
    return answer["data"]


LOCATION_STATUS = """query { workspaceOrError { __typename ... on Workspace { locationEntries {
  name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"""

#: what the UI's asset catalog asks (AssetCatalogTableQuery, then the definitions of the page)
CATALOG = """query AssetCatalogTableQuery {
  assetsOrError { __typename ... on AssetConnection { nodes { id key { path }
    definition { id groupName partitionDefinition { description dimensionTypes { type name } }
      hasMaterializePermission description isExecutable isObservable isPartitioned
      computeKind kinds owners { __typename } tags { key value }
      repository { id name location { id name } } jobNames
      automationCondition { label expandedLabel } } } } } }"""

CATALOG_NODES = """query AssetCatalogGroupTableQuery {
  assetNodes { id assetKey { path } groupName description computeKind kinds isPartitioned
    isExecutable isObservable hasMaterializePermission jobNames
    partitionDefinition { description } repository { id name location { id name } } } }"""

#: a destination's asset group (its lineage page: AssetGraphQuery with a group selector)
GROUP = """query AssetGraphQuery($pipelineSelector: PipelineSelector, $groupSelector: AssetGroupSelector) {
  assetNodes(pipeline: $pipelineSelector, group: $groupSelector) { id assetKey { path } groupName
    isExecutable isObservable isPartitioned hasMaterializePermission kinds description jobNames
    dependencyKeys { path } dependedByKeys { path } opNames graphName
    repository { id name location { id name } } } }"""


def descendants(procs: dict, roots: list[int]) -> list[int]:
    """The live descendants of the processes ``roots`` in ``procs`` (:func:`processes`)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, *_rest) in procs.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [child for pid in roots for child in children.get(pid, [])]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def tree_cpu(roots: list[int]) -> tuple[float, float]:
    """CPU-seconds so far of the processes ``roots`` themselves, and of all their descendants
    (live ones, and those their parents waited for)."""
    procs = processes()
    own = sum(procs[pid][1] for pid in roots if pid in procs)
    below = sum(procs[pid][2] for pid in roots if pid in procs)
    below += sum(procs[pid][1] + procs[pid][2] for pid in descendants(procs, roots))
    return own, below


def tree_rss_gb(roots: list[int]) -> float:
    """Resident memory (GB) of the processes ``roots`` and all their live descendants."""
    return sum(rss_bytes(pid) for pid in [*roots, *descendants(processes(), roots)]) / 1024**3


def memory(process: subprocess.Popen, daemons: list[subprocess.Popen], servers: list[subprocess.Popen]) -> str:
    """The processes' resident memory, for a line of the report."""
    parts = [f"the webserver and its children {tree_rss_gb([process.pid]):.2f}"]
    if daemons:
        parts.append(f"the daemon and its children {tree_rss_gb([daemons[0].pid]):.2f}")
    if servers:
        parts.append(f"the code servers beside them {tree_rss_gb([server.pid for server in servers]):.2f}")
    return "resident GB: " + ", ".join(parts)


def wait_for_servers(servers: list[subprocess.Popen], ports: list[int], log: Path) -> None:
    """Until each code server answers a ping (it serves once its definitions are loaded)."""
    from dagster._grpc.client import DagsterGrpcClient

    waiting = dict(zip(ports, servers, strict=True))
    deadline = time.perf_counter() + 600
    while waiting:
        for server_port, server in list(waiting.items()):
            if server.poll() is not None:
                raise RuntimeError(f"a code server exited: {log.read_text()[-3000:]}")
            try:
                DagsterGrpcClient(port=server_port, host="127.0.0.1").ping("")
                del waiting[server_port]
            except Exception:  # not serving yet  # noqa: BLE001
                pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"code servers on ports {sorted(waiting)} not answering after 600 s")
        time.sleep(0.2)


SENSOR_TICKS = """query ($selector: SensorSelector!) { sensorOrError(sensorSelector: $selector) {
  __typename ... on Sensor { sensorState { ticks(limit: 1) { status } } } } }"""


def wait_for_first_ticks(url: str, names: list[str], began: float) -> float:
    """Until each location's ``transfer_schedule`` sensor has ticked once (the daemon has loaded
    every location); the seconds since ``began``."""
    waiting = set(names)
    while waiting:
        if time.perf_counter() - began > 900:
            raise RuntimeError(f"no sensor tick after 900 s in {sorted(waiting)}")
        for name in sorted(waiting):
            answer = graphql(url, SENSOR_TICKS, {"selector": {
                "repositoryLocationName": name, "repositoryName": "__repository__", "sensorName": "transfer_schedule"}})
            sensor = answer["sensorOrError"]
            if sensor["__typename"] == "Sensor" and sensor["sensorState"]["ticks"]:
                waiting.discard(name)
        time.sleep(0.5)
    return time.perf_counter() - began


@contextlib.contextmanager
def environment(values: dict[str, str]):
    """This process's environment as ``values`` (the processes' own), restored afterwards."""
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


#: ``dagster-daemon`` without the platform's patch of its workspace refresh (the fix marked as
#: already looked at, so the run coordinator does not install it): Dagster's refresh every minute
DAEMON_WITH_DAGSTERS_REFRESH = (
    "import sys; from transfer_platform.orchestration.speed import dagster_fixes; "
    "dagster_fixes._looked.add('workspace_refresh'); from dagster._daemon.cli import main; sys.exit(main())")


def daemon_instance(home: Path, env: dict[str, str], database: str, freshness_daemon: bool) -> None:
    """``home``'s ``dagster.yaml`` as production's (``deploy/dagster.production.yaml``: PostgreSQL
    storage in ``database``, the platform's run coordinator), every run left queued; with
    ``freshness_daemon``, Dagster's freshness daemon on again (the shipped files turn it off)."""
    settings = yaml.safe_load((Path(__file__).parents[1] / "deploy" / "dagster.production.yaml").read_text())
    settings["run_coordinator"]["config"]["max_concurrent_runs"] = 0  # runs the sensor enqueues stay queued
    if freshness_daemon:
        settings["freshness"] = {"enabled": True}
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    env.update(storage_env(database))


def webserver(config_path: Path, work: Path, group: str, shard: str | None, every_shard: int = 0,
              group_shard: int = 0, code_servers: bool = False, daemon: bool = False,
              freshness_daemon: bool = False, idle_seconds: float = 0, dagsters_refresh: bool = False) -> None:
    with contextlib.ExitStack() as stack:
        _webserver(config_path, work, group, shard, every_shard, group_shard, code_servers,
                   stack.enter_context(storage_database()) if daemon else None, freshness_daemon, idle_seconds,
                   dagsters_refresh)


def _webserver(config_path: Path, work: Path, group: str, shard: str | None, every_shard: int,
               group_shard: int, code_servers: bool, daemon_database: str | None, freshness_daemon: bool,
               idle_seconds: float, dagsters_refresh: bool) -> None:
    """The real webserver loading the whole location, or ``shard``'s, or with ``every_shard`` (n)
    the n locations of ``deploy/workspace.sharded.yaml``'s form at once (each a code server of its
    own, as in production; ``group`` is in shard ``group_shard``'s); the seconds until each
    location is ``LOADED``, then the catalog's queries. With ``code_servers``, as
    ``deploy/workspace.servers.yaml``: each location's ``dagster code-server start`` is started
    beside the webserver, at the same time, and the workspace names their ports. With the daemon,
    the instance is production's, on a PostgreSQL database of its own (:func:`daemon_instance`)."""
    home = work / "webserver_home"
    home.mkdir()
    daemon = daemon_database is not None
    # runs the daemon's sensors enqueue stay queued: nothing executes
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\nrun_queue:\n  max_concurrent_runs: 0\n")
    workspace = work / "workspace.yaml"
    locations = ([(f"transfer_platform_shard_{i}", f"defs_shard_{i}_of_{every_shard}") for i in range(every_shard)]
                 if every_shard else [("transfer_platform", "defs")])
    location = locations[group_shard if every_shard else 0][0]  # the location holding ``group``
    ports = [free_port() for _ in locations]
    workspace.write_text(yaml.safe_dump({"load_from": [
        {"grpc_server": {"host": "127.0.0.1", "port": server_port, "location_name": name}} if code_servers else
        {"python_module": {"module_name": "transfer_platform.definitions", "attribute": attribute,
                           "location_name": name}} for (name, attribute), server_port in zip(locations, ports, strict=True)]}))
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "TRANSFER_PLATFORM_CONFIG": str(config_path)}
    env.pop("TRANSFER_PLATFORM_SHARD", None)
    if shard:
        env["TRANSFER_PLATFORM_SHARD"] = shard
    if daemon_database is not None:
        daemon_instance(home, env, daemon_database, freshness_daemon)
    if code_servers or daemon:  # the instance's storage made before the processes that share it start
        from dagster import DagsterInstance

        with environment(env):
            DagsterInstance.from_config(str(home)).dispose()
    log = (work / "webserver.log").open("w")
    began = time.perf_counter()
    servers = [subprocess.Popen([str(BIN / "dagster"), "code-server", "start", "-m", "transfer_platform.definitions",
                                 "-a", attribute, "-h", "127.0.0.1", "-p", str(server_port), "--location-name", name],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=work)
               for (name, attribute), server_port in zip(locations, ports, strict=True)] if code_servers else []
    if servers:  # as a deployment's readiness check: the webserver starts once every server answers
        wait_for_servers(servers, ports, work / "webserver.log")
        print(f"code servers: all {len(servers)} answering {time.perf_counter() - began:.1f} s after their start "
              f"(load average {load()}); their CPU s {sum(tree_cpu([server.pid for server in servers])):.1f}, resident GB "
              f"{tree_rss_gb([server.pid for server in servers]):.2f}", flush=True)
    process = subprocess.Popen([str(BIN / "dagster-webserver"), "-w", str(workspace), "-h", "127.0.0.1",
                                "-p", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True, cwd=work)
    daemon_command = ([sys.executable, "-c", DAEMON_WITH_DAGSTERS_REFRESH] if dagsters_refresh
                      else [str(BIN / "dagster-daemon")])
    daemons = [subprocess.Popen([*daemon_command, "run", "-w", str(workspace)], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=work)] if daemon else []
    url = f"http://127.0.0.1:{port}/graphql"
    try:
        loaded: dict[str, float] = {}
        statuses = None
        while time.perf_counter() - began < 600:
            if process.poll() is not None:
                raise RuntimeError(f"the webserver exited: {(work / 'webserver.log').read_text()[-3000:]}")
            try:
                entries = graphql(url, LOCATION_STATUS, timeout=10)["workspaceOrError"]["locationEntries"]
                statuses = {e["name"]: e["loadStatus"] for e in entries}
                for entry in entries:
                    if entry["loadStatus"] == "LOADED" and entry["name"] not in loaded:
                        error = entry["locationOrLoadError"]
                        if error and error["__typename"] == "PythonError":
                            raise RuntimeError(f"the code location failed to load: {error['message']}")
                        loaded[entry["name"]] = time.perf_counter() - began
                if len(loaded) == len(locations):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise RuntimeError(f"not loaded after 600 s (statuses {statuses})")
        for name, seconds in sorted(loaded.items(), key=lambda kv: kv[1]):
            print(f"webserver: code location {name} LOADED {seconds:.1f} s after the start", flush=True)
        webserver_cpu, below = tree_cpu([process.pid])
        servers_cpu = below + (sum(tree_cpu([server.pid for server in servers])) if servers else 0.0)
        print(f"webserver: every code location LOADED {max(loaded.values()):.1f} s after the start "
              f"(load average {load()}); CPU s by then: the webserver {webserver_cpu:.1f}, its "
              f"{len(locations)} code server(s) {servers_cpu:.1f}"
              + (" (started beside it)" if code_servers else " (its children)")
              + f"; {memory(process, daemons, servers)}", flush=True)
        if daemons:
            seconds = wait_for_first_ticks(url, [name for name, _attribute in locations], began)
            webserver_cpu, below = tree_cpu([process.pid])
            daemon_cpu, daemon_below = tree_cpu([daemons[0].pid])
            beside = sum(tree_cpu([server.pid for server in servers])) if servers else 0.0
            print(f"daemon: every location's sensor ticked {seconds:.1f} s after the start (load average {load()}); "
                  f"CPU s by then: the daemon {daemon_cpu:.1f}, code servers {below + daemon_below + beside:.1f} "
                  f"(the webserver's {below:.1f}, the daemon's {daemon_below:.1f}, beside them {beside:.1f}), "
                  f"the webserver {webserver_cpu:.1f}; {memory(process, daemons, servers)}", flush=True)
            spent, step = daemon_cpu + daemon_below, 30.0  # the sensor's interval
            for k in range(int(-(-idle_seconds // step))):  # its later ticks and its other daemons' passes
                time.sleep(step)
                now = sum(tree_cpu([daemons[0].pid]))
                print(f"daemon: {now - spent:.1f} CPU s in the {k + 1}. {step:.0f} s after the first ticks "
                      f"(load average {load()})", flush=True)
                spent = now
        selector = {"groupName": group, "repositoryName": "__repository__", "repositoryLocationName": location}
        for label, query, variables, count in (
                ("asset catalog (assetsOrError)", CATALOG, None,
                 lambda d: len(d["assetsOrError"]["nodes"])),
                ("asset catalog (assetNodes)", CATALOG_NODES, None, lambda d: len(d["assetNodes"])),
                (f"asset group {group!r}", GROUP, {"groupSelector": selector}, lambda d: len(d["assetNodes"]))):
            times = []
            for _ in range(3):
                began = time.perf_counter()
                data = graphql(url, query, variables)
                times.append(time.perf_counter() - began)
            print(f"webserver: {label:<32} {count(data):6d} assets  "
                  f"{' / '.join(f'{t:.2f}' for t in times)} s  (load average {load()})", flush=True)
    finally:
        for each in (process, *daemons, *servers):
            os.killpg(each.pid, 15)
        deadline = time.monotonic() + 30  # for all of them together: 40 code servers are not 40 x 30 s
        for each in (process, *daemons, *servers):
            try:
                each.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(each.pid, 9)
                each.wait()
        log.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--format", choices=FORMATS, default="yaml",
                        help="the configuration file's format (JSON is read much faster)")
    parser.add_argument("--shards", type=int, default=0,
                        help="time each of n shards (TRANSFER_PLATFORM_SHARD=i/n) instead of the whole")
    parser.add_argument("--only-shard", type=int, help="with --shards: only this shard (0-based)")
    parser.add_argument("--webserver", action="store_true",
                        help="also load it in the real dagster-webserver and time the catalog's queries")
    parser.add_argument("--every-shard", action="store_true",
                        help="with --shards n --webserver: the webserver loads the n shards' locations at once")
    parser.add_argument("--code-servers", action="store_true",
                        help="with --webserver: each location a `dagster code-server start` started beside "
                             "the webserver (deploy/workspace.servers.yaml's form) instead of by it")
    parser.add_argument("--daemon", action="store_true",
                        help="with --webserver: also the daemon, started with it; waits for each location's "
                             "first sensor tick (runs stay queued)")
    parser.add_argument("--freshness-daemon", action="store_true",
                        help="with --daemon: Dagster's freshness daemon on (the shipped instance files turn it off)")
    parser.add_argument("--idle-seconds", type=float, default=0,
                        help="with --daemon: the daemon's CPU seconds in each 30 s of this many after the first ticks")
    parser.add_argument("--dagsters-workspace-refresh", action="store_true",
                        help="with --daemon: Dagster's refresh of every code location each minute, without the "
                             "platform's skip of unchanged code servers (dagster_fixes.install_workspace_refresh)")
    parser.add_argument("--no-in-process", action="store_true", help="only the webserver")
    parser.add_argument("--profile", action="store_true", help="cProfile definitions + snapshot")
    parser.add_argument("--dagster-floor", type=int, metavar="CHECKS", default=None,
                        help="only Dagster's own cost of as many bare assets with CHECKS checks each")
    args = parser.parse_args(argv)
    if not args.daemon and (args.freshness_daemon or args.idle_seconds or args.dagsters_workspace_refresh):
        parser.error("--freshness-daemon, --idle-seconds and --dagsters-workspace-refresh are for --daemon")

    warnings.simplefilter("ignore")
    if args.dagster_floor is not None:
        dagster_floor(args.recipients, args.models, args.dagster_floor)
        return
    work = Path(tempfile.mkdtemp(prefix="tp_code_location_"))
    try:
        config_path = work / "transfer_platform.yaml"
        raw = raw_config(args.recipients, args.models)
        write_config(config_path, raw, args.format)
        print(f"{args.recipients} destinations x {args.models} models"
              + (f" in {args.shards} shards" if args.shards else "") + f"  (load average {load()})", flush=True)
        shards = ([f"{i}/{args.shards}" for i in range(args.shards)
                   if args.only_shard is None or i == args.only_shard] if args.shards else [None])
        if not args.no_in_process:
            totals = [in_process(config_path, shard, args.profile) for shard in shards]
            if len(totals) > 1:
                print(f"{len(totals)} shards together (wall s / CPU s): {sum(t[0] for t in totals):.2f} / "
                      f"{sum(t[1] for t in totals):.2f}", flush=True)
        if args.webserver:
            shard = shards[0]
            group, held = "d0", None
            if shard:
                from transfer_platform.config.shards import parse_shard
                held = parse_shard(shard)
                group = next(d["name"] for d in raw["destinations"] if held.holds(d["recipient"]))
            webserver(config_path, work, group, None if args.every_shard else shard,
                      every_shard=args.shards if args.every_shard else 0, group_shard=held.index if held else 0,
                      code_servers=args.code_servers, daemon=args.daemon, freshness_daemon=args.freshness_daemon,
                      idle_seconds=args.idle_seconds, dagsters_refresh=args.dagsters_workspace_refresh)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
