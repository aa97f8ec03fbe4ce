"""What a user's transfer costs end to end, in the process a user runs,
side by side with the floor measured in the same run.

    .venv/bin/python -m benchmarks.end_to_end [--rows 1800000] [--runs 3] [--daemon] [--demo]
        [--no-peers | --only-peers] [--json benchmark_results/end_to_end.json]

One tenant of ``--rows`` rows (``tp_bench_<run>.events`` in the machine's PostgreSQL, as
``benchmarks/run.py`` builds it) and one PostgreSQL destination schema. Each case ``--runs``
times (median, min, max), each run checked afterwards (untimed: the destination must hold every
row of the tenant and every changed row at its new ``updated_at``, else the run stops):

- ``floor_full`` / ``floor_incremental``: psycopg only, one transaction: ``COPY`` out (the whole
  tenant / the rows changed since the previous transfer) into an UNLOGGED staging table, one
  ``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE excluded.updated_at >= t.updated_at``;
- ``bare_copy_full`` / ``bare_copy_binary_full``: psycopg only, one stream: ``COPY (SELECT <the
  columns> ... WHERE tenant_id = ...) TO STDOUT`` piped chunk by chunk into ``COPY ... FROM
  STDIN`` of an empty table created with its primary key in a fresh schema, one transaction
  (text format; binary format): the backfills' second reference;
- ``cli_full_refresh_{inprocess,default,warm}``: ``transfer-platform transfer d0 --full-refresh``
  as its own process: *inprocess* with a local Spark started by that process
  (``TRANSFER_PLATFORM_SHARED_SPARK=0``), *default* as a user runs it with nothing set (no
  ``spark.remote``, no variable: the shared Spark server, and the command forked by the resident
  command process), *warm* as a client of a Spark Connect server (``transfer-platform
  spark-server``, started once, untimed); in both, the same backfill runs once untimed first, so
  that whatever the first command starts is up and the server's JVM has run the relay once (its
  first large job pays the JVM's warm-up, seconds);
- ``cli_incremental_{inprocess,default,warm}``: 1% of the tenant's rows changed (untimed), then
  ``transfer-platform transfer d0`` as its own process;
- ``sling_full`` / ``sling_incremental`` (``benchmarks/cases_sling.py``): the Sling binary of the
  ``sling-linux-amd64`` wheel, one replication (the tenant's rows, incremental on
  ``updated_at``, merge on ``id``) into a schema of its own, its first run into an empty schema
  and then after each change; kept off the network (telemetry off, its update check through a
  closed local proxy port), checked afterwards under ``strace`` (``sling_network`` in the JSON);
- ``dlt_full`` / ``dlt_incremental`` (``benchmarks/cases_dlt.py``): dlt 1.31's ``sql_table``
  (pyarrow backend, incremental on ``updated_at``, merge on ``id``), telemetry off, in the
  benchmark's process, its first run into an empty dataset with no pipeline state;
- ``daemon_full_refresh_*`` (``--daemon``): the full refresh enqueued (``--enqueue
  --full-refresh``) and run by the real ``dagster-daemon`` against the warm server (shipped
  ``dagster.yaml``);
- ``daemon_incremental_*`` (``--daemon``): the same incremental enqueued (``--enqueue``) and run
  by the real ``dagster-daemon`` against the warm server, on an idle queue: queued -> success,
  queued -> started (split: queued -> launched by the daemon, launched -> started by the run
  worker process) and the run itself, from the run's records (``benchmarks/daemon.py``); the
  destinations' integrity checks are off (their first, once the backfill is in, would hold the
  next transfer of the destination in the queue until it ends). The shipped ``dagster.yaml``
  (its run launcher forks runs from a preloaded parent; the first run after the daemon starts
  waits for that parent's imports, so each case runs once untimed first), then the same with
  Dagster's ``DefaultRunLauncher`` (``daemon_default_launcher_*``, a process spawned per run);
- ``daemon_sustained`` (``--daemon``): ``--small-destinations`` destinations of 1,000-row tenants,
  each enqueued again as soon as its previous transfer ended (one row changed first), for
  ``--sustained-minutes``: transfers per hour through the daemon;
- ``demo_backfill_{cold,warm}`` (``--demo``): ``transfer-platform demo``'s backfill time as it
  prints it (333 windows of 3 recipients x 2 models into Delta, object storage), cold and warm.

Every timed run of the cases above but the daemon's and the demo's is also measured in
CPU-seconds (``benchmarks/cost.py``): the source's backends, the destination's, the client side
(this process and its descendants, the shared Spark server and the resident command process)
and the whole PostgreSQL server; the medians over the runs (``cpu_s``) and per million rows moved
(``cpu_s_per_million_rows``).

The table shows each case's ratio to its floor of the same run and each backfill's to the bare
COPY relay (text), its CPU-seconds per million rows, then the targets (reported, never asserted):
the default command line from its second command on and the daemon, backfill <= 1.2x the floor
and <= 1.0x the bare COPY relay, incremental <= 2x the floor. The JSON holds the cases, the versions, the machine's load average
(and ``uptime``) before and after and its CPU count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from benchmarks.cases_platform import destination_schema, platform_raw
from benchmarks.common import COLUMNS, NOW, SCHEMA, count_rows, drop_schemas, pg_connect, stats
from benchmarks.cost import Cost, median_cost, per_million
from benchmarks.source import SOURCE, create_source, drop_source, touch_one_percent

PREFIX = f"{SCHEMA}_e2e"
FLOOR = f"{SCHEMA}_e2efloor"
BARE = f"{SCHEMA}_e2ebare"
TENANT = "tenant-0"
CLI = str(Path(sys.executable).with_name("transfer-platform"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_800_000, help="rows of the one tenant")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--demo", action="store_true", help="also the demo's backfill, cold and warm")
    parser.add_argument("--demo-runs", type=int, default=1, help="runs of each demo case (~1.5 min each)")
    parser.add_argument("--daemon", action="store_true", help="also (b) and (c): runs launched by the daemon")
    parser.add_argument("--small-destinations", type=int, default=8, help="(c): destinations kept busy")
    parser.add_argument("--sustained-minutes", type=float, default=5.0, help="(c): how long")
    parser.add_argument("--timeline", action="store_true",
                        help="print the phase lines of each command, and with --daemon each daemon run's "
                             "events, seconds after it was queued")
    parser.add_argument("--max-concurrent-runs", type=int, default=4, help="the run coordinator's limit")
    peers = parser.add_mutually_exclusive_group()
    peers.add_argument("--no-peers", action="store_true", help="without Sling and dlt")
    peers.add_argument("--only-peers", action="store_true",
                       help="the floor, Sling and dlt only (no Spark, no platform; the smoke test's)")
    parser.add_argument("--json", default="benchmark_results/end_to_end.json")
    return parser.parse_args(argv)


# -- the floor -------------------------------------------------------------------------------


def floor_transfer(schema: str, since: datetime | None = None) -> None:
    """COPY out (rows with ``updated_at >= since``, or all) -> unlogged staging -> one merge."""
    target, cols = f"{schema}.events", ", ".join(COLUMNS)
    updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "id")
    where = f"tenant_id = '{TENANT}'" + ("" if since is None else f" AND updated_at >= '{since.isoformat()}'")
    with pg_connect() as src, pg_connect() as dst:
        dst.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        dst.execute(f"CREATE TABLE IF NOT EXISTS {target} (LIKE {SOURCE} INCLUDING DEFAULTS, PRIMARY KEY (id))")
        dst.execute(f"CREATE UNLOGGED TABLE {target}_stg (LIKE {SOURCE})")
        with src.cursor().copy(f"COPY (SELECT {cols} FROM {SOURCE} WHERE {where}) TO STDOUT") as out, \
                dst.cursor().copy(f"COPY {target}_stg ({cols}) FROM STDIN") as into:
            for data in out:
                into.write(data)
        dst.execute(f"INSERT INTO {target} AS t ({cols}) SELECT {cols} FROM {target}_stg "
                    f"ON CONFLICT (id) DO UPDATE SET {updates} WHERE excluded.updated_at >= t.updated_at")
        dst.execute(f"DROP TABLE {target}_stg")
        dst.commit()


def bare_copy(schema: str, binary: bool = False) -> None:
    """The bare COPY relay: ``COPY (SELECT <columns> ... WHERE tenant) TO STDOUT`` piped chunk by
    chunk into ``COPY ... FROM STDIN`` of an empty table created with its primary key (text or
    binary format), one transaction."""
    target, cols = f"{schema}.events", ", ".join(COLUMNS)
    form = " (FORMAT binary)" if binary else ""
    with pg_connect() as src, pg_connect() as dst:
        dst.execute(f"CREATE SCHEMA {schema}")
        dst.execute(f"CREATE TABLE {target} (LIKE {SOURCE} INCLUDING DEFAULTS, PRIMARY KEY (id))")
        with src.cursor().copy(f"COPY (SELECT {cols} FROM {SOURCE} WHERE tenant_id = '{TENANT}') TO STDOUT{form}") \
                as out, dst.cursor().copy(f"COPY {target} ({cols}) FROM STDIN{form}") as into:
            for data in out:
                into.write(data)
        dst.commit()


# -- the command line ------------------------------------------------------------------------


def write_config(folder: Path, name: str, remote: str | None, now: datetime) -> Path:
    # the source's rows are dated before its fixed clock NOW, up to a year back (benchmarks/source.py,
    # benchmarks/linear.py): the start precedes them all, whatever today's date
    raw = platform_raw([TENANT], PREFIX, min_start=min(now, NOW) - timedelta(days=400))
    raw["spark"] = {"master": "local[2]", "driver_memory": "2g", **({"remote": remote} if remote else {})}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


#: the command line's Spark modes: (configuration with ``spark.remote``, environment added)
#: *inprocess*: the process starts its own local Spark; *default*: nothing set, as a user runs it;
#: *warm*: a client of the benchmark's Spark Connect server
MODES = {"inprocess": (False, {"TRANSFER_PLATFORM_SHARED_SPARK": "0"}), "default": (False, {}),
         "warm": (True, {})}
#: variables of the caller's that would change what the commands do
UNSET = ("TRANSFER_PLATFORM_SPARK_REMOTE", "TRANSFER_PLATFORM_SHARED_SPARK", "DAGSTER_HOME")


def cli_transfer(config: Path, *extra: str, mode: str = "default") -> dict:
    """``transfer-platform transfer d0`` as its own process in a Spark ``mode``; its JSON summary."""
    env = {**{k: v for k, v in os.environ.items() if k not in UNSET}, **MODES[mode][1]}
    if SHOW_PHASES[0]:
        env["TRANSFER_PLATFORM_LOG_LEVEL"] = "INFO"
    done = subprocess.run([CLI, "--config", str(config), "transfer", "d0", *extra], capture_output=True,
                          text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"transfer-platform transfer failed ({done.returncode}): {done.stderr[-2000:]}")
    if SHOW_PHASES[0]:
        for line in done.stderr.splitlines():
            if '"phase"' in line:
                print(f"  {mode} {' '.join(extra)}: {line[:300]}", flush=True)
    summary = json.loads(done.stdout)
    if summary["status"] != "SUCCESS":
        raise RuntimeError(f"transfer-platform transfer: {summary}")
    return summary


#: with ``--timeline``: print the phase lines each command logs
SHOW_PHASES = [False]

#: ``KEY=value`` in the environment of the processes the command line detaches (the shared Spark
#: server, the resident command process): their CPU is the client side's (``benchmarks/cost.py``)
COST_MARKER: list[str | None] = [None]


def timed(runs: int, prepare, run, check) -> dict:
    """``runs`` times: ``prepare()`` (untimed), ``run()`` (timed, its CPU-seconds counted),
    ``check()`` (untimed)."""
    seconds, costs = [], []
    for _ in range(runs):
        prepare()
        with Cost(COST_MARKER[0]) as cost:
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
        costs.append(cost.report)
        check()
    return {**stats(seconds), "cpu_s": median_cost(costs)}


class Tenant:
    """The tenant's rows and the moments its changes are stamped with (always after the last)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.now = datetime.now(UTC).replace(microsecond=0)
        self.changed_at: datetime | None = None
        self.changed = 0

    def change(self) -> None:
        self.changed_at = datetime.now(UTC) - timedelta(seconds=1)
        self.changed = touch_one_percent(TENANT, 1, self.changed_at)

    def check(self, schema: str) -> None:
        held = count_rows(f"{schema}.events")
        moved = count_rows(f"{schema}.events", "WHERE updated_at = %s", (self.changed_at,)) if self.changed_at else 0
        if held != self.rows or (self.changed_at and moved != self.changed):
            raise RuntimeError(f"{schema}: {held} rows held of {self.rows}, {moved} of {self.changed} changed rows")


