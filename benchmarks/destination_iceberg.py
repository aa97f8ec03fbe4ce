"""The Iceberg destination against its floor, in one run: ``python -m benchmarks.destination_iceberg
--rows 1000000``.

Source: ``benchmarks.source``'s table with one tenant (PostgreSQL). Timed:

- **platform backfill**: ``run_transfer`` of the tenant into an Iceberg table (SQL catalog in the
  test database, warehouse in a temporary folder), Spark warm (its session started untimed);
- **platform incremental**: 1 % of the rows changed, then one incremental transfer;
- **floor backfill**: the same rows ``COPY``'d out of PostgreSQL as CSV into Arrow, then one
  pyiceberg ``append`` (pyarrow writing the Parquet) into a new table of the same catalog;
- **floor incremental**: the changed rows read the same way, then one upsert of them into the
  floor's table, measured two ways on two copies of it: pyiceberg's ``Table.upsert`` and the
  writer's own merge (one overwrite snapshot of the files holding the keys, merged in Arrow).

Each case checks the rows it delivered; the ratios are platform / floor.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from benchmarks.common import COLUMNS, NOW, PG, SCHEMA, pg_connect
from benchmarks.source import SOURCE, create_source, drop_source, touch_one_percent

TENANT = "tenant-0"
CATALOG_SCHEMA = f"{SCHEMA}_iceberg"
SPARK = {"master": "local[2]", "driver_memory": "2g"}


def config(warehouse: Path, *, namespace: str = "r0", min_start=None):
    from benchmarks.cases_platform import platform_raw
    from transfer_platform.config.parsing import parse_config

    raw = platform_raw([TENANT], f"{SCHEMA}_unused", min_start=min_start)
    connection = {"host": PG["host"], "port": PG["port"], "database": PG["dbname"], "username": PG["user"],
                  "schema": CATALOG_SCHEMA}
    raw["destinations"] = [{"name": "d0", "vendor": "iceberg", "recipient": "r0",
                            "connection": {"catalog": connection, "catalog_name": "bench", "namespace": namespace,
                                           "warehouse": {"path": str(warehouse)}}}]
    return parse_config(raw, now=NOW)


def arrow_rows(where: str = "", params: tuple = ()):
    """The tenant's rows (``where``: more conditions) as Arrow, through ``COPY ... CSV``."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from benchmarks.common import TYPES
    from transfer_platform.core.types import TYPES as CORE
    from transfer_platform.destinations.base import _ARROW_TYPES

    buffer = io.BytesIO()
    import psycopg

    with pg_connect() as conn, psycopg.ClientCursor(conn) as cur:
        query = cur.mogrify(f"SELECT {', '.join(COLUMNS)} FROM {SOURCE} WHERE tenant_id = %s {where}",
                            (TENANT, *params))
        with cur.copy(f"COPY ({query}) TO STDOUT (FORMAT csv)") as out:
            for data in out:
                buffer.write(data)
    schema = pa.schema([(c, _ARROW_TYPES[CORE[TYPES[c]].arrow]) for c in COLUMNS])
    buffer.seek(0)
    return pcsv.read_csv(buffer, read_options=pcsv.ReadOptions(column_names=COLUMNS),
                         convert_options=pcsv.ConvertOptions(column_types=schema)).cast(schema)


def timed(run) -> tuple[float, object]:
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    from benchmarks.cases_platform import transfer_all
    from transfer_platform.config.models import SparkSettings
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.destinations.iceberg.merge import merge_rows
    from transfer_platform.destinations.iceberg.writer import _rewrite
    from transfer_platform.runtime.spark_session import get_spark_session

    create_source(args.rows, 1)
    results: dict = {"rows": args.rows}
    with tempfile.TemporaryDirectory(prefix="tp_bench_iceberg_") as folder:
        try:
            cfg = config(Path(folder) / "warehouse")
            model = cfg.model("events")
            spark = get_spark_session(SparkSettings(**SPARK), shared=False)  # a Spark of its own: what these measure
            writer = writer_for(cfg.destination("d0"))

            def table(name: str = "r0.events"):
                return writer.catalog.open(create=True).load_table(name)

            # Spark warm, as in a long-lived worker: a first small transfer, untimed
            transfer_all(spark, config(Path(folder) / "warehouse", namespace="warm",
                                       min_start=NOW - timedelta(days=2)), NOW)
            seconds, moved = timed(lambda: transfer_all(spark, cfg, NOW))
            held = table().scan().to_arrow().num_rows
            assert moved == held == args.rows, (moved, held)
            results["platform_backfill_s"] = round(seconds, 3)

            catalog = writer.catalog.open(create=True)
            floors = {}
            for kind in ("upsert", "merge"):  # two copies: one per way of upserting
                name = f"r0.floor_{kind}"
                floor = catalog.create_table(name, schema=arrow_rows().schema)
                floors[kind] = (name, timed(lambda floor=floor: floor.append(arrow_rows()))[0])
            results["floor_backfill_s"] = round(min(s for _, s in floors.values()), 3)

            changed_at = NOW + timedelta(minutes=59)
            changed = touch_one_percent(TENANT, 1, changed_at)
            seconds, moved = timed(lambda: transfer_all(spark, cfg, NOW + timedelta(hours=1)))
            results["platform_incremental_s"], results["changed_rows"] = round(seconds, 3), changed

            window = arrow_rows("AND updated_at = %s", (changed_at,))
            floor = table(floors["upsert"][0])
            results["floor_incremental_table_upsert_s"] = round(timed(
                lambda: floor.upsert(window, join_cols=["id"]))[0], 3)
            floor = table(floors["merge"][0])
            results["floor_incremental_own_merge_s"] = round(timed(
                lambda: _rewrite(floor, window, model, {}, lambda held: merge_rows(held, window, model)))[0], 3)
            import pyarrow.compute as pc

            for name in ("r0.events", *(n for n, _ in floors.values())):
                rows = table(name).scan().to_arrow()
                assert rows.num_rows == args.rows, (name, rows.num_rows)
                assert int(pc.sum(pc.equal(rows.column("updated_at"), changed_at)).as_py()) == changed, name
            writer.close()
        finally:
            drop_source()
            with pg_connect(autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{CATALOG_SCHEMA}" CASCADE')
    results["backfill_ratio"] = round(results["platform_backfill_s"] / results["floor_backfill_s"], 2)
    results["incremental_ratio"] = round(results["platform_incremental_s"] / min(
        results["floor_incremental_table_upsert_s"], results["floor_incremental_own_merge_s"]), 2)
    for key, value in results.items():
        print(f"{key:40} {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
