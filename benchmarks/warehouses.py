"""The warehouse destinations beside the PostgreSQL destination, in one run on this machine.

    .venv/bin/python -m benchmarks.warehouses --rows 100000 [--vendors snowflake,bigquery] [--json out.json]

The source is the harness's PostgreSQL table (``benchmarks/source.py``), all rows one tenant's:
the end-to-end benchmark's tenant. For PostgreSQL (always, first: the reference) and each vendor
asked for, in turn:

- ``backfill``: the platform's transfer of the tenant's rows into an empty destination
  (``run_transfer``, as ``cases_platform.transfer_all`` does);
- ``incremental_1pct``: then 1 % of the rows changed in the source, one incremental transfer;
- ``backfill_again`` and ``backfill_staged_merge`` (Snowflake, ClickHouse): then, warm, the
  backfill into a new, empty database, and again with the load straight into the empty table
  turned off (staged, then merged): the cost that load saves; twice each, in the order A B B A,
  with the CPU-seconds of this process (chDB), Spark and the emulators' servers beside the wall
  time (PostgreSQL's side is the same for both).

Each case is checked by counting what the destination holds through the vendor's own client
(a wrong count voids the run). The vendors run against the emulators the tests use
(started by ``benchmarks/snowflake_server.py``, ``bigquery_server.py``, ``gcs_server.py`` and
``sftp_server.py``): their numbers say what this platform's path costs around each
vendor's client and an emulator on this machine, not what the real service takes; the ratio to
PostgreSQL, measured in the same run on the same machine, is the comparable number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

from benchmarks.common import NOW, PG, SCHEMA, RowCountMismatch, count_rows, drop_schemas, stats
from benchmarks.cost import ClientTree
from benchmarks.source import create_source, drop_source, tenant_names, touch_one_percent

TENANT = tenant_names(1)[0]


@dataclass
class Target:
    """One destination of the run: its configuration entry (without name and recipient) and how
    many rows it holds (with ``updated_at`` equal to the given moment, if one is given), read
    through the vendor's own client."""

    vendor: str
    entry: dict
    count: Callable[[datetime | None], int]
    env: dict[str, str] = field(default_factory=dict)  # environment variables its secrets name
    #: for a vendor that loads a window into an empty table by its bulk path straight into that
    #: table: a new, empty destination of the vendor (by name), and what turns that path off
    #: (the cases ``backfill_again`` and ``backfill_staged_merge``)
    fresh: Callable[[str], Target] | None = None
    straight_off: Callable[[], AbstractContextManager] | None = None


def postgres(stack: ExitStack, folder: Path, args: argparse.Namespace) -> Target:
    schema = f"{SCHEMA}_wh_pg"
    stack.callback(drop_schemas, schema)
    connection = {"host": PG["host"], "port": PG["port"], "database": PG["dbname"], "username": PG["user"],
                  "schema": schema}

    def count(at: datetime | None) -> int:
        return count_rows(f"{schema}.events", *(("WHERE updated_at = %s", (at,)) if at else ()))

    return Target("postgres", {"vendor": "postgres", "connection": connection}, count)


def snowflake(stack: ExitStack, folder: Path, args: argparse.Namespace) -> Target:
    """A schema of fakesnow's server (``benchmarks/snowflake_server.py``), read through
    snowflake-connector-python."""
    from benchmarks.snowflake_server import PASSWORD, fakesnow_server

    server = stack.enter_context(fakesnow_server(folder))
    schema = "acme"

    def target(database: str) -> Target:
        server.create_schema(database, schema)

        def count(at: datetime | None) -> int:
            with server.connect() as conn, conn.cursor() as cursor:
                cursor.execute(f'SELECT count(*) FROM "{database}"."{schema}"."events"'
                               + (' WHERE "updated_at" = %s' if at else ""), (at,) if at else ())
                return cursor.fetchone()[0]

        return Target("snowflake", {"vendor": "snowflake", "connection": server.connection(
            database, schema, "TP_BENCH_SNOWFLAKE_PASSWORD")}, count, {"TP_BENCH_SNOWFLAKE_PASSWORD": PASSWORD})

    from transfer_platform.destinations.snowflake.writer import SnowflakeWriter

    main = target("TP_BENCH")
    main.fresh, main.straight_off = target, partial(straight_off, SnowflakeWriter)
    return main