class Peers:
    """Sling and dlt, each into a schema of its own, with their setup (untimed)."""

    def __init__(self, folder: Path) -> None:
        from benchmarks import cases_dlt, cases_sling

        self.sling, self.dlt = cases_sling, cases_dlt
        self.folder = folder
        self.replication = cases_sling.write_replication(folder, SOURCE, TENANT, 0)
        self.sling_env = cases_sling.sling_environment(folder)
        self.sling_schema = cases_sling.schema(0)
        self.dlt_schema = cases_dlt.dataset(0)
        self.pipelines = folder / "dlt_pipelines"

    def sling_run(self) -> None:
        self.sling.sling_run(self.replication, self.sling_env)

    def sling_empty(self) -> None:
        drop_schemas(self.sling.PREFIX)

    def dlt_run(self) -> None:
        with self.dlt.dlt_environment(self.folder):
            self.dlt.dlt_copy(TENANT, 0, self.pipelines)

    def dlt_empty(self) -> None:
        drop_schemas(self.dlt.PREFIX)
        self.dlt.forget_pipelines(self.pipelines)

    def versions(self) -> dict:
        return {"sling": self.sling.version(), "dlt": self.dlt.version()}


class Progress(dict):
    """The cases, each printed (stderr) as it is measured: a long run shows where it is."""

    def __setitem__(self, name: str, value: dict) -> None:
        super().__setitem__(name, value)
        print(f"{name}: {json.dumps(value)}", file=sys.stderr, flush=True)


