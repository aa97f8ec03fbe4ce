"""The ``transfer_schedule`` sensor at scale: N PostgreSQL destinations (one recipient and schema
each) x M daily models on one PostgreSQL source table, evaluated as the daemon would against a
Dagster instance whose run, event log and schedule storage are PostgreSQL (a fresh database on
127.0.0.1:5432, dropped afterwards). Nothing needs to exist in the source or destinations.

    .venv/bin/python -m benchmarks.scale --recipients 1000 --models 10

Ticks: the first (every destination due, none delivered), an idle one (nothing due), then one
with ``--stored-runs`` transfer runs in storage (every other one SUCCESS) and every destination
due again. Each prints its seconds, the SQL statements and new PostgreSQL connections it made
(SQLAlchemy events), and the machine's load average.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import tempfile
import time
import uuid
import warnings
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from benchmarks.common import PG, storage_env


def raw_config(recipients: int, models: int) -> dict:
    connection = {"host": PG["host"], "port": PG["port"], "database": PG["dbname"], "username": PG["user"]}
    start = int((datetime.now(UTC) - timedelta(days=30)).replace(hour=0, minute=0, second=0,
                                                                  microsecond=0).timestamp())
    return {
        "sources": [{"name": "src", "vendor": "postgres", "connection": connection}],
        "models": [{"model_name": f"m{j}", "source_name": "src", "source_table": "scale_events",
                    "organization_column": "tenant_id", "min_start_time_epoch": start,
                    "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                                {"name_in_source": "tenant_id", "data_type": "string"},
                                {"name_in_source": "updated_at", "data_type": "timestamp",
                                 "is_last_modified": True},
                                {"name_in_source": "v", "data_type": "string"}]}
                   for j in range(models)],
        "recipients": [{"name": f"r{i}", "id_in_provider_system": f"tenant-{i}"} for i in range(recipients)],
        "destinations": [{"name": f"d{i}", "recipient": f"r{i}", "vendor": "postgres", "frequency_minutes": 0,
                          "connection": {**connection, "schema": f"scale_{i}"}} for i in range(recipients)],
    }


#: the configuration file's formats (``--format``): JSON is read ~100x faster at 10,000 recipients
FORMATS = ("yaml", "json")


def write_config(path: Path, raw: dict, form: str) -> None:
    """``raw`` into ``path`` as YAML or JSON (docs/configuration.md: a JSON object is a YAML
    document, read by the json module)."""
    path.write_text(json.dumps(raw, indent=1) if form == "json" else yaml.safe_dump(raw))


class Counter:
    """SQL statements and new DBAPI connections, process-wide (every SQLAlchemy engine)."""

    def __init__(self) -> None:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine
        from sqlalchemy.pool import Pool

        self.statements = self.connections = 0
        event.listen(Engine, "before_cursor_execute", self._statement)
        event.listen(Pool, "connect", self._connect)

    def _statement(self, *_args) -> None:
        self.statements += 1

    def _connect(self, *_args) -> None:
        self.connections += 1

    def snapshot(self) -> tuple[int, int]:
        return self.statements, self.connections


@contextmanager
def storage_database():
    import psycopg

    name = f"tp_scale_{uuid.uuid4().hex[:8]}"
    dsn = f"host={PG['host']} port={PG['port']} dbname={PG['dbname']} user={PG['user']}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def store_runs(instance, count: int, destinations: int) -> None:
    """``count`` finished transfer runs, spread over the destinations, every other one SUCCESS."""
    import dagster as dg

    from transfer_platform.orchestration.scheduling.run_tags import DESTINATION_TAG, KIND_TAG

    for k in range(count):
        status = dg.DagsterRunStatus.SUCCESS if k % 2 == 0 else dg.DagsterRunStatus.CANCELED
        instance.add_run(dg.DagsterRun(job_name="transfer", run_id=str(uuid.uuid4()), status=status,
                                       tags={KIND_TAG: "transfer", DESTINATION_TAG: f"d{k % destinations}",
                                             "transfer_platform/status": "SUCCESS" if k % 2 == 0 else "CANCELLED"}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--format", choices=FORMATS, default="yaml",
                        help="the configuration file's format (JSON is read much faster)")
    parser.add_argument("--stored-runs", type=int, default=1000)
    parser.add_argument("--without-definitions", action="store_true",
                        help="evaluate the sensor's function without building the definitions "
                             "(they take minutes at 10,000 destinations)")
    parser.add_argument("--profile", action="store_true", help="print each tick's top functions (cProfile)")
    args = parser.parse_args(argv)

    import dagster as dg

    from transfer_platform.definitions import build_definitions
    from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
    from transfer_platform.orchestration.scheduling.sensors import evaluate_schedule

    warnings.simplefilter("ignore")
    counter = Counter()
    work = Path(tempfile.mkdtemp(prefix="tp_scale_"))
    try:
        config_path = work / "transfer_platform.yaml"
        write_config(config_path, raw_config(args.recipients, args.models), args.format)
        platform = TransferPlatformResource(config_path=str(config_path))
        if args.without_definitions:
            def sensor(context):
                return evaluate_schedule(context, platform)
            print(f"{args.recipients} destinations x {args.models} models: definitions not built")
        else:
            began = time.perf_counter()
            sensor = build_definitions(str(config_path)).resolve_sensor_def("transfer_schedule")
            print(f"{args.recipients} destinations x {args.models} models: definitions built in "
                  f"{time.perf_counter() - began:.1f} s  "
                  f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
        platform.config  # noqa: B018 - loaded once, as the code server has it loaded

        with storage_database() as database:
            home = work / "home"
            home.mkdir()
            shutil.copy(Path(__file__).parents[1] / "deploy" / "dagster.production.yaml", home / "dagster.yaml")
            os.environ.update({**storage_env(database), "TRANSFER_PLATFORM_CONFIG": str(config_path)})
            with dg.DagsterInstance.from_config(str(home)) as instance:
                cursor = None

                def tick(label: str) -> dg.SensorResult:
                    nonlocal cursor
                    context = dg.build_sensor_context(instance=instance, cursor=cursor,
                                                      resources={"platform": platform})
                    statements, connections = counter.snapshot()
                    profiler = cProfile.Profile() if args.profile else None
                    began = time.perf_counter()
                    if profiler:
                        profiler.enable()
                    result = sensor(context)
                    seconds = time.perf_counter() - began
                    if profiler:
                        profiler.disable()
                        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
                    statements, connections = (a - b for a, b in zip(counter.snapshot(), (statements, connections),
                                                                     strict=True))
                    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                    print(f"{label:<34} {seconds:6.2f} s  {len(result.run_requests or []):5d} requests  "
                          f"{statements:5d} SQL statements  {connections:5d} new connections  "
                          f"(load average {load})", flush=True)
                    cursor = result.cursor
                    return result

                tick("first tick (all due, none delivered)")
                tick("idle tick (nothing due)")
                store_runs(instance, args.stored_runs, args.recipients)
                # every destination due again (yesterday's tick recorded), runs in storage
                yesterday = (datetime.now(UTC) - timedelta(days=1)).replace(hour=0, minute=0, second=0,
                                                                           microsecond=0)
                cursor = json.dumps({k: yesterday.isoformat() for k in json.loads(cursor)})
                tick(f"due again, {args.stored_runs} runs stored")
                tick("idle tick, runs stored")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
