"""Source staging: what one tick of incremental transfers of one model costs the source, with and
without staging (``staging:`` on the PostgreSQL source).

    .venv/bin/python -m benchmarks.source_staging --recipients 100 [--rows-per-tenant 200] [--ticks 2]

The source is ``benchmarks/source.py``'s table (``--recipients`` tenants, an index on
``(tenant_id, updated_at)``); each recipient has a PostgreSQL destination (one set of schemas per
mode). Both modes are backfilled first (a backfill never stages). Each tick then changes
``--changes`` rows of every tenant (stamped in the tick's last 10 minutes) and transfers every
recipient one after another at the tick's "now" (a 15-minute schedule; the model has no
window size: one window per transfer), first without staging,
then with it. Per tick and mode it reports:

- ``row_statements``: statements that read or counted the model's rows (the source layer's own
  counter, ``jdbc.SOURCE_STATEMENTS``); ``schema_statements``: a read's columns asked with no row;
- ``source_tuples``: tuples the source table's scans returned (``pg_stat_user_tables``:
  ``seq_tup_read + idx_tup_fetch``) and ``source_scans`` (``seq_scan + idx_scan``): the source's
  work, whatever else the server does (pg_stat_statements is not installed here);
- ``server_cpu_s``: CPU seconds of every PostgreSQL process (``/proc``: live processes and the
  postmaster's reaped children); it includes the destinations' writes, on the same server;
- ``wall_s``: the tick's wall time (all transfers, one after another, one Spark session).

Not a test: numbers depend on the machine's load (printed with them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from benchmarks.cases_platform import SPARK, platform_raw
from benchmarks.common import NOW, SCHEMA, drop_schemas, pg_connect
from benchmarks.source import SOURCE, create_source, tenant_names

TICK = timedelta(minutes=15)


def postgres_cpu_seconds() -> float:
    """CPU seconds of every ``postgres`` process on this machine (live ones, and the children
    the postmaster has reaped: its ``cutime``/``cstime``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        if name != "postgres" and not name.startswith("postgres"):
            continue
        fields = text[text.rindex(")") + 2:].split()
        utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
        total += utime + stime + cutime + cstime
    return total / ticks


def table_stats() -> tuple[int, int]:
    schema, table = SOURCE.split(".")
    with pg_connect() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0), "
                           "coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables "
                           "WHERE schemaname = %s AND relname = %s", (schema, table)).fetchone()
    return int(row[0]), int(row[1])


def change(tenants: int, changes: int, tick_now, seed: int) -> None:
    """``changes`` rows of every tenant get a new ``updated_at`` in the tick's last 10 minutes."""
    with pg_connect(autocommit=True) as conn:
        conn.execute(
            f"UPDATE {SOURCE} SET updated_at = %s - ((id * %s) %% 600) * interval '1 second', a = a + 1 "
            "WHERE id / %s BETWEEN %s AND %s",
            (tick_now, seed + 1, tenants, seed * changes, seed * changes + changes - 1))


def run_tick(spark, config, now, count: int) -> dict:
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.sources import jdbc
    from transfer_platform.transfers.order import TransferOrder
    from transfer_platform.transfers.runner import TransferRequest, run_transfer

    before_rows, before_schema = jdbc.SOURCE_STATEMENTS[("src", "rows")], jdbc.SOURCE_STATEMENTS[("src", "schema")]
    tuples0, scans0 = table_stats()
    cpu0 = postgres_cpu_seconds()
    start = time.perf_counter()
    moved = 0
    for i in range(count):
        destination = config.destination(f"d{i}")
        writer = writer_for(destination)
        try:
            (summary,) = run_transfer(TransferRequest(spark=spark, config=config,
                                                      order=TransferOrder(destination=destination.name, tick=now),
                                                      writer=writer, transfer_id=uuid.uuid4().hex, now=now),
                                      config.models_for(destination))
        finally:
            writer.close()
        if summary.status != "SUCCESS":
            raise RuntimeError(f"d{i}: {summary.error}")
        moved += summary.rows_transferred
    wall = time.perf_counter() - start
    cpu = postgres_cpu_seconds() - cpu0
    time.sleep(0.6)  # the statistics collector reports at most every 500 ms
    tuples1, scans1 = table_stats()
    return {"row_statements": jdbc.SOURCE_STATEMENTS[("src", "rows")] - before_rows,
            "schema_statements": jdbc.SOURCE_STATEMENTS[("src", "schema")] - before_schema,
            "source_tuples": tuples1 - tuples0, "source_scans": scans1 - scans0,
            "server_cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "rows_moved": moved}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipients", type=int, default=100)
    parser.add_argument("--rows-per-tenant", type=int, default=200)
    parser.add_argument("--changes", type=int, default=3, help="rows changed per tenant per tick")
    parser.add_argument("--ticks", type=int, default=2)
    args = parser.parse_args(argv)

    from transfer_platform.config.models import SparkSettings
    from transfer_platform.config.parsing import parse_config
    from transfer_platform.runtime.spark_session import get_spark_session

    tenants = tenant_names(args.recipients)
    create_source(args.rows_per_tenant * args.recipients, args.recipients)
    staging = Path(tempfile.mkdtemp(prefix="tp_bench_staging_"))
    prefixes = {"direct": f"{SCHEMA}_off", "staged": f"{SCHEMA}_on"}
    configs = {}
    for mode, prefix in prefixes.items():
        raw = platform_raw(tenants, prefix, min_start=NOW - timedelta(days=400))  # one window per read
        for d in raw["destinations"]:
            d["frequency_minutes"] = 15
        if mode == "staged":
            raw["sources"][0]["staging"] = {"path": str(staging)}
        configs[mode] = parse_config(raw, now=NOW)
    spark = get_spark_session(SparkSettings(**SPARK))
    results: dict = {"recipients": args.recipients, "rows": args.rows_per_tenant * args.recipients,
                     "changes_per_tenant_per_tick": args.changes, "ticks": []}
    try:
        now = NOW
        for mode in prefixes:  # the backfills (never staged: nothing delivered yet)
            results[f"backfill_{mode}"] = run_tick(spark, configs[mode], now, args.recipients)
        for tick in range(1, args.ticks + 1):
            now = NOW + tick * TICK
            change(args.recipients, args.changes, now, tick)
            entry = {"tick": tick, "load_before": os.getloadavg()}
            for mode in prefixes:
                entry[mode] = run_tick(spark, configs[mode], now, args.recipients)
            entry["load_after"] = os.getloadavg()
            entry["staging_left"] = sorted(str(p.relative_to(staging)) for p in staging.rglob("*.parquet"))
            results["ticks"].append(entry)
            print(json.dumps(entry), flush=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with pg_connect(autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        for prefix in prefixes.values():
            drop_schemas(prefix)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
