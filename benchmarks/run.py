"""transfer_platform side by side with the floor and with dlt.

    .venv/bin/python -m benchmarks.run [--rows 2000000] [--tenants 20] [--runs 3] [--scale 10]
        [--skip-10n] [--windows 400] [--window-runs 1] [--recipients 1000] [--definitions-runs 1]
        [--json benchmark_results/results.json]

Creates the multi-tenant table ``tp_bench_<run>.events`` in the machine's PostgreSQL
(127.0.0.1:5432, database ``test``, user ``postgres``, trust auth): ``--rows`` rows over ``--tenants`` tenants,
``updated_at`` spread over a year, 11 columns (bigint key, tenant id, timestamptz, integers,
doubles, short texts, a ~100-byte text). One SparkSession (local[2], 2 GB driver) is created or
reused and warmed up first. Then, in the same run, each case ``--runs`` times (median, min, max),
each run checked afterwards, untimed: the rows it delivered must equal the source's, else the
benchmark stops (a broken case cannot print a fast number). "One tenant" is ``tenant-1``; "all
tenants" is every tenant into its own destination schema, one after another.

- ``floor_one_tenant`` / ``floor_all_tenants``: psycopg only; per tenant, one transaction:
  ``COPY`` out of the source into an UNLOGGED staging table, one ``INSERT ... ON CONFLICT (id) DO
  UPDATE ... WHERE excluded.updated_at >= t.updated_at`` (``cases_floor.py``);
- ``platform_data_one_tenant`` / ``platform_data_all_tenants``: the platform's data path alone,
  ``run_transfer`` per destination (Spark JDBC read -> staged upsert);
- ``dagster_one_tenant`` / ``dagster_all_tenants``: the platform's backfill end to end through
  Dagster: the definitions built from a YAML configuration file, one in-process run materializing
  the tenant's asset / every tenant's asset (without the integrity checks) against a temporary
  instance; the run reuses the harness's SparkSession (checked), so no JVM start is timed;
- ``dlt_one_tenant`` / ``dlt_all_tenants``: dlt 1.31 ``sql_table`` (pyarrow backend, incremental on
  ``updated_at``, merge on ``id``, filtered to the tenant) into a postgres dataset per tenant
  (``cases_dlt.py``);
- ``incremental_n``: after an untimed backfill of one tenant, each run changes 1 % of its rows
  (untimed) and times the incremental transfer;
- ``per_window``: a single-run backfill of ``--windows`` daily windows of one tenant
  (``--window-runs`` runs, 1 by default: it is slow); its value is the time per window (shown
  also less the one-tenant backfill's time pro rata of the rows: an estimate of the overhead alone);
- then the source is rebuilt with ``--scale`` times the rows (same tenants; skipped with
  ``--skip-10n``): ``platform_data_one_tenant_10n`` (the one-tenant backfill, to compare its peak
  memory with N), ``incremental_10n`` (the same changed rows as at N: the cost should follow the
  change, not the table) and ``incremental_10n_1pct`` (1 % of the now larger tenant, for reference);
- ``definitions_load``: building the Dagster definitions of ``--recipients`` x 10 models
  (``--definitions-runs`` runs, 1 by default); ``definitions_snapshot``: what a code server does
  next, before the UI shows them (the repository snapshot, serialized; no target).

Every case reports the peak resident memory of the whole process tree (Python and the Spark JVM,
sampled from /proc every 0.2 s), reset between cases: garbage is collected in Python and in the
JVM first and the resident memory at the case's start is shown too (the JVM does not always give
its heap back, so a peak can carry an earlier case's heap). The table ends with the ratios against the
targets. The JSON (``--json``) holds the cases, the targets, the parameters, the machine's load
average before and after, its CPU count and the versions of pyspark, dagster, dlt and PostgreSQL.
Every schema created (``tp_bench_<run>`` and ``tp_bench_<run>_*``, a new ``<run>`` per process so
that runs at once do not collide) is dropped at the end, whether the run succeeds or not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from benchmarks import cases_dlt, cases_floor, report
from benchmarks.cases_platform import (
    SPARK,
    DagsterBackfill,
    definitions_load_seconds,
    delivered,
    incremental,
    platform_config,
    transfer_all,
)
from benchmarks.common import (
    NOW,
    SCHEMA,
    PeakMemory,
    drop_schemas,
    measure,
    server_version,
    stats,
)
from benchmarks.source import create_source, drop_source, rows_since, tenant_counts, tenant_names

PLATFORM = f"{SCHEMA}_tp"
DAGSTER = f"{SCHEMA}_dag"
INCREMENTAL = f"{SCHEMA}_inc"
WINDOWS = f"{SCHEMA}_win"
WARM_UP = f"{SCHEMA}_warm"
MODELS_PER_RECIPIENT = 10


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="source rows (N)")
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3, help="runs of every timed case")
    parser.add_argument("--scale", type=int, default=10, help="the large source is scale x N rows")
    parser.add_argument("--skip-10n", action="store_true", help="skip the cases on the large source")
    parser.add_argument("--windows", type=int, default=400, help="daily windows of the overhead case")
    parser.add_argument("--window-runs", type=int, default=1, help="runs of the overhead case")
    parser.add_argument("--recipients", type=int, default=1000, help="for the definitions load")
    parser.add_argument("--definitions-runs", type=int, default=1, help="runs of the definitions load")
    parser.add_argument("--json", default="benchmark_results/results.json")
    return parser.parse_args(argv)


@dataclass
class Bench:
    """One benchmark run: its parameters, Spark session, scratch folder and results."""

    args: argparse.Namespace
    spark: object
    folder: Path
    tenants: list[str]
    counts: dict[str, int] = field(default_factory=dict)
    cases: dict[str, dict] = field(default_factory=dict)

    @property
    def one(self) -> int:
        """The index of the "one tenant" (``tenant-1``)."""
        return 1 % len(self.tenants)

    @property
    def every(self) -> list[int]:
        return list(range(len(self.tenants)))

    def expected(self, indices: list[int]) -> int:
        return sum(self.counts.get(self.tenants[i], 0) for i in indices)

    def record(self, name: str, run, indices: list[int], delivered_rows, prefix: str,
               cleanup=lambda: None, runs: int | None = None) -> dict:
        """Measure one case (see :func:`measure`); its schemas are dropped after every run."""

        def clean() -> None:
            drop_schemas(prefix)
            cleanup()

        self.cases[name] = measure(name, run, runs=runs or self.args.runs, expected=self.expected(indices),
                                   delivered=lambda: delivered_rows(indices), cleanup=clean)
        return self.cases[name]


# -- the cases -------------------------------------------------------------------------------


def floor_cases(bench: Bench) -> None:
    one = bench.one
    bench.record("floor_one_tenant",
                 lambda: cases_floor.floor_copy(bench.tenants[one], cases_floor.floor_schema(one)),
                 [one], cases_floor.floor_delivered, cases_floor.PREFIX)
    bench.record("floor_all_tenants", lambda: cases_floor.floor_all(bench.tenants), bench.every,
                 cases_floor.floor_delivered, cases_floor.PREFIX)


def platform_data_cases(bench: Bench, *, suffix: str = "", all_tenants: bool = True) -> None:
    config = platform_config(bench.tenants, PLATFORM)
    rows = lambda indices: delivered(PLATFORM, indices)  # noqa: E731
    bench.record(f"platform_data_one_tenant{suffix}",
                 lambda: transfer_all(bench.spark, config, NOW, [bench.one]), [bench.one], rows, PLATFORM)
    if all_tenants:
        bench.record(f"platform_data_all_tenants{suffix}",
                     lambda: transfer_all(bench.spark, config, NOW), bench.every, rows, PLATFORM)


def dagster_cases(bench: Bench) -> None:
    dagster = DagsterBackfill(bench.tenants, DAGSTER, bench.folder / "dagster")
    rows = lambda indices: delivered(DAGSTER, indices)  # noqa: E731
    try:
        bench.record("dagster_one_tenant", lambda: dagster.materialize(bench.spark, [bench.one]),
                     [bench.one], rows, DAGSTER)
        bench.record("dagster_all_tenants", lambda: dagster.materialize(bench.spark, bench.every),
                     bench.every, rows, DAGSTER)
    finally:
        dagster.close()
    for name in ("dagster_one_tenant", "dagster_all_tenants"):
        bench.cases[name]["spark_session_reused"] = True


def dlt_cases(bench: Bench) -> None:
    pipelines = bench.folder / "dlt_pipelines"
    forget = lambda: cases_dlt.forget_pipelines(pipelines)  # noqa: E731
    with cases_dlt.dlt_environment(bench.folder):
        bench.record("dlt_one_tenant",
                     lambda: cases_dlt.dlt_copy(bench.tenants[bench.one], bench.one, pipelines),
                     [bench.one], cases_dlt.dlt_delivered, cases_dlt.PREFIX, forget)
        bench.record("dlt_all_tenants", lambda: cases_dlt.dlt_all(bench.tenants, pipelines),
                     bench.every, cases_dlt.dlt_delivered, cases_dlt.PREFIX, forget)


def incremental_case(bench: Bench, name: str, *, max_id: int | None = None) -> dict:
    tenant = bench.tenants[bench.one]
    case = incremental(bench.spark, bench.tenants, bench.one, INCREMENTAL, runs=bench.args.runs,
                       total=bench.counts[tenant], max_id=max_id)
    case["note"] = f"rows = changed rows of {tenant} ({bench.counts[tenant]} rows) per run"
    bench.cases[name] = case
    return case


def per_window_case(bench: Bench) -> None:
    """A single-run backfill of daily windows (tenant-2): its time per window, and that time
    less the one-tenant backfill's time pro rata of the rows (an estimate of the pure overhead)."""
    windows, index = bench.args.windows, 2 % len(bench.tenants)
    start = NOW - timedelta(days=windows)
    config = platform_config(bench.tenants, WINDOWS, window=86400, min_start=start)
    rows = rows_since(bench.tenants[index], start)
    case = measure("per_window", lambda: transfer_all(bench.spark, config, NOW, [index]),
                   runs=bench.args.window_runs, expected=rows,
                   delivered=lambda: delivered(WINDOWS, [index]), cleanup=lambda: drop_schemas(WINDOWS))
    one = bench.cases["platform_data_one_tenant"]
    data = one["median_s"] * rows / max(one["rows"], 1)
    case["per_window_s"] = round(case["median_s"] / windows, 4)
    case["per_window_net_s"] = round((case["median_s"] - data) / windows, 4)
    case["windows"] = windows
    case["note"] = (f"{windows} windows: {case['per_window_s']} s per window; "
                    f"~{case['per_window_net_s']} s without moving the rows")
    bench.cases["per_window"] = case


