"""The SFTP destination beside PostgreSQL: a backfill of N rows and an incremental of 1 % through
the platform into each, in the same run.

``.venv/bin/python -m benchmarks.destination_sftp --rows 1000000`` (as root: sshd chroots)

The source is the harness's PostgreSQL table (``benchmarks/source.py``) with one tenant holding
all N rows. The platform moves them with ``run_transfer`` into a folder of a local OpenSSH sshd
(``benchmarks/sftp_server.py``: Parquet files and signed manifests written over SFTP by paramiko)
and into a PostgreSQL schema; then 1 % of the rows change and an incremental transfer moves them
into each. Every case checks the rows it delivered (SFTP: the rows of the files its manifests
name, read back over SFTP); the times are printed side by side (and written as JSON with
``--json``).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from benchmarks.cases_platform import SPARK, delivered, platform_raw
from benchmarks.common import NOW, drop_schemas, measure
from benchmarks.sftp_server import SFTPServer, sftp_server
from benchmarks.source import create_source, drop_source, touch_one_percent

TENANT = "tenant-0"
PREFIX = "bench_sftp"
KEY_ENV, SIGNING_ENV = "TP_BENCH_SFTP_KEY", "TP_BENCH_SIGNING_KEY"


def sftp_rows(server: SFTPServer, root: str, transfer_id: str | None = None, changed_at=None) -> int:
    """Rows of the files the manifests name (of one transfer, or all; ``changed_at``: only rows
    last modified then, as the lookback delivers a few older rows again), read back over SFTP."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with server.sftp() as client:
        folder = f"{root}/_manifests/events"
        count = 0
        for day in client.listdir(folder) if _exists(client, folder) else []:
            for name in client.listdir(f"{folder}/{day}"):
                with client.open(f"{folder}/{day}/{name}", "rb") as file:
                    manifest = json.loads(file.read())
                if transfer_id is not None and manifest["transfer_id"] != transfer_id:
                    continue
                for entry in manifest["files"]:
                    with client.open(f"{root}/{entry['data_file_key']}", "rb") as file:
                        table = pq.read_table(io.BytesIO(file.read()), columns=["updated_at"])
                    if changed_at is not None:
                        table = table.filter(pc.equal(table["updated_at"], changed_at))
                    count += table.num_rows
        return count


def _exists(client, path: str) -> bool:
    try:
        client.stat(path)
    except FileNotFoundError:
        return False
    return True


def configs(server: SFTPServer, root: str):
    """(the SFTP destination's configuration, PostgreSQL's): the same source and model."""
    import os

    from transfer_platform.config.parsing import parse_config
    from transfer_platform.destinations.manifests import new_signing_key

    os.environ[KEY_ENV] = server.private_key
    os.environ[SIGNING_ENV] = new_signing_key()[0]
    postgres = platform_raw([TENANT], PREFIX)
    sftp = platform_raw([TENANT], PREFIX)
    sftp["destinations"] = [{"name": "d0", "vendor": "sftp", "recipient": "r0", "signing_key": f"${{{SIGNING_ENV}}}",
                             "connection": server.connection(root, KEY_ENV)}]
    return parse_config(sftp, now=NOW), parse_config(postgres, now=NOW)


def platform_transfer(spark, config, now, transfer_id: str) -> int:
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.transfers.order import TransferOrder
    from transfer_platform.transfers.runner import TransferRequest, run_transfer

    destination = config.destination("d0")
    writer = writer_for(destination)
    try:
        (summary,) = run_transfer(TransferRequest(spark=spark, config=config, order=TransferOrder(destination="d0"),
                                                  writer=writer, transfer_id=transfer_id, now=now),
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
    with sftp_server(work) as server:
        root = server.folder()
        sftp, postgres = configs(server, root)
        backfill, incremental = f"backfill-{uuid.uuid4().hex[:8]}", f"incremental-{uuid.uuid4().hex[:8]}"
        results["sftp_backfill"] = measure(
            "sftp_backfill", lambda: platform_transfer(spark, sftp, NOW + timedelta(minutes=1), backfill), runs=1,
            expected=rows, delivered=lambda: sftp_rows(server, root))
        results["postgres_backfill"] = measure(
            "postgres_backfill", lambda: platform_transfer(spark, postgres, NOW + timedelta(minutes=1), backfill),
            runs=1, expected=rows, delivered=lambda: delivered(PREFIX, [0]))
        changed_at = NOW + timedelta(minutes=2)
        changed = touch_one_percent(TENANT, 1, changed_at)
        results["sftp_incremental"] = measure(
            "sftp_incremental", lambda: platform_transfer(spark, sftp, NOW + timedelta(minutes=3), incremental),
            runs=1, expected=changed, delivered=lambda: sftp_rows(server, root, incremental, changed_at))
        results["postgres_incremental"] = measure(
            "postgres_incremental",
            lambda: platform_transfer(spark, postgres, NOW + timedelta(minutes=3), incremental), runs=1,
            expected=changed, delivered=lambda: delivered(PREFIX, [0], "WHERE updated_at = %s", (changed_at,)))
    for kind in ("backfill", "incremental"):
        results[f"ratio_{kind}"] = round(results[f"sftp_{kind}"]["median_s"]
                                         / max(results[f"postgres_{kind}"]["median_s"], 1e-6), 1)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tp_bench_sftp_"))
    started = time.perf_counter()
    try:
        results = run(args.rows, work)
    finally:
        drop_source()
        drop_schemas(PREFIX)
        shutil.rmtree(work, ignore_errors=True)
    out = sys.stdout
    out.write(f"SFTP destination beside PostgreSQL, {args.rows} rows of one tenant (2 cores, Spark local[2], "
              "a local sshd)\n")
    out.write(f"{'case':<12} {'sftp s':>9} {'postgres s':>11} {'sftp/postgres':>14}  rows\n")
    for kind in ("backfill", "incremental"):
        sftp, postgres = results[f"sftp_{kind}"], results[f"postgres_{kind}"]
        out.write(f"{kind:<12} {sftp['median_s']:>9.3f} {postgres['median_s']:>11.3f} "
                  f"{results[f'ratio_{kind}']:>14.1f}  {sftp['rows']}\n")
    out.write(f"whole run {time.perf_counter() - started:.0f} s\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
