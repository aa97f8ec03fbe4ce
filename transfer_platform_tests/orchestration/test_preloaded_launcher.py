"""``PreloadedRunLauncher`` (``dagster.yaml``'s run launcher) on a real Dagster instance, with a
code location of its own (a package written under ``tmp_path``: a job whose op records the
process it ran in), so each case takes seconds. The daemon's own runs through it are in
``test_daemon`` and ``test_lifecycle_processes`` (cancel, a worker killed, the control plane lost).

- runs are forked from one preloaded parent: each in a process of its own (the pid its tag
  names), the parent the same for both;
- a file of the code location changed: the parent refuses, a fresh one imports the new code and
  the run sees it; a parent that died is replaced;
- a worker SIGKILLed: the run fails with the code server's words ("was terminated by signal"),
  which the lifecycle sweep reads;
- the launcher disposed (its daemon stops): the running worker goes on, its parent exits after it;
- ``terminate``: the worker is interrupted, the run ends CANCELED; for a worker on another
  machine, by its cancellation thread;
- a parent that cannot fork (a thread started on import): the run goes to Dagster's own path,
  with an engine event saying why.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.launcher import LaunchRunContext
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin

from transfer_platform.orchestration.speed.launcher import NO_FORK, PreloadedRunLauncher
from transfer_platform.orchestration.speed.run_worker import WORKER_TAG, process_start_time
from transfer_platform_tests.support.processes import live_children

pytestmark = pytest.mark.integration

PATIENCE = float(os.environ.get("TP_TEST_PATIENCE", "4"))

CODE = '''
import json, os, time
from pathlib import Path
import dagster as dg

OUT = Path({out!r})
VERSION = {version!r}
{extra}

@dg.op(config_schema={{"wait": bool}})
def record(context):
    OUT.joinpath(context.run_id + ".json").write_text(
        json.dumps({{"pid": os.getpid(), "ppid": os.getppid(), "version": VERSION}}))
    while context.op_config["wait"]:  # until interrupted
        time.sleep(0.05)

@dg.job(executor_def=dg.in_process_executor)  # as the platform's jobs
def recording():
    record()

defs = dg.Definitions(jobs=[recording])
'''


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout * PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Location:
    """A package ``<name>`` under ``root`` (importable by the parent: the tests' PYTHONPATH)."""

    def __init__(self, root: Path, name: str, extra: str = "") -> None:
        self.root, self.name, self.extra = root, name, extra
        self.out = root / "out"
        self.out.mkdir(exist_ok=True)
        self.write("v1")

    def write(self, version: str) -> None:
        package = self.root / self.name
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text("")
        path = package / "defs.py"
        path.write_text(textwrap.dedent(CODE.format(out=str(self.out), version=version, extra=self.extra)))
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a later mtime, however coarse the clock

    @property
    def origin(self) -> JobPythonOrigin:
        repository = RepositoryPythonOrigin(
            executable_path=sys.executable,
            code_pointer=ModuleCodePointer(f"{self.name}.defs", "defs", str(self.root)))
        return JobPythonOrigin("recording", repository)

    def record(self, run_id: str) -> dict:
        return json.loads((self.out / f"{run_id}.json").read_text())


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dg.DagsterInstance]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home"), overrides={
            "run_monitoring": {"cancellation_thread_poll_interval_seconds": 1}}) as test_instance:
        yield test_instance


@pytest.fixture
def launcher(instance: dg.DagsterInstance) -> Iterator[PreloadedRunLauncher]:
    launcher = PreloadedRunLauncher()
    launcher.register_instance(instance)
    yield launcher
    launcher.dispose()


def launch(instance: dg.DagsterInstance, launcher: PreloadedRunLauncher, location: Location,
           wait: bool = False) -> dg.DagsterRun:
    run = instance.create_run(
        job_name="recording", run_id=str(uuid.uuid4()), run_config={"ops": {"record": {"config": {"wait": wait}}}},
        resolved_op_selection=None, step_keys_to_execute=None, status=dg.DagsterRunStatus.NOT_STARTED,
        op_selection=None, root_run_id=None, parent_run_id=None, tags={}, job_snapshot=None,
        execution_plan_snapshot=None, parent_job_snapshot=None, asset_selection=None,
        asset_check_selection=None, remote_job_origin=None, job_code_origin=location.origin,
        asset_graph=None)
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    return run