def ten_n_cases(bench: Bench, changed_at_n: int) -> None:
    """The source rebuilt with ``--scale`` times the rows: the one-tenant backfill (memory) and
    the incremental transfers."""
    args = bench.args
    create_source(args.rows * args.scale, len(bench.tenants))
    bench.counts = tenant_counts()
    platform_data_cases(bench, suffix="_10n", all_tenants=False)
    case = incremental_case(bench, "incremental_10n", max_id=args.rows)
    if case["rows"] != changed_at_n:
        raise RuntimeError(f"incremental_10n changed {case['rows']} rows, incremental_n {changed_at_n}")
    incremental_case(bench, "incremental_10n_1pct")


def definitions_case(bench: Bench) -> None:
    recipients, runs = bench.args.recipients, bench.args.definitions_runs
    with PeakMemory() as memory:
        seconds = [definitions_load_seconds(recipients, MODELS_PER_RECIPIENT) for _ in range(runs)]
    assets = recipients * MODELS_PER_RECIPIENT
    bench.cases["definitions_load"] = {**stats([load for load, _ in seconds]), **memory.report,
                                       "assets": assets, "note": f"{assets} assets"}
    bench.cases["definitions_snapshot"] = {
        **stats([snapshot for _, snapshot in seconds]), **memory.report, "assets": assets,
        "note": "after the load, a code server's repository snapshot for the UI (serialized)"}


