"""The MySQL / MariaDB destination against its floor, in one run on this machine's MariaDB.

    .venv/bin/python -m benchmarks.destination_mysql --rows 1000000 [--json out.json]

The source is the harness's PostgreSQL table (``benchmarks/source.py``), all rows one tenant's.
Cases, each checked by counting what MariaDB holds (a wrong count voids the case):

- ``backfill``: the platform's transfer of the tenant's N rows into an empty MariaDB database
  (``run_transfer``, as ``cases_platform.transfer_all`` does): its window into the empty table is
  loaded into a fresh keyed table that replaces it;
- ``backfill_staged_merge``: the same transfer with the fresh-table path turned off (the window
  staged into a keyless table, then merged into the target, as every other window is);
- ``incremental_1pct``: after it, 1 % of the rows changed in the source, one incremental transfer;
- ``floor_load_data``: ``LOAD DATA LOCAL INFILE`` of a CSV of the same rows (exported from the
  source beforehand, untimed, in key order) into a plain table of the same columns and primary key;
- ``floor_mysql_client``: the same load by the ``mysql`` command-line client (MySQL's own floor for
  a fresh table; skipped if no ``mysql`` client is installed);
- ``staging_load_data`` / ``staging_inserts``: the same rows (at most ``--staging-rows``) already
  in this process as Arrow, into a staging table by the writer's LOAD DATA path and by multi-row
  INSERTs (:func:`insert_batches`; the choice ``destinations/mysql/load.py`` made).

Prints seconds (and, when the server runs on this machine, the CPU-seconds its process spent in
each case, so that a busy machine cannot hide the cost) and the ratios backfill / floor, backfill /
staged-and-merged backfill, and LOAD DATA / INSERTs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pymysql

from benchmarks.common import (
    COLUMNS,
    NOW,
    SCHEMA,
    TYPES,
    PeakMemory,
    RowCountMismatch,
    pg_connect,
    stats,
)
from benchmarks.source import SOURCE, create_source, drop_source, tenant_names, touch_one_percent

MYSQL = {"host": os.environ.get("TP_BENCH_MYSQL_HOST", "127.0.0.1"),
         "port": int(os.environ.get("TP_BENCH_MYSQL_PORT", "3306")),
         "user": os.environ.get("TP_BENCH_MYSQL_USER", "root")}
DATABASE = f"{SCHEMA}_my"
TENANT = tenant_names(1)[0]


def my_connect(database: str | None = None) -> pymysql.Connection:
    return pymysql.connect(**MYSQL, database=database, autocommit=True, charset="utf8mb4", local_infile=True,
                           init_command="SET time_zone = '+00:00'")


def my_count(table: str, where: str = "", params: tuple = ()) -> int:
    conn = my_connect(DATABASE)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM `{table}` {where}", params)
            return cur.fetchone()[0]
    finally:
        conn.close()


def my_run(*statements: str) -> None:
    conn = my_connect()
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def server_cpu_seconds() -> float | None:
    """CPU-seconds (user + system) the local MariaDB/MySQL server process has spent; ``None`` if
    it does not run on this machine (or cannot be read)."""
    for name in ("mariadbd", "mysqld"):
        found = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True, check=False).stdout.split()
        if found:
            try:
                fields = Path(f"/proc/{found[0]}/stat").read_text().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError, ValueError):
                return None
    return None


class ServerCpu:
    """The server's CPU-seconds over a ``with`` block (``seconds``: ``None`` if not local)."""

    def __enter__(self) -> ServerCpu:
        self.start, self.seconds = server_cpu_seconds(), None
        return self

    def __exit__(self, *exc: object) -> None:
        end = server_cpu_seconds()
        if self.start is not None and end is not None:
            self.seconds = round(end - self.start, 2)


def config():
    from benchmarks.cases_platform import platform_raw
    from transfer_platform.config.parsing import parse_config

    raw = platform_raw([TENANT], "unused")
    raw["destinations"] = [{"name": "d0", "vendor": "mysql", "recipient": "r0",
                            "connection": {"host": MYSQL["host"], "port": MYSQL["port"], "database": DATABASE,
                                           "username": MYSQL["user"]}}]
    return parse_config(raw, now=NOW)


def backfill_staged_merge(spark, rows: int) -> dict:
    """The backfill with the fresh-table path turned off (staged, then merged); the database is
    emptied again after it."""
    from benchmarks.cases_platform import transfer_all
    from transfer_platform.destinations.mysql.writer import MysqlWriter

    fits = MysqlWriter._start_empty_load
    MysqlWriter._start_empty_load = lambda self, load, staging: False
    try:
        with ServerCpu() as cpu:
            start = time.perf_counter()
            transfer_all(spark, config(), NOW)
            seconds = time.perf_counter() - start
    finally:
        MysqlWriter._start_empty_load = fits
    if my_count("events") != rows:
        raise RowCountMismatch(f"backfill_staged_merge: MariaDB holds {my_count('events')} rows, the source {rows}")
    my_run(f"DROP DATABASE IF EXISTS `{DATABASE}`", f"CREATE DATABASE `{DATABASE}` CHARACTER SET utf8mb4")
    return {**stats([seconds]), "rows": rows, "rows_checked": True, "server_cpu_s": cpu.seconds}


