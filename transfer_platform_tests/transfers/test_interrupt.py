"""An interrupt stops a transfer; it is never taken for a failed model (issue 12).

SIGINT is how Dagster cancels a run (``transfer-platform cancel``, ``dagster dev`` stopping) and
what Ctrl-C sends. Landing in a Spark job, PySpark's handler cancels the job and raises
``KeyboardInterrupt``; in a run worker that came out of the window's read as the job's error
("Exception thrown in awaitResult": ``_collect_as_arrow`` raises it in a ``finally``, replacing the
interrupt), a DataError blaming the source: the model "failed" and the transfer went on with the
next model, so a cancelled run kept its worker, JVM and code server alive until every other model
was done (seen once stopping ``dagster dev`` during a transfer; not reproduced at will here).

Here, once the first window has committed, a SIGINT is sent while the next window's rows are read
from Spark (a watcher thread waits for the main thread to be in PySpark's ``collect``, the Spark job
that stages a window, or its ``load_stream``; hourly windows over three days). ``run_transfer`` must raise ``KeyboardInterrupt``, record no model error,
start no other model, and leave the destination holding exactly the windows it committed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from transfer_platform.config.loading import load_config
from transfer_platform.destinations.base import writer_for
from transfer_platform.destinations.delta import read_state
from transfer_platform.transfers.order import TransferOrder
from transfer_platform.transfers.runner import TransferRequest, run_transfer
from transfer_platform.tuning import Tuning
from transfer_platform_tests.support.platform import TENANTS, write_config

pytestmark = pytest.mark.integration

#: where the main thread is while a window's Spark job runs or hands its rows back
SPARK_JOB_FRAMES = {"collect", "load_stream", "toArrow"}


def test_an_interrupt_stops_the_transfer_and_fails_no_model(spark, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the lake and destination paths are relative to the configuration
    config = load_config(write_config(tmp_path, window=3600))
    writer = writer_for(config.destination("acme_delta"))
    request = TransferRequest(spark=spark, config=config, order=TransferOrder(destination="acme_delta"),
                              writer=writer, transfer_id="interrupted", now=datetime.now(UTC),
                              tuning=Tuning(run_windows=1))  # a Spark job per window (else 64 share one): one to land in
    committed, timers = [], []

    main, stop = threading.main_thread().ident, threading.Event()

    def interrupt_while_collecting() -> None:
        while not stop.is_set():
            frame = sys._current_frames().get(main)
            while frame is not None and frame.f_code.co_name not in SPARK_JOB_FRAMES:
                frame = frame.f_back
            if frame is not None:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.001)

    def on_window(model, outcome) -> None:
        committed.append((model.model_name, outcome.result.state.watermark))
        if len(committed) == 1:
            watcher = threading.Thread(target=interrupt_while_collecting, daemon=True)
            timers.append(watcher)
            watcher.start()

    summaries = []
    try:
        with pytest.raises(KeyboardInterrupt):
            summaries = run_transfer(request, config.models, on_window=on_window)
    finally:
        stop.set()
        for watcher in timers:
            watcher.join()
        writer.close()

    assert summaries == []  # run_transfer did not return
    assert {model for model, _ in committed} == {"items"}, "another model started after the interrupt"
    table = DeltaTable(str(tmp_path / "dest_acme" / "items"))
    watermark = read_state(table).watermark
    assert watermark == committed[-1][1], "a window was committed but not reported, or the reverse"
    lake = pq.read_table(tmp_path / "lake" / "items")
    lake = lake.filter(pc.equal(lake["organization_id"], TENANTS["acme"])).to_pylist()
    expected = sorted((r for r in lake if r["updated_at"] < watermark), key=lambda r: r["id"])
    rows = table.to_pyarrow_table().select(["id", "organization_id", "updated_at", "v"]).to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == expected
    assert len(expected) < len(lake), "the transfer was not stopped midway"
