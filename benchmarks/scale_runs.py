"""The sensor daemon's first tick at scale: N PostgreSQL destinations x M daily models, the real
``transfer_schedule`` sensor run by Dagster's sensor daemon (``execute_sensor_iteration``) against
a code location loaded in process and an instance whose storage is PostgreSQL (a fresh database,
dropped afterwards) with the shipped ``dagster.yaml`` (our run coordinator). It times:

- the definitions (``transfer_platform.definitions:defs``) and the code server's snapshot of them
  (``RepositorySnap.from_def``, as the gRPC server builds it; its serialized size);
- the daemon's first tick: the sensor's evaluation, then per RunRequest the job and execution plan
  snapshots, ``instance.create_run`` and the run coordinator's ``submit_run``: runs created a second.

    .venv/bin/python -m benchmarks.scale_runs --recipients 1000 --models 10 [--profile]

The run launcher is not involved: queued runs wait for the queue daemon, which is not started.
With ``--ticks N``, N ticks, each once the sensor's interval has passed since the last: the first
pays what the daemon does once per load of the code location (Dagster's remote asset graph, the
coordinator's read of the configuration), the later ones create the next of the spread's first runs.

With ``--code-server``, the code location is what ``workspace.yaml`` makes of it in production: a
gRPC code server in a process of its own (Dagster's managed ``python_module`` location), and the
tick's CPU seconds are split between this process (the daemon's: the sensor daemon, the run
storage, the run coordinator) and the code server's (the sensor's evaluation, the execution
plans), read from ``/proc``. This process then builds no definitions of its own, as a daemon's
does not: its garbage collector keeps Python's settings.

With ``--dequeue SECONDS``, the run queue's daemon then works through those queued runs for that
long, as ``dagster-daemon`` does (``QueuedRunCoordinatorDaemon.run_iteration``, the shipped
coordinator and its limits, ``max_concurrent_runs`` of the production ``dagster.yaml``), with a
launcher that starts nothing (Dagster's ``MockedRunLauncher``): every launched run is ended
(SUCCESS) right after the iteration that launched it, so each iteration finds free slots. It
prints the seconds one iteration takes (its cost to the daemon, whatever the interval) and runs
launched a second: the queue's own ceiling, before any run's work.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import yaml

from benchmarks.code_location import Clock
from benchmarks.common import storage_env
from benchmarks.cost import ClientTree
from benchmarks.scale import FORMATS, Counter, raw_config, storage_database, write_config


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--format", choices=FORMATS, default="yaml",
                        help="the configuration file's format (JSON is read much faster)")
    parser.add_argument("--profile", action="store_true", help="cProfile the tick; print the top functions")
    parser.add_argument("--profile-out", help="write the tick's cProfile stats to this file")
    parser.add_argument("--dequeue", type=float, default=0,
                        help="then dequeue the queued runs for this many seconds (see the module)")
    parser.add_argument("--all-first-runs-at-once", action="store_true",
                        help="every new destination's first run at the first tick (the sensor's spread "
                             "of many new destinations' first runs off: FIRST_RUNS_PER_TICK unbounded)")
    parser.add_argument("--code-server", action="store_true",
                        help="the code location in a gRPC code server of its own, as in production; the tick's "
                             "CPU split between the daemon (this process) and the code server")
    parser.add_argument("--shard", metavar="I/N",
                        help="the code location of one shard (its attribute defs_shard_<i>_of_<n>, as "
                             "deploy/workspace.sharded.yaml loads it): its sensor, its destinations' runs")
    parser.add_argument("--ticks", type=int, default=1,
                        help="this many ticks, each once the sensor's interval has passed since the last (the "
                             "first pays the daemon's once-per-load costs; later ones create the spread's next runs)")
    parser.add_argument("--unpooled", action="store_true",
                        help="the run coordinator's pooled_storage_connections off: dagster-postgres's "
                             "new connection per query (the settings before)")
    args = parser.parse_args(argv)

    import dagster as dg
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget, ModuleTarget

    from transfer_platform.orchestration.scheduling import sensors

    if args.all_first_runs_at_once:
        sensors.FIRST_RUNS_PER_TICK = 10**9
    warnings.simplefilter("ignore")
    counter = Counter()
    work = Path(tempfile.mkdtemp(prefix="tp_scale_runs_"))
    try:
        config_path = work / "transfer_platform.yaml"
        write_config(config_path, raw_config(args.recipients, args.models), args.format)
        os.environ["TRANSFER_PLATFORM_CONFIG"] = str(config_path)
        label = f"{args.recipients} destinations x {args.models} models"

        if args.shard:
            label += f", shard {args.shard}"
        if not args.code_server:
            build_in_process(config_path, label, args.shard)
        with storage_database() as database:
            home = work / "home"
            home.mkdir()
            settings = yaml.safe_load((Path(__file__).parents[1] / "deploy" / "dagster.production.yaml").read_text())
            settings["run_coordinator"]["config"]["pooled_storage_connections"] = not args.unpooled
            if args.dequeue:
                settings["run_launcher"] = {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"}
            (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
            os.environ.update(storage_env(database))
            attribute = "defs"
            if args.shard:
                index, count = (int(part) for part in args.shard.split("/"))
                attribute = f"defs_shard_{index}_of_{count}"
            if args.code_server:  # the spread is the sensor's, evaluated in the code server
                if args.all_first_runs_at_once and args.shard:
                    parser.error("--all-first-runs-at-once with --code-server is for the whole location")
                module, attribute = (("benchmarks.scale_runs", "defs_all_first_runs_at_once")
                                     if args.all_first_runs_at_once else ("transfer_platform.definitions", attribute))
                target = ModuleTarget(module_name=module, attribute=attribute, working_directory=None,
                                      location_name="transfer_platform")
            else:
                target = InProcessWorkspaceLoadTarget([InProcessCodeLocationOrigin(LoadableTargetOrigin(
                    executable_path=sys.executable, module_name="transfer_platform.definitions",
                    attribute=attribute))])
            servers = ClientTree(None)  # this process's descendants: the code server
            with dg.DagsterInstance.from_config(str(home)) as instance:
                clock = Clock()
                with WorkspaceProcessContext(instance, target) as context:
                    wall, cpu = clock.lap()
                    where = "a code server" if args.code_server else "in process"
                    print(f"workspace (definitions + snapshot, {where}) loaded in {wall:.1f} s, {cpu:.1f} CPU s here, "
                          f"{servers.cpu() - own_cpu():.1f} CPU s in the code server  (load average {load()})",
                          flush=True)
                    instance.run_coordinator  # noqa: B018 - opened, as the daemon's run queue thread has it
                    logger = logging.getLogger("scale_runs")
                    logger.setLevel(logging.WARNING)
                    # the daemon's CPU, not its waits on the code server, when they are apart
                    timer = time.process_time if args.code_server else time.perf_counter
                    profiler = cProfile.Profile(timer) if args.profile or args.profile_out else None
                    for tick in range(1, args.ticks + 1):
                        if tick > 1:  # the sensor's next tick is due once its interval has passed
                            time.sleep(sensors.TICK_SECONDS + 1)
                        tick_once(instance, context, logger, counter, servers, profiler if tick == 1 else None,
                                  tick, args.code_server)
                    if args.dequeue:
                        dequeue(instance, context, args.dequeue)
                    if profiler:
                        if args.profile_out:
                            profiler.dump_stats(args.profile_out)
                        if args.profile:
                            stats = pstats.Stats(profiler)
                            stats.sort_stats("cumulative").print_stats(45)
                            stats.sort_stats("tottime").print_stats(20)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def tick_once(instance, context, logger, counter, servers, profiler, tick: int, code_server: bool) -> None:
    """One ``execute_sensor_iteration``: its wall and CPU seconds (the daemon's, and the code
    server's apart), the runs it created, its SQL statements and new connections."""
    import dagster as dg
    from dagster._daemon.sensor import execute_sensor_iteration

    statements, connections = counter.snapshot()
    server_before = servers.cpu() - own_cpu()
    runs_before = instance.get_runs_count()
    clock = Clock()
    if profiler:
        profiler.enable()
    list(execute_sensor_iteration(context, logger, None, None))
    seconds, cpu = clock.lap()
    server_cpu = servers.cpu() - own_cpu() - server_before
    if profiler:
        profiler.disable()
    statements, connections = (a - b for a, b in zip(counter.snapshot(), (statements, connections), strict=True))
    runs = instance.get_runs_count() - runs_before
    queued = instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]))
    state = next(s for s in instance.all_instigator_state() if s.instigator_name == "transfer_schedule")
    ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id)
    spent = (f"{cpu:.1f} CPU s in the daemon, {server_cpu:.1f} in the code server; {runs} runs created "
             f"({queued} queued in all), {runs / seconds:.1f} runs/s, {runs / max(cpu, 1e-9):.1f} runs per "
             f"CPU s of the daemon" if code_server else
             f"{cpu:.1f} CPU s (the daemon's and the code location's, in process), {runs} runs "
             f"created ({queued} queued in all), {runs / seconds:.1f} runs/s, "
             f"{runs / max(cpu, 1e-9):.1f} runs per CPU s")
    print(f"{'first' if tick == 1 else f'tick {tick}:'} daemon tick: {seconds:.1f} s, {spent}, {statements} SQL "
          f"statements ({statements / max(runs, 1):.1f} a run), {connections} new connections; "
          f"tick {ticks[0].status.value if ticks else '?'}  (load average {load()})", flush=True)


