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
from pathlib import Path

import dagster as dg
import psycopg
import yaml

from transfer_platform_tests.support.dagster import execute
from transfer_platform_tests.support.platform import REPO, model, write_config
from transfer_platform_tests.support.postgres import PG, pg_connect


def platform(root: Path, models: int) -> Path:
    path = write_config(root)
    raw = yaml.safe_load(path.read_text())
    if models > 2:
        raw["models"] = [{**model("items"), "model_name": f"m{i}", "source_table": ("items", "notes")[i % 2]}
                         for i in range(models)]
    else:
        raw["models"] = raw["models"][:models]
    path.write_text(yaml.safe_dump(raw))
    return path


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
    from dagster._serdes import deserialize_value

    return deserialize_value(event).user_message[:100]


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
                os.environ.update({"DAGSTER_PG_HOST": PG["host"], "DAGSTER_PG_PORT": str(PG["port"]),
                                   "DAGSTER_PG_DB": database, "DAGSTER_PG_USERNAME": PG["user"],
                                   "DAGSTER_PG_PASSWORD": "", "TRANSFER_PLATFORM_CONFIG": str(config_path)})
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
