"""What the tests of a destination's load of a window into an empty table share: the model's
columns, its windows' rows as Arrow, the ``stage`` records, the refusals every such window must
make by name, and a transfer run in a process of its own that is killed once it says it is
half-way."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import WindowLoad, arrow_schema
from transfer_platform.errors import DataError, DuplicateKey
from transfer_platform_tests.support.cli import PACKAGE_ROOT
from transfer_platform_tests.support.processes import group_alive

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

START = datetime(2025, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
KILL_TIMEOUT_SECONDS = 300  # a failure bound on a loaded machine, not a wait

COLUMNS = [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
           {"name_in_source": "organization_id", "data_type": "string"},
           {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True},
           {"name_in_source": "payload", "data_type": "string"},
           {"name_in_source": "born", "data_type": "date"},
           {"name_in_source": "gone", "data_type": "boolean", "is_deleted_marker": True}]


def model_entry(model_name: str, *, keep_deleted_rows: bool = False, json_payload: bool = False) -> dict:
    """The model, its windows written through the writer (the source is named, never read)."""
    columns = [dict(c, data_type="json") if json_payload and c["name_in_source"] == "payload" else c
               for c in COLUMNS]
    return {"model_name": model_name, "source_name": "src", "source_table": "unread.events",
            "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
            "min_start_time_epoch": int(START.timestamp()), "keep_deleted_rows": keep_deleted_rows,
            "columns": columns}


def rows(model, ids, *, at: datetime = START + timedelta(hours=1), payload: str = "v1", gone=()) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": k, "organization_id": "acme", "updated_at": at + timedelta(seconds=n), "payload": f"{payload}-{k}",
          "born": date(2020, 1, 1), "gone": k in gone} for n, k in enumerate(ids)], schema=arrow_schema(model))


def window(model, day: int, transfer_id: str, *, into_refresh: bool = False) -> WindowLoad:
    return WindowLoad(model, transfer_id, Window(START + day * DAY, START + (day + 1) * DAY), START,
                      into_refresh=into_refresh)


@pytest.fixture
def stage_records(caplog) -> Callable[[], list[dict]]:
    """The ``stage`` phase records logged so far."""
    caplog.set_level(logging.INFO, logger="transfer_platform.phases")

    def records() -> list[dict]:
        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "transfer_platform.phases"]
        return [r for r in lines if r["phase"] == "stage"]

    return records


def refuses_bad_windows(writer, model, *, into_refresh: bool) -> None:
    """A key twice, a NULL key, a NULL last-modified value in a window into an empty table:
    each refused by name."""
    twice = pa.concat_tables([rows(model, range(1, 2001)), rows(model, [1500], payload="again")])
    with pytest.raises(DuplicateKey, match=r"duplicate primary key in one batch: id=1500") as refused:
        writer.write_arrow(twice, window(model, 0, "t1", into_refresh=into_refresh))
    assert refused.value.key_values == {"id": 1500}

    null_key = rows(model, [1, 2]).set_column(0, "id", pa.array([1, None], pa.int64()))
    with pytest.raises(DataError, match=r"NULL primary key value \(id\)"):
        writer.write_arrow(null_key, window(model, 0, "t1", into_refresh=into_refresh))

    null_lm = rows(model, [1, 2]).set_column(2, "updated_at", pa.array([None, START], pa.timestamp("us", tz="UTC")))
    with pytest.raises(DataError, match=r"NULL last-modified value \(updated_at\) at key id=1"):
        writer.write_arrow(null_lm, window(model, 0, "t1", into_refresh=into_refresh))


def killed_when_marked(folder: Path, script: str, *args: str) -> str:
    """Run the Python ``script`` (given ``args`` and then the path of a marker file) as its own
    process group; SIGKILL it once it has written the marker (it then waits forever); returns the
    marker's text."""
    marker = folder / "marker"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    with open(folder / "out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", script, *args, str(marker)], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        launched = time.monotonic()
        while not marker.exists():
            assert proc.poll() is None, (folder / "out").read_text()[-3000:]
            assert time.monotonic() - launched < KILL_TIMEOUT_SECONDS, "the moment to kill it never came"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    return marker.read_text()