def __getattr__(name: str):
    """``defs_all_first_runs_at_once``: the shipped definitions, the sensor's spread of many new
    destinations' first runs off (a code server's target for ``--code-server
    --all-first-runs-at-once``)."""
    if name != "defs_all_first_runs_at_once":
        raise AttributeError(name)
    from transfer_platform.definitions import defs
    from transfer_platform.orchestration.scheduling import sensors

    sensors.FIRST_RUNS_PER_TICK = 10**9
    return defs


def own_cpu() -> float:
    mine = os.times()
    return mine.user + mine.system + mine.children_user + mine.children_system


def build_in_process(config_path: Path, label: str, shard: str | None) -> None:
    """The definitions and the code server's snapshot of them, built and timed in this process."""
    import dagster as dg
    from dagster._core.remote_representation.external_data import RepositorySnap

    from transfer_platform.definitions import build_definitions

    clock = Clock()
    definitions = build_definitions(str(config_path), shard=shard or "")
    repository = definitions.get_repository_def()
    built = clock.lap()
    snap = RepositorySnap.from_def(repository)
    snapped = clock.lap()
    size = len(dg.serialize_value(snap))
    serialized = clock.lap()
    print(f"{label} (wall s / CPU s): definitions {built[0]:.1f} / {built[1]:.1f}, snapshot {snapped[0]:.1f} / "
          f"{snapped[1]:.1f} + serialization {serialized[0]:.1f} / {serialized[1]:.1f} ({size / 1e6:.1f} MB)  "
          f"(load average {load()})", flush=True)
    del snap, repository, definitions