def transfer_cases(args: argparse.Namespace, folder: Path, server_url: str | None) -> tuple[dict, Tenant, dict]:
    """The floor, the command line in its three Spark modes (unless ``--only-peers``), Sling and
    dlt (unless ``--no-peers``): the backfill, then the incremental after 1% changed."""
    tenant = Tenant(args.rows)
    cases: dict[str, dict] = Progress()
    extra: dict = {}
    destination = destination_schema(PREFIX, 0)
    platform = not args.only_peers
    configs = {}
    if platform:
        plain = write_config(folder, "plain", None, tenant.now)
        configs = {mode: write_config(folder, "warm", server_url, tenant.now) if remote else plain
                   for mode, (remote, _) in MODES.items()}
    peers = None if args.no_peers else Peers(folder)
    if peers:
        extra["versions"] = peers.versions()
        with peers.dlt.dlt_environment(folder):  # dlt's imports, untimed
            pass

    floor, bare = destination_schema(FLOOR, 0), destination_schema(BARE, 0)
    cases["floor_full"] = timed(args.runs, lambda: drop_schemas(FLOOR), lambda: floor_transfer(floor),
                                lambda: tenant.check(floor))
    for name, binary in (("bare_copy_full", False), ("bare_copy_binary_full", True)):
        cases[name] = timed(args.runs, lambda: drop_schemas(BARE), lambda b=binary: bare_copy(bare, b),
                            lambda: tenant.check(bare))
    drop_schemas(BARE)
    for mode, config in configs.items():
        if mode != "inprocess":  # the first command, untimed: the same backfill, so that the
            # server's JVM has run the relay once (and, by default, the shared server is started)
            cli_transfer(config, "--full-refresh", mode=mode)
        cases[f"cli_full_refresh_{mode}"] = timed(
            args.runs, lambda: None, lambda c=config, m=mode: cli_transfer(c, "--full-refresh", mode=m),
            lambda: tenant.check(destination))
    if peers:
        cases["sling_full"] = timed(args.runs, peers.sling_empty, peers.sling_run,
                                    lambda: tenant.check(peers.sling_schema))
        cases["dlt_full"] = timed(args.runs, peers.dlt_empty, peers.dlt_run,
                                  lambda: tenant.check(peers.dlt_schema))
    # incrementals: each after 1% of the tenant changed; the floor reads from the change's moment
    cases["floor_incremental"] = timed(
        args.runs, tenant.change, lambda: floor_transfer(floor, tenant.changed_at), lambda: tenant.check(floor))
    for mode, config in configs.items():
        cases[f"cli_incremental_{mode}"] = timed(
            args.runs, tenant.change, lambda c=config, m=mode: cli_transfer(c, mode=m),
            lambda: tenant.check(destination))
    if peers:
        cases["sling_incremental"] = timed(args.runs, tenant.change, peers.sling_run,
                                           lambda: tenant.check(peers.sling_schema))
        cases["dlt_incremental"] = timed(args.runs, tenant.change, peers.dlt_run,
                                         lambda: tenant.check(peers.dlt_schema))
        network = peers.sling.network_check(peers.replication, folder)
        extra["sling_network"] = network
        if network.get("non_loopback"):
            raise RuntimeError(f"Sling connected off the machine: {network['non_loopback']}")
        tenant.check(peers.sling_schema)
    for name in cases:
        cases[name]["rows"] = tenant.changed if "incremental" in name else tenant.rows
        cases[name]["cpu_s_per_million_rows"] = per_million(cases[name]["cpu_s"], cases[name]["rows"])
    drop_schemas(FLOOR)
    return cases, tenant, extra


