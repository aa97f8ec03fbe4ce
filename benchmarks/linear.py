"""Cost that grows linearly: the command line's backfill of one tenant at several
sizes, and an incremental of a fixed number of changed rows into destination tables of those sizes.

    .venv/bin/python -m benchmarks.linear [--sizes 1620000,16200000,50000000] [--runs 1]
        [--changed 16200] [--incremental-runs 3] [--mode default] [--json benchmark_results/linear.json]

One source table (``tp_bench_<run>.events``, one tenant), grown from one size to the next (the
rows of the smaller size stay as they are, as ``benchmarks/source.py`` builds them). At each size:

- the **backfill**: ``transfer-platform transfer d0 --full-refresh`` as its own process (``--mode``:
  *default* as a user runs it, its first command untimed; or *inprocess*), ``--runs`` times, each
  checked afterwards (untimed): seconds and CPU-seconds per million rows (the source's backends,
  the destination's, the client side: ``benchmarks/cost.py``) and the peak resident memory of the
  client side (the command, the resident command process and its fork, the shared Spark server's
  JVM and Python workers), sampled every 0.1 s, with its value at the start;
- the **incremental**: ``--changed`` rows of the tenant changed (the same ids at every size), then
  ``transfer-platform transfer d0`` into the destination table holding the whole tenant,
  ``--incremental-runs`` times: its seconds and CPU-seconds, which should not depend on the size;
  before each, the floor's incremental (``benchmarks/end_to_end.py``'s psycopg ``COPY`` + merge) of
  as many changed rows into the same table: what PostgreSQL itself costs at that size.

Between the steps, untimed: a checkpoint before each backfill, and the destination table vacuumed
and analyzed after it (autovacuum's work on a table just loaded, which would otherwise run during
the incrementals), so that each step measures itself and not the one before.

A size whose source and destination would not fit in the free disk (measured after the first
size: the source's bytes per row, for the rows added and 2.5x the size for the destination's
new and old copies and the WAL) is skipped
and said so. The summary gives each series' spread, (max - min) / min, against 15% (reported,
never asserted). The JSON holds everything with the machine's load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.common import NOW, SCHEMA, count_rows, drop_schemas, pg_connect, stats
from benchmarks.cost import Cost, median_cost, per_million
from benchmarks.end_to_end import MODES, PREFIX, cli_transfer, floor_transfer, uptime, write_config
from benchmarks.source import SOURCE, create_source, drop_source

#: the flatness asked of time and CPU per million rows across sizes
SPREAD = 0.15


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1620000,16200000", help="the tenant's sizes, ascending, comma-separated")
    parser.add_argument("--runs", type=int, default=1, help="backfills at each size")
    parser.add_argument("--changed", type=int, default=16_200, help="rows each incremental changes")
    parser.add_argument("--incremental-runs", type=int, default=3)
    parser.add_argument("--mode", choices=sorted(MODES), default="default", help="the command line's Spark mode")
    parser.add_argument("--json", default="benchmark_results/linear.json")
    args = parser.parse_args(argv)
    args.sizes = [int(size) for size in args.sizes.split(",")]
    if args.sizes != sorted(args.sizes) or args.changed > args.sizes[0]:
        parser.error("--sizes must ascend and --changed must not exceed the first size")
    return args


def grow_source(start: int, end: int) -> None:
    """Rows ``start + 1 .. end`` of the one tenant, as :func:`create_source` makes them."""
    with pg_connect(autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {SOURCE} SELECT g, 'tenant-0', "
            "%s::timestamptz - (g %% 31536000) * interval '1 second' - (g %% 997) * interval '1 microsecond', "
            "g %% 1000, g %% 7, g %% 13, g * 0.5, g / 3.0, 'k' || (g %% 50), 'v' || (g %% 9), "
            "repeat(md5(g::text), 3) FROM generate_series(%s::bigint, %s::bigint) g", (NOW, start + 1, end))
        conn.execute(f"VACUUM ANALYZE {SOURCE}")


def change(count: int, at: datetime) -> int:
    """Change the tenant's rows with ids 1..``count`` (the same rows at every size)."""
    with pg_connect(autocommit=True) as conn:
        return conn.execute(f"UPDATE {SOURCE} SET a = a + 1, updated_at = %s WHERE id <= %s",
                            (at, count)).rowcount