def backfill_and_incremental(spark, rows: int) -> dict:
    from benchmarks.cases_platform import transfer_all

    cfg = config()
    with PeakMemory() as memory, ServerCpu() as cpu:
        start = time.perf_counter()
        transfer_all(spark, cfg, NOW)
        backfill = time.perf_counter() - start
    if my_count("events") != rows:
        raise RowCountMismatch(f"backfill: MariaDB holds {my_count('events')} rows, the source {rows}")
    moment = NOW + timedelta(hours=1)
    changed_at = moment - timedelta(minutes=1)
    changed = touch_one_percent(TENANT, 1, changed_at)
    with ServerCpu() as incremental_cpu:
        start = time.perf_counter()
        transfer_all(spark, cfg, moment)
        incremental = time.perf_counter() - start
    moved = my_count("events", "WHERE updated_at = %s", (changed_at.replace(tzinfo=None),))
    if moved != changed or my_count("events") != rows:
        raise RowCountMismatch(f"incremental: {moved} of {changed} changed rows delivered")
    return {"backfill": {**stats([backfill]), "rows": rows, "rows_checked": True, "server_cpu_s": cpu.seconds,
                         **memory.report},
            "incremental_1pct": {**stats([incremental]), "rows": changed, "rows_checked": True,
                                 "server_cpu_s": incremental_cpu.seconds}}


def export_csv(path: Path) -> None:
    """The tenant's rows as a CSV MySQL reads (untimed): PostgreSQL's CSV, NULL as ``\\N``,
    timestamps in UTC without an offset."""
    cols = ", ".join("updated_at AT TIME ZONE 'UTC'" if c == "updated_at" else c for c in COLUMNS)
    with pg_connect() as conn, path.open("wb") as out, conn.cursor().copy(
            f"COPY (SELECT {cols} FROM {SOURCE} WHERE tenant_id = '{TENANT}' ORDER BY id) TO STDOUT "
            "(FORMAT csv, NULL '\\N')") as copy:
        for data in copy:
            out.write(data)


def _floor_table(path: Path) -> str:
    """The floor's empty keyed table created; its LOAD DATA statement."""
    from transfer_platform.destinations.mysql import dialect as sql

    types = {"integer": "BIGINT", "string": "LONGTEXT", "timestamp": "DATETIME(6)", "float": "DOUBLE"}
    columns = ", ".join(f"`{c}` {'VARCHAR(255)' if c == 'tenant_id' else types[TYPES[c]]}" for c in COLUMNS)
    my_run(f"DROP TABLE IF EXISTS `{DATABASE}`.floor",
           f"CREATE TABLE `{DATABASE}`.floor ({columns}, PRIMARY KEY (id)) {sql.TABLE_OPTIONS}")
    return (f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE floor CHARACTER SET utf8mb4 "
            "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '\\\\' "
            f"LINES TERMINATED BY '\\n' ({', '.join(COLUMNS)})")


def _floor_checked(name: str, seconds: float, rows: int, cpu: ServerCpu) -> dict:
    if my_count("floor") != rows:
        raise RowCountMismatch(f"{name}: {my_count('floor')} rows loaded of {rows}")
    my_run(f"DROP TABLE `{DATABASE}`.floor")
    return {**stats([seconds]), "rows": rows, "rows_checked": True, "server_cpu_s": cpu.seconds}


def floor(path: Path, rows: int) -> dict:
    load = _floor_table(path)
    conn = my_connect(DATABASE)
    try:
        with conn.cursor() as cur, ServerCpu() as cpu:
            start = time.perf_counter()
            cur.execute(load)
            seconds = time.perf_counter() - start
    finally:
        conn.close()
    return _floor_checked("floor", seconds, rows, cpu)


def floor_mysql_client(path: Path, rows: int) -> dict | None:
    """The same load by the ``mysql`` client (``None``: no client installed)."""
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        return None
    load = _floor_table(path)
    command = [client, f"--host={MYSQL['host']}", f"--port={MYSQL['port']}", f"--user={MYSQL['user']}",
               "--local-infile=1", DATABASE, "-e", load]
    with ServerCpu() as cpu:
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        seconds = time.perf_counter() - start
    return _floor_checked("floor_mysql_client", seconds, rows, cpu)


