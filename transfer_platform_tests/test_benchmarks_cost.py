"""The end-to-end benchmark's CPU accounting (``benchmarks/cost.py``) counts each part where it
belongs: a backend's CPU by the table its queries name, the client side's through a process
that detached from it (as the shared Spark server does) when it carries the run's marker. The
CPU amounts are the work these tests make, not speeds: nothing about the machine is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benchmarks.common import SCHEMA, pg_connect
from benchmarks.cost import Cost

pytestmark = pytest.mark.integration

#: a query burning ~0.3 CPU-s in its backend, naming a table of the run in a comment
BURN = "SELECT count(*) FROM generate_series(1, 1000000) g WHERE md5(g::text) < 'a' -- {}"


def test_backend_cpu_goes_to_the_source_or_the_destination_by_the_table_it_names():
    with pg_connect(autocommit=True) as source, pg_connect(autocommit=True) as destination, Cost() as cost:
        source.execute(BURN.format(f"{SCHEMA}.events"))
        # naming both, as a destination's CREATE TABLE ... (LIKE <source>) does
        destination.execute(BURN.format(f"{SCHEMA}_e2e_0.events (LIKE {SCHEMA}.events)"))
    assert cost.report["source"] >= 0.1, cost.report
    assert cost.report["destination"] >= 0.1, cost.report
    assert cost.report["server"] >= cost.report["source"] + cost.report["destination"] - 0.1, cost.report


def test_a_detached_process_with_the_marker_is_the_client_sides(tmp_path):
    ready = tmp_path / "burned"
    burn = ("import sys, time; from pathlib import Path; end = time.process_time() + 0.3\n"
            "while time.process_time() < end: pass\n"
            f"Path({str(ready)!r}).write_text('done'); time.sleep(60)")
    # the launcher starts the burner in a session of its own and ends: the burner is no descendant
    # (its output elsewhere: a burner holding the launcher's pipe would keep subprocess.run waiting)
    launcher = (f"import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {burn!r}], "
                "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)")
    marker = f"TP_BENCH_COST_TEST={tmp_path}"
    env = {**os.environ, "TP_BENCH_COST_TEST": str(tmp_path)}
    with Cost(marker) as cost:
        pid = int(subprocess.run([sys.executable, "-c", launcher], env=env, capture_output=True, text=True,
                                 check=True).stdout)
        try:
            deadline = time.monotonic() + 120
            while not ready.exists() and time.monotonic() < deadline:  # the burner has burned, and lives
                time.sleep(0.05)
        finally:
            os.kill(pid, 9)
    assert ready.exists()
    assert cost.report["client"] >= 0.3, cost.report  # the burner's 0.3 s, the launcher's start besides