def settle(table: str | None = None) -> None:
    """Untimed, between the steps: ``table`` vacuumed and analyzed (what autovacuum would do to a
    table just loaded, in the middle of the next step otherwise), then a checkpoint (the dirty
    pages of the step before written now, not during the next one)."""
    with pg_connect(autocommit=True) as conn:
        if table:
            conn.execute(f"VACUUM ANALYZE {table}")
        conn.execute("CHECKPOINT")


def bytes_per_row(rows: int) -> float:
    with pg_connect(autocommit=True) as conn:
        return conn.execute("SELECT pg_total_relation_size(%s::regclass)", (SOURCE,)).fetchone()[0] / rows


def spread(values: list[float]) -> float | None:
    return round((max(values) - min(values)) / min(values), 3) if len(values) > 1 and min(values) > 0 else None


def at_size(args: argparse.Namespace, config: Path, rows: int, marker: str) -> dict:
    destination = f"{PREFIX}_0.events"
    seconds, costs, peaks, starts = [], [], [], []
    for _ in range(args.runs):
        settle()
        with Cost(marker) as cost:
            start = time.perf_counter()
            cli_transfer(config, "--full-refresh", mode=args.mode)
            seconds.append(time.perf_counter() - start)
        costs.append(cost.report)
        peaks.append(cost.peak_rss)
        starts.append(cost.start_rss)
        if (held := count_rows(destination)) != rows:
            raise RuntimeError(f"backfill of {rows} rows: the destination holds {held}")
    settle(destination)  # the incrementals measure a table in its steady state, not the load's aftermath
    backfill = {**stats(seconds), "rows": rows, "cpu_s": median_cost(costs),
                "s_per_million_rows": round(stats(seconds)["median_s"] * 1e6 / rows, 2),
                "peak_rss_gb": round(max(peaks) / 1024**3, 2), "rss_at_start_gb": round(min(starts) / 1024**3, 2)}
    backfill["cpu_s_per_million_rows"] = per_million(backfill["cpu_s"], rows)
    seconds, costs, floors = [], [], []
    for _ in range(args.incremental_runs):
        at = datetime.now(UTC) - timedelta(seconds=1)
        change(args.changed, at)
        start = time.perf_counter()  # the floor, into the same table: what PostgreSQL itself costs there
        floor_transfer(destination.split(".")[0], at)
        floors.append(time.perf_counter() - start)
        at = datetime.now(UTC) - timedelta(seconds=1)
        changed = change(args.changed, at)
        with Cost(marker) as cost:
            start = time.perf_counter()
            cli_transfer(config, mode=args.mode)
            seconds.append(time.perf_counter() - start)
        costs.append(cost.report)
        moved = count_rows(destination, "WHERE updated_at = %s", (at,))
        if moved != changed or count_rows(destination) != rows:
            raise RuntimeError(f"incremental into {rows} rows: {moved} of {changed} changed rows delivered")
    incremental = {**stats(seconds), "rows": changed, "destination_rows": rows, "cpu_s": median_cost(costs),
                   "floor": stats(floors)}
    incremental["above_floor_s"] = round(incremental["median_s"] - incremental["floor"]["median_s"], 3)
    return {"backfill": backfill, "incremental": incremental}


def summary(sizes: dict) -> dict:
    """Each series' values across the sizes and its spread, against :data:`SPREAD`."""
    series = {
        "backfill s per 1M rows": [s["backfill"]["s_per_million_rows"] for s in sizes.values()],
        "backfill client CPU s per 1M rows": [s["backfill"]["cpu_s_per_million_rows"]["client"] for s in sizes.values()],
        "backfill destination CPU s per 1M rows": [s["backfill"]["cpu_s_per_million_rows"]["destination"]
                                                   for s in sizes.values()],
        "backfill source CPU s per 1M rows": [s["backfill"]["cpu_s_per_million_rows"]["source"] for s in sizes.values()],
        "backfill peak resident GB (client side)": [s["backfill"]["peak_rss_gb"] for s in sizes.values()],
        "incremental s": [s["incremental"]["median_s"] for s in sizes.values()],
        "incremental floor s": [s["incremental"]["floor"]["median_s"] for s in sizes.values()],
        "incremental client CPU s": [s["incremental"]["cpu_s"]["client"] for s in sizes.values()],
        "incremental destination CPU s": [s["incremental"]["cpu_s"]["destination"] for s in sizes.values()],
    }
    return {name: {"values": values, "spread": spread(values), "target": SPREAD,
                   "met": None if spread(values) is None else spread(values) <= SPREAD}
            for name, values in series.items()}


