"""Benchmarks (a first harness for issue 5; dlt and the 10N incremental case are not in it yet).

    .venv/bin/python -m benchmarks.run [--rows 2000000] [--tenants 20] [--runs 3] [--windows 400]
                                       [--recipients 1000] [--json benchmark_results/results.json]

Creates a multi-tenant ``events`` table in the machine's PostgreSQL (schema ``tp_bench``) and
measures, side by side, with medians (min, max) of ``--runs`` runs:

- floor: COPY of one tenant's rows out of the source into an unlogged staging table, then one
  ``INSERT ... ON CONFLICT DO UPDATE ... WHERE excluded.updated_at >= t.updated_at``, one transaction;
- transfer_platform's data path (Spark JDBC read -> staged upsert) for one tenant and for all;
- an incremental transfer after 1 % of one tenant's rows changed;
- per-window overhead: a backfill of 400 daily windows of small data;
- the load time of Dagster definitions for 1,000 recipients x 10 models;
- peak memory of the whole process tree (JVM included), sampled from /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import yaml

PG = {"host": "127.0.0.1", "port": 5432, "dbname": "test", "user": "postgres"}
SCHEMA = "tp_bench"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (the Spark JVM is a child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


class PeakMemory:
    def __init__(self) -> None:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, tree_rss_bytes(os.getpid()))

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def create_source(rows: int, tenants: int) -> None:
    with psycopg.connect(**PG, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(
            f"CREATE TABLE {SCHEMA}.events (id bigint PRIMARY KEY, tenant_id text NOT NULL, "
            "updated_at timestamptz NOT NULL, a integer, b integer, c integer, x double precision, "
            "y double precision, s1 text, s2 text, doc text)")
        conn.execute(
            f"INSERT INTO {SCHEMA}.events SELECT g, 'tenant-' || (g %% %s), "
            "%s::timestamptz - (g %% 31536000) * interval '1 second' - (g %% 997) * interval '1 microsecond', "
            "g %% 1000, g %% 7, g %% 13, g * 0.5, g / 3.0, 'k' || (g %% 50), 'v' || (g %% 9), "
            "repeat(md5(g::text), 3) FROM generate_series(1, %s) g", (tenants, NOW, rows))
        conn.execute(f"CREATE INDEX ON {SCHEMA}.events (tenant_id, updated_at)")
        conn.execute(f"ANALYZE {SCHEMA}.events")


COLUMNS = ["id", "tenant_id", "updated_at", "a", "b", "c", "x", "y", "s1", "s2", "doc"]
TYPES = {"id": "integer", "tenant_id": "string", "updated_at": "timestamp", "a": "integer", "b": "integer",
         "c": "integer", "x": "float", "y": "float", "s1": "string", "s2": "string", "doc": "string"}


def floor_copy(tenant: str) -> None:
    """COPY out -> unlogged staging -> one merge, one transaction (psycopg)."""
    target = f"{SCHEMA}.floor_{uuid.uuid4().hex[:8]}"
    cols = ", ".join(COLUMNS)
    with psycopg.connect(**PG) as src, psycopg.connect(**PG) as dst:
        dst.execute(f"CREATE TABLE {target} (LIKE {SCHEMA}.events INCLUDING ALL)")
        dst.execute(f"CREATE UNLOGGED TABLE {target}_stg (LIKE {SCHEMA}.events)")
        with src.cursor().copy(f"COPY (SELECT {cols} FROM {SCHEMA}.events WHERE tenant_id = "
                               f"'{tenant}') TO STDOUT") as out, \
                dst.cursor().copy(f"COPY {target}_stg ({cols}) FROM STDIN") as into:
            for data in out:
                into.write(data)
        updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "id")
        dst.execute(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {target}_stg ON CONFLICT (id) "
                    f"DO UPDATE SET {updates} WHERE excluded.updated_at >= {target}.updated_at")
        dst.execute(f"DROP TABLE {target}_stg")
        dst.commit()


def platform_config(tenants: list[str], dst_schema: str, *, window: int | None = None,
                    min_start: datetime | None = None):
    from transfer_platform.config import parse_config

    connection = {"host": PG["host"], "port": PG["port"], "database": PG["dbname"], "username": PG["user"]}
    model = {"model_name": "events", "source_name": "src", "source_table": f"{SCHEMA}.events",
             "organization_column": "tenant_id",
             "min_start_time_epoch": int((min_start or NOW - timedelta(days=400)).timestamp()),
             "columns": [{"name_in_source": c, "data_type": TYPES[c], "is_primary_key": c == "id",
                          "is_last_modified": c == "updated_at"} for c in COLUMNS]}
    if window:
        model["max_transfer_time_window_seconds"] = window
    return parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": connection}],
        "models": [model],
        "recipients": [{"name": f"r{i}", "id_in_provider_system": t} for i, t in enumerate(tenants)],
        "destinations": [{"name": f"d{i}", "vendor": "postgres", "recipient": f"r{i}",
                          "connection": {**connection, "schema": f"{dst_schema}_{i}"}}
                         for i in range(len(tenants))],
    }, now=NOW)


def transfer_all(spark, config, now: datetime) -> int:
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.transfers.runner import TransferRequest, run_transfer

    rows = 0
    for destination in config.destinations:
        writer = writer_for(destination)
        try:
            (summary,) = run_transfer(TransferRequest(spark=spark, config=config, destination=destination.name,
                                                      writer=writer, transfer_id=uuid.uuid4().hex, now=now),
                                      config.models_for(destination))
        finally:
            writer.close()
        if summary.status != "SUCCESS":
            raise RuntimeError(summary.error)
        rows += summary.rows_transferred
    return rows


def drop_schemas(prefix: str) -> None:
    with psycopg.connect(**PG, autocommit=True) as conn:
        for (name,) in conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
                                    (prefix,)).fetchall():
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def timed(fn: Callable[[], object], runs: int) -> dict:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(seconds), 3), "min_s": round(min(seconds), 3),
            "max_s": round(max(seconds), 3), "runs": runs}


def definitions_load_seconds(recipients: int, models: int) -> float:
    from transfer_platform.definitions import build_definitions

    with tempfile.TemporaryDirectory() as folder:
        columns = [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                   {"name_in_source": "org", "data_type": "string"},
                   {"name_in_source": "ts", "data_type": "timestamp", "is_last_modified": True}]
        config = {
            "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"}}],
            "models": [{"model_name": f"m{m}", "source_name": "lake", "source_table": f"t{m}",
                        "organization_column": "org", "columns": columns,
                        "max_transfer_time_window_seconds": 86400,
                        "min_start_time_epoch": int((NOW - timedelta(days=365)).timestamp())}
                       for m in range(models)],
            "recipients": [{"name": f"r{r}", "id_in_provider_system": f"t{r}"} for r in range(recipients)],
            "destinations": [{"name": f"d{r}", "vendor": "delta", "recipient": f"r{r}",
                              "connection": {"path": f"dest/{r}"}} for r in range(recipients)],
        }
        path = Path(folder) / "transfer_platform.yaml"
        path.write_text(yaml.safe_dump(config))
        start = time.perf_counter()
        build_definitions(str(path)).resolve_asset_graph()
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--recipients", type=int, default=1000, help="for the definitions load")
    parser.add_argument("--windows", type=int, default=400, help="daily windows of the overhead case")
    parser.add_argument("--json", default="benchmark_results/results.json")
    args = parser.parse_args(argv)

    from transfer_platform.config.models import SparkSettings
    from transfer_platform.spark_session import get_spark_session

    results: dict = {"rows": args.rows, "tenants": args.tenants, "load_average": os.getloadavg()}
    create_source(args.rows, args.tenants)
    tenants = [f"tenant-{i}" for i in range(args.tenants)]
    with PeakMemory() as memory:
        spark = get_spark_session(SparkSettings(master="local[2]", driver_memory="2g"))
        results["floor_one_tenant"] = timed(lambda: floor_copy(tenants[1]), args.runs)
        drop_schemas(f"{SCHEMA}_one")
        results["platform_one_tenant"] = timed(
            lambda: (transfer_all(spark, platform_config(tenants[1:2], f"{SCHEMA}_one_{uuid.uuid4().hex[:6]}"),
                                  NOW)), args.runs)
        drop_schemas(f"{SCHEMA}_one")
        results["platform_all_tenants"] = timed(
            lambda: transfer_all(spark, platform_config(tenants, f"{SCHEMA}_all_{uuid.uuid4().hex[:6]}"), NOW),
            1)
        drop_schemas(f"{SCHEMA}_all")

        incremental = platform_config(tenants[1:2], f"{SCHEMA}_inc")
        transfer_all(spark, incremental, NOW)
        later = NOW + timedelta(hours=1)
        with psycopg.connect(**PG, autocommit=True) as conn:
            conn.execute(f"UPDATE {SCHEMA}.events SET a = a + 1, updated_at = %s WHERE tenant_id = %s "
                         "AND id %% 100 = 0", (later - timedelta(minutes=1), tenants[1]))
        moments = iter(later + timedelta(minutes=k) for k in range(args.runs))
        results["incremental_1pct_one_tenant"] = timed(lambda: transfer_all(spark, incremental, next(moments)),
                                                       args.runs)
        drop_schemas(f"{SCHEMA}_inc")

        windows = platform_config(tenants[2 % len(tenants):][:1], f"{SCHEMA}_win", window=86400,
                                  min_start=NOW - timedelta(days=args.windows))
        start = time.perf_counter()
        transfer_all(spark, windows, NOW)
        results["per_window_overhead_s"] = round((time.perf_counter() - start) / args.windows, 3)
        drop_schemas(f"{SCHEMA}_win")
    results["peak_memory_gb"] = round(memory.peak / 1024**3, 2)
    results["definitions_load_s"] = round(definitions_load_seconds(args.recipients, 10), 2)
    results["definitions_assets"] = args.recipients * 10
    with psycopg.connect(**PG, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")

    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"{key:<{width}}  {value}")  # noqa: T201 - a benchmark prints its table
    print(f"written: {out}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