def insert_batches(conn: pymysql.Connection, insert_sql: str, batches) -> int:
    """The rows as multi-row ``INSERT``s (PyMySQL folds ``executemany`` into statements of up to
    1 MB): what LOAD DATA is compared with."""
    from datetime import datetime

    rows = 0
    with conn.cursor() as cursor:
        for batch in batches:
            values = [tuple(v.replace(tzinfo=None) if isinstance(v, datetime) else v for v in row.values())
                      for row in batch.to_pylist()]
            if values:
                cursor.executemany(insert_sql, values)
            rows += len(values)
    return rows


def staging_comparison(path: Path, rows: int) -> dict:
    """The writer's two ways of staging rows already here as Arrow, on the same rows."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    from transfer_platform.destinations.mysql import dialect as sql
    from transfer_platform.destinations.mysql.load import load_batches

    arrow = {"integer": pa.int64(), "string": pa.string(), "timestamp": pa.timestamp("us"),
             "float": pa.float64()}
    table = pa_csv.read_csv(path, read_options=pa_csv.ReadOptions(column_names=COLUMNS),
                            convert_options=pa_csv.ConvertOptions(
                                column_types={c: arrow[TYPES[c]] for c in COLUMNS}, null_values=["\\N"])
                            ).slice(0, rows)
    types = {"integer": "BIGINT", "string": "LONGTEXT", "timestamp": "DATETIME(6)", "float": "DOUBLE"}
    columns = ", ".join(f"`{c}` {types[TYPES[c]]} NULL" for c in COLUMNS)
    cases = {}
    for name, how in (("staging_load_data", "load"), ("staging_inserts", "inserts")):
        my_run(f"DROP TABLE IF EXISTS `{DATABASE}`.stg", f"CREATE TABLE `{DATABASE}`.stg ({columns}) {sql.TABLE_OPTIONS}")
        conn = my_connect(DATABASE)
        try:
            start = time.perf_counter()
            if how == "load":
                load_batches(conn, sql.load_data("stg", "{path}", COLUMNS), table.to_batches(max_chunksize=65536))
            else:
                insert_batches(conn, f"INSERT INTO stg ({', '.join(f'`{c}`' for c in COLUMNS)}) VALUES "
                               f"({', '.join(['%s'] * len(COLUMNS))})", table.to_batches(max_chunksize=65536))
            seconds = time.perf_counter() - start
        finally:
            conn.close()
        if my_count("stg") != table.num_rows:
            raise RowCountMismatch(f"{name}: {my_count('stg')} rows staged of {table.num_rows}")
        cases[name] = {**stats([seconds]), "rows": table.num_rows, "rows_checked": True}
    my_run(f"DROP TABLE `{DATABASE}`.stg")
    return cases


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the source (one tenant)")
    parser.add_argument("--staging-rows", type=int, default=200_000,
                        help="rows of the LOAD DATA / INSERT staging comparison (at most --rows)")
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.run import start_spark

    args = parse_args(argv)
    spark, _ = start_spark()
    results: dict = {"parameters": vars(args), "cases": {}}
    my_run(f"DROP DATABASE IF EXISTS `{DATABASE}`", f"CREATE DATABASE `{DATABASE}` CHARACTER SET utf8mb4")
    try:
        create_source(args.rows, 1)
        with tempfile.TemporaryDirectory(prefix="tp_bench_mysql_") as folder:
            csv = Path(folder) / f"rows_{uuid.uuid4().hex[:6]}.csv"
            export_csv(csv)
            results["cases"]["floor_load_data"] = floor(csv, args.rows)
            client = floor_mysql_client(csv, args.rows)
            if client is not None:
                results["cases"]["floor_mysql_client"] = client
            results["cases"].update(staging_comparison(csv, min(args.rows, args.staging_rows)))
        results["cases"]["backfill_staged_merge"] = backfill_staged_merge(spark, args.rows)
        results["cases"].update(backfill_and_incremental(spark, args.rows))
    finally:
        my_run(f"DROP DATABASE IF EXISTS `{DATABASE}`")
        drop_source()
    cases = results["cases"]
    results["ratios"] = {
        "backfill / floor": round(cases["backfill"]["median_s"] / cases["floor_load_data"]["median_s"], 2),
        "backfill / staged-and-merged backfill": round(cases["backfill"]["median_s"]
                                                       / cases["backfill_staged_merge"]["median_s"], 2),
        "staging LOAD DATA / INSERTs": round(cases["staging_load_data"]["median_s"]
                                              / cases["staging_inserts"]["median_s"], 2),
    }
    for name, case in cases.items():
        cpu = case.get("server_cpu_s")
        print(f"{name:<22} {case['median_s']:>9.2f} s  {case['rows']:>9} rows"
              + ("" if cpu is None else f"  server {cpu:>7.2f} CPU-s"))
    for name, ratio in results["ratios"].items():
        print(f"{name:<38} {ratio:>6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
