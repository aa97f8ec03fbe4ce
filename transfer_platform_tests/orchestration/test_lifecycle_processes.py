"""Transfer statuses that need real worker processes: PENDING, RUNNING, CANCELLED, KILLED, ORPHANED.

One real ``dagster-daemon`` (see :func:`test_daemon.running_platform`) for the module runs transfers
enqueued as ``transfer-platform transfer --enqueue`` does. Both destinations are disabled, so the
sensor enqueues nothing of its own. The transfers acted on must still be running when the test acts,
however slow the machine: with minute windows over three days (4,320 windows, about 15 minutes of
work) none can end first, and no passing run waits for that, since each is cancelled or killed.
(With hourly windows, about 20 s, a loaded machine let the transfer to be cancelled finish before
`transfer-platform cancel` arrived: "SUCCESS", not KILLED.)

- ``killed`` (acme_delta) runs; ``transfer-platform cancel`` stops it: the run ends CANCELED with a
  start time, and ``transfer-platform transfers --json`` shows KILLED;
- ``pending`` (acme_delta too, max_concurrent_transfers 1) waits behind it, PENDING; cancelled
  while queued it is CANCELLED, with no start time;
- ``orphaned`` (globex_delta) runs, then the control plane loses it: the process that started it
  (the run launcher's preloaded parent) and the run worker (with its Spark JVM) are SIGKILLed, as
  when their machine dies. Dagster
  still says STARTED and the heartbeat stops; the sweep, run with a clock 4 minutes ahead
  (ORPHANED_AFTER is 3 minutes), fails and tags it, and ``transfers --json`` shows ORPHANED with
  submitted/started/ended times;
- a run worker SIGKILLed while the process that started it lives is failed by that process (it
  watches its children, as Dagster's code server does): the sweep reads its engine event and
  reports ORPHANED too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from transfer_platform.config.loading import load_config
from transfer_platform.core.lifecycle import HEARTBEAT_TAG, ORPHANED_AFTER, ORPHANED_TAG
from transfer_platform.orchestration.runs.lifecycle import sweep
from transfer_platform.orchestration.runs.transfers import TransferFilter, list_transfers
from transfer_platform.orchestration.scheduling.run_tags import STATUS_TAG
from transfer_platform_tests.support.daemon import RunningPlatform, running_platform
from transfer_platform_tests.support.dagster import RUN, graphql, last_check, workspace
from transfer_platform_tests.support.processes import alive

pytestmark = pytest.mark.integration

PID = re.compile(r"\(pid: (\d+)\)")


def transfers_json(platform: RunningPlatform) -> dict[str, dict]:
    result = platform.cli("transfers", "--json")
    assert result.returncode == 0, result.stderr
    return {t["id"]: t for t in json.loads(result.stdout)}


def worker_pid(platform: RunningPlatform, run_id: str) -> int:
    """The run worker's pid, from the engine event the worker writes when it starts its steps."""
    for entry in platform.instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        found = PID.search(entry.message or "")
        if found and "Executing steps in process" in entry.message:
            return int(found.group(1))
    raise AssertionError(f"no worker pid among the engine events of {run_id}")


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found


def kill_family(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlatform]:
    destinations = {"acme": {"is_enabled": False}, "globex": {"is_enabled": False}}
    with pytest.MonkeyPatch.context() as patch, running_platform(
            tmp_path_factory.mktemp("lifecycle"), patch, destinations=destinations, window=60) as running:
        yield running


def running_with_heartbeat(platform: RunningPlatform, run_id: str) -> bool:
    run = platform.instance.get_run_by_id(run_id)
    assert run.status in (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING,
                          dg.DagsterRunStatus.STARTED), f"{run_id} ended early: {run.status}"
    return run.status == dg.DagsterRunStatus.STARTED and HEARTBEAT_TAG in run.tags


def test_worker_killed_under_a_live_parent_is_orphaned(platform: RunningPlatform) -> None:
    instance = platform.instance
    run_id = platform.enqueue("globex_delta")
    platform.wait_for("a running transfer with a heartbeat", lambda: running_with_heartbeat(platform, run_id), 240)
    pid = worker_pid(platform, run_id)
    family = [pid, *descendants(pid)]
    kill_family(family)
    platform.wait_for("the worker and its Spark JVM to go", lambda: not any(map(alive, family)), 60)
    platform.wait_for("the run to end", lambda: instance.get_run_by_id(run_id).is_finished, 60)
    sweep(instance, datetime.now(UTC) + ORPHANED_AFTER + timedelta(minutes=1))
    (listed,) = [t for t in list_transfers(instance, TransferFilter()) if t["id"] == run_id]
    assert listed["status"] == "ORPHANED", listed["status"]
    assert instance.get_run_by_id(run_id).tags[STATUS_TAG] == "ORPHANED"  # shown in the runs list


