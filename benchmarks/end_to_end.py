"""Benchmarks of issue 13: what a user's transfer costs end to end, in the process a user runs,
side by side with the floor measured in the same run.

    .venv/bin/python -m benchmarks.end_to_end [--rows 1800000] [--runs 3] [--demo]
        [--json benchmark_results/end_to_end.json]

One tenant of ``--rows`` rows (``tp_bench_<run>.events`` in the machine's PostgreSQL, as
``benchmarks/run.py`` builds it) and one PostgreSQL destination schema. Each case ``--runs``
times (median, min, max), each run checked afterwards (untimed: the destination must hold every
row of the tenant and every changed row at its new ``updated_at``, else the run stops):

- ``floor_full`` / ``floor_incremental``: psycopg only, one transaction: ``COPY`` out (the whole
  tenant / the rows changed since the previous transfer) into an UNLOGGED staging table, one
  ``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE excluded.updated_at >= t.updated_at``;
- ``cli_full_refresh_{cold,warm}``: ``transfer-platform transfer d0 --full-refresh`` as its own
  process: *cold* with a local Spark started by that process (the embedded default), *warm* as a
  client of a Spark Connect server (``transfer-platform spark-server``, started once, untimed);
- ``cli_incremental_{cold,warm}``: 1% of the tenant's rows changed (untimed), then
  ``transfer-platform transfer d0`` as its own process, cold and warm;
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

The table shows each case's ratio to its floor. The JSON holds the cases, the machine's load
average before and after and its CPU count.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from benchmarks.cases_platform import destination_schema, platform_raw
from benchmarks.common import COLUMNS, SCHEMA, count_rows, drop_schemas, pg_connect, stats
from benchmarks.source import SOURCE, create_source, drop_source, touch_one_percent

PREFIX = f"{SCHEMA}_e2e"
FLOOR = f"{SCHEMA}_e2efloor"
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
    parser.add_argument("--max-concurrent-runs", type=int, default=4, help="the run coordinator's limit")
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


# -- the command line ------------------------------------------------------------------------


def write_config(folder: Path, name: str, remote: str | None, now: datetime) -> Path:
    raw = platform_raw([TENANT], PREFIX, min_start=now - timedelta(days=400))
    raw["spark"] = {"master": "local[2]", "driver_memory": "2g", **({"remote": remote} if remote else {})}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def cli_transfer(config: Path, *extra: str) -> dict:
    """``transfer-platform transfer d0`` as its own process; its JSON summary."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFER_PLATFORM_SPARK_REMOTE", "DAGSTER_HOME")}
    done = subprocess.run([CLI, "--config", str(config), "transfer", "d0", *extra], capture_output=True,
                          text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"transfer-platform transfer failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    if summary["status"] != "SUCCESS":
        raise RuntimeError(f"transfer-platform transfer: {summary}")
    return summary


def timed(runs: int, prepare, run, check) -> dict:
    """``runs`` times: ``prepare()`` (untimed), ``run()`` (timed), ``check()`` (untimed)."""
    seconds = []
    for _ in range(runs):
        prepare()
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
        check()
    return stats(seconds)


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


def transfer_cases(args: argparse.Namespace, folder: Path, server_url: str) -> dict:
    tenant = Tenant(args.rows)
    cases: dict[str, dict] = {}
    destination = destination_schema(PREFIX, 0)
    configs = {"cold": write_config(folder, "cold", None, tenant.now),
               "warm": write_config(folder, "warm", server_url, tenant.now)}

    floor = destination_schema(FLOOR, 0)
    cases["floor_full"] = timed(args.runs, lambda: drop_schemas(FLOOR), lambda: floor_transfer(floor),
                                lambda: tenant.check(floor))
    for mode, config in configs.items():
        cases[f"cli_full_refresh_{mode}"] = timed(
            args.runs, lambda: None, lambda c=config: cli_transfer(c, "--full-refresh"),
            lambda: tenant.check(destination))
    # incrementals: each after 1% of the tenant changed; the floor reads from the change's moment
    cases["floor_incremental"] = timed(
        args.runs, tenant.change, lambda: floor_transfer(floor, tenant.changed_at), lambda: tenant.check(floor))
    for mode, config in configs.items():
        cases[f"cli_incremental_{mode}"] = timed(
            args.runs, tenant.change, lambda c=config: cli_transfer(c), lambda: tenant.check(destination))
    for name in cases:
        cases[name]["rows"] = tenant.changed if "incremental" in name else tenant.rows
    drop_schemas(FLOOR)
    return cases, tenant


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
        runs = [daemon.one_run("d0", before=tenant.change) for _ in range(args.runs)]
        tenant.check(destination_schema(PREFIX, 0))
        for key in keys:
            cases[f"daemon_incremental_{key}"] = {**stats([r[key] for r in runs]), "rows": tenant.changed}
        destinations = [f"d{i}" for i in range(1, len(small) + 1)]
        for destination in destinations:  # the backfills first, untimed
            daemon.wait(daemon.enqueue(destination))
        by_destination = dict(zip(destinations, small, strict=True))
        cases["daemon_sustained"] = daemon.sustained(destinations, args.sustained_minutes,
                                                     lambda d: touch_one_row(by_destination[d]))
    return cases


def demo_cases(args: argparse.Namespace, folder: Path, server_url: str) -> dict:
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


RATIOS = (("cli_full_refresh_cold", "floor_full"), ("cli_full_refresh_warm", "floor_full"),
          ("cli_incremental_cold", "floor_incremental"), ("cli_incremental_warm", "floor_incremental"),
          ("daemon_incremental_queued_to_success_s", "floor_incremental"),
          ("daemon_default_launcher_queued_to_success_s", "floor_incremental"))


def table(cases: dict) -> str:
    lines = [f"{'case':<26} {'median s':>9} {'min s':>7} {'max s':>7} {'rows':>9}  vs floor"]
    ratio_of = dict(RATIOS)
    for name, case in cases.items():
        if "median_s" not in case:
            lines.append(f"{name:<26} {json.dumps(case)}")
            continue
        floor = cases.get(ratio_of.get(name, ""), {})
        ratio = f"{case['median_s'] / floor['median_s']:.1f}x" if floor.get("median_s") else ""
        lines.append(f"{name:<26} {case['median_s']:>9.2f} {case['min_s']:>7.2f} {case['max_s']:>7.2f} "
                     f"{case.get('rows', ''):>9}  {ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.spark_server import spark_connect_server

    args = parse_args(argv)
    results = {"parameters": vars(args), "machine": {"cpu_count": os.cpu_count(),
                                                     "load_average_before": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="tp_e2e_") as scratch:
        folder = Path(scratch)
        start = time.perf_counter()
        with spark_connect_server(folder / "server", driver_memory="2g",
                                  conf={"spark.sql.shuffle.partitions": "4"}) as server:
            results["setup"] = {"spark_server_start_s": round(time.perf_counter() - start, 2)}
            try:
                create_source(args.rows, 1)
                cases, tenant = transfer_cases(args, folder, server.url)
                if args.daemon:
                    cases.update(daemon_cases(args, folder, server.url, tenant))
                if args.demo:
                    cases.update(demo_cases(args, folder, server.url))
            finally:
                drop_schemas(f"{SCHEMA}_")
                drop_source()
    results["machine"]["load_average_after"] = os.getloadavg()
    results["cases"] = cases
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(table(cases))
    print(f"setup: {results['setup']}; load average before {results['machine']['load_average_before']}, "
          f"after {results['machine']['load_average_after']}\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