SMALL_ROWS = 1000


def add_small_tenants(count: int, first_id: int) -> list[str]:
    """``count`` tenants of ``SMALL_ROWS`` rows each, added to the source (ids from ``first_id``)."""
    names = [f"small-{i}" for i in range(1, count + 1)]
    with pg_connect(autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {SOURCE} SELECT g, 'small-' || (1 + g %% %s), now() - (g %% 86400) * interval '1 second', "
            "g %% 1000, g %% 7, g %% 13, g * 0.5, g / 3.0, 'k' || (g %% 50), 'v' || (g %% 9), "
            "repeat(md5(g::text), 3) FROM generate_series(%s::bigint, %s::bigint) g", (count, first_id, first_id + count * SMALL_ROWS - 1))
    return names


def touch_one_row(tenant: str) -> None:
    with pg_connect(autocommit=True) as conn:
        conn.execute(f"UPDATE {SOURCE} SET a = a + 1, updated_at = clock_timestamp() WHERE id = "
                     f"(SELECT min(id) FROM {SOURCE} WHERE tenant_id = %s)", (tenant,))


def daemon_cases(args: argparse.Namespace, folder: Path, server_url: str, tenant: Tenant) -> dict:
    """(b) one incremental of 1% of the big tenant, enqueued, through the daemon; (c) the small
    tenants' incrementals, every destination kept busy for ``--sustained-minutes``."""
    from benchmarks.daemon import Daemon

    small = add_small_tenants(args.small_destinations, args.rows + 1)
    raw = platform_raw([TENANT, *small], PREFIX, min_start=tenant.now - timedelta(days=400))
    raw["spark"] = {"master": "local[2]", "driver_memory": "2g", "remote": server_url}
    for destination in raw["destinations"]:  # the sensor's daily integrity runs would queue transfers behind them
        destination["integrity_check_frequency_minutes"] = None
    config = folder / "daemon.yaml"
    config.write_text(yaml.safe_dump(raw))
    cases = {}
    keys = ("queued_to_success_s", "queued_to_start_s", "queued_to_launch_s", "launch_to_start_s", "run_s")
    with Daemon(folder / "daemon_default", config, max_concurrent_runs=args.max_concurrent_runs,
                default_launcher=True) as daemon:
        daemon.one_run("d0", before=tenant.change)  # untimed: the Spark server's first run of d0
        runs = [daemon.one_run("d0", before=tenant.change) for _ in range(args.runs)]
        tenant.check(destination_schema(PREFIX, 0))
        for key in keys:
            cases[f"daemon_default_launcher_{key}"] = {**stats([r[key] for r in runs]), "rows": tenant.changed}
    with Daemon(folder / "daemon", config, max_concurrent_runs=args.max_concurrent_runs) as daemon:
        daemon.one_run("d0", before=tenant.change)  # untimed: the launcher's parent starts with it
        daemon.show_timeline = args.timeline
        runs = [daemon.one_run("d0", before=tenant.change) for _ in range(args.runs)]
        tenant.check(destination_schema(PREFIX, 0))
        for key in keys:
            cases[f"daemon_incremental_{key}"] = {**stats([r[key] for r in runs]), "rows": tenant.changed}
        runs = []
        for _ in range(args.runs):
            runs.append(daemon.one_run("d0", full_refresh=True))
            tenant.check(destination_schema(PREFIX, 0))
        daemon.show_timeline = False
        for key in keys:
            cases[f"daemon_full_refresh_{key}"] = {**stats([r[key] for r in runs]), "rows": tenant.rows}
        destinations = [f"d{i}" for i in range(1, len(small) + 1)]
        for destination in destinations:  # the backfills first, untimed
            daemon.wait(daemon.enqueue(destination))
        by_destination = dict(zip(destinations, small, strict=True))
        cases["daemon_sustained"] = daemon.sustained(destinations, args.sustained_minutes,
                                                     lambda d: touch_one_row(by_destination[d]))
    return cases