def test_killed_cancelled_and_orphaned_transfers(platform: RunningPlatform) -> None:
    instance = platform.instance
    killed = platform.enqueue("acme_delta")
    pending = platform.enqueue("acme_delta")
    orphaned = platform.enqueue("globex_delta")
    platform.wait_for("two running transfers with a heartbeat",
                      lambda: running_with_heartbeat(platform, killed)
                      and running_with_heartbeat(platform, orphaned), 240)
    listed = transfers_json(platform)
    assert (listed[killed]["status"], listed[pending]["status"], listed[orphaned]["status"]) == (
        "RUNNING", "PENDING", "RUNNING")
    assert listed[killed]["started_at"]
    assert not listed[killed]["ended_at"]
    assert not listed[pending]["started_at"]

    # CANCELLED: a pending transfer cancelled before it starts
    result = platform.cli("cancel", pending)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{pending}: CANCELLED"
    # KILLED: a running transfer stopped by the user (RUNNING while it stops, then KILLED)
    killed_worker = worker_pid(platform, killed)
    result = platform.cli("cancel", killed)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() in (f"{killed}: RUNNING", f"{killed}: KILLED")
    platform.wait_for("the cancelled transfer to stop",
                      lambda: instance.get_run_by_id(killed).status == dg.DagsterRunStatus.CANCELED, 120)
    platform.wait_for("the cancelled transfer's worker to exit", lambda: not alive(killed_worker), 30)
    killed_beat = instance.get_run_by_id(killed).tags[HEARTBEAT_TAG]

    # ORPHANED: the process that started the run and the run worker die together
    assert running_with_heartbeat(platform, orphaned)
    pid = worker_pid(platform, orphaned)
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert b"transfer_platform.orchestration.speed.run_worker" in Path(f"/proc/{parent}/cmdline").read_bytes(), (
        "the worker's parent is not the run launcher's preloaded parent")
    family = [parent, pid, *descendants(pid)]
    kill_family(family)
    platform.wait_for("the worker's parent, the worker and its Spark JVM to go",
                      lambda: not any(map(alive, family)), 60)
    last_beat = instance.get_run_by_id(orphaned).tags[HEARTBEAT_TAG]
    time.sleep(3 * 2)  # three heartbeat intervals: no beat, and nobody noticed
    assert instance.get_run_by_id(killed).tags[HEARTBEAT_TAG] == killed_beat, "the killed transfer still beats"
    run = instance.get_run_by_id(orphaned)
    assert run.status == dg.DagsterRunStatus.STARTED
    assert run.tags[HEARTBEAT_TAG] == last_beat
    assert sweep(instance, datetime.now(UTC)) == {"expired": [], "orphaned": []}
    later = datetime.fromisoformat(last_beat) + ORPHANED_AFTER + timedelta(minutes=1)
    assert sweep(instance, later, load_config(platform.config_path)) == {"expired": [], "orphaned": [orphaned]}
    run = instance.get_run_by_id(orphaned)
    assert run.status == dg.DagsterRunStatus.FAILURE
    assert run.tags[ORPHANED_TAG] == "true"

    listed = transfers_json(platform)
    assert listed[killed]["status"] == "KILLED"
    assert listed[killed]["started_at"]
    assert listed[killed]["ended_at"]
    assert listed[pending]["status"] == "CANCELLED"
    assert listed[pending]["started_at"] is None
    assert listed[pending]["ended_at"]
    assert listed[orphaned]["status"] == "ORPHANED"
    submitted, started, ended = (datetime.fromisoformat(listed[orphaned][k])
                                 for k in ("submitted_at", "started_at", "ended_at"))
    assert submitted <= started <= ended

    # where users look (the webserver's GraphQL): the visible status tags, each model's
    # last_transfer check, and a cancel that reads as one
    with workspace(instance) as context:
        shown = {run_id: {t["key"]: t["value"] for t in graphql(context, RUN, runId=run_id)["runOrError"]["tags"]}
                 for run_id in (killed, pending, orphaned)}
        assert [shown[r].get(STATUS_TAG) for r in (killed, pending, orphaned)] == ["KILLED", "CANCELLED", "ORPHANED"]
        assert not [k for tags in shown.values() for k in tags if k.startswith(".dagster/")]
        for model in ("items", "notes"):  # the model in progress and the one not reached
            check = last_check(context, ["acme", "acme_delta", model])
            assert (check["runId"], check["status"], check["evaluation"]["severity"]) == (killed, "FAILED", "WARN")
            assert check["evaluation"]["description"].startswith("KILLED: cancelled by a user")
            check = last_check(context, ["globex", "globex_delta", model])
            assert (check["status"], check["evaluation"]["severity"]) == ("FAILED", "ERROR")
            assert check["metadata"]["transfer_id"] == orphaned  # reported by the sweep, outside the run
            assert check["evaluation"]["description"].startswith("ORPHANED: orphaned: no heartbeat since")
    (cancelled,) = instance.all_logs(killed, of_type=dg.DagsterEventType.RUN_CANCELED)
    assert cancelled.dagster_event.event_specific_data.error.message.startswith(
        "transfer_platform.errors.TransferCancelled: cancelled by a user while it moved model 'items'")
