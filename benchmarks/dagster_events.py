"""How much Dagster storage one ``transfer`` run writes: event_logs rows and bytes per run.

A real run of the ``transfer`` job (in process, as the orchestration tests run it) on a Dagster
instance whose storage is PostgreSQL (deploy/dagster.production.yaml), with 1 and with 10 models
(Parquet lake -> Delta); for each run: events by type and the bytes of their ``event`` column
(``pg_column_size``: as stored, after TOAST compression; ``octet_length``: the JSON text), plus the
run's row in ``runs``. First run: the backfill (4 daily windows per model); second: incremental.

    .venv/bin/python -m benchmarks.dagster_events
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from benchmarks.common import PG, pg_connect, storage_env
from transfer_platform.config.loading import load_config
from transfer_platform.definitions import build_definitions
from transfer_platform.orchestration.scheduling.run_tags import USER_TAG_PREFIX, limit_tags

REPO = Path(__file__).resolve().parents[1]
#: the lake's tenants (its rows) and the one recipient (acme, destination acme_delta)
TENANTS = {"acme": "org-acme", "globex": "org-glob'ex"}
DESTINATION = "acme_delta"
#: the lake's days of rows: from midnight DAYS days ago, so the backfill is DAYS + 1 daily windows
DAYS = 3
ROWS_PER_DAY = 4  # per tenant and table
#: a tag of the user's on every run, as the API's and the command line's runs may have
USER_TAGS = {USER_TAG_PREFIX + "team": "data"}


def write_lake(root: Path, now: datetime) -> None:
    """Tables ``items`` and ``notes``: rows of every tenant over the last :data:`DAYS` days."""
    start = (now - timedelta(days=DAYS)).replace(hour=0, minute=0, second=0, microsecond=0)
    schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()),
                        ("updated_at", pa.timestamp("us", tz="UTC")), ("v", pa.string())])
    for table in ("items", "notes"):
        rows, key = [], 0
        for day in range(DAYS):
            for i in range(ROWS_PER_DAY):
                for tenant in TENANTS.values():
                    key += 1
                    rows.append({"id": key, "organization_id": tenant,
                                 "updated_at": start + timedelta(days=day, hours=5 * i, microseconds=key),
                                 "v": f"{table}-{key}"})
        (root / table).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / table / "part-0.parquet")


def model(name: str, table: str, now: datetime) -> dict:
    start = (now - timedelta(days=DAYS)).replace(hour=0, minute=0, second=0, microsecond=0)
    return {
        "model_name": name, "source_name": "lake", "source_table": table,
        "organization_column": "organization_id", "min_start_time_epoch": int(start.timestamp()),
        "max_transfer_time_window_seconds": 86_400,
        "columns": [
            {"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
            {"name_in_source": "organization_id", "data_type": "string"},
            {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
            {"name_in_source": "v", "data_type": "string"},
        ],
    }


def platform(root: Path, models: int) -> Path:
    """``transfer_platform.yaml`` under ``root``: the Parquet lake (``root/lake``), ``models`` daily
    models of it (1: ``items``; 2: ``items``, ``notes``; more: ``m<i>`` over either table) and the
    Delta destination :data:`DESTINATION` (``root/dest_acme``)."""
    now = datetime.now(UTC)
    write_lake(root / "lake", now)
    if models > 2:
        entries = [model(f"m{i}", ("items", "notes")[i % 2], now) for i in range(models)]
    else:
        entries = [model("items", "items", now), model("notes", "notes", now)][:models]
    config = {
        "sources": [{"name": "lake", "vendor": "parquet", "connection": {"path": "lake"},
                     "lookback_window": 0, "max_concurrent_transfers": 10}],
        "models": entries,
        "recipients": [{"name": "acme", "id_in_provider_system": TENANTS["acme"]}],
        "destinations": [{"name": DESTINATION, "recipient": "acme", "vendor": "delta",
                          "connection": {"path": "dest_acme"}}],
        "spark": {"master": "local[1]", "driver_memory": "512m"},
    }
    path = root / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def execute(config_path: Path, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """A run of the ``transfer`` job over every model, in this process, tagged as the run
    coordinator tags a queued transfer (plus :data:`USER_TAGS`)."""
    config = load_config(config_path)
    tags = {**limit_tags(config, DESTINATION, config.models, "transfer"), **USER_TAGS}
    job = build_definitions(str(config_path)).resolve_job_def("transfer")
    return job.execute_in_process(run_config={"ops": {"run_transfer": {"config": {"destination": DESTINATION}}}},
                                  instance=instance, tags=tags, raise_on_error=False)


def measure(database: str, run_id: str) -> dict:
    with psycopg.connect(**{**PG, "dbname": database}) as conn:
        by_type = conn.execute(
            "SELECT coalesce(dagster_event_type, 'log message'), count(*), sum(pg_column_size(event)),"
            " sum(octet_length(event)) FROM event_logs WHERE run_id = %s GROUP BY 1 ORDER BY 3 DESC",
            (run_id,)).fetchall()
        run_row = conn.execute("SELECT pg_column_size(r.*) FROM runs r WHERE run_id = %s", (run_id,)).fetchone()[0]
        tags = conn.execute("SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM run_tags t"
                            " WHERE run_id = %s", (run_id,)).fetchone()
        messages = conn.execute(
            "SELECT event FROM event_logs WHERE run_id = %s AND dagster_event_type IS NULL", (run_id,)).fetchall()
    return {"events": sum(r[1] for r in by_type), "stored_bytes": sum(r[2] for r in by_type),
            "json_bytes": sum(r[3] for r in by_type), "run_row_bytes": run_row,
            "tags": tags[0], "tag_bytes": tags[1],
            "by_type": {r[0]: {"count": r[1], "stored_bytes": r[2], "json_bytes": r[3]} for r in by_type},
            "log_messages": [_message(m) for (m,) in messages]}


def disk(database: str) -> dict[str, int]:
    """pg_total_relation_size (table, indexes, TOAST) of the tables a run writes."""
    with psycopg.connect(**{**PG, "dbname": database}) as conn:
        return {t: conn.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0]
                for t in ("event_logs", "runs", "run_tags", "asset_keys", "asset_event_tags",
                          "asset_check_executions", "dynamic_partitions", "snapshots")}


def _message(event: str) -> str:
    return dg.deserialize_value(event).user_message[:100]


def main() -> None:
    out = {}
    for models in (1, 10):
        database = f"tp_events_{uuid.uuid4().hex[:8]}"
        with pg_connect(autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')
        try:
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                config_path = platform(root, models)
                home = root / "home"
                home.mkdir()
                shutil.copy(REPO / "deploy" / "dagster.production.yaml", home / "dagster.yaml")
                os.environ.update({**storage_env(database), "TRANSFER_PLATFORM_CONFIG": str(config_path),
                                   "DAGSTER_HOME": str(home)})  # the step logs go under it, as in production
                with dg.DagsterInstance.from_config(str(home)) as instance:
                    for label in ("backfill", "incremental", "incremental", "incremental"):
                        before = disk(database)
                        result = execute(config_path, instance)
                        assert result.success, label
                        out[f"{models} models, {label} {result.run_id[:8]}"] = {
                            **measure(database, result.run_id),
                            "disk_bytes_by_table": {t: disk(database)[t] - before[t] for t in before}}
        finally:
            with pg_connect(autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
