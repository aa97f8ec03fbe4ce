"""The Snowflake destination beside the PostgreSQL one: a backfill of N rows and an incremental of
1 % through the platform into each, in the same run.

``.venv/bin/python -m benchmarks.destination_snowflake --rows 100000``

The source is the harness's PostgreSQL table (``benchmarks/source.py``) with one tenant holding
all N rows. Snowflake here is the emulator the tests use (fakesnow's server, DuckDB underneath,
started as its own process on 127.0.0.1), driven by snowflake-connector-python: Parquet files
``PUT`` to the stage, ``COPY INTO`` staging, one transaction's merge. Its times say what the
platform's side costs (Spark, Parquet, the HTTP protocol, the emulator), not what a Snowflake
warehouse would take. Every case checks the rows it delivered; the times are printed side by
side (and written as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from benchmarks.cases_platform import SPARK, delivered, platform_raw, transfer_all
from benchmarks.common import NOW, measure
from benchmarks.source import create_source, drop_source, touch_one_percent
from benchmarks.spark_server import free_port

TENANT, PREFIX, DATABASE, SCHEMA = "tenant-0", "tp_bench_sf", "TP_BENCH", "acme"
PASSWORD_ENV = "TP_BENCH_SNOWFLAKE_PASSWORD"


@contextmanager
def fakesnow_server() -> Iterator[int]:
    """fakesnow's server in its own process; its port once it accepts connections."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "fakesnow", "-s", "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("fakesnow's server did not start") from None
                time.sleep(0.1)
        yield port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


def connect(port: int):
    import snowflake.connector

    return snowflake.connector.connect(account="fakesnow", user="fake", password="snow", host="127.0.0.1",
                                       port=port, protocol="http",
                                       session_parameters={"CLIENT_OUT_OF_BAND_TELEMETRY_ENABLED": False})


def snowflake_count(port: int, where: str = "", params: tuple = ()) -> int:
    with connect(port) as conn, conn.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{DATABASE}"."{SCHEMA}"."events" {where}', params)
        return cursor.fetchone()[0]


def configs(port: int):
    from transfer_platform.config.parsing import parse_config

    postgres = platform_raw([TENANT], PREFIX)
    snowflake = platform_raw([TENANT], PREFIX)
    snowflake["destinations"] = [{"name": "d0", "vendor": "snowflake", "recipient": "r0", "connection": {
        "account": "fakesnow", "user": "fake", "password": f"${{{PASSWORD_ENV}}}", "database": DATABASE,
        "schema": SCHEMA, "warehouse": "BENCH_WH", "host": "127.0.0.1", "port": port, "protocol": "http"}}]
    return parse_config(postgres, now=NOW), parse_config(snowflake, now=NOW)


def run(rows: int) -> dict:
    from transfer_platform.config.models import SparkSettings
    from transfer_platform.runtime.spark_session import get_spark_session

    os.environ[PASSWORD_ENV] = "snow"
    create_source(rows, 1)
    spark = get_spark_session(SparkSettings(**SPARK), shared=False)
    results: dict = {"rows": rows}
    with fakesnow_server() as port:
        with connect(port) as conn, conn.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE IF NOT EXISTS "{DATABASE}"')
            cursor.execute(f'CREATE SCHEMA IF NOT EXISTS "{DATABASE}"."{SCHEMA}"')
        postgres, snowflake = configs(port)
        for name, config, count in (("postgres", postgres, lambda where="", params=(): delivered(PREFIX, [0], where, params)),
                                    ("snowflake", snowflake, lambda where="", params=(): snowflake_count(port, where, params))):
            results[f"{name}_backfill"] = measure(f"{name}_backfill",
                                                  lambda c=config: transfer_all(spark, c, NOW + timedelta(minutes=1)),
                                                  runs=1, expected=rows, delivered=count)
        changed_at = NOW + timedelta(minutes=2)
        changed = touch_one_percent(TENANT, 1, changed_at)
        results["postgres_incremental"] = measure(
            "postgres_incremental", lambda: transfer_all(spark, postgres, NOW + timedelta(minutes=3)), runs=1,
            expected=changed, delivered=lambda: delivered(PREFIX, [0], "WHERE updated_at = %s", (changed_at,)))
        results["snowflake_incremental"] = measure(
            "snowflake_incremental", lambda: transfer_all(spark, snowflake, NOW + timedelta(minutes=3)), runs=1,
            expected=changed, delivered=lambda: snowflake_count(port, 'WHERE "updated_at" = %s', (changed_at,)))
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="source rows (N), all of one tenant")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common import drop_schemas

    args = parse_args(argv)
    started = time.perf_counter()
    try:
        results = run(args.rows)
    finally:
        drop_source()
        drop_schemas(PREFIX)
    out = sys.stdout
    out.write(f"Snowflake (the emulator) beside PostgreSQL, {args.rows} rows of one tenant (Spark local[2])\n")
    out.write(f"{'case':<12} {'snowflake s':>12} {'postgres s':>11}  rows\n")
    for kind in ("backfill", "incremental"):
        sf, pg = results[f"snowflake_{kind}"], results[f"postgres_{kind}"]
        out.write(f"{kind:<12} {sf['median_s']:>12.3f} {pg['median_s']:>11.3f}  {sf['rows']}\n")
    out.write(f"whole run {time.perf_counter() - started:.0f} s\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
