"""Two transfers of one model to one destination never interleave, whoever started them: the
writer holds the model's lock in the destination itself (a PostgreSQL session advisory lock; a
Delta destination's ``flock`` on ``_tp_locks/<model>.lock`` in its folder), not only in Dagster's
run queue. And a transfer cleans up only staging that no live transfer owns.

- In one process, the test's own session holds the lock the way a live transfer in another
  process does (with its staging table): a transfer waits, then is refused naming the holder, and
  leaves that staging table and the destination alone; once the lock is released it runs and
  cleans up.
- Two real ``transfer-platform transfer`` processes started at once on a large batch, into
  PostgreSQL and into Delta: the second plans only once the first is done (or is refused with the
  message, if the first takes longer than the wait); the destination ends equal to the source,
  with no staging left.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import staging_suffix
from transfer_platform.destinations.postgres import STAGING_PREFIX
from transfer_platform.destinations.postgres.dialect import model_lock_key
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.cli import PACKAGE_ROOT, TENANT, add_rows, write_config
from transfer_platform_tests.support.destinations import ONE_ROW_PER_KEY
from transfer_platform_tests.support.events import MODEL, create_events, source_rows
from transfer_platform_tests.support.postgres import (
    destination_rows,
    pg_connect,
    status_row,
    tables_in,
)
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

WAIT_SECONDS = 600  # a failure bound: two JVMs start on a possibly loaded 2-core machine


def test_a_transfer_waits_for_the_models_lock_then_is_refused_and_touches_nothing(
        spark, pg_conn, pg_schema, dst_schema, tmp_path, monkeypatch):
    now = datetime.now(UTC).replace(microsecond=0)
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=50, start=now - timedelta(hours=1),
             span=timedelta(minutes=30), payload="v1 ")
    config = load_config(write_config(tmp_path / "tp.yaml", source_schema=pg_schema, dst_schema=dst_schema,
                                      min_start=now - timedelta(hours=2), window_seconds=None))
    assert transfer(spark, config, now - timedelta(minutes=10), "t1").status == "SUCCESS"
    before_rows, before_status = destination_rows(pg_conn, dst_schema), status_row(pg_conn, dst_schema)

    # a live transfer elsewhere: its session holds the model's lock and it is loading its staging
    live_staging = STAGING_PREFIX + staging_suffix(MODEL, "live")
    pg_conn.execute(f'CREATE UNLOGGED TABLE "{dst_schema}"."{live_staging}" (id bigint)')
    with pg_connect(autocommit=True) as live:
        live.execute("SET application_name = 'transfer_platform live-one'")
        live.execute("SELECT pg_advisory_lock(%s)", (model_lock_key("test", dst_schema, MODEL),))
        refused = transfer(spark, config, now, "t2", tuning=Tuning(lock_wait_seconds=1))
        assert refused.status == "ERROR"
        assert "another transfer of this model to this destination is running" in refused.error
        assert "transfer_platform live-one" in refused.error
        assert live_staging in tables_in(pg_conn, dst_schema)  # a live transfer's staging: kept
        assert destination_rows(pg_conn, dst_schema) == before_rows
        assert status_row(pg_conn, dst_schema) == before_status

    # its session ended (the transfer died): the next transfer runs and drops what it left
    after = transfer(spark, config, now, "t3")
    assert after.status == "SUCCESS", after.error
    assert tables_in(pg_conn, dst_schema) == ["_transfer_status", MODEL]


def delta_config(path: Path, root: Path) -> Path:
    """The same configuration file with a Delta destination at ``root`` instead."""
    raw = yaml.safe_load(path.read_text())
    raw["destinations"][0] = {**{k: v for k, v in raw["destinations"][0].items()
                                 if k not in ("connection", "max_concurrent_queries_per_transfer")},
                              "vendor": "delta", "connection": {"path": str(root)}}
    path.write_text(yaml.safe_dump(raw))
    return path


def delta_rows(root: Path) -> list:
    from deltalake import DeltaTable

    rows = DeltaTable(str(root / MODEL)).to_pyarrow_table().to_pylist()
    return sorted((r["id"], r["organization_id"], r["updated_at"], r["payload"]) for r in rows)


def test_a_delta_transfer_waits_for_the_models_lock_file_then_is_refused_and_touches_nothing(
        spark, pg_conn, pg_schema, tmp_path, monkeypatch):
    from deltalake import DeltaTable

    now = datetime.now(UTC).replace(microsecond=0)
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=50, start=now - timedelta(hours=1),
             span=timedelta(minutes=30), payload="v1 ")
    root = tmp_path / "delta"
    config = load_config(delta_config(write_config(
        tmp_path / "tp.yaml", source_schema=pg_schema, dst_schema="unused", min_start=now - timedelta(hours=2),
        window_seconds=None), root))
    assert transfer(spark, config, now - timedelta(minutes=10), "t1").status == "SUCCESS"
    version = DeltaTable(str(root / MODEL)).version()

    # a live transfer elsewhere holds the model's lock file (another open file: flock conflicts)
    with open(root / "_tp_locks" / f"{MODEL}.lock", "r+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.truncate()
        held.write(json.dumps({"transfer_id": "live-one", "host": "h", "pid": 1, "since": "then"}))
        held.flush()
        refused = transfer(spark, config, now, "t2", tuning=Tuning(lock_wait_seconds=1))
        assert refused.status == "ERROR"
        assert "another transfer of this model to this destination is running" in refused.error
        assert "transfer live-one, process 1 on h" in refused.error
        assert DeltaTable(str(root / MODEL)).version() == version  # not a commit more

    after = transfer(spark, config, now, "t3")  # the holder is gone: it runs
    assert after.status == "SUCCESS", after.error
    assert delta_rows(root) == source_rows(pg_conn, pg_schema, TENANT)


def start_cli(config_path: Path, tmp_path: Path, name: str) -> subprocess.Popen:
    env = {**os.environ, "TRANSFER_PLATFORM_LOG_LEVEL": "INFO"}
    env.pop("DAGSTER_HOME", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
    with open(tmp_path / f"{name}.out", "wb") as out, open(tmp_path / f"{name}.err", "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "transfer_platform.cli", "--config", str(config_path),
                                 "transfer", "dst"], cwd=tmp_path, env=env, stdout=out, stderr=err,
                                start_new_session=True)


def phase_times(log: str, phase: str) -> list[datetime]:
    """When each phase line was written (the command line's log format starts with the time)."""
    return [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")  # noqa: DTZ007 - one clock, compared
            for line in log.splitlines() if f'"phase": "{phase}"' in line]


@pytest.mark.parametrize("vendor", ONE_ROW_PER_KEY)
def test_two_transfer_commands_at_once_never_interleave(spark, pg_conn, pg_schema, dst_schema, tmp_path, vendor):
    """Both start together; whichever takes the model's lock first moves the batch, and the other
    plans only after the first's last step (or is refused with the reason if the first outlasts
    its wait). Without the lock both would plan, stage and merge at the same time."""
    now = datetime.now(UTC).replace(microsecond=0)
    create_events(pg_conn, pg_schema)
    add_rows(pg_conn, pg_schema, tenant=TENANT, first_id=1, count=200_000, start=now - timedelta(hours=1),
             span=timedelta(minutes=50), payload="batch ")
    config_path = write_config(tmp_path / "tp.yaml", source_schema=pg_schema, dst_schema=dst_schema,
                               min_start=now - timedelta(hours=2), window_seconds=None)
    last_step = "clean up"
    if vendor == "delta":
        config_path, last_step = delta_config(config_path, tmp_path / "delta"), "load"
    processes = {name: start_cli(config_path, tmp_path, name) for name in ("a", "b")}

    codes = {name: proc.wait(timeout=WAIT_SECONDS) for name, proc in processes.items()}
    logs = {name: (tmp_path / f"{name}.err").read_text() for name in processes}
    planned = {name: phase_times(log, "plan") for name, log in logs.items()}
    first = min((name for name in planned if planned[name]), key=lambda name: planned[name][0])
    second = "b" if first == "a" else "a"
    assert codes[first] == 0, logs[first][-3000:]
    assert phase_times(logs[first], last_step)
    if codes[second] == 0:  # it waited for the lock: it planned after the first's last step
        assert planned[second][0] >= phase_times(logs[first], last_step)[-1], (logs[first], logs[second])
    else:  # the first outlasted the wait: refused, with the reason, before planning anything
        assert "another transfer of this model to this destination is running" in logs[second]
        assert not planned[second]
    expected = source_rows(pg_conn, pg_schema, TENANT)
    if vendor == "delta":
        assert delta_rows(tmp_path / "delta") == expected
        return
    assert destination_rows(pg_conn, dst_schema) == expected
    assert tables_in(pg_conn, dst_schema) == ["_transfer_status", MODEL]
    assert status_row(pg_conn, dst_schema)["high_watermark"] == max(r[2] for r in expected)


@pytest.mark.parametrize("round_", range(3))
def test_transfers_of_several_models_starting_at_once_on_a_new_destination_all_start(pg_schema, new_schema,
                                                                                    round_) -> None:
    """Before any model's lock, each transfer makes sure the destination's status table exists
    (``CREATE TABLE IF NOT EXISTS``); transfers of six models starting at once on a new schema
    race there (PostgreSQL refuses all but one with a duplicate type), and every one must start."""
    import threading

    from transfer_platform.config.parsing import parse_config
    from transfer_platform.destinations.base import writer_for
    from transfer_platform_tests.support.config import DESTINATION, events_model
    from transfer_platform_tests.support.events import day
    from transfer_platform_tests.support.postgres import pg_connection_config

    models = [{**events_model(f"{pg_schema}.events", min_start=day(1, 1)), "model_name": f"m{i}"} for i in range(6)]
    config = parse_config({
        "sources": [{"name": "src", "vendor": "postgres", "connection": pg_connection_config()}],
        "models": models, "recipients": [{"name": "rcpt", "id_in_provider_system": "acme"}],
        "destinations": [{"name": DESTINATION, "recipient": "rcpt", "vendor": "postgres",
                          "connection": pg_connection_config(new_schema())}],
    }, now=day(2, 1))
    start, errors = threading.Barrier(len(models)), []

    def prepare(model) -> None:
        writer = writer_for(config.destination(DESTINATION))
        try:
            writer.conn.execute("SELECT 1")  # connected before the start: they all race
            start.wait()
            writer.prepare(model, f"t-{model.model_name}")
        except Exception as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(exc)
        finally:
            writer.close()

    threads = [threading.Thread(target=prepare, args=(model,)) for model in config.models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