def finished(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun:
    wait_for(f"run {run_id} to finish", lambda: instance.get_run_by_id(run_id).is_finished)
    return instance.get_run_by_id(run_id)


def messages(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.message or "" for e in instance.all_logs(run_id)]


def test_runs_fork_from_one_parent_until_its_code_changes(tmp_path: Path, instance: dg.DagsterInstance,
                                                          launcher: PreloadedRunLauncher) -> None:
    location = Location(tmp_path, "tp_launch_code")
    first, second = (launch(instance, launcher, location) for _ in range(2))
    records = []
    for run in (first, second):
        assert finished(instance, run.run_id).status == dg.DagsterRunStatus.SUCCESS, messages(instance, run.run_id)
        record = location.record(run.run_id)
        host, pid, _started = instance.get_run_by_id(run.run_id).tags[WORKER_TAG].split()
        assert int(pid) == record["pid"], "the run did not execute in the process the launcher forked"
        records.append(record)
    assert records[0]["pid"] != records[1]["pid"], "two runs shared a process"
    assert records[0]["ppid"] == records[1]["ppid"] != os.getpid(), "the runs were not forked from one parent"
    assert records[0]["version"] == "v1"

    location.write("v2")  # the code changed: its parent refuses, a new one imports v2
    third = launch(instance, launcher, location)
    assert finished(instance, third.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert location.record(third.run_id)["version"] == "v2"
    assert location.record(third.run_id)["ppid"] != records[0]["ppid"]

    os.kill(location.record(third.run_id)["ppid"], signal.SIGKILL)  # the parent died: replaced
    fourth = launch(instance, launcher, location)
    assert finished(instance, fourth.run_id).status == dg.DagsterRunStatus.SUCCESS


def test_a_daemon_holding_over_1024_descriptors_launches_runs(tmp_path: Path, instance: dg.DagsterInstance,
                                                              launcher: PreloadedRunLauncher) -> None:
    """A long-lived daemon may hold more than 1024 open files: the pipe to the run worker parent
    then has a number ``select()`` refuses (it raised ValueError and failed every launch)."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        run = launch(instance, launcher, Location(tmp_path, "tp_many_fds"))
        assert finished(instance, run.run_id).status == dg.DagsterRunStatus.SUCCESS, messages(instance, run.run_id)
    finally:
        for fd in held:
            os.close(fd)


def waiting_workers(parent: int) -> list[int]:
    """The run worker parent's live children: with no run executing, its spare."""
    return [pid for pid, _name in live_children(parent)]


def test_a_run_executes_in_a_worker_forked_before_it_was_launched(tmp_path: Path, instance: dg.DagsterInstance,
                                                                 launcher: PreloadedRunLauncher) -> None:
    location = Location(tmp_path, "tp_spare_code")
    first = launch(instance, launcher, location)
    assert finished(instance, first.run_id).status == dg.DagsterRunStatus.SUCCESS
    parent = location.record(first.run_id)["ppid"]
    wait_for("one worker waiting for the next run", lambda: len(waiting_workers(parent)) == 1)
    (spare,) = waiting_workers(parent)
    second = launch(instance, launcher, location)
    assert finished(instance, second.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert location.record(second.run_id)["pid"] == spare  # the run took the worker that waited

    wait_for("the next spare", lambda: len(waiting_workers(parent)) == 1)
    (spare,) = waiting_workers(parent)
    os.kill(spare, signal.SIGKILL)  # a spare that died: the next run forks its own, nothing is failed
    wait_for("the spare to be gone", lambda: spare not in waiting_workers(parent))
    third = launch(instance, launcher, location)
    assert finished(instance, third.run_id).status == dg.DagsterRunStatus.SUCCESS, messages(instance, third.run_id)
    assert location.record(third.run_id)["pid"] != spare
    assert location.record(third.run_id)["ppid"] == parent
    assert instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE])) == 0


