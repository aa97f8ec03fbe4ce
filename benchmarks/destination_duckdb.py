"""The DuckDB destination: a backfill of N rows and an incremental of 1 % through the platform,
beside the floor measured in the same run.

``.venv/bin/python -m benchmarks.destination_duckdb --rows 1000000``

The source is the harness's PostgreSQL table (``benchmarks/source.py``) with one tenant holding
all N rows. The platform moves them with ``run_transfer`` (Spark reads the source, its executors
stage Parquet files, DuckDB merges them and records the watermark in one transaction) into a
fresh DuckDB file; then 1 % of the rows change and an incremental transfer moves them. The floor
is DuckDB alone: ``COPY ... FROM`` a Parquet file of the same N rows into a table with the same
columns and primary key (the file written beforehand, untimed), and for the incremental one
``INSERT ... ON CONFLICT DO UPDATE`` from a Parquet file of the changed rows. Every case checks
the rows it delivered; the times and the ratio platform / floor are printed (and written as
JSON with ``--json``).
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

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from benchmarks.cases_platform import SPARK, platform_raw
from benchmarks.common import COLUMNS, NOW, RowCountMismatch, measure, pg_connect
from benchmarks.source import SOURCE, create_source, drop_source, touch_one_percent

TENANT = "tenant-0"
#: the DuckDB types of the harness's columns (as the destination creates them)
DUCKDB_TYPES = {"id": "BIGINT", "tenant_id": "VARCHAR", "updated_at": "TIMESTAMP WITH TIME ZONE", "a": "BIGINT",
                "b": "BIGINT", "c": "BIGINT", "x": "DOUBLE", "y": "DOUBLE", "s1": "VARCHAR", "s2": "VARCHAR",
                "doc": "VARCHAR"}
ARROW_TYPES = {"id": pa.int64(), "tenant_id": pa.string(), "updated_at": pa.timestamp("us", tz="UTC"),
               "a": pa.int64(), "b": pa.int64(), "c": pa.int64(), "x": pa.float64(), "y": pa.float64(),
               "s1": pa.string(), "s2": pa.string(), "doc": pa.string()}


def duckdb_count(path: Path, where: str = "", params: list | None = None) -> int:
    import duckdb

    if not path.exists():
        return 0
    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute(f"SELECT count(*) FROM main.events {where}", params or []).fetchall()[0][0]


def source_to_parquet(path: Path, where: str = "", params: tuple = ()) -> int:
    """The tenant's source rows (``where``: more conditions) as one Parquet file, via ``COPY ...
    TO STDOUT (FORMAT csv)`` (untimed: the floor's input)."""
    csv = path.with_suffix(".csv")
    with pg_connect() as conn, csv.open("wb") as out, conn.cursor().copy(
            f"COPY (SELECT {', '.join(COLUMNS)} FROM {SOURCE} WHERE tenant_id = %s {where}) "
            "TO STDOUT (FORMAT csv)", (TENANT, *params)) as copy:
        for data in copy:
            out.write(data)
    table = pacsv.read_csv(csv, read_options=pacsv.ReadOptions(column_names=COLUMNS),
                           convert_options=pacsv.ConvertOptions(column_types=ARROW_TYPES))
    pq.write_table(table, path)
    csv.unlink()
    return table.num_rows


def floor_backfill(parquet: Path, database: Path) -> None:
    import duckdb

    columns = ", ".join(f"{c} {DUCKDB_TYPES[c]}" for c in COLUMNS)
    with duckdb.connect(str(database)) as conn:
        conn.execute(f"CREATE TABLE events ({columns}, PRIMARY KEY (id))")
        conn.execute(f"COPY events FROM '{parquet}' (FORMAT parquet)")


def floor_incremental(parquet: Path, database: Path) -> None:
    import duckdb

    updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "id")
    with duckdb.connect(str(database)) as conn:
        conn.execute(f"INSERT INTO events AS t SELECT * FROM read_parquet('{parquet}') ON CONFLICT (id) "
                     f"DO UPDATE SET {updates} WHERE excluded.updated_at >= t.updated_at")


