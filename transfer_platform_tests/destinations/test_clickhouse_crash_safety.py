"""A transfer into ClickHouse (an embedded chDB folder) killed with SIGKILL in the middle of a
window's commit, after earlier windows of it committed: the window's clone of the table is made
and being filled, the swap not done. A recipient then opening the folder in another process with
clickhouse-connect reads exactly the rows and watermark the earlier windows committed; the next
transfer removes what the dead one left and delivers the source's rows.

chDB lets one process open a folder at a time, so every transfer runs as the real command line
in its own process group, and every read in a process of its own after it ended. The test waits
until the table's metadata file (``metadata/<database>/events.sql``, its comment the state) shows
the window of the first rows committed and a window's clone (``_tp_stg_<model>_<transfer>_swap``)
exists: a later window, holding rows of the batch, is being committed; then it kills the group
(and, if the commit ended before the kill landed, does it again into a new folder).
What the reader must find is exact against the watermark it reads: every source row before it,
no row after it.
"""

from __future__ import annotations

import os
import re
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
ATTEMPTS = 5  # transfers killed, each into a folder of its own, until one is caught mid-commit


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
    before = source_rows(pg_conn, pg_schema, TENANT)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1000, count=BATCH, start=now - timedelta(days=2),
             span=timedelta(days=1), payload="batch-")
    model = events_model(f"{pg_schema}.events", min_start=now - timedelta(days=5))  # daily windows
    first_rows_done_us = int((now - timedelta(days=4) + timedelta(hours=1)).timestamp()) * 1_000_000

    # the kill lands a few milliseconds after the clone is seen: on a busy machine the commit may
    # end first (nothing left to find: the rows and watermark are still checked), and the
    # transfer is killed again into a new folder, until one is caught mid-commit
    for attempt in range(ATTEMPTS):
        folder = tmp_path / f"chdb_{attempt}"
        config = tmp_path / f"transfer_platform_{attempt}.yaml"
        config.write_text(yaml.safe_dump({
            "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
            "models": [model],
            "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
            "destinations": [{"name": DESTINATION, "vendor": "clickhouse", "recipient": "rcpt",
                              "connection": {"path": str(folder), "database": DATABASE}}],
            "spark": {"master": "local[2]", "driver_memory": "1g"},
        }))
        _kill_while_committing(tmp_path, config, folder / "metadata" / DATABASE, first_rows_done_us)

        committed = watermark(folder)  # another process opens the folder
        assert now - timedelta(days=4) < committed < now - timedelta(days=1)
        held = delivered(folder)
        assert held == [row for row in source_rows(pg_conn, pg_schema, TENANT) if row[2] < committed]  # exact
        assert set(before) <= set(held)
        if any(name.endswith("_swap") for name in own_tables(folder)):  # killed mid-commit: its clone left
            break
    else:
        pytest.fail(f"the window's commit ended before the kill landed in all {ATTEMPTS} attempts")

    _ran(tmp_path, _cli(tmp_path, config))
    assert delivered(folder) == source_rows(pg_conn, pg_schema, TENANT)
    assert watermark(folder) > committed
    assert own_tables(folder) == []


def _kill_while_committing(tmp_path: Path, config: Path, metadata: Path, first_rows_done_us: int) -> None:
    """Start the transfer; SIGKILL its process group once the first rows' window is committed and
    a later window's clone exists (its commit under way)."""
    proc = _cli(tmp_path, config)

    def fourth_window_committing() -> bool:
        if not metadata.is_dir():
            return False
        names = os.listdir(metadata)
        if not any(n.startswith("_tp_stg_") and n.endswith("_swap.sql") for n in names):
            return False
        try:
            found = re.search(r'"watermark_us": (\d+)', (metadata / f"{MODEL}.sql").read_text())
        except OSError:
            return False
        return found is not None and int(found.group(1)) >= first_rows_done_us

    try:
        launched = time.monotonic()
        while not fourth_window_committing():
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