def test_a_killed_worker_fails_its_run_and_terminate_cancels(tmp_path: Path, instance: dg.DagsterInstance,
                                                             launcher: PreloadedRunLauncher) -> None:
    location = Location(tmp_path, "tp_launch_waits")
    killed = launch(instance, launcher, location, wait=True)
    wait_for("the worker to start its op", lambda: (location.out / f"{killed.run_id}.json").exists())
    os.kill(location.record(killed.run_id)["pid"], signal.SIGKILL)
    run = finished(instance, killed.run_id)
    assert run.status == dg.DagsterRunStatus.FAILURE
    assert any(f"Run execution process for {killed.run_id} was terminated by signal 9" in m
               for m in messages(instance, killed.run_id))

    cancelled = launch(instance, launcher, location, wait=True)
    wait_for("the worker to start its op", lambda: (location.out / f"{cancelled.run_id}.json").exists())
    launcher.dispose()  # the daemon stops: its parent takes no more runs, the running one goes on
    parent = location.record(cancelled.run_id)["ppid"]
    assert instance.get_run_by_id(cancelled.run_id).status == dg.DagsterRunStatus.STARTED
    assert process_start_time(parent), "the parent left before its running worker"
    other = PreloadedRunLauncher()  # terminate from another process's launcher (the webserver, the CLI)
    other.register_instance(instance)
    assert other.terminate(cancelled.run_id)
    assert finished(instance, cancelled.run_id).status == dg.DagsterRunStatus.CANCELED
    assert not other.terminate(cancelled.run_id)  # finished: nothing to terminate
    wait_for("the parent to exit after its last worker", lambda: process_start_time(parent) is None)

    # the worker on another machine (its tag says so): the run is marked CANCELING, and the worker's
    # cancellation thread interrupts it (the instance polls every second here)
    elsewhere = launch(instance, other, location, wait=True)
    wait_for("the worker to start its op", lambda: (location.out / f"{elsewhere.run_id}.json").exists())
    _host, pid, started = instance.get_run_by_id(elsewhere.run_id).tags[WORKER_TAG].split()
    instance.add_run_tags(elsewhere.run_id, {WORKER_TAG: f"another-machine {pid} {started}"})
    assert other.terminate(elsewhere.run_id)
    assert finished(instance, elsewhere.run_id).status == dg.DagsterRunStatus.CANCELED
    other.dispose()


def test_a_parent_that_cannot_fork_leaves_the_run_to_dagster(tmp_path: Path, instance: dg.DagsterInstance,
                                                             launcher: PreloadedRunLauncher) -> None:
    location = Location(tmp_path, "tp_launch_thread", extra=(
        "import threading\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()"))
    with pytest.raises(dg.DagsterInvariantViolationError, match="requires a workspace"):
        launch(instance, launcher, location)  # Dagster's own path needs the daemon's workspace
    (run,) = instance.get_runs()
    assert any(NO_FORK in m for m in messages(instance, run.run_id))
    assert WORKER_TAG not in run.tags


def watchers() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name == "kill-on-cancel"]


def test_the_cancel_watch_interrupts_a_run_marked_canceling(instance: dg.DagsterInstance) -> None:
    """Another machine's terminate marks the run CANCELING; the worker's watch interrupts it at
    its next look (every second here), as Dagster's cancellation thread does."""
    from transfer_platform.orchestration.speed.run_worker import watch_for_cancel

    interrupted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        run = instance.create_run_for_job(dg.GraphDefinition("empty").to_job(), run_id=str(uuid.uuid4()))
        stop = watch_for_cancel(instance, run.run_id)
        instance.report_run_canceling(run)
        wait_for("the interrupt", lambda: bool(interrupted))
        stop.set()
        assert interrupted == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_run_shorter_than_the_watch_interval_opens_no_second_instance(
        instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch's instance is opened at its first look, one interval after the start: a run that
    ended before never opens it (Dagster's thread opened one as it started, for every run)."""
    from transfer_platform.orchestration.speed.run_worker import watch_for_cancel

    opened: list[object] = []
    from_ref = dg.DagsterInstance.from_ref
    monkeypatch.setattr(dg.DagsterInstance, "from_ref", staticmethod(lambda ref: opened.append(ref) or from_ref(ref)))
    run = instance.create_run_for_job(dg.GraphDefinition("empty").to_job(), run_id=str(uuid.uuid4()))
    stop = watch_for_cancel(instance, run.run_id)
    stop.set()  # the run ended
    wait_for("the watch to end", lambda: not watchers())
    assert opened == []