def demo_cases(args: argparse.Namespace, folder: Path, server_url: str, tenant: Tenant | None = None) -> dict:
    """The demo's backfill, as ``transfer-platform demo`` prints it, cold and warm."""
    cases = {}
    for mode, remote in (("cold", None), ("warm", server_url)):
        seconds = []
        for run in range(args.demo_runs):
            env = {k: v for k, v in os.environ.items() if k not in ("TRANSFER_PLATFORM_SPARK_REMOTE", "DAGSTER_HOME")}
            if remote:
                env["TRANSFER_PLATFORM_SPARK_REMOTE"] = remote
            start = time.perf_counter()
            done = subprocess.run([CLI, "demo", "--dir", str(folder / f"demo_{mode}_{run}")], capture_output=True,
                                  text=True, env=env, check=False)
            whole = time.perf_counter() - start
            if done.returncode != 0 or "every destination equals its tenant's source rows" not in done.stdout:
                raise RuntimeError(f"the demo failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
            seconds.append(float(re.search(r"== backfill \(([\d.]+) s\)", done.stdout).group(1)))
            cases.setdefault(f"demo_process_{mode}", []).append(whole)
        cases[f"demo_backfill_{mode}"] = stats(seconds)
        cases[f"demo_process_{mode}"] = stats(cases[f"demo_process_{mode}"])
    return cases


FLOORS = {"full": "floor_full", "incremental": "floor_incremental"}
#: the backfills' second reference: the bare COPY relay into an empty keyed table (text format)
BARE_COPY = "bare_copy_full"
#: (case, limit of its ratio to the floor): reported, never asserted
TARGETS = (("cli_full_refresh_default", 1.2), ("daemon_full_refresh_queued_to_success_s", 1.2),
           ("cli_incremental_default", 2.0), ("daemon_incremental_queued_to_success_s", 2.0))
#: (case, limit of its ratio to the bare COPY relay): reported, never asserted
BARE_TARGETS = (("cli_full_refresh_default", 1.0), ("daemon_full_refresh_queued_to_success_s", 1.0))


def floor_of(name: str) -> str | None:
    """The floor a case compares with: the backfill's (``full`` in its name) or the incremental's."""
    if name.startswith(("floor_", "demo_")) or not name.endswith(
            ("_full", "_incremental", "_inprocess", "_default", "_warm", "queued_to_success_s")):
        return None
    return FLOORS["full" if "full" in name else "incremental"]


def ratio(cases: dict, name: str, reference: str | None = None) -> float | None:
    """A case's median over its floor's (or ``reference``'s) median of the same run."""
    floor = cases.get(reference or floor_of(name) or "", {})
    case = cases.get(name, {})
    if not floor.get("median_s") or "median_s" not in case:
        return None
    return round(case["median_s"] / floor["median_s"], 2)


def bare_ratio(cases: dict, name: str) -> float | None:
    """A backfill's median over the bare COPY relay's of the same run."""
    if floor_of(name) != FLOORS["full"] or name == BARE_COPY:
        return None
    return ratio(cases, name, BARE_COPY)


def targets(cases: dict) -> list[dict]:
    found = []
    for (name, limit), reference in [*((t, "floor") for t in TARGETS), *((t, "bare_copy") for t in BARE_TARGETS)]:
        value = ratio(cases, name) if reference == "floor" else bare_ratio(cases, name)
        if value is not None:
            found.append({"case": name, "reference": reference, f"ratio_to_{reference}": value, "target": limit,
                          "met": value <= limit})
    return found


def times(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def table(cases: dict) -> str:
    lines = [f"{'case':<42} {'median s':>9} {'min s':>7} {'max s':>7} {'rows':>9} {'vs floor':>8} {'vs bare':>7}"
             f"  CPU s per 1M rows: {'source':>6} {'dest':>6} {'client':>6} {'server':>6}"]
    for name, case in cases.items():
        if "median_s" not in case:
            lines.append(f"{name:<42} {json.dumps(case)}")
            continue
        cpu = case.get("cpu_s_per_million_rows") or {}
        parts = " ".join(f"{cpu[k]:>6.1f}" if k in cpu else f"{'':>6}" for k in ("source", "destination", "client",
                                                                                  "server"))
        lines.append(f"{name:<42} {case['median_s']:>9.2f} {case['min_s']:>7.2f} {case['max_s']:>7.2f} "
                     f"{case.get('rows', ''):>9} {times(ratio(cases, name)):>8} {times(bare_ratio(cases, name)):>7}"
                     f"  {'':<19}{parts}")
    for target in targets(cases):
        reference = target["reference"]
        lines.append(f"target {target['case']}: {target[f'ratio_to_{reference}']:.2f}x {reference.replace('_', ' ')}"
                     f", <= {target['target']}x: {'met' if target['met'] else 'NOT met'}")
    return "\n".join(lines)


def uptime() -> str:
    done = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    from benchmarks.spark_server import spark_connect_server
    from transfer_platform.runtime.resident import stop_servers as stop_resident
    from transfer_platform.runtime.shared_spark import STATE_DIR_ENV_VAR, stop_servers

    args = parse_args(argv)
    SHOW_PHASES[0] = args.timeline
    results = {"parameters": vars(args), "machine": {"cpu_count": os.cpu_count(), "uptime_before": uptime(),
                                                     "load_average_before": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="tp_e2e_") as scratch, ExitStack() as stack:
        folder = Path(scratch)
        # the default mode's shared Spark server: its state in the scratch folder, stopped at the end
        os.environ[STATE_DIR_ENV_VAR] = str(folder / "shared_spark")
        COST_MARKER[0] = f"{STATE_DIR_ENV_VAR}={folder / 'shared_spark'}"
        stack.callback(stop_servers, folder / "shared_spark")
        stack.callback(stop_resident, folder / "shared_spark")
        server_url, errors = None, []
        if not args.only_peers:
            start = time.perf_counter()
            server = stack.enter_context(spark_connect_server(
                folder / "server", driver_memory="2g", conf={"spark.sql.shuffle.partitions": "4"}))
            server_url = server.url
            results["setup"] = {"spark_server_start_s": round(time.perf_counter() - start, 2)}
        try:
            create_source(args.rows, 1)
            cases, tenant, extra = transfer_cases(args, folder, server_url)
            results.update(extra)
            # a failure of the later stages keeps the cases measured so far (written, then exit 1)
            for wanted, stage in ((args.daemon, daemon_cases), (args.demo, demo_cases)):
                if wanted and server_url and not errors:
                    try:
                        cases.update(stage(args, folder, server_url, tenant))
                    except Exception as exc:  # noqa: BLE001 - reported below, the exit code says it
                        errors.append(f"{stage.__name__}: {type(exc).__name__}: {exc}")
        finally:
            drop_schemas(f"{SCHEMA}_")
            drop_source()
    results["machine"]["load_average_after"] = os.getloadavg()
    results["machine"]["uptime_after"] = uptime()
    results["cases"] = cases
    for name, case in cases.items():
        if ratio(cases, name) is not None:
            case["ratio_to_floor"] = ratio(cases, name)
        if bare_ratio(cases, name) is not None:
            case["ratio_to_bare_copy"] = bare_ratio(cases, name)
    results["targets"] = targets(cases)
    results["errors"] = errors
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(table(cases))
    if "sling_network" in results:
        print(f"sling network: {results['sling_network']}")
    print(f"setup: {results.get('setup', {})}; versions: {results.get('versions', {})}\n"
          f"uptime before: {results['machine']['uptime_before']}\nuptime after:  {results['machine']['uptime_after']}\n"
          f"written: {out}")
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
