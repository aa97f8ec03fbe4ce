"""Scale-out: the Spark Connect server in front of a Spark standalone cluster (a master and a
worker started from PySpark's own ``bin/spark-class`` on 127.0.0.1), transfers run by the command
line as a user runs them (``spark.remote`` in the file). The reads and the staging COPY's Python
functions run in the cluster's executor, not in the server's JVM or in the command's process.

Expectations come from the seeds: a backfill delivers every row of the recipient's tenant and no
other; the next transfer reads from the greatest last-modified value delivered minus the lookback
(change-detection seed: "query the source for slightly earlier data than the most recently
transferred row"), so a row committed late with a value just before that one is delivered too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from benchmarks.spark_server import spark_connect_server
from transfer_platform.runtime.spark_session import REMOTE_ENV_VAR
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import (
    LOOKBACK,
    create_events,
    insert_rows,
    make_rows,
    source_rows,
)
from transfer_platform_tests.support.postgres import destination_rows, pg_connection_config
from transfer_platform_tests.support.spark_server import standalone_cluster

pytestmark = pytest.mark.integration

TENANT, OTHER = "tenant-a", "tenant-b"
CLI = str(Path(sys.executable).with_name("transfer-platform"))


def cli_transfer(config: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (REMOTE_ENV_VAR, "DAGSTER_HOME")}
    done = subprocess.run([CLI, "--config", str(config), "transfer", DESTINATION], capture_output=True,
                          text=True, env=env, check=False, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_a_backfill_and_an_incremental_through_a_connect_server_on_a_standalone_cluster(
        tmp_path: Path, pg_conn, pg_schema: str, dst_schema: str) -> None:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days = [today - timedelta(days=d) for d in range(4, 0, -1)]
    create_events(pg_conn, pg_schema)
    insert_rows(pg_conn, pg_schema, make_rows([TENANT, OTHER], 300, days, seed=13))
    with standalone_cluster(tmp_path / "cluster", cores=2, memory="1g") as cluster, \
            spark_connect_server(tmp_path / "server", master=cluster.master_url, driver_memory="512m",
                                 conf={"spark.executor.memory": "768m", "spark.cores.max": "2"}) as server:
        config = tmp_path / "transfer_platform.yaml"
        config.write_text(yaml.safe_dump({
            "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config(),
                         "max_concurrent_queries_per_transfer": 2}],
            "models": [events_model(f"{pg_schema}.events", min_start=days[0])],
            "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
            "destinations": [{"name": DESTINATION, "vendor": "postgres", "recipient": "rcpt",
                              "connection": pg_connection_config(dst_schema)}],
            "spark": {"remote": server.url},
        }))

        backfill = cli_transfer(config)
        assert backfill["status"] == "SUCCESS", backfill
        assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)

        # changes: rows updated now, a new row, and a row committed late whose value lies just
        # before the greatest value delivered (inside the 30 s lookback)
        delivered_max = max(r[2] for r in source_rows(pg_conn, pg_schema, TENANT))
        now = datetime.now(UTC) - timedelta(seconds=2)
        pg_conn.execute(f'UPDATE "{pg_schema}".events SET payload = %s, updated_at = %s '
                        "WHERE organization_id = %s AND id %% 10 = 0", ("changed", now, TENANT))
        insert_rows(pg_conn, pg_schema, [(100_001, TENANT, now, "new"), (100_002, OTHER, now, "other's"),
                                         (100_003, TENANT, delivered_max - LOOKBACK / 2, "late")])
        incremental = cli_transfer(config)
        assert incremental["status"] == "SUCCESS", incremental
        assert destination_rows(pg_conn, dst_schema) == source_rows(pg_conn, pg_schema, TENANT)
        assert {r[0] for r in destination_rows(pg_conn, dst_schema)} >= {100_001, 100_003}

        # the work ran in the cluster: the server registered with the master as an application,
        # whose executor the worker launched (its folder in the worker's work dir)
        assert "Registering app transfer_platform Spark Connect server" in cluster.master_log.read_text()
        executors = list((tmp_path / "cluster" / "work").glob("app-*/*/stderr"))
        assert executors, "no executor was launched on the worker"