@contextmanager
def straight_off(writer: type) -> Iterator[None]:
    """A vendor's load of a window straight into an empty table turned off: staged, then merged."""
    fits = writer._start_empty_load
    writer._start_empty_load = lambda self, load, staging: False
    try:
        yield
    finally:
        writer._start_empty_load = fits


def bigquery(stack: ExitStack, folder: Path, args: argparse.Namespace) -> Target:
    """A dataset of crucible, the BigQuery emulator (``benchmarks/bigquery_server.py``), read
    through google-cloud-bigquery."""
    import uuid

    from benchmarks.bigquery_server import bigquery_server

    server = stack.enter_context(bigquery_server(folder))
    dataset = f"bench_{uuid.uuid4().hex[:8]}"
    server.create_dataset(dataset)
    client = server.client()
    stack.callback(client.close)

    def count(at: datetime | None) -> int:
        where = f"WHERE updated_at = TIMESTAMP '{at.isoformat()}'" if at else ""
        return list(client.query(f"SELECT COUNT(*) FROM `{server.project}.{dataset}.events` {where}").result())[0][0]

    return Target("bigquery", {"vendor": "bigquery", "connection": {"project": server.project, "dataset": dataset,
                                                                    "api_endpoint": server.endpoint}}, count)


def clickhouse(stack: ExitStack, folder: Path, args: argparse.Namespace) -> Target:
    """A database of an embedded chDB folder (``--chdb-folder``, or a new one: chDB opens one
    folder per process), read with ``FINAL``."""
    import uuid

    import clickhouse_connect

    from transfer_platform.destinations.clickhouse.writer import ClickhouseWriter

    path = Path(args.chdb_folder) if args.chdb_folder else folder / "chdb"
    client = clickhouse_connect.get_client(dsn=f"chdb://{path}")

    def target(name: str) -> Target:
        database = f"{name.lower()}_{uuid.uuid4().hex[:8]}"
        stack.callback(client.command, f"DROP DATABASE IF EXISTS `{database}` SYNC")

        def count(at: datetime | None) -> int:
            where, params = ("WHERE updated_at = {at:DateTime64(6, 'UTC')}",
                             {"at": at.strftime("%Y-%m-%d %H:%M:%S.%f")}) if at else ("", None)
            return client.query(f"SELECT count() FROM `{database}`.events FINAL {where}",
                                parameters=params).result_rows[0][0]

        return Target("clickhouse", {"vendor": "clickhouse", "connection": {"path": str(path), "database": database}},
                      count)

    main = target("tp_bench")
    main.fresh, main.straight_off = target, partial(straight_off, ClickhouseWriter)
    return main


def sftp(stack: ExitStack, folder: Path, args: argparse.Namespace) -> Target:
    """A folder of a local OpenSSH sshd (``benchmarks/sftp_server.py``; as root: it chroots), its
    rows those of the files its manifests name, read back over SFTP with paramiko."""
    from benchmarks.sftp_server import sftp_server
    from transfer_platform.destinations.manifests import new_signing_key

    server = stack.enter_context(sftp_server(folder))
    root = server.folder()
    files = stack.enter_context(server.sftp())

    def keys(prefix: str) -> list[str]:  # relative to root; the manifests' folder holds one folder per day
        try:
            days = files.listdir(f"{root}/{prefix}")
        except FileNotFoundError:
            return []
        return [f"{prefix}{day}/{name}" for day in days for name in files.listdir(f"{root}/{prefix}{day}")]

    def get(key: str) -> bytes:
        with files.open(f"{root}/{key}", "rb") as file:
            return file.read()

    env = {"TP_BENCH_SFTP_KEY": server.private_key, "TP_BENCH_SIGNING_KEY": new_signing_key()[0]}
    return Target("sftp", {"vendor": "sftp", "signing_key": "${TP_BENCH_SIGNING_KEY}",
                           "connection": server.connection(root, "TP_BENCH_SFTP_KEY")},
                  lambda at: manifest_rows(keys, get, "_manifests/events/", at), env)