def platform_config(database: Path):
    from transfer_platform.config.parsing import parse_config

    raw = platform_raw([TENANT], "unused")
    raw["destinations"] = [{"name": "d0", "vendor": "duckdb", "recipient": "r0",
                            "connection": {"path": str(database)}}]
    return parse_config(raw, now=NOW)


def platform_transfer(spark, config, now) -> int:
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.transfers.order import TransferOrder
    from transfer_platform.transfers.runner import TransferRequest, run_transfer

    destination = config.destination("d0")
    writer = writer_for(destination)
    try:
        (summary,) = run_transfer(TransferRequest(spark=spark, config=config,
                                                  order=TransferOrder(destination="d0"), writer=writer,
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
    return parser.parse_args(argv)


def run(rows: int, work: Path) -> dict:
    from transfer_platform.config.models import SparkSettings
    from transfer_platform.runtime.spark_session import get_spark_session

    create_source(rows, 1)
    spark = get_spark_session(SparkSettings(**SPARK), shared=False)  # a Spark of its own: what these measure
    results: dict = {"rows": rows}

    parquet, floor_db, platform_db = work / "backfill.parquet", work / "floor.duckdb", work / "platform.duckdb"
    assert source_to_parquet(parquet) == rows
    results["floor_backfill"] = measure("floor_backfill", lambda: floor_backfill(parquet, floor_db), runs=1,
                                        expected=rows, delivered=lambda: duckdb_count(floor_db))
    config = platform_config(platform_db)
    results["platform_backfill"] = measure(
        "platform_backfill", lambda: platform_transfer(spark, config, NOW + timedelta(minutes=1)), runs=1,
        expected=rows, delivered=lambda: duckdb_count(platform_db))

    changed_at = NOW + timedelta(minutes=2)
    changed = touch_one_percent(TENANT, 1, changed_at)
    changes = work / "changes.parquet"
    assert source_to_parquet(changes, "AND updated_at = %s", (changed_at,)) == changed
    results["floor_incremental"] = measure(
        "floor_incremental", lambda: floor_incremental(changes, floor_db), runs=1, expected=changed,
        delivered=lambda: duckdb_count(floor_db, "WHERE updated_at = ?", [changed_at]))
    results["platform_incremental"] = measure(
        "platform_incremental", lambda: platform_transfer(spark, config, NOW + timedelta(minutes=3)), runs=1,
        expected=changed, delivered=lambda: duckdb_count(platform_db, "WHERE updated_at = ?", [changed_at]))
    if duckdb_count(platform_db) != rows:
        raise RowCountMismatch(f"platform: {duckdb_count(platform_db)} rows after the incremental, the source has {rows}")
    for kind in ("backfill", "incremental"):
        results[f"ratio_{kind}"] = round(results[f"platform_{kind}"]["median_s"]
                                         / max(results[f"floor_{kind}"]["median_s"], 1e-6), 1)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tp_bench_duckdb_"))
    started = time.perf_counter()
    try:
        results = run(args.rows, work)
    finally:
        drop_source()
        shutil.rmtree(work, ignore_errors=True)
    out = sys.stdout
    out.write(f"DuckDB destination, {args.rows} rows of one tenant (2 cores, Spark local[2])\n")
    out.write(f"{'case':<12} {'platform s':>11} {'floor s':>9} {'platform/floor':>15}  rows\n")
    for kind in ("backfill", "incremental"):
        platform, floor = results[f"platform_{kind}"], results[f"floor_{kind}"]
        out.write(f"{kind:<12} {platform['median_s']:>11.3f} {floor['median_s']:>9.3f} "
                  f"{results[f'ratio_{kind}']:>15.1f}  {platform['rows']}\n")
    out.write(f"peak memory of the process tree: {results['platform_backfill']['peak_memory_gb']} GB "
              f"(backfill); whole run {time.perf_counter() - started:.0f} s\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
