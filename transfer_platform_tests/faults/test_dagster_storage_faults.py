"""Dagster's storage (PostgreSQL, the production settings of deploy/dagster.production.yaml) going
away during a transfer run: the instance's connections go through the proxy of the tests, which
drops or resets them in the middle of the run (once it has committed its first window), during the
backfill and during an incremental (the small platform: a Parquet lake to a Delta destination).

Afterwards, read with an instance that does not go through the proxy: the run is not left RUNNING
(it ended, or the heartbeat sweep makes it ORPHANED), the destination holds exactly the tenant's
rows up to its watermark, and the next run delivers every row.
"""

from __future__ import annotations

import shutil
import threading
import time
from datetime import UTC, datetime, timedelta

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transfer_platform.config.loading import load_config
from transfer_platform.core.lifecycle import ORPHANED_AFTER, ORPHANED_TAG
from transfer_platform.destinations.base import writer_for
from transfer_platform.orchestration.runs.lifecycle import sweep
from transfer_platform_tests.support.dagster import execute
from transfer_platform_tests.support.faults import record
from transfer_platform_tests.support.platform import REPO, delivered, lake_rows, write_config
from transfer_platform_tests.support.postgres import PG
from transfer_platform_tests.support.tcp_proxy import tcp_proxy

pytestmark = pytest.mark.integration

TABLES = ("items", "notes")


def instance_at(home, monkeypatch, database: str, port: int) -> dg.DagsterInstance:
    for key, value in {"DAGSTER_PG_HOST": PG["host"], "DAGSTER_PG_PORT": str(port), "DAGSTER_PG_DB": database,
                       "DAGSTER_PG_USERNAME": PG["user"], "DAGSTER_PG_PASSWORD": ""}.items():
        monkeypatch.setenv(key, value)
    return dg.DagsterInstance.from_config(str(home))


def add_lake_rows(lake, count: int) -> None:
    """``count`` new rows of each tenant in each table, modified just now (after the last run)."""
    from transfer_platform_tests.support.platform import TENANTS, TS

    now = datetime.now(UTC)
    schema = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", TS),
                        ("v", pa.string())])
    for table in TABLES:
        rows = [{"id": 100_000 + k * count + i, "organization_id": tenant,
                 "updated_at": now + timedelta(milliseconds=i), "v": f"{table}-new-{i}"}
                for k, tenant in enumerate(TENANTS.values()) for i in range(count)]
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), lake / table / "part-1.parquet")


def watermarks(config_path) -> dict:
    config = load_config(config_path)
    writer = writer_for(config.destination("acme_delta"))
    try:
        return {t: writer.committed_state(config.model(t)).state.watermark for t in TABLES}
    finally:
        writer.close()


@pytest.mark.parametrize(("phase", "fault"), [("backfill", "drop"), ("backfill", "reset"), ("incremental", "drop")])
def test_dagster_storage_lost_mid_run_leaves_no_run_running(tmp_path, monkeypatch, dagster_database, phase, fault):
    config_path = write_config(tmp_path)
    monkeypatch.chdir(tmp_path)  # the runs' compute logs (./storage) stay out of the checkout
    monkeypatch.setenv("TRANSFER_PLATFORM_CONFIG", str(config_path))
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.production.yaml", home / "dagster.yaml")
    with tcp_proxy(PG["host"], PG["port"]) as proxy:
        instance = instance_at(home, monkeypatch, dagster_database, proxy.port)
        if phase == "incremental":
            assert execute(config_path, instance).success
            add_lake_rows(tmp_path / "lake", 100)
        # the fault lands once the run has committed a window (mid-run, between two of its writes)
        log = tmp_path / "dest_acme" / "items" / "_delta_log"
        commits = len(list(log.glob("*.json"))) if log.exists() else 0
        stop = threading.Event()

        def strike() -> None:
            while not stop.is_set():
                if log.exists() and len(list(log.glob("*.json"))) > commits:
                    proxy.fault(fault)
                    return
                time.sleep(0.01)

        watcher = threading.Thread(target=strike, daemon=True)
        watcher.start()
        started = time.monotonic()
        try:
            result = execute(config_path, instance)
        finally:
            stop.set()
            watcher.join(10)
        took = time.monotonic() - started
        assert proxy.fired.is_set(), f"the run ended before the fault ({proxy.bytes_forwarded} bytes)"
        run_id = result.run_id
        instance.dispose()
    # read with an instance that does not go through the proxy
    direct = instance_at(home, monkeypatch, dagster_database, PG["port"])
    try:
        run = direct.get_run_by_id(run_id)
        status = run.status
        outcome = f"run {status.value} in {took:.1f} s"
        if status not in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE):
            # the run's last writes were lost with the storage: the heartbeat sweep ends it
            assert status == dg.DagsterRunStatus.STARTED, status
            swept = sweep(direct, datetime.now(UTC) + ORPHANED_AFTER + timedelta(minutes=1),
                          load_config(config_path))
            assert run_id in swept["orphaned"], swept
            run = direct.get_run_by_id(run_id)
            assert run.status == dg.DagsterRunStatus.FAILURE
            assert ORPHANED_TAG in run.tags
            outcome += " (its end lost) -> ORPHANED by the sweep"
        marks = watermarks(config_path)
        for table in TABLES:
            held = delivered(tmp_path, "acme", table)
            upto = [r for r in lake_rows(tmp_path, table) if marks[table] and r["updated_at"] < marks[table]]
            assert held == upto, (table, len(held), len(upto))
        healed = time.monotonic()
        again = execute(config_path, direct)
        recovered_in = time.monotonic() - healed
        assert again.success
        assert direct.get_run_by_id(again.run_id).status == dg.DagsterRunStatus.SUCCESS
        for table in TABLES:
            assert delivered(tmp_path, "acme", table) == lake_rows(tmp_path, table)
    finally:
        direct.dispose()
    record(f"{fault} after the run's first commit", f"Dagster storage (PostgreSQL), {phase}", outcome, recovered_in)