# -- the run ---------------------------------------------------------------------------------


def start_spark() -> tuple[object, float]:
    """The harness's SparkSession (the active one if there is one) and the seconds it took."""
    from transfer_platform.config.models import SparkSettings
    from transfer_platform.runtime.spark_session import get_spark_session

    start = time.perf_counter()
    spark = get_spark_session(SparkSettings(**SPARK), shared=False)  # a Spark of its own: what these measure
    return spark, time.perf_counter() - start


def warm_up(bench: Bench) -> float:
    """One untimed one-tenant transfer: the first Spark job in a JVM is seconds slower."""
    start = time.perf_counter()
    transfer_all(bench.spark, platform_config(bench.tenants, WARM_UP), NOW, [bench.one])
    drop_schemas(WARM_UP)
    return time.perf_counter() - start


def run_cases(bench: Bench, setup: dict) -> None:
    args = bench.args
    start = time.perf_counter()
    create_source(args.rows, args.tenants)
    bench.counts = tenant_counts()
    setup["source_created_s"] = round(time.perf_counter() - start, 2)
    setup["spark_warm_up_s"] = round(warm_up(bench), 2)
    floor_cases(bench)
    platform_data_cases(bench)
    dagster_cases(bench)
    dlt_cases(bench)
    per_window_case(bench)
    changed = incremental_case(bench, "incremental_n")["rows"]  # last: it changes the source
    if not args.skip_10n:
        ten_n_cases(bench, changed)
    definitions_case(bench)


def machine() -> dict:
    import dagster
    import pyspark

    return {"cpu_count": os.cpu_count(), "load_average_before": os.getloadavg(),
            "versions": {"python": sys.version.split()[0], "pyspark": pyspark.__version__,
                         "dagster": dagster.__version__, "dlt": cases_dlt.version(),
                         "postgresql": server_version()}}


def write(results: dict, path: str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict = {"parameters": vars(args), "machine": machine(), "setup": {}}
    spark, seconds = start_spark()
    results["setup"]["spark_session_start_s"] = round(seconds, 2)
    with tempfile.TemporaryDirectory(prefix="tp_bench_") as folder:
        bench = Bench(args=args, spark=spark, folder=Path(folder), tenants=tenant_names(args.tenants))
        try:
            run_cases(bench, results["setup"])
        finally:
            drop_schemas(f"{SCHEMA}_")
            drop_source()
    results["machine"]["load_average_after"] = os.getloadavg()
    results["cases"] = bench.cases
    results["targets"] = report.ratios(bench.cases)
    out = write(results, args.json)
    print(report.table(bench.cases, results["targets"]))
    print(f"setup: {results['setup']}; load average before {results['machine']['load_average_before']}, "
          f"after {results['machine']['load_average_after']}")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