def gcs(stack: ExitStack, folder: Path, args: argparse.Namespace) -> Target:
    """A bucket of fake-gcs-server (``benchmarks/gcs_server.py``), its rows those of the files its
    manifests name, read with google-cloud-storage."""
    import uuid

    from benchmarks.gcs_server import gcs_server
    from transfer_platform.destinations.manifests import new_signing_key

    server = stack.enter_context(gcs_server(folder))
    bucket, root = f"bench-{uuid.uuid4().hex[:10]}", "bench"
    server.create_bucket(bucket)
    blobs = server.client().bucket(bucket)

    def keys(prefix: str) -> list[str]:
        return [blob.name for blob in blobs.client.list_blobs(bucket, prefix=prefix)]

    env = {"TP_BENCH_SIGNING_KEY": new_signing_key()[0]}
    return Target("gcs", {"vendor": "gcs", "signing_key": "${TP_BENCH_SIGNING_KEY}",
                          "connection": {"bucket": bucket, "prefix": root, "endpoint_url": server.endpoint}},
                  lambda at: manifest_rows(keys, lambda key: blobs.blob(key).download_as_bytes(),
                                           f"{root}/_manifests/events/", at), env)


def manifest_rows(keys: Callable[[str], list[str]], get: Callable[[str], bytes], manifests: str,
                  at: datetime | None) -> int:
    """Object storage's rows: those of the files the model's manifests (under the prefix
    ``manifests``) name (``at``: only rows last modified then), read through ``keys`` (the keys
    under a prefix) and ``get`` (a key's bytes; a manifest's ``data_file_key`` is such a key)."""
    import io

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    count = 0
    for key in keys(manifests):
        if not key.endswith(".json"):
            continue
        for entry in json.loads(get(key))["files"]:
            table = pq.read_table(io.BytesIO(get(entry["data_file_key"])), columns=["updated_at"])
            if at is not None:
                table = table.filter(pc.equal(table["updated_at"], at))
            count += table.num_rows
    return count


#: vendor -> how to set its destination up (an emulator started on ``stack``, closed after)
TARGETS: dict[str, Callable[[ExitStack, Path, argparse.Namespace], Target]] = {
    "postgres": postgres, "snowflake": snowflake, "bigquery": bigquery, "clickhouse": clickhouse, "gcs": gcs,
    "sftp": sftp}


def config(target: Target):
    from benchmarks.cases_platform import platform_raw
    from transfer_platform.config.parsing import parse_config

    raw = platform_raw([TENANT], "unused")
    raw["destinations"] = [{"name": "d0", "recipient": "r0", **target.entry}]
    return parse_config(raw, now=NOW)