def table(sizes: dict, skipped: list[str], found: dict) -> str:
    lines = [f"{'rows':>10} {'backfill s':>10} {'s/1M':>6} {'CPU s/1M: src':>13} {'dest':>6} {'client':>6} "
             f"{'peak GB':>7} {'start GB':>8} | {'incr. s':>7} {'min-max':>11} {'floor s':>7} {'CPU s: dest':>11} "
             f"{'client':>6}"]
    for rows, size in sizes.items():
        b, i = size["backfill"], size["incremental"]
        cpu = b["cpu_s_per_million_rows"]
        lines.append(f"{rows:>10} {b['median_s']:>10.1f} {b['s_per_million_rows']:>6.2f} {cpu['source']:>13.2f} "
                     f"{cpu['destination']:>6.2f} {cpu['client']:>6.2f} {b['peak_rss_gb']:>7.2f} "
                     f"{b['rss_at_start_gb']:>8.2f} | {i['median_s']:>7.2f} {i['min_s']:>5.2f}-{i['max_s']:<5.2f} "
                     f"{i['floor']['median_s']:>7.2f} "
                     f"{i['cpu_s']['destination']:>11.2f} {i['cpu_s']['client']:>6.2f}")
    lines += [f"skipped: {reason}" for reason in skipped]
    for name, row in found.items():
        met = "-" if row["met"] is None else ("met" if row["met"] else "NOT met")
        lines.append(f"{name}: {row['values']} spread {row['spread']} (<= {row['target']}: {met})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from transfer_platform.runtime.resident import stop_servers as stop_resident
    from transfer_platform.runtime.shared_spark import STATE_DIR_ENV_VAR, stop_servers

    args = parse_args(argv)
    results: dict = {"parameters": vars(args), "machine": {"cpu_count": os.cpu_count(), "uptime_before": uptime(),
                                                           "load_average_before": os.getloadavg()}}
    sizes: dict[int, dict] = {}
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tp_linear_") as scratch, ExitStack() as stack:
        folder = Path(scratch)
        state = folder / "shared_spark"
        os.environ[STATE_DIR_ENV_VAR] = str(state)
        stack.callback(stop_servers, state)
        stack.callback(stop_resident, state)
        marker = f"{STATE_DIR_ENV_VAR}={state}"
        config = write_config(folder, "linear", None, datetime.now(UTC).replace(microsecond=0))
        try:
            previous = 0
            for rows in args.sizes:
                if previous:
                    need = bytes_per_row(previous) * ((rows - previous) + 2.5 * rows)
                    free = shutil.disk_usage("/var/lib/postgresql" if Path("/var/lib/postgresql").exists() else "/").free
                    if need > free:
                        skipped.append(f"{rows} rows: needs ~{need / 1e9:.0f} GB, {free / 1e9:.0f} GB free")
                        continue
                    grow_source(previous, rows)
                else:
                    create_source(rows, 1)
                    if args.mode == "default":  # its first command untimed: whatever it starts is up
                        cli_transfer(config, mode=args.mode)
                previous = rows
                sizes[rows] = at_size(args, config, rows, marker)
                print(f"{rows} rows: {json.dumps(sizes[rows])}", flush=True)
        finally:
            drop_schemas(f"{SCHEMA}_")
            drop_source()
    found = summary(sizes)
    results["machine"].update(load_average_after=os.getloadavg(), uptime_after=uptime())
    results.update(sizes={str(k): v for k, v in sizes.items()}, skipped=skipped, summary=found)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(table(sizes, skipped, found))
    print(f"uptime before: {results['machine']['uptime_before']}\nuptime after:  {results['machine']['uptime_after']}\n"
          f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