def dequeue(instance, context, seconds: float) -> None:
    """The run queue's daemon iterating for ``seconds`` over the queued runs (see the module)."""
    import dagster as dg
    from dagster._core.events import DagsterEvent, DagsterEventType
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
        QueuedRunCoordinatorDaemon,
    )

    in_progress = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.NOT_STARTED]
    queued = instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]))
    launched, iterations, durations = 0, 0, []
    daemon = QueuedRunCoordinatorDaemon(interval_seconds=0)
    with daemon:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            began = time.perf_counter()
            list(daemon.run_iteration(context))
            durations.append(time.perf_counter() - began)
            iterations += 1
            for run in instance.get_runs(dg.RunsFilter(statuses=in_progress)):
                launched += 1
                instance.report_dagster_event(DagsterEvent(  # ended: its slot is free again
                    event_type_value=DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name,
                    message="ended by benchmarks.scale_runs"), run_id=run.run_id)
    spent = sum(durations)
    durations.sort()
    print(f"dequeue: {iterations} iterations over {queued} queued runs, {launched} launched in {spent:.1f} s of "
          f"iterations: {launched / spent:.1f} runs/s; an iteration {durations[len(durations) // 2]:.2f} s "
          f"(median), {durations[-1]:.2f} s (max)  (load average {load()})", flush=True)


if __name__ == "__main__":
    main()