def run_vendor(spark, target: Target, rows: int, start: datetime) -> dict:
    """The backfill at ``start``, then the 1 % incremental an hour later; both checked."""
    import os

    from benchmarks.cases_platform import transfer_all

    os.environ.update(target.env)
    cfg = config(target)
    began = time.perf_counter()
    transfer_all(spark, cfg, start)
    backfill = time.perf_counter() - began
    if (held := target.count(None)) != rows:
        raise RowCountMismatch(f"{target.vendor} backfill: {held} rows held, the source has {rows}")
    moment = start + timedelta(hours=1)
    changed_at = moment - timedelta(minutes=1)
    changed = touch_one_percent(TENANT, 1, changed_at)
    began = time.perf_counter()
    transfer_all(spark, cfg, moment)
    incremental = time.perf_counter() - began
    moved = target.count(changed_at)
    if moved != changed:
        raise RowCountMismatch(f"{target.vendor} incremental: {moved} of {changed} changed rows delivered")
    result = {"backfill": {**stats([backfill]), "rows": rows, "rows_checked": True},
              "incremental_1pct": {**stats([incremental]), "rows": changed, "rows_checked": True}}
    if target.fresh is not None and target.straight_off is not None:  # both warm, into empty destinations
        turned_off = {"backfill_again": nullcontext, "backfill_staged_merge": target.straight_off}
        times: dict[str, list[float]] = {case: [] for case in turned_off}
        cpu: dict[str, list[float]] = {case: [] for case in turned_off}
        tree = ClientTree(None)  # this process (chDB), its children (Spark, the emulators' servers)
        order = ["backfill_again", "backfill_staged_merge", "backfill_staged_merge", "backfill_again"]
        for n, case in enumerate(order):  # A B B A: neither favoured by going first
            other = target.fresh(f"TP_BENCH_{case.upper()}_{n}")
            with turned_off[case]():
                began, cpu_before = time.perf_counter(), tree.cpu()
                transfer_all(spark, config(other), moment)
                times[case].append(time.perf_counter() - began)
                cpu[case].append(tree.cpu() - cpu_before)
            if (held := other.count(None)) != rows:
                raise RowCountMismatch(f"{target.vendor} {case}: {held} rows held, the source has {rows}")
        result.update({case: {**stats(seconds), "rows": rows, "rows_checked": True,
                              "cpu_s_median": round(statistics.median(cpu[case]), 2)}
                       for case, seconds in times.items()})
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the source (one tenant)")
    parser.add_argument("--vendors", default=",".join(v for v in TARGETS if v != "postgres"),
                        help="the vendors beside PostgreSQL, comma-separated (default: all)")
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    parser.add_argument("--chdb-folder", default=None,
                        help="ClickHouse: the chDB folder to use (default: a new one; chDB opens one folder per process)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import tempfile

    from benchmarks.run import start_spark

    args = parse_args(argv)
    vendors = ["postgres", *(v for v in args.vendors.split(",") if v and v != "postgres")]
    unknown = [v for v in vendors if v not in TARGETS]
    if unknown:
        print(f"unknown vendors: {', '.join(unknown)} (known: {', '.join(TARGETS)})", file=sys.stderr)
        return 2
    spark, _ = start_spark()
    results: dict = {"parameters": vars(args), "vendors": {}}
    try:
        create_source(args.rows, 1)
        with tempfile.TemporaryDirectory(prefix="tp_bench_warm_") as folder, ExitStack() as stack:
            # untimed: the first transfer in a JVM pays Spark's warm-up, which would count against
            # PostgreSQL, measured first
            run_vendor(spark, postgres(stack, Path(folder), args), args.rows, NOW)
        for index, vendor in enumerate(vendors):
            with tempfile.TemporaryDirectory(prefix=f"tp_bench_{vendor}_") as folder, ExitStack() as stack:
                target = TARGETS[vendor](stack, Path(folder), args)
                results["vendors"][vendor] = run_vendor(spark, target, args.rows, NOW + timedelta(hours=2 * (index + 1)))
    finally:
        drop_source()
    reference = results["vendors"]["postgres"]
    print(f"{'vendor':<12} {'backfill s':>11} {'x postgres':>10} {'1% incr. s':>11} {'x postgres':>10}")
    for vendor, cases in results["vendors"].items():
        ratios = {case: round(cases[case]["median_s"] / reference[case]["median_s"], 2)
                  for case in ("backfill", "incremental_1pct")}
        cases["ratio_to_postgres"] = ratios
        print(f"{vendor:<12} {cases['backfill']['median_s']:>11.2f} {ratios['backfill']:>10.2f} "
              f"{cases['incremental_1pct']['median_s']:>11.2f} {ratios['incremental_1pct']:>10.2f}")
        if "backfill_staged_merge" in cases:
            again, merged = cases["backfill_again"], cases["backfill_staged_merge"]
            print(f"{'':<12} warm, into empty tables: the backfill {again['median_s']:.2f} s "
                  f"({again['cpu_s_median']:.2f} CPU s), staged then merged {merged['median_s']:.2f} s "
                  f"({merged['cpu_s_median']:.2f} CPU s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
