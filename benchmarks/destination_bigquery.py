"""The BigQuery destination beside PostgreSQL: the same tenant's backfill of N rows and its 1 %
incremental, moved by the platform into each, in the same run.

``.venv/bin/python -m benchmarks.destination_bigquery --rows 100000``

The source is the harness's PostgreSQL table (``benchmarks/source.py``), one tenant holding all N
rows. The platform moves them with ``run_transfer`` into a fresh PostgreSQL schema and into a
fresh dataset of a BigQuery emulator (crucible-emulator, ``scripts/crucible/.venv``, started here
on a free port of 127.0.0.1: one CSV load job per window, then its ``MERGE``); then 1 % of the
rows change and an incremental transfer moves them into each. Every case checks the rows it
delivered. The emulator is DuckDB behind BigQuery's REST API on this machine: its times say what
the platform's BigQuery path costs here, not what BigQuery itself takes (the emulator's CSV load
job takes about 260 rows a second on this machine: it dominates a backfill; docs/destinations.md).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from benchmarks.cases_platform import SPARK, delivered, platform_raw, transfer_all
from benchmarks.common import NOW, drop_schemas, measure
from benchmarks.source import create_source, drop_source, touch_one_percent

TENANT = "tenant-0"
PROJECT = "tp-bench"
CRUCIBLE = Path(__file__).resolve().parents[1] / "scripts" / "crucible" / ".venv" / "bin" / "crucible"


def start_emulator(log: Path) -> tuple[subprocess.Popen, str]:
    """The emulator on a free port, once it accepts connections (bounded: 120 s)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([str(CRUCIBLE), "serve", "--dialect", "bigquery", "--host", "127.0.0.1", "--port",
                                str(port)], stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the BigQuery emulator exited: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("the BigQuery emulator did not listen in 120 s") from None
            time.sleep(0.1)


def client(endpoint: str):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery

    return bigquery.Client(project=PROJECT, credentials=AnonymousCredentials(),
                           client_options={"api_endpoint": endpoint})


def bigquery_count(endpoint: str, dataset: str, where: str = "") -> int:
    from google.api_core.exceptions import NotFound

    bq = client(endpoint)
    try:
        return list(bq.query(f"SELECT COUNT(*) FROM `{PROJECT}.{dataset}.events` {where}").result())[0][0]
    except NotFound:
        return 0
    finally:
        bq.close()


def platform_config(prefix: str, endpoint: str, dataset: str):
    from transfer_platform.config.parsing import parse_config

    raw = platform_raw([TENANT, TENANT], prefix)  # d0: PostgreSQL; d1: BigQuery, the same tenant
    raw["destinations"][1] = {"name": "d1", "vendor": "bigquery", "recipient": "r1",
                              "connection": {"project": PROJECT, "dataset": dataset, "api_endpoint": endpoint}}
    return parse_config(raw, now=NOW)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="source rows (N), all of one tenant")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    return parser.parse_args(argv)


def run(rows: int, endpoint: str, prefix: str) -> dict:
    from transfer_platform.config.models import SparkSettings
    from transfer_platform.runtime.spark_session import get_spark_session

    create_source(rows, 1)
    spark = get_spark_session(SparkSettings(**SPARK), shared=False)
    dataset = f"bench_{uuid.uuid4().hex[:8]}"
    bq = client(endpoint)
    bq.create_dataset(f"{PROJECT}.{dataset}")
    bq.close()
    config = platform_config(prefix, endpoint, dataset)
    results: dict = {"rows": rows}
    cases = {"postgres": 0, "bigquery": 1}  # the destinations' indices (d0, d1)
    for name, index in cases.items():
        count = (lambda: delivered(prefix, [0])) if name == "postgres" else (lambda: bigquery_count(endpoint, dataset))
        results[f"{name}_backfill"] = measure(
            f"{name}_backfill", lambda i=index: transfer_all(spark, config, NOW + timedelta(minutes=1), [i]),
            runs=1, expected=rows, delivered=count)
    changed_at = NOW + timedelta(minutes=2)
    changed = touch_one_percent(TENANT, 1, changed_at)
    stamp = changed_at.isoformat()
    for name, index in cases.items():
        count = ((lambda: delivered(prefix, [0], "WHERE updated_at = %s", (changed_at,))) if name == "postgres" else
                 (lambda: bigquery_count(endpoint, dataset, f"WHERE updated_at = TIMESTAMP '{stamp}'")))
        results[f"{name}_incremental"] = measure(
            f"{name}_incremental", lambda i=index: transfer_all(spark, config, NOW + timedelta(minutes=3), [i]),
            runs=1, expected=changed, delivered=count)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tp_bench_bigquery_"))
    prefix = f"tp_bench_bq_{uuid.uuid4().hex[:6]}"
    process, endpoint = start_emulator(work / "crucible.log")
    started = time.perf_counter()
    try:
        results = run(args.rows, endpoint, prefix)
    finally:
        drop_source()
        drop_schemas(prefix)
        process.terminate()
        process.wait(30)
    out = sys.stdout
    out.write(f"BigQuery (emulator) beside PostgreSQL, {args.rows} rows of one tenant (2 cores, Spark local[2])\n")
    out.write(f"{'case':<12} {'bigquery s':>11} {'postgres s':>11}  rows\n")
    for kind in ("backfill", "incremental"):
        bq, pg = results[f"bigquery_{kind}"], results[f"postgres_{kind}"]
        out.write(f"{kind:<12} {bq['median_s']:>11.3f} {pg['median_s']:>11.3f}  {bq['rows']}\n")
    out.write(f"whole run {time.perf_counter() - started:.0f} s\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
