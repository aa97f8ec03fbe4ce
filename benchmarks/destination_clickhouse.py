"""The ClickHouse destination beside PostgreSQL: a backfill of N rows and an incremental of 1 %,
through the platform into each, in the same run.

``.venv/bin/python -m benchmarks.destination_clickhouse --rows 1000000``

The source is the harness's PostgreSQL table (``benchmarks/source.py``) with one tenant holding
all N rows. The platform moves them with ``run_transfer`` into a fresh ClickHouse database (an
embedded chDB folder: ClickHouse 26.9 in this process, the only ClickHouse here) and into a fresh
PostgreSQL schema; then 1 % of the rows change and an incremental transfer moves them into each.
Every case checks the rows it delivered (ClickHouse read with ``FINAL``); the times are printed
side by side (and written as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from benchmarks.cases_platform import SPARK, platform_raw
from benchmarks.common import NOW, RowCountMismatch, count_rows, measure, pg_connect
from benchmarks.source import create_source, drop_source, touch_one_percent

TENANT = "tenant-0"


def clickhouse_count(folder: Path, database: str, where: str = "", params: dict | None = None) -> int:
    import clickhouse_connect

    client = clickhouse_connect.get_client(dsn=f"chdb://{folder}")
    found = client.query("SELECT count() FROM system.tables WHERE database = {db:String} AND name = 'events'",
                         parameters={"db": database}).result_rows[0][0]
    if not found:
        return 0
    return client.query(f"SELECT count() FROM `{database}`.events FINAL {where}", parameters=params).result_rows[0][0]


def platform_config(folder: Path, database: str, schema: str):
    from transfer_platform.config.parsing import parse_config

    raw = platform_raw([TENANT], "unused")
    postgres = raw["destinations"][0]
    raw["destinations"] = [{**postgres, "name": "pg", "connection": {**postgres["connection"], "schema": schema}},
                           {"name": "ch", "vendor": "clickhouse", "recipient": "r0",
                            "connection": {"path": str(folder), "database": database}}]
    return parse_config(raw, now=NOW)


def platform_transfer(spark, config, destination_name: str, now) -> int:
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.transfers.order import TransferOrder
    from transfer_platform.transfers.runner import TransferRequest, run_transfer

    destination = config.destination(destination_name)
    writer = writer_for(destination)
    try:
        (summary,) = run_transfer(TransferRequest(spark=spark, config=config,
                                                  order=TransferOrder(destination=destination_name), writer=writer,
                                                  transfer_id=uuid.uuid4().hex, now=now),
                                  config.models_for(destination))
    finally:
        writer.close()
    if summary.status != "SUCCESS":
        raise RuntimeError(summary.error)
    return summary.rows_transferred


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="source rows (N), all of one tenant")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--chdb-folder", default=None, help="a chDB folder to use (default: a new one); chDB opens "
                                                            "one folder per process")
    return parser.parse_args(argv)


def run(rows: int, folder: Path, database: str, schema: str) -> dict:
    from transfer_platform.config.models import SparkSettings
    from transfer_platform.runtime.spark_session import get_spark_session

    create_source(rows, 1)
    spark = get_spark_session(SparkSettings(**SPARK), shared=False)  # a Spark of its own: what these measure
    results: dict = {"rows": rows}
    config = platform_config(folder, database, schema)

    def pg_count(where: str = "", params: tuple = ()) -> int:
        return count_rows(f"{schema}.events", where, params)

    results["clickhouse_backfill"] = measure(
        "clickhouse_backfill", lambda: platform_transfer(spark, config, "ch", NOW + timedelta(minutes=1)), runs=1,
        expected=rows, delivered=lambda: clickhouse_count(folder, database))
    results["postgres_backfill"] = measure(
        "postgres_backfill", lambda: platform_transfer(spark, config, "pg", NOW + timedelta(minutes=1)), runs=1,
        expected=rows, delivered=pg_count)

    changed_at = NOW + timedelta(minutes=2)
    changed = touch_one_percent(TENANT, 1, changed_at)
    results["clickhouse_incremental"] = measure(
        "clickhouse_incremental", lambda: platform_transfer(spark, config, "ch", NOW + timedelta(minutes=3)), runs=1,
        expected=changed, delivered=lambda: clickhouse_count(folder, database, "WHERE updated_at = {at:DateTime64(6, 'UTC')}",
                                                             {"at": changed_at.strftime("%Y-%m-%d %H:%M:%S.%f")}))
    results["postgres_incremental"] = measure(
        "postgres_incremental", lambda: platform_transfer(spark, config, "pg", NOW + timedelta(minutes=3)), runs=1,
        expected=changed, delivered=lambda: pg_count("WHERE updated_at = %s", (changed_at,)))
    if clickhouse_count(folder, database) != rows:
        raise RowCountMismatch(f"clickhouse: {clickhouse_count(folder, database)} rows after the incremental, the source has "
                               f"{rows}")
    for kind in ("backfill", "incremental"):
        results[f"ratio_{kind}"] = round(results[f"clickhouse_{kind}"]["median_s"]
                                         / max(results[f"postgres_{kind}"]["median_s"], 1e-6), 1)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tp_bench_clickhouse_"))
    folder = Path(args.chdb_folder) if args.chdb_folder else work / "chdb"
    name = f"tp_bench_ch_{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    try:
        results = run(args.rows, folder, name, name)
    finally:
        drop_source()
        with pg_connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        if args.chdb_folder:
            import clickhouse_connect

            clickhouse_connect.get_client(dsn=f"chdb://{folder}").command(f"DROP DATABASE IF EXISTS `{name}` SYNC")
        shutil.rmtree(work, ignore_errors=True)
    out = sys.stdout
    out.write(f"ClickHouse (chDB) and PostgreSQL destinations, {args.rows} rows of one tenant (2 cores, Spark "
              "local[2])\n")
    out.write(f"{'case':<12} {'clickhouse s':>13} {'postgres s':>11} {'clickhouse/postgres':>20}  rows\n")
    for kind in ("backfill", "incremental"):
        ch, pg = results[f"clickhouse_{kind}"], results[f"postgres_{kind}"]
        out.write(f"{kind:<12} {ch['median_s']:>13.3f} {pg['median_s']:>11.3f} "
                  f"{results[f'ratio_{kind}']:>20.1f}  {ch['rows']}\n")
    out.write(f"whole run {time.perf_counter() - started:.0f} s\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
