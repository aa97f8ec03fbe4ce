"""A transfer into ClickHouse (an embedded chDB folder) killed with SIGKILL in the middle of a
window's commit: the window's clone of the table is made and being filled, the swap not done. A
recipient then opening the folder in another process with clickhouse-connect reads exactly the
rows and watermark of before; the next transfer removes what the dead one left and delivers the
source's rows.

chDB lets one process open a folder at a time, so every transfer runs as the real command line
in its own process group, and every read in a process of its own after it ended. The test waits
until the window's clone (``_tp_stg_<model>_<transfer>_swap``) appears in the database's metadata
folder, then kills the group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from transfer_platform_tests.support.cli import PACKAGE_ROOT, TENANT, add_rows
from transfer_platform_tests.support.clickhouse import chdb_in_another_process
from transfer_platform_tests.support.config import DESTINATION, events_model
from transfer_platform_tests.support.events import MODEL, create_events, normalize, source_rows
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.processes import group_alive

pytestmark = pytest.mark.integration

BATCH = 40_000  # rows of the window that is killed (read by the driver, no Spark job): a commit long enough to catch
TIMEOUT_SECONDS = 600  # a failure bound (a JVM starts slowly on a loaded machine), not a wait
DATABASE = "acme_ch"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    env.pop("DAGSTER_HOME", None)
    return env


def _cli(tmp_path: Path, config: Path, *args: str) -> subprocess.Popen:
    out = open(tmp_path / "cli.out", "ab")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen([sys.executable, "-m", "transfer_platform.cli", "--config", str(config), "transfer",
                             DESTINATION, *args], cwd=tmp_path, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _ran(tmp_path: Path, proc: subprocess.Popen) -> None:
    assert proc.wait(timeout=TIMEOUT_SECONDS) == 0, (tmp_path / "cli.out").read_text(errors="replace")[-3000:]


def delivered(path: Path) -> list:
    return normalize(chdb_in_another_process(
        path, f"SELECT id, organization_id, updated_at, payload FROM {DATABASE}.events FINAL"))


def watermark(path: Path):
    (row,) = chdb_in_another_process(path, f"SELECT transfer_last_updated_at FROM {DATABASE}._transfer_status "
                                           f"WHERE data_model_name = '{MODEL}'")
    return row[0].replace(tzinfo=UTC) if row[0].tzinfo is None else row[0]


def own_tables(path: Path) -> list[str]:
    return [r[0] for r in chdb_in_another_process(
        path, f"SELECT name FROM system.tables WHERE database = '{DATABASE}' AND startsWith(name, '_tp_stg_')")]


def test_a_transfer_killed_in_the_middle_of_a_commit_leaves_the_rows_and_watermark_of_before(
        pg_conn, pg_schema, tmp_path) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=10, start=now - timedelta(days=4),
             span=timedelta(hours=1), payload="before-")
    folder = tmp_path / "chdb"
    model = events_model(f"{pg_schema}.events", min_start=now - timedelta(days=5))
    del model["max_transfer_time_window_seconds"]  # one window: the whole batch committed at once
    config = tmp_path / "transfer_platform.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": [model],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": DESTINATION, "vendor": "clickhouse", "recipient": "rcpt",
                          "connection": {"path": str(folder), "database": DATABASE}}],
        "spark": {"master": "local[2]", "driver_memory": "1g"},
    }))
    first = now - timedelta(days=3)
    _ran(tmp_path, _cli(tmp_path, config, "--end", first.isoformat()))
    before = delivered(folder)
    assert len(before) == 10
    assert watermark(folder) == first
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1000, count=BATCH, start=now - timedelta(days=2),
             span=timedelta(days=1), payload="batch-")

    proc = _cli(tmp_path, config)
    metadata = folder / "metadata" / DATABASE
    try:
        launched = time.monotonic()
        while not any(n.startswith("_tp_stg_") and n.endswith("_swap.sql") for n in os.listdir(metadata)):
            assert proc.poll() is None, "the commit ended before it was caught: " + (
                tmp_path / "cli.out").read_text(errors="replace")[-3000:]
            assert time.monotonic() - launched < TIMEOUT_SECONDS
        os.killpg(proc.pid, signal.SIGKILL)  # the window's clone exists: the commit is under way
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while group_alive(proc.pid):
        assert time.monotonic() < deadline
        time.sleep(0.1)

    assert delivered(folder) == before  # another process opens the folder: exactly the rows of before
    assert watermark(folder) == first  # and their watermark
    assert any(name.endswith("_swap") for name in own_tables(folder))  # killed mid-commit: its clone left

    _ran(tmp_path, _cli(tmp_path, config))
    assert delivered(folder) == source_rows(pg_conn, pg_schema, TENANT)
    assert watermark(folder) > first
    assert own_tables(folder) == []
